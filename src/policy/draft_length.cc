#include "policy/draft_length.h"

#include <algorithm>

#include "base/error.h"

namespace specd {

int BassDraftLength::NextLength(int current, int max_accepted, int l_incre, int l_mod, int l_limit,
                                int* decreasing) {
  if (max_accepted >= current) {
    *decreasing = 0;
    return std::min(current + l_incre, l_limit);
  }
  const int next = current - (current + l_mod - 1) / l_mod - *decreasing;
  *decreasing = 1;
  return std::max({1, max_accepted, next});
}

void BassDraftLength::Observe(const StepObservation& step) {
  if (step.verified.empty()) return;
  int max_accepted = 0;
  for (const auto& [drafted, accepted] : step.verified)
    max_accepted = std::max(max_accepted, accepted);
  current_ = NextLength(current_, max_accepted, l_incre_, l_mod_, l_limit_, &decreasing_);
}

void CostAwarePolicy::Observe(const StepObservation& step) {
  // The draft's reading of prompts, per token that drafting steps commit (a decayed ratio with a
  // prior of kPriorTokens tokens, so that the first prompt of a run is not charged to its first
  // few tokens).
  constexpr double kDecay = 0.995, kPriorTokens = 256.0;
  draft_prompt_ms_ = kDecay * draft_prompt_ms_ + step.prefill_draft_ms;
  draft_prompt_rows_ = kDecay * draft_prompt_rows_ + step.prefill_draft_rows;
  drafted_tokens_ = kDecay * drafted_tokens_ + (step.k > 0 ? step.tokens : 0);
  model_.SetDraftOverheadPerToken(draft_prompt_ms_ / (drafted_tokens_ + kPriorTokens));
  // Steps that read prompts are not typical decode steps.
  if (step.prefill_target_rows > 0 || step.n_sequences == 0) return;
  for (const auto& [drafted, accepted] : step.verified) model_.ObserveAcceptance(drafted, accepted);
  // A step whose draft first caught up on tokens written by plain steps: its first draft
  // forward read more rows than a typical one. With later forwards in the step (K >= 2), the
  // first is counted as their mean, and the step measures its K; with one, it is not timed.
  // (Prorating the first forward's time by rows under-counted it: a forward of 16 x 32 rows costs
  // far less per row than one of 16, and the K = 1 time it left, 2.8 ms against a typical 3.4 on
  // the 16.5M pair at batch 16, kept drafting on where it lost.) Prompts the draft read first
  // (left unread by plain steps) are charged above, not to the step.
  double step_ms = step.step_ms - step.prefill_draft_ms;
  bool typical = !step.catch_up;
  // A plain step right after a drafting step reads target weights that the draft's forwards
  // pushed out of the caches (SmolLM2 i8 on the Xeon, whose weights partly fit its L3: 4.3-5.0 ms
  // against 3.7-3.9 in a run of plain steps). That is drafting's cost, not a plain step's:
  // counted for K = 0 it made plain steps look slow and kept drafting on where it lost (0.88x).
  if (step.k == 0 && previous_k_ > 0) typical = false;
  previous_k_ = step.k;
  if (step.catch_up && step.draft_forwards.size() >= 2) {
    double later_ms = 0.0;
    for (size_t i = 1; i < step.draft_forwards.size(); ++i)
      later_ms += step.draft_forwards[i].second;
    later_ms /= static_cast<double>(step.draft_forwards.size() - 1);
    step_ms -= std::max(0.0, step.draft_forwards.front().second - later_ms);
    typical = true;
  }
  double drafted = 0.0;
  for (const auto& [n, accepted] : step.verified) drafted += n;
  model_.ObserveStep(step.n_sequences, step.k, step_ms, !typical,
                     step.verified.empty() ? -1.0 : drafted / step.verified.size());
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
