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
  // Expected further tokens of a completion at n_generated of at most n_max: the mean of
  // (length - n_generated) over the kept finished completions that were longer, at most
  // n_max - n_generated; n_max - n_generated while fewer than kMinLonger were longer (nothing
  // is known yet, or this one is unusually long).
  int ExpectedRemaining(int n_generated, int n_max) const;

  static constexpr int kKept = 64;      // the most recent finished completions
  static constexpr int kMinLonger = 4;  // longer ones needed for an estimate

 private:
  std::array<int, kKept> lengths_ = {};
  int count_ = 0;  // completions seen (the ring holds the last kKept)
};

}  // namespace specd
