// The step-based engine: sequences join with Add, leave with Cancel or when they finish, and each
// Step runs one decoding step (engine/step.h) for all of them: ONE target forward with whatever
// they need (prompt chunks of new sequences, plain decode rows, verification rows) and, with a
// proposer, one draft forward per draft position. A finished sequence frees its KV slots at
// once. Plain decoding is the engine without a proposer. Per-sequence sampling parameters: one
// batch may mix greedy and sampled sequences.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "base/timer.h"
#include "engine/step.h"

namespace specd {

class Engine {
 public:
  // `proposer` and `policy` go together (speculative) or are both null (plain).
  Engine(Model& target, KvCache& kv, const KernelContext& ctx, const StepOptions& options,
         Proposer* proposer = nullptr, DraftLengthPolicy* policy = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Adds a sequence; returns its id. Throws an Error (and changes nothing) if its prompt is empty,
  // it does not fit the context, or no KV slot is free.
  int Add(const SequenceRequest& request);
  // n completions of one prompt, the prompt read once (its KV forked); completion i gets RNG
  // sequence request.rng_sequence + i.
  std::vector<int> AddCompletions(const SequenceRequest& request, int n);
  // Ends a sequence now (finish_reason "cancelled" unless given) and frees its KV slots.
  void Cancel(int id, const char* reason = "cancelled");

  // Drops a finished sequence's record (a long-running engine forgets what it has reported).
  void Forget(int id);

  // One step for every live sequence.
  StepReport Step();
  bool HasWork() const;
  const Sequence& sequence(int id) const;
  const SpeculativeStats& stats() const { return decoder_.stats(); }
  // The longest draft a step may verify (0 without a proposer).
  int max_draft() const { return policy_ != nullptr ? policy_->max_length() : 0; }
  // Finished sequences whose KV is kept for prompts that start the same way (cache_prompt); each
  // holds a KV slot until a new sequence needs it (least recently used first).
  int n_cached_prefixes() const { return static_cast<int>(cached_.size()); }

 private:
  // A finished sequence's KV slot kept with the tokens it holds.
  struct CachedPrefix {
    int slot = -1;
    std::vector<int32_t> tokens;
    int64_t last_use = 0;
  };
  void Release(Sequence& s);
  // A free KV slot, giving up the least recently used cached prefix when none is free.
  int AcquireSlot();
  // Takes the cached prefix sharing the most tokens with s's prompt (at least one; all but the
  // prompt's last token at most, which must be read for its logits) as s's slot, with its moved
  // chunks when the request reuses them (then the latest cached prefix when none shares the
  // start). False if nothing is reused.
  bool ReuseCachedPrefix(Sequence& s);
  // Past the n_shared tokens of `cached` that begin s's prompt, moves the runs of at least
  // s.request.cache_reuse_chunk cached tokens that come next in the prompt to their places in
  // s's slot (llama-server's scan); returns the prompt tokens the slot now holds.
  int ReuseMovedChunks(const std::vector<int32_t>& cached, int n_shared, const Sequence& s);

  Model& target_;
  KvCache& kv_;
  Proposer* proposer_;
  DraftLengthPolicy* policy_;
  StepDecoder decoder_;
  std::map<int, Sequence> sequences_;
  std::vector<CachedPrefix> cached_;
  int64_t use_counter_ = 0;
  int next_id_ = 0;
  Timer clock_;
};

}  // namespace specd
