// SDSAT merge gates: the target drafting for itself with adaptive tokens gives plain greedy
// output token for token (k = 1..13, batch 1 and 4, merged and two-forward loops), its
// coupled sampled output is plain Gumbel sampling's, adaptive-token KV entries never outlive a
// step, and a model without SDSAT metadata is refused by name. (The sampled distribution test is
// in speculative_test.cc with the other proposers'.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "base/error.h"
#include "draft/sdsat_proposer.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "tests/test_util.h"

namespace specd {
namespace {

using testing::Greedy;
using testing::ModelPair;
using testing::Prompt;

SpeculationConfig FixedLength(int k, SpecSampling mode = SpecSampling::kRejection) {
  return testing::FixedDrafts(k, mode);
}

std::vector<std::vector<int32_t>> Plain(Model& target, const KernelContext& ctx, KvCache& kv,
                                        const GenerateRequest& request) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& s : GenerateAutoregressive(target, ctx, kv, request).sequences) {
    out.push_back(s.tokens);
  }
  return out;
}

std::vector<std::vector<int32_t>> SelfDrafted(Model& target, const KernelContext& ctx, KvCache& kv,
                                              const GenerateRequest& request,
                                              const SdsatOptions& sdsat, SpecSampling mode,
                                              SpeculativeStats* stats) {
  SdsatProposer proposer(sdsat);
  std::vector<std::vector<int32_t>> out;
  const int k = sdsat.tree_nodes > 0 ? sdsat.tree_nodes : sdsat.n_adaptive;
  for (const auto& s :
       GenerateWithProposer(target, ctx, kv, proposer, request, FixedLength(k, mode), stats)
           .sequences) {
    out.push_back(s.tokens);
  }
  return out;
}

TEST(Sdsat, GreedyEqualsPlainForEveryKAtBatchOneAndFour) {
  ModelPair p(DType::kQ8_0, /*draft_seed=*/11);
  auto kv = p.target->NewKvCache({4, 256});
  for (int batch : {1, 4}) {
    GenerateRequest request = Greedy(Prompt(7, 1), 40);
    if (batch == 4) {
      for (int b = 0; b < 4; ++b) request.prompts.push_back(Prompt(3 + 6 * b, b));  // ragged
    }
    const auto plain = Plain(*p.target, p.ctx, *kv, request);
    for (int k = 1; k <= 13; ++k) {
      for (bool merge : {true, false}) {
        SpeculativeStats stats;
        const auto out = SelfDrafted(*p.target, p.ctx, *kv, request,
                                     {.adaptive_token = 5, .n_adaptive = k, .merge = merge},
                                     SpecSampling::kRejection, &stats);
        EXPECT_EQ(out, plain) << "batch " << batch << " k " << k << (merge ? "" : " unmerged");
        EXPECT_GT(stats.n_drafted, 0) << "nothing was drafted: the test proves nothing";
      }
    }
  }
}

// Nucleus sampling's token trees (and the same trees under greedy): output is still plain
// decoding's, greedy and coupled, for shallow and deep, narrow and wide trees.
TEST(Sdsat, TokenTreesKeepGreedyAndCoupledOutput) {
  ModelPair p(DType::kQ8_0, /*draft_seed=*/11);
  auto kv = p.target->NewKvCache({4, 256});
  struct Shape {
    int depth, nodes, width;
  };
  for (int batch : {1, 4}) {
    for (bool greedy : {true, false}) {
      GenerateRequest request = Greedy(Prompt(7, 1), 40);
      if (batch == 4) {
        for (int b = 0; b < 4; ++b) request.prompts.push_back(Prompt(3 + 6 * b, b));
      }
      if (!greedy) request.sampling = {0.8f, 10, 0.95f, 5, SamplingMethod::kGumbel};
      const auto plain = Plain(*p.target, p.ctx, *kv, request);
      for (const Shape& t : {Shape{1, 3, 3}, Shape{3, 6, 2}, Shape{5, 12, 4}, Shape{13, 20, 10}}) {
        SpeculativeStats stats;
        const auto out =
            SelfDrafted(*p.target, p.ctx, *kv, request,
                        {.adaptive_token = 5,
                         .n_adaptive = t.depth,
                         .tree_nodes = t.nodes,
                         .tree_width = t.width},
                        greedy ? SpecSampling::kRejection : SpecSampling::kCoupled, &stats);
        EXPECT_EQ(out, plain) << "batch " << batch << (greedy ? " greedy" : " coupled") << " depth "
                              << t.depth << " nodes " << t.nodes;
        EXPECT_GT(stats.n_drafted, 0) << "nothing was drafted: the test proves nothing";
      }
    }
  }
}

