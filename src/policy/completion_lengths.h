// How long a running completion will go on, from the lengths of those that finished: a request's
// max_tokens says little (HumanEval asks for 256 and stops at ~50 on its stop strings), and the
// draft-length policy weighs what starting to draft costs against the tokens left to repay it.
#pragma once

#include <array>

namespace specd {

class CompletionLengths {
 public:
  // A completion finished (end of text, a stop, or max_tokens) after n_generated tokens.
  void Finished(int n_generated);
  // Expected further tokens of a completion at n_generated of at most n_max, over the kept
  // finished completions that were longer, each weighted by 1 / its length: E[(L - n) / L] /
  // E[1 / L]. Time per token averaged over completions (BASS's latency, and what each client
  // sees) charges a start cost C to a completion of L tokens as C / L, so a start repays when
  // the saving per token times this exceeds C; the plain mean would count a 6-token answer's
  // slowdown as little as a 200-token one's. At most n_max - n_generated; n_max - n_generated
  // while fewer than kMinLonger were longer (nothing is known yet, or this one is unusually
  // long).
  int ExpectedRemaining(int n_generated, int n_max) const;

  static constexpr int kKept = 64;      // the most recent finished completions
  static constexpr int kMinLonger = 4;  // longer ones needed for an estimate

 private:
  std::array<int, kKept> lengths_ = {};
  int count_ = 0;  // completions seen (the ring holds the last kKept)
};

}  // namespace specd
