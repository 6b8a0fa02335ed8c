// Cost-aware draft length: picks K for each speculative step to maximize expected tokens per
// millisecond, from what this run has measured: the per-token acceptance rate, the time of a
// draft forward, and the time of a target forward as a function of its rows. K = 0 (a plain
// target step) is a candidate, so speculation that does not pay on this machine, model pair
// or batch size turns itself off instead of making decoding slower.
//
// Model: with per-token acceptance a, a step drafting K tokens yields on average
// E(K) = (1 - a^(K+1)) / (1 - a) tokens per sequence and costs T(K) = K d + v(B (K + 1)),
// where d(B) is one draft forward over the B sequences and v(n) one target forward over n rows.
// Both are kept per row count (moving averages); counts not measured yet are extrapolated with
// an affine fit through the measured ones. a is estimated as accepted / (accepted + rejections),
// the maximum-likelihood estimate for a geometric run of acceptances.
#pragma once

#include <map>

namespace specd {

// Forward time as a function of the number of rows, learned from measurements.
class ForwardCostCurve {
 public:
  void Observe(int n_rows, double ms);
  // Predicted ms for n rows; a negative number before any measurement.
  double Predict(int n_rows) const;

 private:
  struct Average {
    double ms = 0.0;
    int count = 0;
  };
  std::map<int, Average> by_rows_;
};

class CostAwareDraftLength {
 public:
  // k_max caps the draft length; prior_acceptance is a's starting value.
  explicit CostAwareDraftLength(int k_max, double prior_acceptance = 0.6);

  // The draft length for the next step of n_sequences sequences.
  int Next(int n_sequences);

  // Measurements of the step just taken.
  void ObserveDraftForward(int n_rows, double ms) { draft_.Observe(n_rows, ms); }
  void ObserveTargetForward(int n_rows, double ms) { target_.Observe(n_rows, ms); }
  // One sequence's verification: `accepted` of `drafted` tokens (a rejection ends the run).
  void ObserveAcceptance(int drafted, int accepted);

  double acceptance() const;
  // Expected tokens per ms per sequence of a step with draft length k (0 before any data).
  double ExpectedTokensPerMs(int k, int n_sequences) const;

 private:
  int k_max_;
  double prior_acceptance_;
  double accepted_ = 0.0;  // decayed counts of accepted drafts and of rejections
  double rejected_ = 0.0;
  ForwardCostCurve draft_;
  ForwardCostCurve target_;
  int plain_steps_ = 0;  // consecutive steps with K = 0
};

}  // namespace specd
