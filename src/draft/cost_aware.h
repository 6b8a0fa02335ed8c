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
#include <utility>

namespace specd {

// Forward time as a function of the number of rows, learned from measurements.
class ForwardCostCurve {
 public:
  void Observe(int n_rows, double ms);
  // Predicted ms for n rows; a negative number before any measurement.
  double Predict(int n_rows) const;
  bool empty() const { return by_rows_.empty(); }

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

  // The draft length for the next step of n_sequences sequences, the longest of which has at
  // most remaining_tokens left (exploration is not worth it near the end).
  int Next(int n_sequences, int remaining_tokens = 1 << 30);

  // The prompt's forwards: used only until decode steps have been measured (prompt rows
  // produce no logits, so they are cheaper per row than verification rows).
  void ObservePrefill(int target_rows, double target_ms, int draft_rows, double draft_ms);
  // Measurements of the step just taken.
  void ObserveDraftForward(int n_rows, double ms) { draft_.Observe(n_rows, ms); }
  void ObserveTargetForward(int n_rows, double ms) { target_.Observe(n_rows, ms); }
  // One sequence's verification: `accepted` of `drafted` tokens (a rejection ends the run).
  void ObserveAcceptance(int drafted, int accepted);
  // A whole step: its wall time, the part spent in forwards, and the tokens it committed. The
  // rest of the time (sampling, verification, bookkeeping) is learned per target row; the
  // tokens per ms actually achieved with this K at this batch size override the model's
  // prediction once seen twice, so a biased cost model cannot keep a losing K. A step whose
  // draft first caught up on skipped tokens (`catch_up`) is not typical and only feeds the
  // overhead estimate.
  void ObserveStep(int n_sequences, int k, double step_ms, double forward_ms, int tokens,
                   bool catch_up);

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
  ForwardCostCurve prefill_draft_;
  ForwardCostCurve prefill_target_;
  int plain_steps_ = 0;  // consecutive steps with K = 0
  int probe_every_;      // plain steps before K = 1 is tried again; doubles after each probe
  int decisions_ = 0;
  double overhead_per_row_ms_[2] = {-1.0, -1.0};  // [plain step, drafting step]
  struct Rate {
    double tokens_per_ms = 0.0;  // per sequence
    int count = 0;
  };
  std::map<std::pair<int, int>, Rate> realized_;  // by (n_sequences, k)
};

}  // namespace specd
