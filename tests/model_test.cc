// The forward pass over ragged batches: batching must not change any row's logits, rollback must
// be exact, and misuse must give clear errors.
#include "model/model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "base/error.h"
#include "engine/generate.h"
#include "tests/test_util.h"

namespace specd {
namespace {

struct Fixture {
  explicit Fixture(const std::string& shape = "tiny", DType type = DType::kQ8_0, int threads = 2)
      : pool(threads), ctx{&pool, CpuFeatures::Detect()} {
    model = Model::Load(testing::TinyModel(shape, type), &ctx);
  }
  ThreadPool pool;
  KernelContext ctx;
  std::unique_ptr<Model> model;
};

std::vector<int32_t> Tokens(int n, int salt) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back((i * 37 + salt * 101 + 3) % 384);
  return t;
}

// Logits of every row of `tokens`, run alone as one sequence in one forward.
std::vector<float> AloneLogits(Fixture& f, const std::vector<int32_t>& tokens, AttentionMode mode) {
  auto kv = f.model->NewKvCache({1, 128});
  const int seq = kv->Acquire();
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.Add(tokens[i], i, seq, true);
  std::vector<float> logits;
  f.model->Forward(f.ctx, b, *kv, mode, &logits);
  return logits;
}

class RaggedTest : public ::testing::TestWithParam<std::tuple<std::string, DType, AttentionMode>> {
};

TEST_P(RaggedTest, RaggedBatchEqualsEachSequenceAlone) {
  const auto [shape, type, mode] = GetParam();
  Fixture f(shape, type);
  const int64_t n_vocab = f.model->config().n_vocab;
  // Four sequences of different lengths. Step 1 prefills them (3, 9, 1, 17 tokens) in one
  // batch; step 2 mixes a 4-token verification chunk, single decode rows and a new prompt.
  const std::vector<std::vector<int32_t>> seqs = {Tokens(7, 1), Tokens(10, 2), Tokens(2, 3),
                                                  Tokens(17, 4)};
  const std::vector<int> first = {3, 9, 1, 17};
  auto kv = f.model->NewKvCache({4, 64});
  std::vector<int> slot(4);
  for (int s = 0; s < 4; ++s) slot[s] = kv->Acquire();
  std::vector<std::vector<float>> got(4);
  Batch b;
  std::vector<float> logits;
  for (int s = 0; s < 4; ++s) {
    for (int i = 0; i < first[s]; ++i) b.Add(seqs[s][i], i, slot[s], true);
  }
  f.model->Forward(f.ctx, b, *kv, mode, &logits);
  int64_t row = 0;
  for (int s = 0; s < 4; ++s) {
    got[s].insert(got[s].end(), logits.begin() + row * n_vocab,
                  logits.begin() + (row + first[s]) * n_vocab);
    row += first[s];
  }
  b.Clear();
  for (int s = 0; s < 4; ++s) {
    for (int i = first[s]; i < static_cast<int>(seqs[s].size()); ++i) {
      b.Add(seqs[s][i], i, slot[s], true);
    }
  }
  f.model->Forward(f.ctx, b, *kv, mode, &logits);
  row = 0;
  for (int s = 0; s < 4; ++s) {
    const int n = static_cast<int>(seqs[s].size()) - first[s];
    got[s].insert(got[s].end(), logits.begin() + row * n_vocab,
                  logits.begin() + (row + n) * n_vocab);
    row += n;
  }
  for (AttentionMode alone_mode : {AttentionMode::kPad, AttentionMode::kSplit}) {
    for (int s = 0; s < 4; ++s) {
      const auto alone = AloneLogits(f, seqs[s], alone_mode);
      ASSERT_EQ(alone.size(), got[s].size());
      double max_diff = 0;
      for (size_t i = 0; i < alone.size(); ++i) {
        max_diff = std::max(max_diff, std::fabs(double(alone[i]) - got[s][i]));
      }
      // Matmul is batch invariant and attention sums keys in the same order: bit-identical.
      EXPECT_EQ(max_diff, 0.0) << "sequence " << s;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RaggedTest,
    ::testing::Combine(::testing::Values("tiny", "tiny-qwen2"),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0),
                       ::testing::Values(AttentionMode::kPad, AttentionMode::kSplit)));

TEST(Model, TruncateThenDecodeEqualsNeverHavingDecoded) {
  Fixture f;
  const auto prompt = Tokens(6, 5);
  auto kv = f.model->NewKvCache({1, 64});
  const int seq = kv->Acquire();
  Batch b;
  std::vector<float> logits;
  for (int i = 0; i < 6; ++i) b.Add(prompt[i], i, seq, false);
  f.model->Forward(f.ctx, b, *kv, AttentionMode::kSplit, &logits);
  // A rejected draft: 5 speculative tokens, rolled back.
  b.Clear();
  for (int i = 0; i < 5; ++i) b.Add(100 + i, 6 + i, seq, true);
  f.model->Forward(f.ctx, b, *kv, AttentionMode::kSplit, &logits);
  kv->Truncate(seq, 6);
  EXPECT_EQ(kv->Length(seq), 6);
  b.Clear();
  b.Add(42, 6, seq, true);
  b.Add(43, 7, seq, true);
  f.model->Forward(f.ctx, b, *kv, AttentionMode::kSplit, &logits);
  auto expected_tokens = prompt;
  expected_tokens.push_back(42);
  expected_tokens.push_back(43);
  const auto expected = AloneLogits(f, expected_tokens, AttentionMode::kSplit);
  const int64_t n_vocab = f.model->config().n_vocab;
  for (int r = 0; r < 2; ++r) {
    for (int64_t i = 0; i < n_vocab; ++i) {
      ASSERT_EQ(logits[r * n_vocab + i], expected[(6 + r) * n_vocab + i]) << "row " << r;
    }
  }
}

TEST(Model, ForkedPrefixEqualsReEncoding) {
  Fixture f;
  const auto prompt = Tokens(9, 6);
  auto kv = f.model->NewKvCache({2, 64});
  const int a = kv->Acquire(), c = kv->Acquire();
  Batch b;
  std::vector<float> logits;
  for (int i = 0; i < 9; ++i) b.Add(prompt[i], i, a, false);
  f.model->Forward(f.ctx, b, *kv, AttentionMode::kSplit, &logits);
  kv->Fork(a, c, 5);  // c continues from a's first 5 positions
  b.Clear();
  b.Add(77, 5, c, true);
  f.model->Forward(f.ctx, b, *kv, AttentionMode::kSplit, &logits);
  std::vector<int32_t> expected_tokens(prompt.begin(), prompt.begin() + 5);
  expected_tokens.push_back(77);
  const auto expected = AloneLogits(f, expected_tokens, AttentionMode::kSplit);
  const int64_t n_vocab = f.model->config().n_vocab;
  for (int64_t i = 0; i < n_vocab; ++i) ASSERT_EQ(logits[i], expected[5 * n_vocab + i]);
}

TEST(Model, ResultsDoNotDependOnThreadCount) {
  Fixture one("tiny", DType::kQ4_0, 1), two("tiny", DType::kQ4_0, 2);
  const auto tokens = Tokens(12, 9);
  EXPECT_EQ(AloneLogits(one, tokens, AttentionMode::kPad),
            AloneLogits(two, tokens, AttentionMode::kPad));
}

TEST(Model, MatmulMacsPerTokenCountsEveryMatrixOnce) {
  Fixture f;
  const ModelConfig& c = f.model->config();
  const int64_t q_dim = int64_t{c.n_head} * c.head_dim;
  const int64_t per_layer =
      c.n_embd * (q_dim + 2 * c.kv_dim()) + q_dim * c.n_embd + 3 * int64_t{c.n_embd} * c.n_ff;
  EXPECT_EQ(f.model->MatmulMacsPerToken(), c.n_layer * per_layer + c.n_vocab * c.n_embd);
}

std::string ForwardError(Fixture& f, KvCache& kv, const Batch& b) {
  std::vector<float> logits;
  try {
    f.model->Forward(f.ctx, b, kv, AttentionMode::kSplit, &logits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Model, MisuseGivesClearErrorsAndLeavesTheCacheUnchanged) {
  Fixture f;
  auto kv = f.model->NewKvCache({2, 8});
  const int s = kv->Acquire();
  Batch b;
  b.Add(1, 0, s, true);
  b.Add(400, 1, s, true);
  EXPECT_NE(ForwardError(f, *kv, b).find("outside the vocabulary"), std::string::npos);
  EXPECT_EQ(kv->Length(s), 0);
  b.Clear();
  b.Add(1, 3, s, true);
  EXPECT_NE(ForwardError(f, *kv, b).find("expects position 0"), std::string::npos);
  b.Clear();
  b.Add(1, 0, 1, true);
  EXPECT_NE(ForwardError(f, *kv, b).find("not an active sequence"), std::string::npos);
  b.Clear();
  for (int i = 0; i < 9; ++i) b.Add(1, i, s, false);
  EXPECT_NE(ForwardError(f, *kv, b).find("exceed the context of 8"), std::string::npos);
  EXPECT_EQ(kv->Length(s), 0);
  const int t = kv->Acquire();
  b.Clear();
  b.Add(1, 0, s, false);
  b.Add(1, 0, t, false);
  b.Add(1, 1, s, false);
  EXPECT_NE(ForwardError(f, *kv, b).find("not contiguous"), std::string::npos);
  EXPECT_THROW(kv->Acquire(), Error);
  EXPECT_THROW(kv->Truncate(s, 3), Error);
  EXPECT_GT(kv->BytesReserved(), 0u);
}

TEST(Generate, BatchedSequencesEqualSingleRunsWithTheirSeeds) {
  Fixture f("tiny", DType::kQ8_0);
  auto kv = f.model->NewKvCache({4, 128});
  GenerateRequest req;
  req.prompt = Tokens(5, 8);
  req.n_predict = 12;
  req.n_sequences = 4;
  req.sampling = {0.9f, 50, 0.95f, 1234};
  req.stop_at_eos = false;
  const auto batched = GenerateAutoregressive(*f.model, f.ctx, *kv, req);
  ASSERT_EQ(batched.sequences.size(), 4u);
  // Same seed again: identical output (seeded reproducibility end to end).
  const auto again = GenerateAutoregressive(*f.model, f.ctx, *kv, req);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(batched.sequences[i].tokens, again.sequences[i].tokens);
  // Sequences differ from each other (separate RNG streams) ...
  EXPECT_NE(batched.sequences[0].tokens, batched.sequences[1].tokens);
  // ... and sequence 0 alone is the same as sequence 0 in the batch.
  req.n_sequences = 1;
  req.attention = AttentionMode::kPad;
  const auto single = GenerateAutoregressive(*f.model, f.ctx, *kv, req);
  EXPECT_EQ(single.sequences[0].tokens, batched.sequences[0].tokens);
  EXPECT_EQ(batched.n_tokens, 48);
}

TEST(Generate, RejectsRequestsThatDoNotFit) {
  Fixture f;
  auto kv = f.model->NewKvCache({1, 16});
  GenerateRequest req;
  req.prompt = Tokens(10, 1);
  req.n_predict = 10;
  EXPECT_THROW(GenerateAutoregressive(*f.model, f.ctx, *kv, req), Error);
  req.n_predict = 2;
  req.n_sequences = 2;
  EXPECT_THROW(GenerateAutoregressive(*f.model, f.ctx, *kv, req), Error);
  req.n_sequences = 1;
  req.prompt.clear();
  EXPECT_THROW(GenerateAutoregressive(*f.model, f.ctx, *kv, req), Error);
}

}  // namespace
}  // namespace specd
