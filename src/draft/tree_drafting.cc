// Token trees from a draft model (EasySpec appendix C; the dynamic tree of EAGLE-2): level by
// level, the newest level's nodes are scored by one draft forward and the tree grows by the
// tree_width likeliest children, ranked by the draft's probability of the whole path; the step's
// k nodes are then the k likeliest of all (a path's probability never exceeds its prefix's, so
// they form a tree). A confident draft thus drafts mostly a chain, an unsure one a bushy tree.
// Growth stops at tree_depth levels (default k) or once no new node can be among the k best.
// The target verifies the tree in one forward.
//
// Each level's forward re-reads the newest nodes and their ancestors as tree rows (a node sees
// the committed keys and its ancestors only); the draft is small, so re-reading costs less than
// keeping per-node visibility of earlier forwards' entries. After verification the accepted
// path is re-read as a chain (as in bonus calibration).
//
// Rejection sampling needs each node's children drawn from the draft's q one after another
// without replacement, their number not chosen by looking at the draws: the root gets tree_width
// distinct draws (fewer if q has fewer tokens), every later node one, so the tree is up to
// tree_width sampled chains sharing the root. Greedy and coupled verification accept
// any tree and get the ranked one.
#include <algorithm>
#include <cmath>
#include <functional>

#include "base/error.h"
#include "draft/draft_model_proposer.h"
#include "verify/verify.h"

namespace specd {
namespace {

struct Candidate {
  double score;  // log-probability of the path under the draft
  int32_t token;
  int parent;  // node index, -1: the root
};

// One sequence's tree under construction.
struct TreeBuild {
  size_t input = 0;
  std::vector<int32_t> tokens, parents;
  std::vector<double> score;              // per node
  std::vector<int> depth;                 // per node (children of the root: 1)
  std::vector<int> frontier;              // nodes (-1: the root) whose rows come next
  std::vector<std::vector<float>> probs;  // rejection sampling: q of each row ([n_vocab])
};

bool Sampled(const DraftInput& in) {
  return !in.sampling->greedy() && in.mode == SpecSampling::kRejection;
}

// Children candidates of node `parent` (path score `base`) from its logits row.
void RankedCandidates(const DraftInput& in, int parent, double base, int depth, int width,
                      std::span<const float> row, std::vector<Candidate>* out) {
  for (const auto& [token, logprob] : RankedDraftTokens(in, depth - 1, row, width)) {
    out->push_back({base + logprob, token, parent});
  }
}

// Adds one level to `b` from its frontier's logits rows (`rows`, [frontier, n_vocab]).
void GrowLevel(const DraftInput& in, int width, int level, const float* rows, int64_t n_vocab,
               TreeBuild* b) {
  std::vector<int> frontier;
  frontier.swap(b->frontier);
  const bool sampled = Sampled(in);
  const int budget = in.k - static_cast<int>(b->tokens.size());
  std::vector<Candidate> candidates;
  for (size_t f = 0; f < frontier.size(); ++f) {
    const int node = frontier[f];
    const std::span<const float> logits(rows + f * n_vocab, n_vocab);
    if (!sampled) {
      RankedCandidates(in, node, node < 0 ? 0.0 : b->score[node], level, width, logits,
                       &candidates);
      continue;
    }
    // Children drawn from q, as many as fixed in advance: width at the root, one below.
    if (b->probs.size() < static_cast<size_t>(node) + 2) b->probs.resize(node + 2);
    b->probs[node + 1] = ProcessedProbs(logits, *in.sampling);
    const int n_children = std::min(node < 0 ? width : 1, budget - static_cast<int>(f));
    const RngKey key{in.sampling->seed, in.rng_sequence,
                     static_cast<uint64_t>(in.first_position + level - 1), RngPurpose::kDraft};
    // One after another without replacement (as the verifier assumes), until q is used up.
    std::vector<float> remaining = b->probs[node + 1];
    int support = 0;
    for (float x : remaining) support += x > 0.0f;
    for (int c = 0; c < std::min(n_children, support); ++c) {
      const uint32_t index = static_cast<uint32_t>((node + 1) * width + c);
      const int32_t token = DrawFrom(remaining, UniformDouble(key, index));
      remaining[token] = 0.0f;
      candidates.push_back({0.0, token, node});
    }
  }
  if (!sampled) {
    // The level's beam: the `width` likeliest paths, minus those that cannot be among the k
    // likeliest nodes (a node already k-th or better beats them and all their descendants).
    const size_t keep = std::min<size_t>(candidates.size(), width);
    auto better = [](const Candidate& a, const Candidate& c) { return a.score > c.score; };
    std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), better);
    candidates.resize(keep);
    if (static_cast<int>(b->score.size()) >= in.k) {
      std::vector<double> scores = b->score;
      std::nth_element(scores.begin(), scores.begin() + in.k - 1, scores.end(), std::greater<>());
      const double kth = scores[in.k - 1];
      std::erase_if(candidates, [&](const Candidate& c) { return c.score <= kth; });
    }
  }
  for (const Candidate& c : candidates) {
    b->frontier.push_back(static_cast<int>(b->tokens.size()));
    b->tokens.push_back(c.token);
    b->parents.push_back(c.parent);
    b->score.push_back(c.score);
    b->depth.push_back(level);
  }
}

