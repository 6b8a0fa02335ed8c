#include "draft/combined_proposer.h"

namespace specd {

void CombinedProposer::AddSequence(int seq, std::span<const int32_t> prompt) {
  first_.AddSequence(seq, prompt);
  second_.AddSequence(seq, prompt);
}

void CombinedProposer::ForkSequence(int src, int dst) {
  first_.ForkSequence(src, dst);
  second_.ForkSequence(src, dst);
}

void CombinedProposer::RemoveSequence(int seq) {
  first_.RemoveSequence(seq);
  second_.RemoveSequence(seq);
  drafted_by_first_.erase(seq);
  drafted_by_second_.erase(seq);
}

void CombinedProposer::Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
                               ProposerTimings* timings) {
  first_.Propose(inputs, out, timings);
  std::vector<DraftInput> rest;
  std::vector<size_t> rest_at;
  for (size_t j = 0; j < inputs.size(); ++j) {
    if ((*out)[j].tokens.empty() && inputs[j].k > 0) {
      rest.push_back(inputs[j]);
      rest_at.push_back(j);
    } else if (!(*out)[j].tokens.empty()) {
      drafted_by_first_[inputs[j].seq] = (*out)[j].tokens;
      ++n_first;
    }
  }
  if (rest.empty()) return;
  std::vector<Proposal> second_out;
  second_.Propose(rest, &second_out, timings);
  for (size_t r = 0; r < rest.size(); ++r) {
    (*out)[rest_at[r]] = std::move(second_out[r]);
    drafted_by_second_[rest[r].seq] = (*out)[rest_at[r]].tokens;
    ++n_second;
  }
}

void CombinedProposer::Accept(int seq, int n_accepted, int32_t next) {
  // The proposer that drafted verifies its own; the other reads the committed tokens.
  auto committed = [&](const std::vector<int32_t>& drafted) {
    std::vector<int32_t> tokens(drafted.begin(), drafted.begin() + n_accepted);
    tokens.push_back(next);
    return tokens;
  };
  if (auto it = drafted_by_first_.find(seq); it != drafted_by_first_.end()) {
    first_.Accept(seq, n_accepted, next);
    second_.Append(seq, committed(it->second));
    drafted_by_first_.erase(it);
  } else if (auto it2 = drafted_by_second_.find(seq); it2 != drafted_by_second_.end()) {
    second_.Accept(seq, n_accepted, next);
    first_.Append(seq, committed(it2->second));
    drafted_by_second_.erase(it2);
  } else {  // neither drafted
    first_.Accept(seq, 0, next);
    second_.Accept(seq, 0, next);
  }
}

void CombinedProposer::Append(int seq, std::span<const int32_t> tokens) {
  first_.Append(seq, tokens);
  second_.Append(seq, tokens);
}

}  // namespace specd
