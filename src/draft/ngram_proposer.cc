#include "draft/ngram_proposer.h"

#include <algorithm>

#include "base/error.h"

namespace specd {

NgramProposer::NgramProposer(int min_n, int max_n, int64_t n_vocab)
    : min_n_(min_n), max_n_(max_n), n_vocab_(n_vocab) {
  SPECD_CHECK(min_n >= 1 && max_n >= min_n && max_n <= 64, "n-gram sizes must satisfy 1 <= min (",
              min_n, ") <= max (", max_n, ") <= 64");
}

void NgramProposer::AddSequence(int seq, std::span<const int32_t> prompt) {
  SPECD_CHECK(!seqs_.count(seq), "n-gram: sequence ", seq, " already exists");
  seqs_[seq].history.assign(prompt.begin(), prompt.end());
}

void NgramProposer::ForkSequence(int src, int dst) { seqs_[dst] = seqs_.at(src); }

void NgramProposer::RemoveSequence(int seq) { seqs_.erase(seq); }

std::vector<int32_t> NgramProposer::Lookup(const std::vector<int32_t>& history, int min_n,
                                           int max_n, int k) {
  const int size = static_cast<int>(history.size());
  for (int n = std::min(max_n, size - 1); n >= min_n; --n) {
    const auto tail = history.end() - n;
    // The latest earlier occurrence of the last n tokens (not the tail itself).
    for (int start = size - n - 1; start >= 0; --start) {
      if (!std::equal(tail, history.end(), history.begin() + start)) continue;
      const int from = start + n;
      const int count = std::min(k, size - from);
      return std::vector<int32_t>(history.begin() + from, history.begin() + from + count);
    }
  }
  return {};
}

void NgramProposer::Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
                            ProposerTimings* timings) {
  (void)timings;
  out->assign(inputs.size(), Proposal{});
  for (size_t j = 0; j < inputs.size(); ++j) {
    const DraftInput& in = inputs[j];
    State& s = seqs_.at(in.seq);
    s.proposed = in.k > 0 ? Lookup(s.history, min_n_, max_n_, in.k) : std::vector<int32_t>{};
    Proposal& p = (*out)[j];
    p.tokens = s.proposed;
    p.source = TokenSource::kLookup;
    const bool rejection = !in.sampling->greedy() && in.mode == SpecSampling::kRejection;
    for (size_t i = 0; rejection && i < p.tokens.size(); ++i) {
      // The proposal is certain: q is a point mass, accepted with probability p(token).
      p.probs.emplace_back(n_vocab_, 0.0f);
      p.probs.back()[p.tokens[i]] = 1.0f;
    }
  }
}

void NgramProposer::Accept(int seq, int n_accepted, int32_t next) {
  State& s = seqs_.at(seq);
  s.history.insert(s.history.end(), s.proposed.begin(), s.proposed.begin() + n_accepted);
  s.history.push_back(next);
  s.proposed.clear();
}

void NgramProposer::Append(int seq, std::span<const int32_t> tokens) {
  State& s = seqs_.at(seq);
  s.history.insert(s.history.end(), tokens.begin(), tokens.end());
}

}  // namespace specd
