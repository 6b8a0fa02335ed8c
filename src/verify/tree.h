// Verification of a token tree, as pure functions (no model, no KV). A tree of K nodes is drafted
// after a sequence's last committed token, the root; node i has a token and a parent (-1: the
// root), parents before children. The target scored K + 1 rows: row 0 the root, row 1 + i node i.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/rng.h"

namespace specd {

struct TokenTree {
  std::vector<int32_t> tokens;
  std::vector<int32_t> parents;

  int size() const { return static_cast<int>(tokens.size()); }
  // Depth of node i (its parent the root: 1).
  int Depth(int node) const;
  // Checks the shape; throws an Error naming the problem.
  void Validate() const;
};

struct TreeOutcome {
  std::vector<int> path;  // accepted nodes, root to leaf
  int32_t next = -1;      // the target's token after the path (recovered or bonus)
};

// Greedy or coupled verification: `choices` [K + 1] is the target's own token at each row (argmax,
// or its Gumbel-max sample keyed by the row's position). From the root, move to the first child
// whose token equals the choice at the current row; stop when none does. Every emitted token is
// the target's own choice, so the output is plain decoding's: greedy's, or coupled sampling's.
TreeOutcome VerifyTreeByMatch(const TokenTree& tree, std::span<const int32_t> choices);

// Sampled verification by multi-candidate rejection sampling without replacement (SpecInfer's
// algorithm with the drawn siblings removed from q, as in recursive speculative decoding): at the
// current row, with the target's distribution p and the draft's q, try its children in node
// order: accept child c with probability min(1, p(c) / q(c)), else p <- norm(max(0, p - q)) and
// q <- q without c, renormalized, and try the next; when all are rejected the next token is drawn
// from p; a leaf's bonus token from its row. target_probs [K + 1] are the target's rows,
// draft_probs [K + 1] the distribution q each row's children were drawn from (empty for a row
// without children). Lossless when the children of each node were drawn one after another from
// q without replacement (each from q minus the siblings before it), however many were drawn, as
// long as whether to draw another never depended on the draw itself.
TreeOutcome VerifyTreeSampled(const TokenTree& tree,
                              std::span<const std::vector<float>> target_probs,
                              std::span<const std::vector<float>> draft_probs, const RngKey& key);

}  // namespace specd
