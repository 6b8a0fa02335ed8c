// Cost-aware draft length: picks K for each speculative step to maximize tokens per
// millisecond, from what this run measures. K = 0 (a plain target step) is a candidate, so
// speculation that does not pay on this machine, model pair or batch size turns itself off
// instead of making decoding slower.
//
// What it knows: the step time t(B, K) of a step with draft length K over B sequences, measured
// (draft forwards, the target forward, sampling and verification together), and the
// per-token acceptance a, shared by every K (a decayed maximum-likelihood estimate for a
// geometric run of acceptances). A step is expected to commit E(K) = (1 - a^(K+1)) / (1 - a)
// tokens per sequence, at E(K) / t(B, K) tokens per ms per sequence. Times are measured, not
// modelled: a first version predicted unmeasured K from a cost model fitted to a few row
// counts, and one cold or stale measurement could switch speculation off where it paid most.
//
// How it explores:
//  - the first K tried is 2 at batch 1, 1 at 2-4 and 0 beyond (small batches usually gain
//    from drafting; large ones, whose verification is compute-bound, often do not); K then
//    climbs while the longest tried is the best, doubling (drafting more costs more, so tokens
//    per ms are single-peaked in K), and the untried neighbours of the best are tried next;
//  - a (B, K)'s time is the mean of its last 8 measurements without the upsets (those over 1.25x
//    the least: a shared machine's upsets only ever add time), and the best K is measured twice
//    before it is trusted; a drafting K's time moves with plain steps' time since it was
//    measured (contexts grow while plain steps run: see StepTime);
//  - the times of a process's first 2 steps are not kept (they run cold);
//  - after 4, 8, then every 16 drafting steps a neighbour of the best K is measured again
//    (times drift: memory bandwidth on a shared machine comes and goes); K = 0 takes two plain
//    steps, the first of which is not timed (it follows drafting), and only while plain steps
//    are within reach (at least 80% of the best rate): otherwise their time cannot matter.
//    Plain steps not yet measured at the batch size are the first refresh: a climb that settles
//    on K >= 2 never meets them otherwise, and drafting can lose to them at every K;
//  - drafting is charged what the draft's reading of new prompts costs per token it commits
//    (SetDraftOverheadPerToken), which a step's time does not show;
//  - a drafting K that lost to plain steps on one measurement is measured once more before
//    plain steps are trusted (at most twice per run): one slow step must not switch it off;
//  - after plain steps, drafting resumes only when predicted 2% better (the draft must first
//    catch up on what they wrote); when plain steps win but drafting is within 10% of them,
//    drafting is probed once more after 16 plain steps (unless the request is about to end), to
//    follow a changing acceptance or undo an unlucky measurement. More such probes cost more
//    than they found in simulation: each is a step at a losing K plus the draft's catch-up (up
//    to 32 tokens per sequence). A probe takes two steps: the first catches up, the second is
//    timed;
//  - while fewer than 24 drafts were verified, drafting goes on where an acceptance one standard
//    error above the estimate would make it win: sampled drafts are accepted at random, and an
//    unlucky start must not switch speculation off for a whole request;
//  - a batch size within 25% of a measured one (sequences finishing one by one) is decided
//    with that one's times; another starts from the nearest measured one's best K if that is
//    within a factor of 2, else as a first batch does.
#pragma once

#include <map>
#include <utility>

namespace specd {

class CostAwareDraftLength {
 public:
  // k_max caps the draft length; prior_acceptance is a's starting value.
  explicit CostAwareDraftLength(int k_max, double prior_acceptance = 0.6);

  // The draft length for the next step of n_sequences sequences, the longest of which has at
  // most remaining_tokens left (exploration is not worth it near the end).
  int Next(int n_sequences, int remaining_tokens = 1 << 30);

  // One sequence's verification: `accepted` of `drafted` tokens (a rejection ends the run).
  void ObserveAcceptance(int drafted, int accepted);
  // A whole step's wall time. A step whose draft first caught up on tokens skipped by plain
  // steps (`catch_up`) is not typical and is left out.
  // `mean_drafted`: the drafts a sequence actually got (a lookup proposer often has fewer than K,
  // or none); the expected tokens of a K are those of that many drafts. Negative: K.
  void ObserveStep(int n_sequences, int k, double step_ms, bool catch_up,
                   double mean_drafted = -1.0);

  // What reading new prompts costs the draft, per token committed by drafting steps (the same
  // engine without speculation does not read them; plain steps leave them unread). Charged to
  // every drafting K: at high load, with prompts arriving all the time, it decides.
  void SetDraftOverheadPerToken(double ms) { draft_overhead_ms_ = ms; }
  // What the next step would spend before it can draft: a fresh batch's unread prompts (and what
  // it wrote since), read by the draft (ms; 0 when none). Drafting starts only where its expected
  // saving over the remaining tokens repays it: a request of short completions at a batch size
  // where drafting barely wins (or loses, and would only probe) is decoded plain, unread.
  void SetStartCostMs(double ms) { start_cost_ms_ = ms; }

