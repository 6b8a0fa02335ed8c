// The step's structured-output stages (engine/step.h): drafts cut to what the grammar allows, and
// every output row masked by the grammar's state at its position, so that the target's
// distribution is the constrained one everywhere and speculation stays lossless against
// constrained plain decoding.
#include <algorithm>

#include "base/error.h"
#include "engine/step.h"
#include "engine/step_plan.h"
#include "verify/tree.h"

namespace specd {
namespace {

// Advances the constraint along `tokens` while it takes them; returns how many it took.
int AdvanceAlong(TokenConstraint& constraint, std::span<const int32_t> tokens) {
  int n = 0;
  while (n < static_cast<int>(tokens.size()) && constraint.Advance(tokens[n])) ++n;
  return n;
}

// How many of a chain's tokens the grammar takes in order; the constraint is left as found.
int AllowedPrefix(TokenConstraint& constraint, std::span<const int32_t> tokens) {
  const int n = AdvanceAlong(constraint, tokens);
  constraint.Rollback(n);
  return n;
}

// Node `node`'s tokens from the root, in order.
std::vector<int32_t> PathTokens(const Proposal& tree, int node) {
  std::vector<int32_t> path;
  for (int at = node; at >= 0; at = tree.parents[at]) path.push_back(tree.tokens[at]);
  std::reverse(path.begin(), path.end());
  return path;
}

// A token tree without the nodes the grammar does not allow (and their subtrees). Parents come
// before children, so a node's parent is decided before it.
Proposal AllowedTree(TokenConstraint& constraint, const Proposal& tree) {
  const int k = static_cast<int>(tree.tokens.size());
  std::vector<int> new_index(k, -1);
  Proposal kept;
  kept.source = tree.source;
  if (!tree.probs.empty()) kept.probs.push_back(tree.probs[0]);  // the root's row
  for (int i = 0; i < k; ++i) {
    const int parent = tree.parents[i];
    if (parent >= 0 && new_index[parent] < 0) continue;
    const std::vector<int32_t> path = PathTokens(tree, i);
    if (AllowedPrefix(constraint, path) != static_cast<int>(path.size())) continue;
    new_index[i] = static_cast<int>(kept.tokens.size());
    kept.tokens.push_back(tree.tokens[i]);
    kept.parents.push_back(parent < 0 ? -1 : new_index[parent]);
    if (!tree.probs.empty()) kept.probs.push_back(tree.probs[1 + i]);
  }
  // A tree that lost every node is no tree: an empty chain.
  if (kept.tokens.empty()) return Proposal{};
  return kept;
}

}  // namespace

void StepDecoder::CutDisallowedDrafts(Plan* plan) {
  for (size_t j = 0; j < plan->decode.size(); ++j) {
    TokenConstraint* constraint = plan->decode[j]->constraint.get();
    Proposal& prop = plan->proposals[j];
    if (constraint == nullptr || prop.tokens.empty()) continue;
    if (prop.is_tree()) {
      // Multi-candidate rejection sampling is exact only for candidates drawn from the q it is
      // given: a disallowed candidate must stay, to be rejected (p is 0 there) and to take its
      // share off the residual. Greedy and coupled walks only compare, so it goes.
      const SamplingParams& sampling = plan->decode[j]->request.sampling;
      const bool by_rejection =
          !sampling.greedy() && options_.spec_sampling == SpecSampling::kRejection;
      if (!by_rejection) prop = AllowedTree(*constraint, prop);
      continue;
    }
    const int n = AllowedPrefix(*constraint, prop.tokens);
    prop.tokens.resize(n);
    if (prop.probs.size() > static_cast<size_t>(n)) prop.probs.resize(n);
  }
}

void StepDecoder::MaskDecodeRows(Sequence& s, const Proposal& prop, float* rows) {
  const size_t n_vocab = static_cast<size_t>(target_.config().n_vocab);
  auto row = [&](int r) { return std::span<float>(rows + r * n_vocab, n_vocab); };
  TokenConstraint& constraint = *s.constraint;
  constraint.Mask(row(0));
  const int k = static_cast<int>(prop.tokens.size());
  if (!prop.is_tree()) {
    // Row i + 1 predicts what follows draft i: the grammar advanced along the drafts.
    int advanced = 0;
    for (int i = 0; i < k && constraint.Advance(prop.tokens[i]); ++i) {
      ++advanced;
      constraint.Mask(row(i + 1));
    }
    constraint.Rollback(advanced);
    return;
  }
  for (int i = 0; i < k; ++i) {
    // A node the grammar does not allow (kept for rejection sampling) is never reached: its row
    // and its subtree's are never read.
    const std::vector<int32_t> path = PathTokens(prop, i);
    const int advanced = AdvanceAlong(constraint, path);
    if (advanced == static_cast<int>(path.size())) constraint.Mask(row(1 + i));
    constraint.Rollback(advanced);
  }
}

void StepDecoder::MaskRows(const Plan& plan) {
  const int64_t n_vocab = target_.config().n_vocab;
  int64_t out_row = 0;
  for (const Plan::Chunk& c : plan.prefill) {
    if (c.end < static_cast<int>(c.s->request.prompt.size())) continue;
    if (c.s->constraint != nullptr) {
      c.s->constraint->Mask({logits_.data() + out_row * n_vocab, static_cast<size_t>(n_vocab)});
    }
    ++out_row;
  }
  for (size_t j = 0; j < plan.decode.size(); ++j) {
    Sequence& s = *plan.decode[j];
    if (s.constraint == nullptr) continue;
    MaskDecodeRows(s, plan.proposals[j], logits_.data() + plan.rows[j].out_row * n_vocab);
  }
}

}  // namespace specd
