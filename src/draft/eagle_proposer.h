// EAGLE (Li et al., 2024): a one-layer head drafts from the target's own features instead of
// from tokens alone. Head row i reads fc([E(t_{i+1}); f_i]), where E is the target's token
// embedding and f_i the target's final normed hidden state at position i; the head's own final
// normed hidden state predicts f_{i+1}, and its (FR-Spec) output matrix turns that into the
// distribution of t_{i+2}. Later drafting forwards of a step feed the predicted feature back in.
// After each verification the rows of the accepted tokens are re-read with the target's true
// features, which the engine hands over from the verification forward.
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "draft/draft_model_proposer.h"
#include "draft/proposer.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace specd {

class EagleProposer : public Proposer, public TargetFeatureReader {
 public:
  // Rows a sequence's head cache re-reads at most after a run of steps without drafting: it
  // restarts from the last this-many positions instead (as DraftModelProposer's catch-up).
  static constexpr int kDefaultCatchUpLimit = 32;

  // `head` is an EAGLE head (config().eagle) for `target`; `kv` (shaped for the head) needs a
  // slot per live sequence with room for its tokens plus the longest draft.
  EagleProposer(const Model& target, Model& head, KvCache& kv, const KernelContext& ctx,
                AttentionMode attention, int catch_up_limit = kDefaultCatchUpLimit);
  ~EagleProposer() override;

  void AddSequence(int seq, std::span<const int32_t> prompt) override;
  void ForkSequence(int src, int dst) override;
  void RemoveSequence(int seq) override;
  void Prefill(ProposerTimings* timings) override;
  void Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
               ProposerTimings* timings) override;
  void Accept(int seq, int n_accepted, int32_t next) override;
  void Append(int seq, std::span<const int32_t> tokens) override;
  TargetFeatureReader* feature_reader() override { return this; }
  void TakeTargetFeatures(int seq, int64_t first_position, std::span<const float> rows) override;

 private:
  struct State {
    int slot = -1;
    std::vector<int32_t> tokens;  // committed tokens; the last is the target's next input
    // Positions before `fed` are in the head's cache (from position fed - kv length on);
    // `features` [n, n_embd] holds the target's features at positions fed, fed + 1, ...
    int64_t fed = 0;
    std::vector<float> features;
    std::vector<int32_t> drafted;  // this step's drafts
    int kv_kept = 0;               // the cache's length before this step's drafting rows
  };
  // Rows the head can read for `s` now: positions fed .. fed + n - 1, each with the next token
  // and its feature.
  int64_t PendingRows(const State& s) const;
  // Drops rows beyond the catch-up limit (restarting the head's cache).
  void CatchUp(State& s);
  // One head forward: row r reads batch.tokens[r] (the token after its position) and
  // features[r] ([m, n_embd]); hidden_ gets every row's final normed hidden state, logits_ the
  // flagged rows'. Its time goes to `forwards` when given.
  void HeadForward(const Batch& batch, const float* features,
                   std::vector<std::pair<int, double>>* forwards);

  const Model& target_;
  Model& head_;
  KvCache& kv_;
  const KernelContext& ctx_;
  AttentionMode attention_;
  const int catch_up_limit_;
  std::map<int, State> seqs_;
  std::vector<float> logits_;  // [outputs, n_vocab]
  std::vector<float> hidden_;  // [rows, n_embd]
  std::vector<float> concat_;  // [rows, 2 n_embd] the fc's input
  std::vector<float> input_;   // [rows, n_embd] the head's first-layer input
  MatmulScratch matmul_scratch_;
};

// An EAGLE head's first-layer input for rows (token t_{i+1}, the target's feature f_i):
// fc([E(t_{i+1}); f_i]). features [m, n_embd]; *concat [m, 2 n_embd] is scratch, *out [m, n_embd].
void EagleInputRows(const KernelContext& ctx, const Model& target, const Model& head,
                    std::span<const int32_t> tokens, const float* features,
                    std::vector<float>* concat, std::vector<float>* out, MatmulScratch* scratch);

// The proposer a draft file asks for: an EAGLE head's proposer when it is one (chains only:
// fuzzy drafting and trees are refused), else a DraftModelProposer with `options`.
std::unique_ptr<Proposer> MakeModelProposer(const Model& target, Model& draft, KvCache& draft_kv,
                                            const KernelContext& ctx, AttentionMode attention,
                                            const DraftModelOptions& options);

}  // namespace specd
