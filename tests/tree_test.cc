// Token trees: a tree batch gives each node the logits of its root-to-node path decoded as a
// chain (bit for bit), the accepted path compacted into place continues like a chain, and the
// tree verifiers keep greedy output and the target's distribution.
#include "verify/tree.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/rng.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tests/test_util.h"
#include "verify/verify.h"

namespace specd {
namespace {

using testing::ModelPair;
using testing::Prompt;

// Logits of the last row of `tokens` appended to a fresh sequence holding `prefix`.
std::vector<float> ChainLogits(ModelPair& p, const std::vector<int32_t>& prefix,
                               const std::vector<int32_t>& tokens) {
  auto kv = p.target->NewKvCache({1, 128});
  const int seq = kv->Acquire();
  std::vector<float> logits;
  Batch b;
  for (size_t i = 0; i < prefix.size(); ++i) b.Add(prefix[i], i, seq, false);
  p.target->Forward(p.ctx, b, *kv, AttentionMode::kSplit, &logits);
  b.Clear();
  for (size_t i = 0; i < tokens.size(); ++i) {
    b.Add(tokens[i], prefix.size() + i, seq, i + 1 == tokens.size());
  }
  p.target->Forward(p.ctx, b, *kv, AttentionMode::kSplit, &logits);
  return logits;
}

TEST(Tree, EachNodeGetsItsPathsLogitsAndTheKeptPathContinuesLikeAChain) {
  ModelPair p(DType::kQ8_0, 7);
  const int64_t v = p.target->config().n_vocab;
  const std::vector<int32_t> prompt = Prompt(6, 1);
  const int32_t last = 17;
  // Root `last`, then nodes: 0 (a), 1 (b) children of the root; 2 child of 0; 3 child of 1;
  // 4 child of 2.
  const TokenTree tree{{30, 31, 32, 33, 34}, {-1, -1, 0, 1, 2}};
  for (AttentionMode mode : {AttentionMode::kSplit, AttentionMode::kPad}) {
    auto kv = p.target->NewKvCache({2, 128});
    const int seq = kv->Acquire();
    const int other = kv->Acquire();  // a chain sequence in the same batch
    std::vector<float> logits;
    Batch b;
    for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], i, seq, false);
    for (size_t i = 0; i < prompt.size(); ++i) b.Add(prompt[i], i, other, false);
    p.target->Forward(p.ctx, b, *kv, mode, &logits);
    b.Clear();
    const int base = static_cast<int>(prompt.size());
    b.Add(last, base, seq, true);
    for (int i = 0; i < tree.size(); ++i) {
      const int parent_row = tree.parents[i] < 0 ? 0 : 1 + tree.parents[i];
      b.AddNode(tree.tokens[i], base + tree.Depth(i), seq, true, parent_row);
    }
    b.Add(5, base, other, true);
    p.target->Forward(p.ctx, b, *kv, mode, &logits);
    for (int i = -1; i < tree.size(); ++i) {
      std::vector<int32_t> path;  // root .. node i
      for (int n = i; n >= 0; n = tree.parents[n]) path.insert(path.begin(), tree.tokens[n]);
      path.insert(path.begin(), last);
      const auto want = ChainLogits(p, prompt, path);
      ASSERT_EQ(0, std::memcmp(want.data(), logits.data() + (i + 1) * v, v * sizeof(float)))
          << "node " << i;
    }
    const auto other_want = ChainLogits(p, prompt, {5});
    EXPECT_EQ(0, std::memcmp(other_want.data(), logits.data() + (tree.size() + 1) * v,
                             v * sizeof(float)));
    // Keep root, node 0, node 2 (KV indices base, base + 1, base + 3), then decode on.
    kv->KeepPath(seq, base, {base, base + 1, base + 3});
    b.Clear();
    b.Add(40, base + 3, seq, true);
    p.target->Forward(p.ctx, b, *kv, mode, &logits);
    const auto chain = ChainLogits(p, prompt, {last, 30, 32, 40});
    EXPECT_EQ(0, std::memcmp(chain.data(), logits.data(), v * sizeof(float)));
  }
}

TEST(Tree, MalformedTreesAndBatchesAreRefused) {
  EXPECT_THROW((TokenTree{{1, 2}, {-1, 1}}.Validate()), Error);  // a node its own parent
  EXPECT_THROW((TokenTree{{1}, {}}.Validate()), Error);
  ModelPair p(DType::kF32, 7);
  auto kv = p.target->NewKvCache({1, 16});
  const int seq = kv->Acquire();
  std::vector<float> logits;
  Batch b;
  b.Add(1, 0, seq, true);
  b.AddNode(2, 2, seq, true, 0);  // position must be the parent's + 1
  EXPECT_THROW(p.target->Forward(p.ctx, b, *kv, AttentionMode::kSplit, &logits), Error);
  b.Clear();
  b.Add(1, 0, seq, true);
  b.AddNode(2, 1, seq, true, 1);  // not an earlier row
  EXPECT_THROW(p.target->Forward(p.ctx, b, *kv, AttentionMode::kSplit, &logits), Error);
  EXPECT_EQ(kv->Length(seq), 0);
}

