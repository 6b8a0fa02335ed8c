// A smaller model of the same vocabulary drafts autoregressively: one draft forward per draft
// position over every sequence that drafts this step, each sequence with its own KV slot.
// Optionally (EasySpec) its forwards run layer-parallel ("fuzzy"), with bonus calibration, and it
// drafts token trees instead of chains.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "draft/proposer.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/layer_groups.h"
#include "model/model.h"

namespace specd {

struct DraftModelOptions {
  // Most tokens the draft reads to catch up after plain steps: after a long run of steps without
  // drafting it would have to read every skipped token, which costs about as much as having
  // drafted all along. It restarts instead from the last this-many tokens: a proposer needs no
  // more context to be useful, and RoPE makes its fresh positions equivalent. Output is
  // unaffected (the target decides).
  static constexpr int kDefaultCatchUpLimit = 32;
  int catch_up_limit = kDefaultCatchUpLimit;
  // Most prompt tokens the draft reads (the last ones, from position 0): an editor's prompt of
  // 2,430 tokens cost the Qwen draft 0.8 s to read, as much as 60 target tokens, and a draft
  // trained on 512-token texts gains little from the far context. Output is unaffected.
  static constexpr int kDefaultPromptLimit = 256;
  int prompt_limit = kDefaultPromptLimit;
  // EasySpec's fuzzy drafting: the draft's forwards run these layer groups layer-parallel.
  LayerGroups fuzzy;
  // Bonus calibration (EasySpec 3.2): a step's first draft forward is exact and re-reads the
  // tokens accepted at the last step with the bonus token, replacing their fuzzy keys / values;
  // the later drafting forwards are fuzzy. Without it every forward is fuzzy and fuzzy entries
  // stay in the cache.
  bool calibrate = true;
  // Token trees (tree_width > 1): each level keeps the tree_width likeliest nodes (by the draft's
  // path probability), up to tree_depth levels (0: as deep as the step's k nodes allow).
  int tree_width = 0;
  int tree_depth = 0;
};

class DraftModelProposer : public Proposer {
 public:
  static constexpr int kDefaultCatchUpLimit = DraftModelOptions::kDefaultCatchUpLimit;

  // `kv` needs a slot per live sequence with room for its tokens plus the longest draft.
  DraftModelProposer(Model& draft, KvCache& kv, const KernelContext& ctx, AttentionMode attention,
                     DraftModelOptions options = {});
  ~DraftModelProposer() override;

  void AddSequence(int seq, std::span<const int32_t> prompt) override;
  void ForkSequence(int src, int dst) override;
  void RemoveSequence(int seq) override;
  int RowsBeforeFirstDraft(std::span<const int> seqs) const override;
  // Prompts are read by the first Propose that drafts for their sequence, not when the target
  // reads them or a sequence is forked: a sequence that joins a batch where plain steps win never
  // needs them (Prefill stays the base class's no-op).
  void Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
               ProposerTimings* timings) override;
  void Accept(int seq, int n_accepted, int32_t next) override;
  void Append(int seq, std::span<const int32_t> tokens) override;
  void AcceptPath(int seq, std::span<const int> path, int32_t next) override;

 private:
  const DraftModelOptions options_;
  struct State {
    int slot = -1;
    std::vector<int32_t> prefill;  // prompt tokens not read yet (all but the last)
    // Sequences forked from one prompt share its group: whichever of them draft first read it
    // once, the others of the group drafting with them take a copy of that KV.
    int prompt_group = -1;
    std::vector<int32_t> pending;  // inputs not yet in the KV cache; the last is the next input
    std::vector<int32_t> drafted;  // this step's drafts (a chain, or a tree's nodes)
    std::vector<int32_t> parents;  // a tree's node parents
    int kv_before = 0;             // KV length before this step's drafting
    int pending_before = 0;        // pending inputs fed by this step's drafting
  };
  // Reads the queued prompts of the sequences `wanted` accepts in one forward, adding its time
  // to `timings` (may be null). A prompt group's copies are read once.
  void RunPrefill(ProposerTimings* timings, const std::function<bool(int)>& wanted);
  // Sets up each drafting sequence's step (catch-up, KV marks); returns the largest k.
  int BeginStep(std::span<const DraftInput> inputs, ProposerTimings* timings);
  // One draft forward; the first of a step is exact under bonus calibration.
  void DraftForward(const Batch& batch, bool first, ProposerTimings* timings);
  // Token trees (tree_drafting.cc).
  void ProposeTrees(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
                    ProposerTimings* timings);
  // After a verification: keep the cache's entries up to the step's first forward and `kept`
  // drafted tokens; re-read the kept drafts then `next` at the next step.
  void KeepDrafts(State& s, std::span<const int32_t> kept, int32_t next);

  Model& model_;
  KvCache& kv_;
  const KernelContext& ctx_;
  AttentionMode attention_;
  std::map<int, State> seqs_;
  std::vector<float> logits_;  // [rows, n_vocab]
};

}  // namespace specd
