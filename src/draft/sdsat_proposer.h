// SDSAT (Semantic Adaptive Tokens): the target drafts for itself. k copies of an adaptive token
// appended after a sequence make ONE target forward propose k tokens (the row of adaptive token
// i predicts the token i + 1 places after the next input). The adaptive tokens ride on the
// engine's verification forward as rider rows, after the sequence's drafts:
//   [last, d1..dD, a1..ak]  ->  verify d1..dD as usual; if all D are kept, the rows of a1..ak
//                               are the next step's drafts (a1 sits where the bonus token goes);
//                               otherwise the next step has no drafts and is [last, a1..ak].
// A step without drafts is the paper's "draft step 1" (its first row gives the next token
// exactly), a step with drafts its "draft step 2 + verification" (equation 3); merged, the
// paper's two forwards per loop become one whenever every draft is kept. Adaptive-token KV
// entries are dropped after every step; greedy output equals plain greedy output exactly,
// sampled output follows the target's distribution (coupled or rejection verification).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "draft/proposer.h"
#include "model/model.h"

namespace specd {

struct SdsatOptions {
  int32_t adaptive_token = -1;
  int n_adaptive = 5;  // k: adaptive tokens appended (drafts per step)
  // Adaptive tokens also after a step's drafts (one forward per loop when all are kept); false
  // (the default): the paper's loop of two forwards, adaptive tokens only in steps without
  // drafts, which measured faster on CPUs, where every extra verification row costs.
  bool merge = false;
  // Nucleus sampling with a token tree (the paper's 2.1.2): at most tree_nodes > 0 nodes, as
  // deep as the adaptive rows (n_adaptive), each node with at most tree_width children; 0: a
  // chain. Steps with drafts carry no adaptive tokens then (the two-step loop).
  int tree_nodes = 0;
  int tree_width = 10;
};

// The token tree of one step (sdsat_tree.cc) from a previous step's adaptive rows
// ([n_rows, n_vocab], row d the distribution of the token d + 1 places after the tree's root):
// at most max_nodes nodes, at most max_children children per node. Greedy and coupled trees
// hold the likeliest paths; for rejection sampling the tree's `probs` are each row's q.
Proposal AdaptiveTokenTree(const DraftInput& in, std::span<const float> rows, int n_rows,
                           int max_nodes, int max_children);

// The adaptive token and max window a fine-tuned model records (specd.sdsat.adaptive_token,
// specd.sdsat.max_window); `token_flag` >= 0 overrides the token. Throws an Error naming what to
// pass when the model records none and no token is given, or the token is out of range.
SdsatOptions SdsatOptionsForModel(const Model& model, int n_adaptive, int32_t token_flag);

// `options` with the tree asked for by --sdsat-tree NODES[,WIDTH] (empty: a chain). Throws an
// Error naming a bad value.
SdsatOptions SdsatOptionsWithTree(SdsatOptions options, const std::string& tree_flag);

class SdsatProposer : public Proposer, public RiderRows {
 public:
  explicit SdsatProposer(const SdsatOptions& options);

  void AddSequence(int seq, std::span<const int32_t> prompt) override;
  void ForkSequence(int src, int dst) override;
  void RemoveSequence(int seq) override;
  void Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
               ProposerTimings* timings) override;
  void Accept(int seq, int n_accepted, int32_t next) override;
  void Append(int seq, std::span<const int32_t> tokens) override;
  RiderRows* rider_rows() override { return this; }
  void RiderTokens(int seq, int max_tokens, std::vector<int32_t>* tokens) override;
  void TakeRiderRows(int seq, std::span<const float> rows) override;
  int max_rider_tokens() const override { return options_.n_adaptive; }

 private:
  struct State {
    Proposal ready;    // drafts for the next step (from the last kept adaptive rows)
    Proposal pending;  // drafts from this step's adaptive rows, kept if every draft is
    // Trees, and chains under a grammar: the adaptive rows themselves ([n, n_vocab]), the drafts
    // drawn when the step comes (a grammar's state is known only then).
    std::vector<float> ready_rows, pending_rows;
    bool constrained = false;  // this step's request had a grammar
    size_t row_size = 1;       // n_vocab, once rows came
    bool has_pending = false;
    int proposed = 0;  // drafts given this step
    int n_riders = 0;  // adaptive tokens asked for this step
    // This step's request (sampling copied: the caller's pointer expires; its constraint is
    // not kept, as it lives only during Propose).
    DraftInput input;
    SamplingParams sampling;
  };
  // Under a grammar: drafts drawn now from the kept adaptive rows, each under the mask.
  void DrawConstrainedChain(const DraftInput& in, State& s, Proposal* p);
  SdsatOptions options_;
  std::map<int, State> seqs_;
};

}  // namespace specd
