// A smaller model of the same vocabulary drafts autoregressively: one draft forward per draft
// position over every sequence that drafts this step, each sequence with its own KV slot.
#pragma once

#include <map>
#include <memory>

#include "draft/proposer.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace specd {

class DraftModelProposer : public Proposer {
 public:
  // Most tokens the draft reads to catch up after plain steps: after a long run of steps without
  // drafting it would have to read every skipped token, which costs about as much as having
  // drafted all along. It restarts instead from the last this-many tokens: a proposer needs no
  // more context to be useful, and RoPE makes its fresh positions equivalent. Output is
  // unaffected (the target decides).
  static constexpr int kDefaultCatchUpLimit = 32;

  // `kv` needs a slot per live sequence with room for its tokens plus the longest draft.
  DraftModelProposer(Model& draft, KvCache& kv, const KernelContext& ctx, AttentionMode attention,
                     int catch_up_limit = kDefaultCatchUpLimit);
  ~DraftModelProposer() override;

  void AddSequence(int seq, std::span<const int32_t> prompt) override;
  void ForkSequence(int src, int dst) override;
  void RemoveSequence(int seq) override;
  void Prefill(ProposerTimings* timings) override { RunPrefill(timings); }
  void Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
               ProposerTimings* timings) override;
  void Accept(int seq, int n_accepted, int32_t next) override;
  void Append(int seq, std::span<const int32_t> tokens) override;

 private:
  const int catch_up_limit_;
  struct State {
    int slot = -1;
    std::vector<int32_t> prefill;  // prompt tokens not read yet (all but the last)
    std::vector<int32_t> pending;  // inputs not yet in the KV cache; the last is the next input
    std::vector<int32_t> drafted;  // this step's drafts
    int kv_before = 0;             // KV length before this step's drafting
    int pending_before = 0;        // pending inputs fed by this step's drafting
  };
  // Reads every queued prompt in one forward.
  void RunPrefill(ProposerTimings* timings);
  // Draws draft token i of `in` from a logits row.
  int32_t Draw(const DraftInput& in, int i, std::span<const float> row, Proposal* out) const;

  Model& model_;
  KvCache& kv_;
  const KernelContext& ctx_;
  AttentionMode attention_;
  std::map<int, State> seqs_;
  std::vector<float> logits_;  // [rows, n_vocab]
};

}  // namespace specd
