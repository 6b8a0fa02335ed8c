#include "draft/cost_aware.h"

#include <algorithm>
#include <cmath>

namespace specd {
namespace {
constexpr double kSmoothing = 0.2;         // weight of a new time measurement
constexpr double kAcceptanceDecay = 0.98;  // per observed verification
constexpr double kPriorWeight = 2.0;       // pseudo-observations behind the prior acceptance
constexpr int kFirstProbe = 32;  // plain steps before K = 1 is probed; doubles after each probe
constexpr int kMaxProbe = 1024;
constexpr double kMargin = 1.05;           // drafting must promise 5% more tokens per ms
constexpr double kFirstMargin = 1.25;      // ... and 25% on the first step, from prompt timings
constexpr double kFirstProbeRatio = 0.95;  // first step: try K = 1 if it looks this close
constexpr int kFirstDraftLength = 1;       // before anything is measured: the cheapest try
}  // namespace

void ForwardCostCurve::Observe(int n_rows, double ms) {
  Average& a = by_rows_[n_rows];
  a.ms = a.count == 0 ? ms : (1.0 - kSmoothing) * a.ms + kSmoothing * ms;
  ++a.count;
}

double ForwardCostCurve::Predict(int n_rows) const {
  if (by_rows_.empty()) return -1.0;
  if (auto it = by_rows_.find(n_rows); it != by_rows_.end()) return it->second.ms;
  if (by_rows_.size() == 1) {
    // One point: assume the shape measured on this CPU's int8 kernels, t ~ (2 + n).
    const auto& [n0, a] = *by_rows_.begin();
    return a.ms * (2.0 + n_rows) / (2.0 + n0);
  }
  // Least-squares line through the measured points; never decreasing in n.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double count = static_cast<double>(by_rows_.size());
  for (const auto& [n, a] : by_rows_) {
    sx += n;
    sy += a.ms;
    sxx += double(n) * n;
    sxy += n * a.ms;
  }
  const double slope = std::max(0.0, (count * sxy - sx * sy) / (count * sxx - sx * sx));
  const double intercept = (sy - slope * sx) / count;
  const double floor = by_rows_.begin()->second.ms * 0.5;  // a guard against wild fits
  return std::max(floor, intercept + slope * n_rows);
}

CostAwareDraftLength::CostAwareDraftLength(int k_max, double prior_acceptance)
    : k_max_(std::max(1, k_max)), prior_acceptance_(prior_acceptance), probe_every_(kFirstProbe) {}

void CostAwareDraftLength::ObserveAcceptance(int drafted, int accepted) {
  if (drafted <= 0) return;
  accepted_ = kAcceptanceDecay * accepted_ + accepted;
  rejected_ = kAcceptanceDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
}

void CostAwareDraftLength::ObservePrefill(int target_rows, double target_ms, int draft_rows,
                                          double draft_ms) {
  if (target_rows > 0) prefill_target_.Observe(target_rows, target_ms);
  if (draft_rows > 0) prefill_draft_.Observe(draft_rows, draft_ms);
}

void CostAwareDraftLength::ObserveStep(int n_sequences, int k, double step_ms, double forward_ms,
                                       int tokens, bool catch_up) {
  const int rows = n_sequences * (k + 1);
  if (rows <= 0 || step_ms <= 0.0) return;
  if (!catch_up) {
    Rate& r = realized_[{n_sequences, k}];
    const double rate = tokens / step_ms / n_sequences;
    r.tokens_per_ms =
        r.count == 0 ? rate : (1.0 - kSmoothing) * r.tokens_per_ms + kSmoothing * rate;
    ++r.count;
  }
  const double per_row = std::max(0.0, step_ms - forward_ms) / rows;
  double& avg = overhead_per_row_ms_[k > 0 ? 1 : 0];
  avg = avg < 0.0 ? per_row : (1.0 - kSmoothing) * avg + kSmoothing * per_row;
}

double CostAwareDraftLength::acceptance() const {
  return (accepted_ + kPriorWeight * prior_acceptance_) / (accepted_ + rejected_ + kPriorWeight);
}

double CostAwareDraftLength::ExpectedTokensPerMs(int k, int n_sequences) const {
  if (auto it = realized_.find({n_sequences, k}); it != realized_.end() && it->second.count >= 2) {
    return it->second.tokens_per_ms;
  }
  const double a = std::min(acceptance(), 0.999);
  const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
  const ForwardCostCurve& target = target_.empty() ? prefill_target_ : target_;
  const ForwardCostCurve& draft = draft_.empty() ? prefill_draft_ : draft_;
  const double verify_ms = target.Predict(n_sequences * (k + 1));
  const double draft_ms = k == 0 ? 0.0 : draft.Predict(n_sequences);
  if (verify_ms <= 0.0 || draft_ms < 0.0) return 0.0;
  const double per_row = overhead_per_row_ms_[k > 0 ? 1 : 0];
  const double overhead_ms = std::max(0.0, per_row) * n_sequences * (k + 1);
  return tokens / (k * draft_ms + verify_ms + overhead_ms);
}

int CostAwareDraftLength::Next(int n_sequences, int remaining_tokens) {
  const bool first = decisions_++ == 0;
  const double margin = first ? kFirstMargin : kMargin;
  if (ExpectedTokensPerMs(0, n_sequences) <= 0.0 || ExpectedTokensPerMs(1, n_sequences) <= 0.0) {
    return std::min(k_max_, kFirstDraftLength);
  }
  int best = 0;
  double best_rate = margin * ExpectedTokensPerMs(0, n_sequences);
  for (int k = 1; k <= k_max_; ++k) {
    const double rate = ExpectedTokensPerMs(k, n_sequences);
    if (rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  if (best > 0) {
    plain_steps_ = 0;
    probe_every_ = kFirstProbe;
    return best;
  }
  // The first step's estimates rest on prompt timings and a prior acceptance: when drafting
  // looks close to paying, one K = 1 step measures the real thing.
  if (first && ExpectedTokensPerMs(1, n_sequences) >=
                   kFirstProbeRatio * ExpectedTokensPerMs(0, n_sequences)) {
    return 1;
  }
  // Plain steps teach nothing about acceptance or draft cost: probe K = 1 now and then, less
  // often each time (a probe makes the draft catch up on every token it skipped).
  if (++plain_steps_ >= probe_every_ && remaining_tokens > probe_every_) {
    plain_steps_ = 0;
    probe_every_ = std::min(kMaxProbe, probe_every_ * 2);
    return 1;
  }
  return 0;
}

}  // namespace specd
