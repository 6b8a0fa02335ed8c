#include "policy/cost_aware.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <utility>

namespace specd {
namespace {
constexpr double kAcceptanceDecay = 0.98;  // per observed verification
constexpr double kPriorWeight = 2.0;       // pseudo-observations behind the prior acceptance
constexpr int kFirstProbe = 16;            // plain steps before drafting is probed again
constexpr int kMaxProbes = 1;              // in a row (each costs a losing step and a catch-up)
constexpr int kFirstRefresh = 4;
constexpr double kProbeWithin = 0.9;  // plain steps win: probe drafting if it is this close
// Drafting must beat plain steps by this to resume. 5% (with step times as the least of four)
// kept whole requests on plain steps at 2-4% predicted gains in simulation.
constexpr double kSwitchMargin = 1.02;
constexpr int kRefreshEvery = 16;  // drafting steps between re-measuring a neighbour (at most)
constexpr int kTrusted = 2;        // measurements of a K near the best before it is trusted
constexpr int kColdSteps = 2;      // a process's first steps: their times are not kept
// Drafting starts where its predicted saving exceeds the start cost by this factor: the first
// drafting steps run below the measured rate (the draft catches up, K climbs), and where the
// two are close (HumanEval at b = 4) starting at once lost to waiting by 0.08-0.10 of BASS's
// per-token latency on the Xeon of 2026-12-06.
constexpr double kStartMargin = 1.5;
constexpr int kMaxSecondLooks = 2;         // re-measurements of a drafting K that lost once
constexpr double kPlainWithinReach = 0.8;  // plain steps refreshed only if this close to the best
// Until this many drafts (decayed) were verified, drafting that would win at an acceptance
// kOptimism standard errors above the estimate goes on: a few sampled drafts say little.
constexpr double kEnoughDrafts = 24.0;
constexpr double kOptimism = 1.0;
}  // namespace

CostAwareDraftLength::CostAwareDraftLength(int k_max, double prior_acceptance)
    : k_max_(std::max(1, k_max)),
      prior_acceptance_(prior_acceptance),
      probe_after_(kFirstProbe),
      refresh_after_(kFirstRefresh) {}

void CostAwareDraftLength::ObserveAcceptance(int drafted, int accepted) {
  if (drafted <= 0) return;
  accepted_ = kAcceptanceDecay * accepted_ + accepted;
  rejected_ = kAcceptanceDecay * rejected_ + (accepted < drafted ? 1.0 : 0.0);
}

void CostAwareDraftLength::ObserveStep(int n_sequences, int k, double step_ms, bool catch_up,
                                       double mean_drafted) {
  if (n_sequences <= 0 || step_ms <= 0.0 || catch_up || ++steps_seen_ <= kColdSteps) return;
  const StepTime* plain = k > 0 ? Time(n_sequences, 0) : nullptr;
  const double plain_now_ms = plain != nullptr ? plain->ms() : 0.0;
  StepTime& t = times_[{n_sequences, k}];
  if (t.count == 0) ++measured_ks_[n_sequences];
  t.plain_then_ms[t.count % StepTime::kKept] = plain_now_ms;
  t.recent_ms[t.count++ % StepTime::kKept] = step_ms;
  // The first plain time at a batch size (once measured twice) stands for the plain time of the
  // drafting steps measured before it: the first steps try drafting, these came soon after.
  if (k == 0 && t.count == kTrusted) {
    for (auto& [key, drafting] : times_) {
      if (key.first != n_sequences || key.second == 0) continue;
      for (double& then_ms : drafting.plain_then_ms) then_ms = then_ms > 0.0 ? then_ms : t.ms();
    }
  }
  if (mean_drafted >= 0.0) {
    t.drafted = t.drafted < 0.0 ? mean_drafted : 0.8 * t.drafted + 0.2 * mean_drafted;
  }
}

double CostAwareDraftLength::StepTime::MeanOverKept(const double* values) const {
  const int n = std::min(count, kKept);
  if (n == 0) return 0.0;
  const double least = *std::min_element(recent_ms, recent_ms + n);
  double sum = 0.0;
  int kept = 0;
  for (int i = 0; i < n; ++i) {
    if (recent_ms[i] > kUpsetFactor * least) continue;
    if (values[i] <= 0.0) return 0.0;
    sum += values[i], ++kept;
  }
  return sum / kept;
}

double CostAwareDraftLength::CurrentMs(const StepTime& t, int batch, int k) const {
  const double ms = t.ms();
  const StepTime* plain = k > 0 ? Time(batch, 0) : nullptr;
  const double then_ms = t.PlainThenMs();
  if (plain == nullptr || then_ms <= 0.0) return ms;
  // Drifts within 5% are left alone: a mean of jittery plain steps moves that much by chance, and
  // that noise would be added to every drafting K's time. Never below half the measured time: a
  // drift that large is a changed machine, not longer contexts.
  const double drift_ms = plain->ms() - then_ms;
  if (std::abs(drift_ms) <= 0.05 * then_ms) return ms;
  return std::max(0.5 * ms, ms + drift_ms);
}

double CostAwareDraftLength::acceptance() const {
  return (accepted_ + kPriorWeight * prior_acceptance_) / (accepted_ + rejected_ + kPriorWeight);
}

const CostAwareDraftLength::StepTime* CostAwareDraftLength::Time(int batch, int k) const {
  const auto it = times_.find({batch, k});
  return it == times_.end() ? nullptr : &it->second;
}

int CostAwareDraftLength::DecidingBatch(int n_sequences) const {
  const auto own = measured_ks_.find(n_sequences);
  if (own != measured_ks_.end() && own->second >= 2) return n_sequences;
  int nearest = n_sequences;
  for (const auto& [batch, n_k] : measured_ks_) {
    if (n_k >= 2 && (nearest == n_sequences ||
                     std::abs(batch - n_sequences) < std::abs(nearest - n_sequences))) {
      nearest = batch;
    }
  }
  // A batch size within 25% of a measured one (sequences finishing one by one) is decided
  // as that one: exploring it afresh would cost more than it could find.
  return 4 * std::abs(nearest - n_sequences) <= nearest ? nearest : n_sequences;
}

double CostAwareDraftLength::OptimisticAcceptance() const {
  const double a = acceptance();
  const double n = accepted_ + rejected_ + kPriorWeight;
  return std::min(0.999, a + kOptimism * std::sqrt(a * (1.0 - a) / n));
}

double CostAwareDraftLength::ExpectedTokensPerMs(int k, int n_sequences) const {
  return ExpectedTokensPerMs(k, DecidingBatch(n_sequences), acceptance());
}

double CostAwareDraftLength::ExpectedTokensPerMs(int k, int batch, double acceptance,
                                                 bool with_overhead) const {
  const StepTime* t = Time(batch, k);
  const double step_ms = t != nullptr ? CurrentMs(*t, batch, k) : 0.0;
  if (step_ms <= 0.0) return 0.0;
  const double a = std::min(acceptance, 0.999);
  const double drafts = t->drafted >= 0.0 ? t->drafted : k;
  const double tokens = (1.0 - std::pow(a, drafts + 1)) / (1.0 - a);  // per sequence
  const double overhead_ms = k > 0 && with_overhead ? draft_overhead_ms_ * tokens * batch : 0.0;
  return tokens / (step_ms + overhead_ms);
}

int CostAwareDraftLength::BestMeasured(int batch, double* rate) const {
  int best = -1;
  *rate = 0.0;
  for (int k = 0; k <= k_max_; ++k) {
    // Leaving plain steps costs the draft a catch-up on what they wrote: only for a margin.
    const double margin = k > 0 && plain_steps_ > 0 ? kSwitchMargin : 1.0;
    const double r = ExpectedTokensPerMs(k, batch) / margin;
    if (Time(batch, k) != nullptr && r > *rate) {
      best = k;
      *rate = r * margin;
    }
  }
  return best;
}

int CostAwareDraftLength::Next(int n_sequences, int remaining_tokens) {
  // A probe's first step caught the draft up (and is not timed); its second measures it.
  if (const int k = std::exchange(probe_second_step_, 0); k > 0) return k;
  const int batch = DecidingBatch(n_sequences);
  double best_rate = 0.0;
  const int best = BestMeasured(batch, &best_rate);
  if (best < 0) return StartingK(n_sequences);
  if (!StartRepaid(batch, remaining_tokens)) return 0;
  // The best K measured only once is measured again at once (one slow step could be what
  // made the others look worse, or this one better).
  if (Time(batch, best)->count < kTrusted) return best;
  if (const int k = ClimbingK(batch, best, remaining_tokens); k >= 0) return k;
  if (best > 0) return WhileDrafting(batch, best, best_rate, n_sequences, remaining_tokens);
  return WhilePlain(batch, best_rate, remaining_tokens);
}

bool CostAwareDraftLength::StartRepaid(int batch, int remaining_tokens) const {
  if (start_cost_ms_ <= 0.0) return true;
  // The start cost replaces the per-token share of prompt reads here (it is that cost, whole).
  const double plain = ExpectedTokensPerMs(0, batch, acceptance(), /*with_overhead=*/false);
  if (plain <= 0.0) return true;  // plain steps unmeasured here: nothing to weigh it against
  double drafting = 0.0;
  for (int k = 1; k <= k_max_; ++k) {
    drafting = std::max(drafting, ExpectedTokensPerMs(k, batch, acceptance(), false));
  }
  if (drafting <= plain) return false;  // not even a probe is worth reading the prompts for
  return remaining_tokens * (1.0 / plain - 1.0 / drafting) > kStartMargin * start_cost_ms_;
}

int CostAwareDraftLength::StartingK(int n_sequences) const {
  // Small batches usually gain from drafting, large ones often do not (their verification is
  // compute-bound), so the first steps start the climb from there. A batch size met later
  // (sequences finishing) starts from the best K of the nearest one measured.
  int nearest = -1;
  for (const auto& [key, t] : times_) {
    if (nearest < 0 || std::abs(key.first - n_sequences) < std::abs(nearest - n_sequences)) {
      nearest = key.first;
    }
  }
  // Only a batch size within a factor of 2 says much: the server met 32 sequences after 1 and
  // 2, whose K = 2 started a climb through K = 1..4 where plain steps won.
  double rate = 0.0;
  if (nearest >= 0 && 2 * std::min(nearest, n_sequences) >= std::max(nearest, n_sequences)) {
    if (const int k = BestMeasured(nearest, &rate); k >= 0) return k;
  }
  return std::min(k_max_, n_sequences == 1 ? 2 : n_sequences <= 4 ? 1 : 0);
}

int CostAwareDraftLength::ClimbingK(int batch, int best, int remaining_tokens) const {
  // Climb while the longest K tried is the best: to twice the draft length (then the lengths
  // in between are tried as neighbours of the best).
  const int next = std::min(k_max_, std::max(best + 1, 2 * best));
  if (next <= best || Time(batch, next) != nullptr) return -1;
  for (int k = best + 1; k <= k_max_; ++k) {
    if (Time(batch, k) != nullptr) return -1;  // not the longest tried
  }
  // From plain steps only while the draft has not fallen behind (catching up on every token
  // the plain steps wrote is what a probe costs; probes are rationed in WhilePlain).
  if (best > 0 || (plain_steps_ == 0 && remaining_tokens > kFirstProbe)) return next;
  return -1;
}

int CostAwareDraftLength::WhileDrafting(int batch, int best, double best_rate, int n_sequences,
                                        int remaining_tokens) {
  // A neighbour of the best never tried (the climb skipped it), or, beyond 4 sequences (where
  // plain steps often win), plain steps when this batch size started from another's best K (a
  // first plain step after drafting is not timed: it then comes again): try it now.
  for (int k : {best + 1, best - 1, n_sequences > 4 ? 0 : -1}) {
    if (k >= 0 && k <= k_max_ && Time(batch, k) == nullptr && remaining_tokens > 2) return k;
  }
  plain_steps_ = 0;
  probe_after_ = kFirstProbe;
  probes_ = 0;
  if (std::exchange(plain_refresh_pending_, false)) return 0;  // the timed one
  if (++drafting_steps_ < refresh_after_) return best;
  drafting_steps_ = 0;
  refresh_after_ = std::min(kRefreshEvery, 2 * refresh_after_);
  // In turn: the longer neighbour, the shorter one, plain steps.
  // Plain steps never measured at this batch size come first: drafting may lose to them at
  // every K (the climb starts from K = 2 at batch 1 and meets K = 0 only via K = 1).
  const bool plain_unknown = Time(batch, 0) == nullptr;
  refresh_turn_ = plain_unknown ? 2 : (refresh_turn_ + 1) % 3;
  const int k = refresh_turn_ == 2 ? 0 : std::clamp(best + 1 - 2 * refresh_turn_, 0, k_max_);
  if (k == 0 && (plain_unknown || ExpectedTokensPerMs(0, batch) >= kPlainWithinReach * best_rate) &&
      remaining_tokens > 2) {
    plain_refresh_pending_ = true;
    return 0;
  }
  return k > 0 && k != best ? k : best;
}

int CostAwareDraftLength::WhilePlain(int batch, double best_rate, int remaining_tokens) {
  // Plain steps win on the estimate. Probe the best drafting K now and then (less often each
  // time) where it is close enough that a change in acceptance could tip it, unless the request
  // is about to end.
  double drafting_rate = 0.0;
  int drafting_k = 1;
  for (int k = 1; k <= k_max_; ++k) {
    const double r = ExpectedTokensPerMs(k, batch);
    if (r > drafting_rate) drafting_rate = r, drafting_k = k;
  }
  // One measurement of drafting may have been a slow outlier (a shared machine's upsets only add
  // time, and one such step used to switch speculation off for a whole run: batch 8 of the
  // 16.5M pair on AMX, 1.44x at K = 4, ran 99.6% plain steps): before plain steps are trusted
  // over it, the best drafting K is measured a second time.
  const StepTime* drafting_time = Time(batch, drafting_k);
  if (drafting_time != nullptr && drafting_time->count < kTrusted &&
      second_looks_ < kMaxSecondLooks && remaining_tokens > kFirstProbe) {
    ++second_looks_;
    return drafting_k;
  }
  // But while the drafts verified so far are few and an acceptance one standard error above the
  // estimate would make drafting win, draft on to learn it: sampled drafts are accepted at random.
  // At t = 0.7 on SmolLM2 (Zen 2, batch 1) a request whose first 8 drafting steps accepted 2 of
  // 10 drafts (estimate 0.27) kept to plain steps to its end where its drafts were accepted about
  // half the time (traced: 0.95x over 16 prompts where K = 1 gave 1.09x).
  if (accepted_ + rejected_ < kEnoughDrafts && remaining_tokens > kFirstProbe) {
    const double optimistic = OptimisticAcceptance();
    for (int k = 1; k <= k_max_; ++k) {
      if (ExpectedTokensPerMs(k, batch, optimistic) > best_rate) return drafting_k;
    }
  }
  if (++plain_steps_ >= probe_after_ && remaining_tokens > probe_after_ && probes_ < kMaxProbes &&
      drafting_rate >= kProbeWithin * best_rate) {
    plain_steps_ = 1;  // still behind: the probe's step is a catch-up
    probe_after_ *= 2;
    ++probes_;
    probe_second_step_ = drafting_k;
    return drafting_k;
  }
  return 0;
}

}  // namespace specd