// The tree's shape from hand-made rows over 8 tokens: best first by path probability, and
// sampled trees with distinct siblings drawn from each row's q.
TEST(Sdsat, TokenTreeGrowsBestFirstAndSamplesDistinctSiblings) {
  auto logits = [](std::vector<float> probs) {
    for (float& x : probs) x = std::log(std::max(x, 1e-9f));
    return probs;
  };
  std::vector<float> rows = logits({0.0f, 0.6f, 0.3f, 0.1f, 0.0f, 0.0f, 0.0f, 0.0f});
  const std::vector<float> second = logits({0.0f, 0.0f, 0.0f, 0.0f, 0.9f, 0.05f, 0.05f, 0.0f});
  rows.insert(rows.end(), second.begin(), second.end());
  SamplingParams greedy{0.0f, 0, 1.0f, 0};
  DraftInput in{.seq = 0, .k = 8, .first_position = 10, .sampling = &greedy};
  // 1 (0.6), 1 -> 4 (0.54), 2 (0.3): the chain first, then a sibling.
  Proposal tree = AdaptiveTokenTree(in, rows, 2, 3, 3);
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{1, 4, 2}));
  EXPECT_EQ(tree.parents, (std::vector<int32_t>{-1, 0, -1}));
  EXPECT_TRUE(tree.probs.empty());
  // Width 1: a chain, however many nodes are allowed.
  tree = AdaptiveTokenTree(in, rows, 2, 8, 1);
  EXPECT_EQ(tree.tokens, (std::vector<int32_t>{1, 4}));

  SamplingParams sampled{1.0f, 0, 1.0f, 0};
  in.sampling = &sampled;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    sampled.seed = seed;
    tree = AdaptiveTokenTree(in, rows, 2, 12, 10);
    // Row 0 has 3 tokens, row 1 three: every node drawn, 3 + 3 * 3 = 12.
    ASSERT_EQ(tree.tokens.size(), 12u);
    ASSERT_EQ(tree.probs.size(), 13u);
    EXPECT_EQ(tree.probs[0].size(), 8u);
    for (int parent = -1; parent < 12; ++parent) {
      std::vector<int32_t> children;
      for (size_t i = 0; i < tree.tokens.size(); ++i) {
        if (tree.parents[i] == parent) children.push_back(tree.tokens[i]);
      }
      std::vector<int32_t> distinct = children;
      std::sort(distinct.begin(), distinct.end());
      distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
      EXPECT_EQ(distinct.size(), children.size()) << "repeated sibling, seed " << seed;
      EXPECT_EQ(tree.probs[parent + 1].empty(), children.empty());
      for (int32_t c : children) EXPECT_GT(tree.probs[parent + 1][c], 0.0f);
    }
  }
}

// On the shipped 16.5M target (an untrained adaptive token still drafts some right), greedy
// output stays plain's, and whole drafts get accepted, which exercises the merged path: the
// adaptive rows of a fully accepted step are the next step's drafts.
TEST(Sdsat, ShippedModelKeepsGreedyOutputAndAcceptsWholeDrafts) {
  const std::string path = SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf";
  ASSERT_TRUE(std::filesystem::exists(path));
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto target = Model::Load(path, &ctx);
  auto kv = target->NewKvCache({2, 512});
  GenerateRequest request = Greedy({}, 96);
  request.prompts = {{1, 822, 12345 % 4000, 38}, {1, 1405, 326, 284, 366}};
  const auto plain = Plain(*target, ctx, *kv, request);
  for (int k : {1, 2, 4}) {
    SpeculativeStats stats;
    const auto out = SelfDrafted(*target, ctx, *kv, request,
                                 {.adaptive_token = 5, .n_adaptive = k, .merge = true},
                                 SpecSampling::kRejection, &stats);
    EXPECT_EQ(out, plain) << "k " << k;
    EXPECT_GT(stats.n_accepted, 0) << "k " << k;
    // Steps that verified drafts: after a fully accepted one the next also has drafts.
    EXPECT_GT(stats.n_drafts, 0) << "k " << k;
  }
}

