// EAGLE heads: the file format, the features the target hands out, the proposer's bookkeeping
// (its drafts equal what a head computes from scratch over the committed text), and the merge
// gates (greedy output equals plain greedy at batch 1 and 8; the distribution test is in
// speculative_test.cc).
#include <gtest/gtest.h>

#include <algorithm>

#include "base/error.h"
#include "draft/eagle_proposer.h"
#include "engine/generate.h"
#include "gguf/gguf.h"
#include "tests/test_util.h"

namespace specd {
namespace {

using testing::Greedy;
using testing::Prompt;

struct EagleSetup {
  explicit EagleSetup(DType type = DType::kF32, const std::string& shape = "tiny")
      : pool(2), ctx{&pool, CpuFeatures::Detect()} {
    target = Model::Load(testing::TinyModel(shape, type, 7), &ctx);
    head = Model::Load(testing::EagleHeadOf(testing::TinyModel(shape, type, 8), 21), &ctx);
  }
  ThreadPool pool;
  KernelContext ctx;
  std::unique_ptr<Model> target, head;
};

// The target's final normed hidden state of every position of `tokens`, from a fresh cache.
std::vector<float> TargetFeatures(EagleSetup& e, const std::vector<int32_t>& tokens) {
  auto kv = e.target->NewKvCache({1, 256});
  const int slot = kv->Acquire();
  Batch batch;
  for (size_t i = 0; i < tokens.size(); ++i) batch.Add(tokens[i], i, slot, i + 1 == tokens.size());
  std::vector<float> logits, hidden;
  ForwardExtras extras;
  extras.hidden = &hidden;
  e.target->Forward(e.ctx, batch, *kv, AttentionMode::kSplit, &logits, extras);
  return hidden;
}

int32_t Argmax(const float* row, int64_t n) { return std::max_element(row, row + n) - row; }

// k greedy drafts of a head run from scratch: rows j = 0..n-2 read (tokens[j+1], f_j), then each
// draft is read with the feature the head predicted for it.
std::vector<int32_t> DraftsFromScratch(EagleSetup& e, const std::vector<int32_t>& tokens, int k) {
  const int64_t d = e.target->config().n_embd, n_vocab = e.target->config().n_vocab;
  const auto features = TargetFeatures(e, tokens);
  auto kv = e.head->NewKvCache({1, 256});
  const int slot = kv->Acquire();
  std::vector<int32_t> next(tokens.begin() + 1, tokens.end());
  std::vector<float> rows_features(features.begin(), features.end() - d);
  std::vector<int32_t> drafts;
  int64_t position = 0;
  for (int i = 0; i < k; ++i) {
    const int64_t m = static_cast<int64_t>(next.size());
    std::vector<float> concat, input, logits, hidden;
    MatmulScratch scratch;
    EagleInputRows(e.ctx, *e.target, *e.head, next, rows_features.data(), &concat, &input,
                   &scratch);
    Batch batch;
    for (int64_t r = 0; r < m; ++r) batch.Add(next[r], position + r, slot, r + 1 == m);
    ForwardExtras extras;
    extras.input_rows = input.data();
    extras.hidden = &hidden;
    e.head->Forward(e.ctx, batch, *kv, AttentionMode::kSplit, &logits, extras);
    position += m;
    drafts.push_back(Argmax(logits.data(), n_vocab));
    next = {drafts.back()};
    rows_features.assign(hidden.end() - d, hidden.end());
  }
  return drafts;
}

TEST(EagleHead, LoadsWithoutAnEmbeddingAndNeedsInputRows) {
  EagleSetup e;
  EXPECT_TRUE(e.head->config().eagle);
  EXPECT_EQ(e.head->config().n_layer, 1);
  ASSERT_NE(e.head->eagle_fc(), nullptr);
  EXPECT_EQ(e.target->eagle_fc(), nullptr);
  auto kv = e.head->NewKvCache({1, 16});
  Batch batch;
  batch.Add(3, 0, kv->Acquire(), true);
  std::vector<float> logits;
  EXPECT_THROW(e.head->Forward(e.ctx, batch, *kv, AttentionMode::kSplit, &logits), Error);
  EXPECT_EQ(kv->Length(0), 0);
  std::vector<float> row(e.head->config().n_embd);
  EXPECT_THROW(e.head->EmbedTokens(std::vector<int32_t>{3}, row.data()), Error);
}

TEST(EagleHead, MalformedFilesAreRefusedByName) {
  // An EAGLE flag on a model that keeps its embedding.
  const std::string path = testing::TinyModel("tiny", DType::kF32, 8);
  auto file = GgufFile::Open(path);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.Set(key, value);
  w.Set("specd.eagle", GgufValue::Bool(true));
  for (const GgufTensorInfo& t : file->tensors()) {
    w.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  const std::string bad = testing::TempDir() + "/eagle-with-embedding.gguf";
  w.Write(bad);
  try {
    Model::Load(bad);
    FAIL() << "loaded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("no token_embd.weight"), std::string::npos)
        << error.what();
  }
  // A head without its input projection.
  auto head = GgufFile::Open(testing::EagleHeadOf(path, 3));
  GgufWriter w2;
  for (const auto& [key, value] : head->metadata()) w2.Set(key, value);
  for (const GgufTensorInfo& t : head->tensors()) {
    if (t.name == "eagle.fc.weight") continue;
    w2.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  const std::string no_fc = testing::TempDir() + "/eagle-without-fc.gguf";
  w2.Write(no_fc);
  try {
    Model::Load(no_fc);
    FAIL() << "loaded";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("eagle.fc.weight"), std::string::npos) << error.what();
  }
}

TEST(EagleHead, HiddenRowsAreWhatTheOutputMatrixReads) {
  EagleSetup e;
  const auto tokens = Prompt(9, 1);
  const auto hidden = TargetFeatures(e, tokens);
  const int64_t d = e.target->config().n_embd, n_vocab = e.target->config().n_vocab;
  ASSERT_EQ(hidden.size(), tokens.size() * d);
  // The last row's logits from a plain forward equal the output matrix times its hidden row.
  auto kv = e.target->NewKvCache({1, 64});
  const int slot = kv->Acquire();
  Batch batch;
  for (size_t i = 0; i < tokens.size(); ++i) batch.Add(tokens[i], i, slot, i + 1 == tokens.size());
  std::vector<float> logits;
  e.target->Forward(e.ctx, batch, *kv, AttentionMode::kSplit, &logits);
  const GgufTensorInfo& out = e.target->gguf().FindTensor("output.weight")
                                  ? e.target->gguf().GetTensor("output.weight")
                                  : e.target->gguf().GetTensor("token_embd.weight");
  ASSERT_EQ(out.type, DType::kF32);
  const float* w = reinterpret_cast<const float*>(out.data);
  const float* h = hidden.data() + (tokens.size() - 1) * d;
  std::vector<float> expected(n_vocab);
  for (int64_t v = 0; v < n_vocab; ++v) {
    double sum = 0;
    for (int64_t i = 0; i < d; ++i) sum += double(w[v * d + i]) * h[i];
    expected[v] = static_cast<float>(sum);
  }
  EXPECT_LT(testing::RelativeError(logits, expected), 1e-5);
}

// The proposer's drafts, after a prompt, a plain step, and verifications accepting part of and
// all of a draft, equal a from-scratch head run over the committed text: its features and its
// cache are kept in step with what the target committed.
TEST(EagleProposer, DraftsEqualAFreshHeadOverTheCommittedText) {
  EagleSetup e;
  const int64_t d = e.target->config().n_embd;
  auto kv = e.head->NewKvCache({2, 256});
  EagleProposer proposer(*e.target, *e.head, *kv, e.ctx, AttentionMode::kSplit);
  std::vector<int32_t> committed = Prompt(11, 3);
  proposer.AddSequence(0, committed);
  // The target reads the prompt and commits its first token (a plain step).
  auto features = TargetFeatures(e, committed);
  proposer.TakeTargetFeatures(0, 0, features);
  proposer.Prefill(nullptr);
  committed.push_back(17);
  proposer.Accept(0, 0, 17);
  const SamplingParams greedy{0.0f, 0, 1.0f, 0};
  const int k = 4;
  // Steps: accept 1 of 4 then a correction; accept all 4 then the bonus; accept none.
  for (int accepted : {1, 4, 0}) {
    std::vector<Proposal> out;
    const DraftInput in{0,       k, static_cast<int64_t>(committed.size()),
                        &greedy, 0, SpecSampling::kRejection};
    proposer.Propose(std::span(&in, 1), &out, nullptr);
    ASSERT_EQ(out[0].tokens, DraftsFromScratch(e, committed, k)) << "accepting " << accepted;
    // The target reads the last token and the drafts; its features of those rows come back.
    std::vector<int32_t> read = committed;
    read.insert(read.end(), out[0].tokens.begin(), out[0].tokens.end());
    const auto all = TargetFeatures(e, read);
    const int64_t first = static_cast<int64_t>(committed.size()) - 1;
    proposer.TakeTargetFeatures(0, first,
                                std::span<const float>(all.data() + first * d, (1 + k) * d));
    const int32_t next = static_cast<int32_t>(100 + accepted);
    proposer.Accept(0, accepted, next);
    committed.insert(committed.end(), out[0].tokens.begin(), out[0].tokens.begin() + accepted);
    committed.push_back(next);
  }
  // A fork continues from the same state.
  proposer.ForkSequence(0, 1);
  std::vector<Proposal> out;
  const std::vector<DraftInput> in = {
      {0, 3, static_cast<int64_t>(committed.size()), &greedy, 0, SpecSampling::kRejection},
      {1, 2, static_cast<int64_t>(committed.size()), &greedy, 1, SpecSampling::kRejection}};
  proposer.Propose(in, &out, nullptr);
  const auto expected = DraftsFromScratch(e, committed, 3);
  EXPECT_EQ(out[0].tokens, expected);
  EXPECT_EQ(out[1].tokens, std::vector<int32_t>(expected.begin(), expected.begin() + 2));
}

TEST(EagleGreedy, EqualsPlainGreedyAtBatch1And8) {
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    EagleSetup e(type);
    const int n = 8;
    auto target_kv = e.target->NewKvCache({n, 256});
    auto head_kv = e.head->NewKvCache({n, 256});
    std::vector<std::vector<int32_t>> prompts;
    for (int b = 0; b < n; ++b) prompts.push_back(Prompt(3 + 5 * b, b));
    std::vector<std::vector<int32_t>> expected;
    for (const auto& prompt : prompts) {
      expected.push_back(GenerateAutoregressive(*e.target, e.ctx, *target_kv, Greedy(prompt, 30))
                             .sequences[0]
                             .tokens);
    }
    for (const char* policy : {"fixed", "adaptive", "cost", "schedule"}) {
      SpeculationConfig o = testing::FixedDrafts(std::string(policy) == "adaptive" ? 7 : 3);
      if (std::string(policy) == "adaptive") o.policy = DraftLengthPolicyKind::kBass;
      if (std::string(policy) == "cost") o.policy = DraftLengthPolicyKind::kCostAware;
      if (std::string(policy) == "schedule") o.schedule = {0, 3, 0, 0, 5, 1, 0, 2};
      for (AttentionMode mode : {AttentionMode::kPad, AttentionMode::kSplit}) {
        GenerateRequest one = Greedy(prompts[3], 30);
        one.attention = mode;
        SpeculativeStats stats;
        auto out =
            GenerateSpeculative(*e.target, *e.head, e.ctx, *target_kv, *head_kv, one, o, &stats);
        EXPECT_EQ(out.sequences[0].tokens, expected[3]) << DTypeName(type) << " " << policy;
        GenerateRequest batch = Greedy({}, 30);
        batch.prompts = prompts;
        batch.attention = mode;
        out =
            GenerateSpeculative(*e.target, *e.head, e.ctx, *target_kv, *head_kv, batch, o, &stats);
        ASSERT_EQ(out.sequences.size(), static_cast<size_t>(n));
        for (int b = 0; b < n; ++b) {
          EXPECT_EQ(out.sequences[b].tokens, expected[b])
              << DTypeName(type) << " " << policy << " sequence " << b;
        }
        EXPECT_GT(stats.n_drafted, 0) << policy;
      }
    }
  }
}

TEST(EagleGreedy, TreesAndFuzzyDraftingAreRefusedByName) {
  EagleSetup e;
  auto kv = e.head->NewKvCache({1, 64});
  DraftModelOptions tree;
  tree.tree_width = 2;
  try {
    MakeModelProposer(*e.target, *e.head, *kv, e.ctx, AttentionMode::kSplit, tree);
    FAIL() << "made";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("EAGLE head"), std::string::npos) << error.what();
  }
  // A head for another width is refused.
  auto other = Model::Load(testing::EagleHeadOf(testing::TinyModel("micro", DType::kF32, 8), 2));
  auto other_kv = other->NewKvCache({1, 64});
  EXPECT_THROW(EagleProposer(*e.target, *other, *other_kv, e.ctx, AttentionMode::kSplit), Error);
}

}  // namespace
}  // namespace specd