// One level's forward rows of `b`: its frontier (scored) and their ancestors, parents first.
void AddLevelRows(const TreeBuild& b, int level, int slot, int root_position, Batch* batch) {
  const int n = static_cast<int>(b.tokens.size());
  std::vector<char> needed(n, 0);
  for (int f : b.frontier) {
    for (int a = f; a >= 0 && !needed[a]; a = b.parents[a]) needed[a] = 1;
  }
  std::vector<int> row_of(n, -1);
  for (int i = 0; i < n; ++i) {
    if (!needed[i]) continue;
    row_of[i] = static_cast<int>(batch->size());
    const int parent = b.parents[i];
    batch->AddNode(b.tokens[i], root_position + b.depth[i], slot, b.depth[i] == level,
                   parent < 0 ? Batch::kCommittedParent : row_of[parent]);
  }
}

// Greedy and coupled trees: the k likeliest nodes, in their original (parents-first) order.
void KeepLikeliest(int k, TreeBuild* b) {
  const int n = static_cast<int>(b->tokens.size());
  if (n <= k) return;
  std::vector<int> order(n);
  for (int i = 0; i < n; ++i) order[i] = i;
  // Ties to the earlier node, so an ancestor always ranks before its descendants.
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int c) { return b->score[a] > b->score[c]; });
  order.resize(k);
  std::sort(order.begin(), order.end());
  std::vector<int> new_index(n, -1);
  TreeBuild kept;
  kept.input = b->input;
  for (int i : order) {
    new_index[i] = static_cast<int>(kept.tokens.size());
    kept.tokens.push_back(b->tokens[i]);
    kept.parents.push_back(b->parents[i] < 0 ? -1 : new_index[b->parents[i]]);
    kept.score.push_back(b->score[i]);
    kept.depth.push_back(b->depth[i]);
  }
  *b = std::move(kept);
}

}  // namespace

void DraftModelProposer::ProposeTrees(std::span<const DraftInput> inputs,
                                      std::vector<Proposal>* out, ProposerTimings* timings) {
  const int width = options_.tree_width;
  const int64_t n_vocab = model_.config().n_vocab;
  BeginStep(inputs, timings);
  std::vector<TreeBuild> builds;
  Batch batch;
  // The first forward reads each sequence's pending tokens; its last row scores the root.
  for (size_t j = 0; j < inputs.size(); ++j) {
    if (inputs[j].k <= 0) continue;
    const State& s = seqs_.at(inputs[j].seq);
    const int base = kv_.Length(s.slot);
    for (size_t t = 0; t < s.pending.size(); ++t) {
      batch.Add(s.pending[t], base + static_cast<int>(t), s.slot, t + 1 == s.pending.size());
    }
    TreeBuild b;
    b.input = j;
    b.frontier = {-1};
    builds.push_back(std::move(b));
  }
  if (builds.empty()) return;
  DraftForward(batch, /*first=*/true, timings);

  for (int level = 1;; ++level) {
    int64_t row = 0;
    bool grew = false;
    for (TreeBuild& b : builds) {
      const DraftInput& in = inputs[b.input];
      if (b.frontier.empty()) continue;
      const int n_rows = static_cast<int>(b.frontier.size());
      GrowLevel(in, width, level, logits_.data() + row * n_vocab, n_vocab, &b);
      row += n_rows;
      const int max_depth = options_.tree_depth > 0 ? options_.tree_depth : in.k;
      const bool full = Sampled(in) && static_cast<int>(b.tokens.size()) >= in.k;
      if (full || level >= max_depth) b.frontier.clear();
      grew = grew || !b.frontier.empty();
    }
    if (!grew) break;
    batch.Clear();
    for (const TreeBuild& b : builds) {
      if (b.frontier.empty()) continue;
      const State& s = seqs_.at(inputs[b.input].seq);
      kv_.Truncate(s.slot, s.kv_before + s.pending_before);
      AddLevelRows(b, level, s.slot, kv_.Length(s.slot) - 1, &batch);
    }
    DraftForward(batch, /*first=*/false, timings);
  }

  for (TreeBuild& b : builds) {
    const DraftInput& in = inputs[b.input];
    if (!Sampled(in)) KeepLikeliest(in.k, &b);
    State& s = seqs_.at(in.seq);
    s.drafted = b.tokens;
    s.parents = b.parents;
    Proposal& p = (*out)[b.input];
    p.tokens = b.tokens;
    p.parents = b.parents;
    if (Sampled(in)) {
      b.probs.resize(b.tokens.size() + 1);  // leaves have no children: no q
      p.probs = std::move(b.probs);
    }
  }
}

}  // namespace specd
