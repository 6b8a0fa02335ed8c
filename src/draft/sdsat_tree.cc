// SDSAT's token tree (the paper's 2.1.2, nucleus sampling): the adaptive rows of one forward give
// a distribution per depth, the same for every node at that depth (an adaptive row does not see
// the drafts before it). The tree grows best first: a node's next child is worth the path's
// log-probability plus that of the child, so a confident row extends the chain and an unsure
// one branches; the k best nodes are kept (a child never outranks its parent, so they form a
// tree).
//
// Greedy: children are the row's likeliest tokens. Coupled: the row's Gumbel-max choices under
// the target's noise at that position, best first. Rejection sampling: each child is drawn from
// the row's processed q without the siblings drawn before it, and the next sibling's worth is the
// mass q has left; whether another is drawn depends only on draws already made, which keeps
// multi-candidate rejection sampling lossless (verify/tree.h).
#include <cmath>
#include <queue>

#include "base/error.h"
#include "draft/sdsat_proposer.h"
#include "verify/verify.h"

namespace specd {
namespace {

// The next child of `parent` (-1: the root), to be added when it ranks among the best.
struct Slot {
  double worth;  // log-probability of the path through the child (sampled: an upper bound)
  int parent;
  int child;          // how many children `parent` has so far
  double mass = 1.0;  // sampled: what q has left once they are drawn
  bool operator<(const Slot& o) const { return worth < o.worth; }
};

// What the rows offer at each depth: ranked candidates, or q to draw from.
struct DepthChoices {
  std::vector<std::pair<int32_t, float>> ranked;  // (token, log-probability), best first
  std::vector<float> q;                           // rejection sampling: [n_vocab]
  int support = 0;                                // tokens of q above zero
};

DepthChoices ChoicesAt(const DraftInput& in, int depth, std::span<const float> row,
                       int max_children) {
  const SamplingParams& sampling = *in.sampling;
  DepthChoices c;
  if (sampling.greedy() || in.mode == SpecSampling::kCoupled) {
    c.ranked = RankedDraftTokens(in, depth, row, max_children);
  } else {
    c.q = ProcessedProbs(row, sampling);
    for (float x : c.q) c.support += x > 0.0f;
  }
  return c;
}

}  // namespace

Proposal AdaptiveTokenTree(const DraftInput& in, std::span<const float> rows, int n_rows,
                           int max_nodes, int max_children) {
  SPECD_CHECK(n_rows > 0 && rows.size() % n_rows == 0 && max_children >= 1 && max_children <= 64,
              "SDSAT tree: bad rows or width");
  const size_t n_vocab = rows.size() / n_rows;
  const bool sampled = !in.sampling->greedy() && in.mode == SpecSampling::kRejection;
  std::vector<DepthChoices> choices;
  for (int d = 0; d < n_rows; ++d) {
    choices.push_back(ChoicesAt(in, d, rows.subspan(d * n_vocab, n_vocab), max_children));
  }
  Proposal tree;
  std::vector<double> score;                  // per node
  std::vector<int> depth;                     // per node (children of the root: 1)
  std::vector<std::vector<float>> remaining;  // sampled: per row, q minus the children drawn
  std::priority_queue<Slot> slots;
  auto open = [&](int node) {  // a node's first child becomes a candidate
    const int d = node < 0 ? 0 : depth[node];
    if (d >= n_rows) return;
    const double base = node < 0 ? 0.0 : score[node];
    if (sampled) {
      if (choices[d].support > 0) slots.push({base, node, 0});
    } else if (!choices[d].ranked.empty()) {
      slots.push({base + choices[d].ranked[0].second, node, 0});
    }
  };
  if (sampled) remaining.emplace_back();
  open(-1);
  while (static_cast<int>(tree.tokens.size()) < max_nodes && !slots.empty()) {
    const Slot slot = slots.top();
    slots.pop();
    const int d = slot.parent < 0 ? 0 : depth[slot.parent];
    const double base = slot.parent < 0 ? 0.0 : score[slot.parent];
    const DepthChoices& c = choices[d];
    int32_t token;
    double logprob;
    if (sampled) {
      std::vector<float>& left = remaining[slot.parent + 1];
      if (left.empty()) left = c.q;
      const RngKey key{in.sampling->seed, in.rng_sequence,
                       static_cast<uint64_t>(in.first_position + d), RngPurpose::kDraft};
      token = DrawFrom(
          left, UniformDouble(key, static_cast<uint32_t>((slot.parent + 1) * 64 + slot.child)));
      logprob = std::log(c.q[token]);
      left[token] = 0.0f;
      if (slot.child + 1 < std::min(max_children, c.support)) {
        const double mass = slot.mass - c.q[token];
        slots.push({base + std::log(std::max(mass, 1e-30)), slot.parent, slot.child + 1, mass});
      }
    } else {
      std::tie(token, logprob) = c.ranked[slot.child];
      if (slot.child + 1 < static_cast<int>(c.ranked.size())) {
        slots.push({base + c.ranked[slot.child + 1].second, slot.parent, slot.child + 1});
      }
    }
    tree.tokens.push_back(token);
    tree.parents.push_back(slot.parent);
    score.push_back(base + logprob);
    depth.push_back(d + 1);
    if (sampled) remaining.emplace_back();
    open(static_cast<int>(tree.tokens.size()) - 1);
  }
  if (sampled) {
    // The q each row's children were drawn from; rows without children need none.
    tree.probs.resize(tree.tokens.size() + 1);
    for (size_t r = 0; r < remaining.size(); ++r) {
      if (!remaining[r].empty()) tree.probs[r] = choices[r == 0 ? 0 : depth[r - 1]].q;
    }
  }
  return tree;
}

}  // namespace specd