// The shipped SDSAT fine-tune of that target: its adaptive token comes from its metadata, greedy
// output stays plain's, and it drafts far better than the same token on the base model (the
// fine-tuning learned something the engine uses).
TEST(Sdsat, ShippedFineTuneDraftsBetterThanItsBase) {
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto tuned = Model::Load(SPECD_SOURCE_DIR "/models/specd-target-sdsat-q8_0.gguf", &ctx);
  auto base = Model::Load(SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf", &ctx);
  const SdsatOptions options = SdsatOptionsForModel(*tuned, 3, -1);
  EXPECT_EQ(options.adaptive_token, 7);                     // <unused0>
  EXPECT_THROW(SdsatOptionsForModel(*base, 3, -1), Error);  // the base records none
  GenerateRequest request = Greedy({}, 64);
  // Python-like prompts in the shipped tokenizer's ids (def, class, import, return lines).
  request.prompts = {
      {1, 336, 3875, 994, 394}, {1, 1405, 326, 284, 366}, {1, 822, 345, 38}, {1, 284, 348, 710}};
  double acceptance[2];
  int i = 0;
  for (Model* model : {tuned.get(), base.get()}) {
    auto kv = model->NewKvCache({4, 512});
    const auto plain = Plain(*model, ctx, *kv, request);
    SpeculativeStats stats;
    EXPECT_EQ(SelfDrafted(*model, ctx, *kv, request, options, SpecSampling::kRejection, &stats),
              plain);
    acceptance[i++] = stats.acceptance_rate();
  }
  EXPECT_GT(acceptance[0], 2 * acceptance[1])
      << "fine-tuned " << acceptance[0] << ", base " << acceptance[1];
}

TEST(Sdsat, CoupledSamplingEqualsPlainGumbelSampling) {
  ModelPair p(DType::kF32, /*draft_seed=*/11);
  auto kv = p.target->NewKvCache({3, 256});
  GenerateRequest request = Greedy(Prompt(9, 2), 40);
  request.n_sequences = 3;
  request.sampling = {0.8f, 20, 0.95f, 77, SamplingMethod::kGumbel};
  const auto plain = Plain(*p.target, p.ctx, *kv, request);
  for (int k : {1, 4, 9}) {
    for (bool merge : {true, false}) {
      SpeculativeStats stats;
      const auto out = SelfDrafted(*p.target, p.ctx, *kv, request,
                                   {.adaptive_token = 2, .n_adaptive = k, .merge = merge},
                                   SpecSampling::kCoupled, &stats);
      EXPECT_EQ(out, plain) << "k " << k << (merge ? " merged" : "");
      EXPECT_GT(stats.n_drafted, 0);
    }
  }
}

// After every step each live sequence's KV holds exactly its committed tokens but the next
// input: adaptive-token rows (and rejected drafts) are gone.
TEST(Sdsat, AdaptiveTokenEntriesNeverOutliveAStep) {
  ModelPair p(DType::kF32, /*draft_seed=*/11);
  auto kv = p.target->NewKvCache({2, 128});
  // Merged: adaptive tokens after the drafts too, the case with the most rows to drop.
  SdsatProposer proposer({.adaptive_token = 1, .n_adaptive = 6, .merge = true});
  auto policy = MakeDraftLengthPolicy(FixedLength(6));
  Engine engine(*p.target, *kv, p.ctx, StepOptions{}, &proposer, policy.get());
  SequenceRequest r;
  r.n_predict = 50;
  r.stop_at_eos = false;
  r.prompt = Prompt(5, 3);
  const int a = engine.Add(r);
  r.prompt = Prompt(11, 4);
  const int b = engine.Add(r);
  int steps = 0;
  while (engine.HasWork()) {
    engine.Step();
    ++steps;
    for (int id : {a, b}) {
      const Sequence& s = engine.sequence(id);
      if (s.finished()) continue;
      EXPECT_EQ(kv->Length(s.slot), static_cast<int>(s.request.prompt.size() + s.tokens.size()) - 1)
          << "step " << steps;
    }
  }
  EXPECT_GT(steps, 5);
}

TEST(Sdsat, ModelWithoutAdaptiveTokenIsRefusedByName) {
  ModelPair p(DType::kF32, /*draft_seed=*/11);
  try {
    SdsatOptionsForModel(*p.target, 5, -1);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("{adaptive_token}"), std::string::npos) << e.what();
  }
  EXPECT_THROW(SdsatOptionsForModel(*p.target, 5, p.target->config().n_vocab), Error);
  EXPECT_THROW(SdsatOptionsForModel(*p.target, 0, 3), Error);
  EXPECT_EQ(SdsatOptionsForModel(*p.target, 7, 3).adaptive_token, 3);
}

}  // namespace
}  // namespace specd
