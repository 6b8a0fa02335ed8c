// Prompt lookup (n-gram) drafting, as llama.cpp's lookup and vLLM's ngram proposer do it: the
// sequence's own text is the draft model. To propose k tokens, find the latest earlier place
// where the sequence's last n tokens occurred (n from max_n down to min_n) and propose the
// tokens that followed it there. No model, no KV cache: it costs microseconds, and pays where
// text repeats (code, quoting, editing).
#pragma once

#include <map>
#include <vector>

#include "draft/proposer.h"

namespace specd {

class NgramProposer : public Proposer {
 public:
  // n_vocab sizes the point-mass distributions rejection sampling needs.
  NgramProposer(int min_n, int max_n, int64_t n_vocab);

  void AddSequence(int seq, std::span<const int32_t> prompt) override;
  void ForkSequence(int src, int dst) override;
  void RemoveSequence(int seq) override;
  void Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
               ProposerTimings* timings) override;
  void Accept(int seq, int n_accepted, int32_t next) override;
  void Append(int seq, std::span<const int32_t> tokens) override;

  // The continuation of the longest matching n-gram in `history` (up to k tokens), or nothing.
  static std::vector<int32_t> Lookup(const std::vector<int32_t>& history, int min_n, int max_n,
                                     int k);

 private:
  struct State {
    std::vector<int32_t> history;  // committed tokens
    std::vector<int32_t> proposed;
  };
  int min_n_, max_n_;
  int64_t n_vocab_;
  std::map<int, State> seqs_;
};

}  // namespace specd
