#include "draft/draft_length.h"

#include <algorithm>

#include "base/error.h"

namespace specd {

int AdaptiveDraftLength::NextLength(int current, int max_accepted, int l_incre, int l_mod,
                                    int l_limit, int* decreasing) {
  if (max_accepted >= current) {
    *decreasing = 0;
    return std::min(current + l_incre, l_limit);
  }
  const int next = current - (current + l_mod - 1) / l_mod - *decreasing;
  *decreasing = 1;
  return std::max({1, max_accepted, next});
}

void AdaptiveDraftLength::Observe(const StepObservation& step) {
  if (step.verified.empty()) return;
  int max_accepted = 0;
  for (const auto& [drafted, accepted] : step.verified)
    max_accepted = std::max(max_accepted, accepted);
  current_ = NextLength(current_, max_accepted, l_incre_, l_mod_, l_limit_, &decreasing_);
}

void CostAwarePolicy::Observe(const StepObservation& step) {
  // The first step reads the prompts: its forwards are the first measurements (many rows, the
  // far end of the cost curves) until decode steps have been measured.
  if (!saw_prefill_ && step.prefill_target_rows > 0 && step.k == 0 && step.verified.empty()) {
    model_.ObservePrefill(step.target_rows, step.target_ms, step.prefill_draft_rows,
                          step.prefill_draft_ms);
    saw_prefill_ = true;
    return;
  }
  if (step.prefill_target_rows > 0) return;  // mixed with prompt rows: not a typical step
  for (const auto& [rows, ms] : step.draft_forwards) model_.ObserveDraftForward(rows, ms);
  model_.ObserveTargetForward(step.target_rows, step.target_ms);
  for (const auto& [drafted, accepted] : step.verified) model_.ObserveAcceptance(drafted, accepted);
  model_.ObserveStep(step.n_sequences, step.k, step.step_ms, step.forward_ms, step.tokens,
                     step.catch_up);
}

ScheduledDraftLength::ScheduledDraftLength(std::vector<int> schedule)
    : schedule_(std::move(schedule)) {
  SPECD_CHECK(!schedule_.empty(), "a draft-length schedule needs at least one length");
  for (int k : schedule_) {
    SPECD_CHECK(k >= 0 && k <= 64, "scheduled draft lengths must be in 0..64, got ", k);
    max_ = std::max(max_, k);
  }
}

}  // namespace specd