  double acceptance() const;
  // Expected tokens per ms per sequence of a step with draft length k over n_sequences, from
  // the times measured at that batch size (or the nearest one measured); 0 when unmeasured.
  double ExpectedTokensPerMs(int k, int n_sequences) const;

 private:
  // The last few step times of one (batch, K); the estimate is the mean of those within
  // kUpsetFactor of the least. The upsets of a step on a shared machine (a cold start, a
  // neighbour's burst) only ever add time, so the slow ones are left out; but the rest are
  // averaged, not reduced to their least: a step that commits more tokens takes longer (each is
  // sampled, scored, read by the draft), so the least of a few would be the time of a step
  // whose drafts were rejected, and after a run of accepted ones a drafting K looked as slow as
  // its slowest (SmolLM2 at t = 0.7 on Zen 2, traced: requests that kept to plain steps after
  // such a run; over 16 prompts 0.99x where K = 1 gave 1.16x).
  // A drafting K also remembers what plain steps took (at its batch size) when each of its steps
  // was measured: contexts grow while plain steps run, and a plain step at batch 4 of SmolLM2 went
  // 9.0 -> 11.3 ms over 200 tokens while K = 1's time, measured at the start, stayed 18.3 ms; so
  // K = 1 looked better and better and drafting resumed again and again (it then took 20.8 ms). Its
  // time is moved by as much as plain steps' has moved since (a step's attention grows about as
  // much whatever its rows: 18.3 + 2.3 against the 20.8 measured).
  struct StepTime {
    static constexpr int kKept = 8;
    static constexpr double kUpsetFactor = 1.25;
    double recent_ms[kKept] = {};
    double plain_then_ms[kKept] = {};  // plain steps' time when each was measured, 0: unknown
    int count = 0;
    double drafted = -1.0;  // mean drafts per sequence at this K (moving average), -1: unknown
    double ms() const { return MeanOverKept(recent_ms); }
    double PlainThenMs() const { return MeanOverKept(plain_then_ms); }
    // The mean of values[i] over the steps within kUpsetFactor of the least; 0 if none, or if
    // one of those values is unknown (<= 0).
    double MeanOverKept(const double* values) const;
  };
  // The batch size whose times decide for n_sequences: itself once it has two K measured,
  // otherwise the nearest that has if within 25% (else n_sequences itself).
  int DecidingBatch(int n_sequences) const;
  const StepTime* Time(int batch, int k) const;
  // K's step time `t` at `batch`, moved by the drift of plain steps' time since it was measured.
  double CurrentMs(const StepTime& t, int batch, int k) const;
  // ExpectedTokensPerMs at a given acceptance, `batch` being the deciding one; with_overhead:
  // drafting charged its per-token share of prompt reads.
  double ExpectedTokensPerMs(int k, int batch, double acceptance, bool with_overhead = true) const;
  // Whether drafting's saving over the remaining tokens, at the best measured rates, exceeds the
  // start cost (true when there is none or plain steps are unmeasured at this batch size).
  bool StartRepaid(int batch, int remaining_tokens) const;
  // The acceptance estimate plus kOptimism standard errors (of a rate over the decayed count of
  // drafts seen): what the drafts seen so far cannot rule out.
  double OptimisticAcceptance() const;
  // The measured K with the highest expected rate at `batch` (-1 if none).
  int BestMeasured(int batch, double* rate) const;
  // Next's cases: nothing measured at this batch size yet; the climb to longer drafts (-1 when
  // it is over); drafting is the best (neighbours, refreshes); plain steps are the best
  // (second looks, optimism while drafts are few, probes).
  int StartingK(int n_sequences) const;
  int ClimbingK(int batch, int best, int remaining_tokens) const;
  int WhileDrafting(int batch, int best, double best_rate, int n_sequences, int remaining_tokens);
  int WhilePlain(int batch, double best_rate, int remaining_tokens);

  int k_max_;
  double prior_acceptance_;
  double accepted_ = 0.0;  // decayed counts of accepted drafts and of rejections
  double rejected_ = 0.0;
  std::map<std::pair<int, int>, StepTime> times_;  // by (batch, K)
  std::map<int, int> measured_ks_;                 // batch -> how many Ks it has times for
  int plain_steps_ = 0;                            // consecutive plain steps chosen as the best
  int probe_after_;         // plain steps before drafting is probed again; doubles after each
  int probes_ = 0;          // probes since drafting was last the best
  int drafting_steps_ = 0;  // drafting steps since the last refresh of a neighbour
  int refresh_after_;       // drafting steps between refreshes: 4, 8, then 16
  int steps_seen_ = 0;
  int refresh_turn_ = 2;  // what was refreshed last: 0 the longer neighbour, 1 the shorter, 2 K = 0
  int second_looks_ = 0;  // drafting Ks measured again after losing to plain steps once
  double draft_overhead_ms_ = 0.0;  // per token committed while drafting
  double start_cost_ms_ = 0.0;      // before the next step could draft
  // A plain step right after drafting is not timed (it runs with the target's weights pushed out
  // of the caches): a refresh of K = 0 takes two plain steps and times the second.
  bool plain_refresh_pending_ = false;
  int probe_second_step_ = 0;  // K of a probe's second step (the first caught the draft up)
};

}  // namespace specd
