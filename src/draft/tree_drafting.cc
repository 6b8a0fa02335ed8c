// Token trees from a draft model (EasySpec appendix C; the dynamic tree of EAGLE-2): level by
// level, every node of the newest level is scored by one draft forward and the tree grows by the
// tree_width likeliest children, ranked by the draft's probability of the whole path, until the
// step's k nodes or tree_depth levels are used. The target verifies the tree in one forward.
//
// Each level's forward re-reads every node so far as tree rows (a node sees the committed keys
// and its ancestors only); the draft is small, so re-reading costs less than keeping per-node
// visibility of earlier forwards' entries. After verification the accepted path is re-read as a
// chain (as in bonus calibration).
//
// Rejection sampling needs each node's children drawn independently from the draft's q, their
// number fixed before they are drawn: the root gets tree_width draws, every later node one, so
// the tree is tree_width sampled chains sharing the root. Greedy and coupled verification accept
// any tree and get the ranked one.
#include <algorithm>
#include <cmath>

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
  std::vector<int> frontier;              // nodes (-1: the root) whose rows come next
  std::vector<std::vector<float>> probs;  // rejection sampling: q of each row ([n_vocab])
};

bool Sampled(const DraftInput& in) {
  return !in.sampling->greedy() && in.mode == SpecSampling::kRejection;
}

// Children candidates of node `parent` (path score `base`) from its logits row.
void RankedCandidates(const DraftInput& in, int parent, double base, int depth, int width,
                      std::span<const float> row, std::vector<Candidate>* out) {
  if (in.sampling->greedy()) {
    for (const auto& [token, logprob] : TopLogProbs(row, width)) {
      out->push_back({base + logprob, token, parent});
    }
    return;
  }
  // Coupled: the draft's Gumbel-max choices under the target's noise at this position, best
  // first (the first is what a chain would draft).
  const std::vector<TokenProb> kept = ProcessLogits(row, *in.sampling);
  const RngKey key{in.sampling->seed, in.rng_sequence,
                   static_cast<uint64_t>(in.first_position + depth - 1), RngPurpose::kSample};
  for (int32_t token : GumbelTop(kept, key, width)) {
    float prob = 0.0f;
    for (const TokenProb& tp : kept) prob = tp.token == token ? tp.prob : prob;
    out->push_back({base + std::log(std::max(prob, 1e-30f)), token, parent});
  }
}

}  // namespace

void DraftModelProposer::ProposeTrees(std::span<const DraftInput> inputs,
                                      std::vector<Proposal>* out, ProposerTimings* timings) {
  const int width = options_.tree_width;
  const int max_depth = options_.tree_depth > 0 ? options_.tree_depth : 1 << 30;
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

  for (int depth = 1;; ++depth) {
    int64_t row = 0;
    bool grew = false;
    for (TreeBuild& b : builds) {
      const DraftInput& in = inputs[b.input];
      const int budget = in.k - static_cast<int>(b.tokens.size());
      std::vector<int> frontier;
      frontier.swap(b.frontier);
      if (frontier.empty()) continue;
      const bool sampled = Sampled(in);
      std::vector<Candidate> candidates;
      for (size_t f = 0; f < frontier.size(); ++f) {
        const int node = frontier[f];
        const std::span<const float> logits(logits_.data() + row++ * n_vocab, n_vocab);
        if (!sampled) {
          const double base = node < 0 ? 0.0 : b.score[node];
          RankedCandidates(in, node, base, depth, width, logits, &candidates);
          continue;
        }
        // Children drawn from q, as many as fixed in advance: width at the root, one below.
        if (b.probs.size() < static_cast<size_t>(node) + 2) b.probs.resize(node + 2);
        b.probs[node + 1] = ProcessedProbs(logits, *in.sampling);
        const int n_children = std::min(node < 0 ? width : 1, budget - static_cast<int>(f));
        const RngKey key{in.sampling->seed, in.rng_sequence,
                         static_cast<uint64_t>(in.first_position + depth - 1), RngPurpose::kDraft};
        for (int c = 0; c < n_children; ++c) {
          const uint32_t index = static_cast<uint32_t>((node + 1) * width + c);
          candidates.push_back({0.0, DrawFrom(b.probs[node + 1], UniformDouble(key, index)), node});
        }
      }
      if (!sampled) {
        // The likeliest paths, best first.
        const size_t keep = std::min<size_t>({candidates.size(), static_cast<size_t>(width),
                                              static_cast<size_t>(std::max(budget, 0))});
        std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(),
                          [](const Candidate& a, const Candidate& c) { return a.score > c.score; });
        candidates.resize(keep);
      }
      for (const Candidate& c : candidates) {
        b.frontier.push_back(static_cast<int>(b.tokens.size()));
        b.tokens.push_back(c.token);
        b.parents.push_back(c.parent);
        b.score.push_back(c.score);
      }
      const bool full = static_cast<int>(b.tokens.size()) >= in.k || depth >= max_depth;
      if (full) b.frontier.clear();
      grew = grew || !b.frontier.empty();
    }
    if (!grew) break;
    // Every node so far, as tree rows; logits for the newest level.
    batch.Clear();
    for (TreeBuild& b : builds) {
      if (b.frontier.empty()) continue;
      const State& s = seqs_.at(inputs[b.input].seq);
      kv_.Truncate(s.slot, s.kv_before + s.pending_before);
      const int root_position = kv_.Length(s.slot) - 1;
      const int first_row = static_cast<int>(batch.size());
      std::vector<int> node_depth(b.tokens.size());
      for (size_t i = 0; i < b.tokens.size(); ++i) {
        const int parent = b.parents[i];
        node_depth[i] = parent < 0 ? 1 : node_depth[parent] + 1;
        const bool newest = node_depth[i] == depth;
        batch.AddNode(b.tokens[i], root_position + node_depth[i], s.slot, newest,
                      parent < 0 ? Batch::kCommittedParent : first_row + parent);
      }
    }
    DraftForward(batch, /*first=*/false, timings);
  }

  for (TreeBuild& b : builds) {
    const DraftInput& in = inputs[b.input];
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
