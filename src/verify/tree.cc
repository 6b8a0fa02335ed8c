#include "verify/tree.h"

#include "base/error.h"
#include "verify/verify.h"

namespace specd {

int TokenTree::Depth(int node) const {
  int depth = 0;
  for (int n = node; n >= 0; n = parents[n]) ++depth;
  return depth;
}

void TokenTree::Validate() const {
  SPECD_CHECK(tokens.size() == parents.size(), "token tree: ", tokens.size(), " tokens but ",
              parents.size(), " parents");
  for (int i = 0; i < size(); ++i) {
    SPECD_CHECK(parents[i] >= -1 && parents[i] < i, "token tree: node ", i, " has parent ",
                parents[i], " (parents must come before their children)");
  }
}

namespace {
// Children of `node` (-1: the root) in node order.
std::vector<int> Children(const TokenTree& tree, int node) {
  std::vector<int> out;
  for (int i = 0; i < tree.size(); ++i) {
    if (tree.parents[i] == node) out.push_back(i);
  }
  return out;
}
}  // namespace

TreeOutcome VerifyTreeByMatch(const TokenTree& tree, std::span<const int32_t> choices) {
  tree.Validate();
  SPECD_CHECK(choices.size() == static_cast<size_t>(tree.size()) + 1,
              "tree verify: need one choice per row (K + 1)");
  TreeOutcome out;
  int node = -1;  // the root
  while (true) {
    const int32_t want = choices[node + 1];
    int next_node = -1;
    for (int c : Children(tree, node)) {
      if (tree.tokens[c] == want) {
        next_node = c;
        break;
      }
    }
    if (next_node < 0) {
      out.next = want;
      return out;
    }
    out.path.push_back(next_node);
    node = next_node;
  }
}

TreeOutcome VerifyTreeSampled(const TokenTree& tree,
                              std::span<const std::vector<float>> target_probs,
                              std::span<const std::vector<float>> draft_probs, const RngKey& key) {
  tree.Validate();
  const size_t rows = static_cast<size_t>(tree.size()) + 1;
  SPECD_CHECK(target_probs.size() == rows && draft_probs.size() == rows,
              "tree verify: need K + 1 target rows and K + 1 draft rows");
  TreeOutcome out;
  int node = -1;
  while (true) {
    const int depth = static_cast<int>(out.path.size());
    std::vector<float> p = target_probs[node + 1];
    const std::vector<int> children = Children(tree, node);
    std::vector<float> q;
    if (!children.empty()) {
      q = draft_probs[node + 1];
      SPECD_CHECK(q.size() == p.size(), "tree verify: row ", node + 1,
                  " has children but no draft distribution of the target's size");
    }
    int accepted = -1;
    for (size_t j = 0; j < children.size() && accepted < 0; ++j) {
      const int32_t c = tree.tokens[children[j]];
      RngKey accept_key = key;
      accept_key.purpose = RngPurpose::kAccept;
      const double u = UniformDouble(accept_key, static_cast<uint32_t>(depth * 256 + j));
      if (q[c] > 0.0f && u * q[c] < p[c]) {
        accepted = children[j];
      } else {
        p = Residual(p, q);
        q = WithoutToken(q, c);  // siblings are distinct: the next one was drawn without c
      }
    }
    if (accepted < 0) {
      RngKey draw_key = key;
      draw_key.purpose = children.empty() ? RngPurpose::kBonus : RngPurpose::kResidual;
      out.next = DrawFrom(p, UniformDouble(draw_key, static_cast<uint32_t>(depth)));
      return out;
    }
    out.path.push_back(accepted);
    node = accepted;
  }
}

}  // namespace specd
