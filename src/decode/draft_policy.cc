#include "decode/draft_policy.h"

#include <algorithm>
#include <cmath>

namespace specd {
namespace {
constexpr double kSmoothing = 0.2;         // weight of a new time measurement
constexpr double kAcceptanceDecay = 0.98;  // per observed verification
constexpr double kPriorWeight = 4.0;       // pseudo-observations behind the prior acceptance
constexpr int kProbeEvery = 16;            // plain steps between probes of K = 1
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
    : k_max_(std::max(1, k_max)), prior_acceptance_(prior_acceptance) {}

void CostAwareDraftLength::ObserveAcceptance(int drafted, int accepted) {
  if (drafted <= 0) return;
  accepted_ = kAcceptanceDecay * accepted_ + accepted;
  rejected_ = kAcceptanceDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
}

double CostAwareDraftLength::acceptance() const {
  return (accepted_ + kPriorWeight * prior_acceptance_) / (accepted_ + rejected_ + kPriorWeight);
}

double CostAwareDraftLength::ExpectedTokensPerMs(int k, int n_sequences) const {
  const double a = std::min(acceptance(), 0.999);
  const double tokens = (1.0 - std::pow(a, k + 1)) / (1.0 - a);
  const double verify_ms = target_.Predict(n_sequences * (k + 1));
  const double draft_ms = k == 0 ? 0.0 : draft_.Predict(n_sequences);
  if (verify_ms <= 0.0 || draft_ms < 0.0) return 0.0;
  return tokens / (k * draft_ms + verify_ms);
}

int CostAwareDraftLength::Next(int n_sequences) {
  if (target_.Predict(n_sequences) < 0.0 || draft_.Predict(n_sequences) < 0.0) {
    return std::min(k_max_, kFirstDraftLength);
  }
  int best = 0;
  double best_rate = ExpectedTokensPerMs(0, n_sequences);
  for (int k = 1; k <= k_max_; ++k) {
    const double rate = ExpectedTokensPerMs(k, n_sequences);
    if (rate > best_rate) {
      best = k;
      best_rate = rate;
    }
  }
  if (best > 0) {
    plain_steps_ = 0;
    return best;
  }
  // Plain steps teach nothing about acceptance or draft cost: probe K = 1 now and then.
  if (++plain_steps_ >= kProbeEvery) {
    plain_steps_ = 0;
    return 1;
  }
  return 0;
}

}  // namespace specd
