#include "draft/sdsat_proposer.h"

#include <algorithm>

#include "base/error.h"

namespace specd {

SdsatOptions SdsatOptionsForModel(const Model& model, int n_adaptive, int32_t token_flag) {
  SdsatOptions o;
  o.n_adaptive = n_adaptive;
  const GgufValue* recorded = model.FindMetadata("specd.sdsat.adaptive_token");
  o.adaptive_token = token_flag >= 0 ? token_flag
                     : recorded != nullptr
                         ? static_cast<int32_t>(recorded->AsInt("specd.sdsat.adaptive_token"))
                         : -1;
  SPECD_CHECK(o.adaptive_token >= 0, model.gguf().path(),
              " was not fine-tuned for SDSAT (no specd.sdsat.adaptive_token in it or its {lora} "
              "adapter): pass "
              "{adaptive_token} ID (any token works, losslessly, but only a fine-tuned model "
              "drafts well with it)");
  SPECD_CHECK(o.adaptive_token < model.config().n_vocab, "{adaptive_token} ", o.adaptive_token,
              " is outside the vocabulary of ", model.config().n_vocab, " tokens");
  SPECD_CHECK(n_adaptive >= 1 && n_adaptive <= 64, "{adaptive_k} must be in 1..64, got ",
              n_adaptive);
  return o;
}

SdsatOptions SdsatOptionsWithTree(SdsatOptions options, const std::string& tree_flag) {
  if (tree_flag.empty()) return options;
  const auto parsed = ParseNumberPair(tree_flag, 256, 64);
  SPECD_CHECK(parsed.has_value(), "{sdsat_tree} '", tree_flag,
              "': expected NODES[,WIDTH] with NODES in 1..256 and WIDTH in 1..64");
  options.tree_nodes = parsed->first;
  if (parsed->second > 0) options.tree_width = parsed->second;
  SPECD_CHECK(!options.merge,
              "{sdsat_tree} drafts trees in the two-step loop: drop "
              "{sdsat_loop} merged");
  return options;
}

SdsatProposer::SdsatProposer(const SdsatOptions& options) : options_(options) {
  SPECD_CHECK(options.adaptive_token >= 0 && options.n_adaptive >= 1,
              "SDSAT needs an adaptive token and k >= 1");
  SPECD_CHECK(options.tree_nodes == 0 || !options.merge,
              "SDSAT token trees go with the two-step loop, not the merged one");
}

void SdsatProposer::AddSequence(int seq, std::span<const int32_t>) { seqs_[seq] = State{}; }

void SdsatProposer::ForkSequence(int src, int dst) {
  seqs_[dst] = seqs_.at(src);
  seqs_[dst].input.sampling = &seqs_[dst].sampling;
}

void SdsatProposer::RemoveSequence(int seq) { seqs_.erase(seq); }

void SdsatProposer::Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
                            ProposerTimings*) {
  out->assign(inputs.size(), Proposal{});
  for (size_t j = 0; j < inputs.size(); ++j) {
    const DraftInput& in = inputs[j];
    State& s = seqs_.at(in.seq);
    s.sampling = *in.sampling;
    s.input = in;
    s.input.sampling = &s.sampling;
    s.input.constraint = nullptr;
    s.constrained = in.constraint != nullptr;
    s.has_pending = false;
    Proposal& p = (*out)[j];
    if (options_.tree_nodes > 0) {
      const int n_rows = static_cast<int>(s.ready_rows.size() / s.row_size);
      if (n_rows > 0 && in.k > 0) {
        p = AdaptiveTokenTree(in, s.ready_rows, n_rows, std::min(in.k, options_.tree_nodes),
                              options_.tree_width);
      }
      s.proposed = static_cast<int>(p.tokens.size());
      s.ready_rows.clear();
      continue;
    }
    if (!s.ready_rows.empty()) {  // chain rows kept for a grammar
      DrawConstrainedChain(in, s, &p);
      continue;
    }
    const int n = std::min<int>(in.k, static_cast<int>(s.ready.tokens.size()));
    p.tokens.assign(s.ready.tokens.begin(), s.ready.tokens.begin() + n);
    if (!s.ready.probs.empty()) {
      p.probs.assign(s.ready.probs.begin(), s.ready.probs.begin() + n);
    }
    s.proposed = n;
    s.ready = Proposal{};
  }
}

void SdsatProposer::DrawConstrainedChain(const DraftInput& in, State& s, Proposal* p) {
  const int n_rows = static_cast<int>(s.ready_rows.size() / s.row_size);
  const int n = in.constraint != nullptr ? std::min(in.k, n_rows) : 0;
  for (int i = 0; i < n; ++i) {
    const std::span<const float> row(s.ready_rows.data() + i * s.row_size, s.row_size);
    const int32_t token = DrawDraftToken(in, i, row, p);
    if (token == kNoDraft) break;
    p->tokens.push_back(token);
  }
  s.proposed = static_cast<int>(p->tokens.size());
  s.ready_rows.clear();
  s.ready = Proposal{};
}

void SdsatProposer::RiderTokens(int seq, int max_tokens, std::vector<int32_t>* tokens) {
  State& s = seqs_.at(seq);
  tokens->clear();
  s.n_riders = 0;
  if (s.input.k <= 0 || (!options_.merge && s.proposed > 0)) return;
  s.n_riders = std::min(options_.n_adaptive, max_tokens);
  tokens->assign(s.n_riders, options_.adaptive_token);
}

void SdsatProposer::TakeRiderRows(int seq, std::span<const float> rows) {
  State& s = seqs_.at(seq);
  SPECD_CHECK(s.n_riders > 0 && rows.size() % s.n_riders == 0,
              "SDSAT: rider rows do not match the adaptive tokens asked for");
  const size_t n_vocab = rows.size() / s.n_riders;
  if (options_.tree_nodes > 0 || s.constrained) {
    s.pending_rows.assign(rows.begin(), rows.end());
    s.row_size = n_vocab;
    s.has_pending = true;
    return;
  }
  // Adaptive row i predicts the token i + 1 places after the bonus token, which goes where this
  // step's drafts end: position first_position + proposed.
  DraftInput next = s.input;
  next.first_position = s.input.first_position + s.proposed + 1;
  s.pending = Proposal{};
  for (int i = 0; i < s.n_riders; ++i) {
    s.pending.tokens.push_back(
        DrawDraftToken(next, i, rows.subspan(i * n_vocab, n_vocab), &s.pending));
  }
  s.has_pending = true;
}

void SdsatProposer::Accept(int seq, int n_accepted, int32_t) {
  State& s = seqs_.at(seq);
  if (s.has_pending && n_accepted == s.proposed) {
    s.ready = std::move(s.pending);
    s.ready_rows.swap(s.pending_rows);
  }
  s.pending = Proposal{};
  s.pending_rows.clear();
  s.has_pending = false;
}

void SdsatProposer::Append(int seq, std::span<const int32_t>) {
  State& s = seqs_.at(seq);
  s.ready = Proposal{};
  s.pending = Proposal{};
  s.ready_rows.clear();
  s.pending_rows.clear();
  s.has_pending = false;
}

}  // namespace specd