TEST(Tree, GreedyWalkFollowsTheTargetsChoices) {
  const TokenTree tree{{5, 6, 7, 8}, {-1, -1, 1, 1}};  // root -> {5, 6}; 6 -> {7, 8}
  // Rows: root, node 0 (5), node 1 (6), node 2 (7), node 3 (8).
  EXPECT_EQ(VerifyTreeByMatch(tree, std::vector<int32_t>{6, 0, 8, 0, 9}).path,
            (std::vector<int>{1, 3}));
  EXPECT_EQ(VerifyTreeByMatch(tree, std::vector<int32_t>{6, 0, 8, 0, 9}).next, 9);
  const TreeOutcome none = VerifyTreeByMatch(tree, std::vector<int32_t>{4, 0, 0, 0, 0});
  EXPECT_TRUE(none.path.empty());
  EXPECT_EQ(none.next, 4);
}

// Two-level trees drawn from the draft (2 distinct children at each level) over a 6-token
// vocabulary: the first two emitted tokens (a second one drawn from the target when the tree
// ended after one) must follow p(x1) p(x2 | x1).
enum class TreeBug { kNone, kResidualIgnored, kSiblingsWithReplacement };

double TreeSamplingPValue(TreeBug bug, int n_samples) {
  constexpr int kV = 6;
  SplitMix64 rng(5);
  auto random_dist = [&](double sharp) {
    std::vector<float> d(kV);
    double total = 0;
    for (auto& x : d)
      total += (x = static_cast<float>(std::pow(0.05 + (rng.Next() >> 40) / 16777216.0, sharp)));
    for (auto& x : d) x = static_cast<float>(x / total);
    return d;
  };
  const auto p0 = random_dist(2.0), q0 = random_dist(1.0);
  std::vector<std::vector<float>> p1(kV), q1(kV);
  for (int t = 0; t < kV; ++t) p1[t] = random_dist(2.0), q1[t] = random_dist(1.0);
  std::vector<int64_t> counts(kV * kV, 0);
  for (int s = 0; s < n_samples; ++s) {
    const RngKey draw{static_cast<uint64_t>(s), 0, 0, RngPurpose::kDraft};
    auto sample = [&](const std::vector<float>& d, uint32_t i) {
      return DrawFrom(d, UniformDouble(draw, i));
    };
    // Two children of a node: the second drawn from q without the first.
    TokenTree tree;
    auto add_children = [&](const std::vector<float>& q, int parent, uint32_t index) {
      const int32_t first = sample(q, index);
      const int32_t second =
          sample(bug == TreeBug::kSiblingsWithReplacement ? q : WithoutToken(q, first), index + 1);
      tree.tokens.insert(tree.tokens.end(), {first, second});
      tree.parents.insert(tree.parents.end(), {parent, parent});
    };
    add_children(q0, -1, 0);
    for (int c = 0; c < 2; ++c) add_children(q1[tree.tokens[c]], c, 2 + 2 * c);
    std::vector<std::vector<float>> target = {p0}, draft = {q0};
    for (int n = 0; n < tree.size(); ++n) {
      target.push_back(n < 2 ? p1[tree.tokens[n]] : p0);  // depth-2 rows: any distribution
      draft.push_back(n < 2 ? q1[tree.tokens[n]] : q0);
    }
    const RngKey key{static_cast<uint64_t>(s), 0, 0, RngPurpose::kAccept};
    TreeOutcome out = VerifyTreeSampled(tree, target, draft, key);
    if (bug == TreeBug::kResidualIgnored && out.path.empty()) out.next = sample(p0, 99);
    std::vector<int32_t> emitted;
    for (int n : out.path) emitted.push_back(tree.tokens[n]);
    emitted.push_back(out.next);
    if (emitted.size() < 2) emitted.push_back(sample(p1[emitted[0]], 100));
    ++counts[emitted[0] * kV + emitted[1]];
  }
  std::vector<double> expected(kV * kV);
  for (int a = 0; a < kV; ++a) {
    for (int b = 0; b < kV; ++b) expected[a * kV + b] = double(p0[a]) * p1[a][b];
  }
  return testing::ChiSquarePValue(expected, counts, n_samples);
}

TEST(Tree, SampledVerificationKeepsTheTargetDistribution) {
  const double p_ok = TreeSamplingPValue(TreeBug::kNone, 40000);
  std::printf("tree sampling: chi-square p = %.3g\n", p_ok);
  EXPECT_GT(p_ok, 0.001);
  for (const auto& [bug, name] :
       {std::pair{TreeBug::kResidualIgnored, "the residual ignored"},
        std::pair{TreeBug::kSiblingsWithReplacement, "siblings drawn with replacement"}}) {
    const double p_bug = TreeSamplingPValue(bug, 40000);
    std::printf("tree sampling with %s (a bug): p = %.3g\n", name, p_bug);
    EXPECT_LT(p_bug, 0.001) << name;
  }
}

}  // namespace
}  // namespace specd
