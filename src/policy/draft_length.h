// Draft-length policies behind one interface: how many tokens to draft at the next step.
//   FixedDraftLength     K every step;
//   BassDraftLength      BASS Algorithm 1 (BassParameters);
//   CostAwareDraftLength K from measured costs and acceptance, 0 when drafting does not pay
//                        (cost_aware.h; adapted here);
//   ScheduledDraftLength a given cycle of lengths (tests, experiments).
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "policy/cost_aware.h"

namespace specd {

// What a step measured, for the policies that learn.
struct StepObservation {
  int n_sequences = 0;                                 // sequences that took part
  int k = 0;                                           // the draft length the policy gave
  std::vector<std::pair<int, int>> verified;           // (drafted, accepted) per sequence
  std::vector<std::pair<int, double>> draft_forwards;  // (rows, ms)
  int target_rows = 0;
  double target_ms = 0.0;
  int prefill_target_rows = 0;  // rows reading prompts in the same target forward
  int prefill_draft_rows = 0;
  double prefill_draft_ms = 0.0;
  double step_ms = 0.0;     // wall time of the whole step
  double forward_ms = 0.0;  // of which in forwards
  int tokens = 0;           // committed by the step
  bool catch_up = false;    // the draft first read tokens skipped by plain steps
};

class DraftLengthPolicy {
 public:
  virtual ~DraftLengthPolicy() = default;
  // Draft length for the next step of n_sequences sequences, the longest of which has at most
  // remaining_tokens left to generate.
  virtual int Next(int n_sequences, int remaining_tokens) = 0;
  // Rows the draft would read before the next step could draft (a fresh batch's unread prompts:
  // Proposer::RowsBeforeFirstDraft); set before each Next.
  virtual void SetStartRows(int rows) { (void)rows; }
  virtual void Observe(const StepObservation& step) { (void)step; }
  // The longest draft it can ask for (KV room, statistics arrays).
  virtual int max_length() const = 0;
  virtual const char* name() const = 0;
};

class FixedDraftLength : public DraftLengthPolicy {
 public:
  explicit FixedDraftLength(int k) : k_(k) {}
  int Next(int, int) override { return k_; }
  int max_length() const override { return k_; }
  const char* name() const override { return "fixed"; }

 private:
  int k_;
};

// BASS Algorithm 1's constants (the paper's values): the start l0, the growth after a step where
// some sequence accepted everything, the shrink divisor and the limit.
struct BassParameters {
  int l0 = 7;
  int l_incre = 2;
  int l_mod = 10;
  int l_limit = 32;
};

// BASS Algorithm 1: grow by l_incre after a step where some sequence accepted everything; shrink
// by ceil(l / l_mod) (and one more after consecutive decreases) otherwise.
class BassDraftLength : public DraftLengthPolicy {
 public:
  explicit BassDraftLength(const BassParameters& p = {})
      : current_(p.l0), l_incre_(p.l_incre), l_mod_(p.l_mod), l_limit_(p.l_limit) {}
  int Next(int, int) override { return current_; }
  void Observe(const StepObservation& step) override;
  int max_length() const override { return l_limit_; }
  const char* name() const override { return "bass"; }
  // One step of the algorithm from `current` when the best sequence accepted max_accepted;
  // `decreasing` carries the algorithm's s (1 after a decrease).
  static int NextLength(int current, int max_accepted, int l_incre, int l_mod, int l_limit,
                        int* decreasing);

 private:
  int current_;
  int l_incre_, l_mod_, l_limit_;
  int decreasing_ = 0;
};

class CostAwarePolicy : public DraftLengthPolicy {
 public:
  // K in {0} and k_min..k_max: a draft shorter than k_min is lengthened to it (llama.cpp's
  // --draft-min: fewer drafts are not worth a verification).
  explicit CostAwarePolicy(int k_max, int k_min = 0)
      : k_max_(k_max), k_min_(k_min), model_(k_max) {}
  int Next(int n_sequences, int remaining_tokens) override {
    const int k = model_.Next(n_sequences, remaining_tokens);
    return k > 0 && k < k_min_ ? k_min_ : k;
  }
  void SetStartRows(int rows) override {
    model_.SetStartCostMs(draft_prompt_rows_ > 0.0 ? rows * draft_prompt_ms_ / draft_prompt_rows_
                                                   : 0.0);
  }
  void Observe(const StepObservation& step) override;
  int max_length() const override { return k_max_; }
  const char* name() const override { return "cost"; }
  const CostAwareDraftLength& model() const { return model_; }

 private:
  int k_max_;
  int k_min_;
  CostAwareDraftLength model_;
  int previous_k_ = 0;              // the last decode step's draft length
  double draft_prompt_ms_ = 0.0;    // decayed sums: the draft reading prompts,
  double draft_prompt_rows_ = 0.0;  // the rows it read,
  double drafted_tokens_ = 0.0;     // and the tokens drafting steps committed
};

class ScheduledDraftLength : public DraftLengthPolicy {
 public:
  explicit ScheduledDraftLength(std::vector<int> schedule);
  int Next(int, int) override { return schedule_[step_ % schedule_.size()]; }
  void Observe(const StepObservation&) override { ++step_; }
  int max_length() const override { return max_; }
  const char* name() const override { return "schedule"; }

 private:
  std::vector<int> schedule_;
  size_t step_ = 0;
  int max_ = 1;
};

}  // namespace specd
