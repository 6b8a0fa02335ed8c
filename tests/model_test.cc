// The forward pass over ragged batches: batching must not change any row's logits, rollback must
// be exact, and misuse must give clear errors.
#include "model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "base/error.h"
#include "engine/generate.h"
#include "gguf/gguf.h"
#include "model/kv_shift.h"
#include "model/synth.h"
#include "tensor/quantize.h"
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

// Logits of every row of `tokens`, run alone as one sequence in one forward (64 positions per
// sequence, as the ragged batches below: with LongRoPE the context chooses the factors).
std::vector<float> SequenceLogits(Model& model, const KernelContext& ctx,
                                  const std::vector<int32_t>& tokens,
                                  AttentionMode mode = AttentionMode::kSplit) {
  auto kv = model.NewKvCache({1, 64});
  const int seq = kv->Acquire();
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.Add(tokens[i], i, seq, true);
  std::vector<float> logits;
  model.Forward(ctx, b, *kv, mode, &logits);
  return logits;
}

std::vector<float> AloneLogits(Fixture& f, const std::vector<int32_t>& tokens, AttentionMode mode) {
  return SequenceLogits(*f.model, f.ctx, tokens, mode);
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
    ::testing::Combine(::testing::Values("tiny", "tiny-qwen2", "tiny-qwen3", "tiny-phi3"),
                       ::testing::Values(DType::kF32, DType::kBF16, DType::kQ8_0, DType::kQ4_0),
                       ::testing::Values(AttentionMode::kPad, AttentionMode::kSplit)));

// Logits of every row of `tokens` as one sequence in a cache of n_ctx positions per sequence.
std::vector<float> LogitsWithContext(Fixture& f, const std::vector<int32_t>& tokens, int n_ctx) {
  auto kv = f.model->NewKvCache({1, n_ctx});
  const int seq = kv->Acquire();
  Batch b;
  for (size_t i = 0; i < tokens.size(); ++i) b.Add(tokens[i], i, seq, true);
  std::vector<float> logits;
  f.model->Forward(f.ctx, b, *kv, AttentionMode::kSplit, &logits);
  return logits;
}

// phi3's fused attn_qkv and gate-up matrices are read as views of their rows: the same weights
// written apart give the same bits (packed, stacked, on every path).
TEST(Architectures, Phi3FusedMatricesEqualTheSameWeightsApart) {
  Fixture fused("tiny-phi3"), apart("tiny-phi3-apart");
  ASSERT_EQ(fused.model->config().arch, "phi3");
  EXPECT_EQ(fused.model->config().rope.rotary_dim, 12);  // partial rotary: 12 of 16
  for (AttentionMode mode : {AttentionMode::kPad, AttentionMode::kSplit}) {
    EXPECT_EQ(AloneLogits(fused, Tokens(20, 1), mode), AloneLogits(apart, Tokens(20, 1), mode));
  }
}

// LongRoPE as llama.cpp chooses it: the short factors while a sequence's context is within the
// original one (64 here), the long factors beyond; the attention factor scales both.
TEST(Architectures, LongRopeFactorsFollowTheContextSize) {
  Fixture f("tiny-phi3");
  const ModelConfig& c = f.model->config();
  EXPECT_EQ(c.rope_original_ctx, 64);
  EXPECT_FLOAT_EQ(c.rope.attn_factor, 1.1f);
  EXPECT_NE(c.rope.freq_factors, c.rope_long.freq_factors);
  const std::vector<int32_t> tokens = Tokens(24, 2);
  EXPECT_EQ(LogitsWithContext(f, tokens, 32), LogitsWithContext(f, tokens, 64));
  EXPECT_NE(LogitsWithContext(f, tokens, 64), LogitsWithContext(f, tokens, 65));
  EXPECT_EQ(LogitsWithContext(f, tokens, 65), LogitsWithContext(f, tokens, 256));
}

// qwen3 reads as per-head q / k norms without biases (its output is checked against llama.cpp's in
// bench/arch_parity.py; here only that the architecture entry sets these fields).
TEST(Architectures, Qwen3ReadsItsQkNorms) {
  Fixture f("tiny-qwen3");
  EXPECT_EQ(f.model->config().arch, "qwen3");
  EXPECT_TRUE(f.model->config().qk_norm);
  EXPECT_FALSE(f.model->config().qkv_bias);
}

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

// --cache-reuse's move: a key of layer 0 depends on its token and position only, so a chunk
// moved d positions and rotated by d equals the chunk read at its new place (to rounding, and to
// f16's for f16 caches); values move unchanged. Both rotary layouts (llama's pairs, NeoX's halves).
TEST(Model, MovedKeysEqualKeysReadAtTheNewPositions) {
  for (const std::string shape : {"tiny", "tiny-qwen2"}) {
    for (const DType kv_type : {DType::kF32, DType::kF16}) {
      Fixture f(shape);
      auto kv = f.model->NewKvCache({2, 64, kv_type});
      const int moved = kv->Acquire(), fresh = kv->Acquire();
      const auto tokens = Tokens(12, 4);
      Batch b;
      std::vector<float> logits;
      for (int i = 0; i < 12; ++i) b.Add(tokens[i], i, moved, i == 11);
      for (int i = 5; i < 12; ++i) b.Add(tokens[i], i - 5, fresh, i == 11);
      f.model->Forward(f.ctx, b, *kv, AttentionMode::kSplit, &logits);
      kv->MoveRows(moved, 5, 0, 7);
      ShiftKeyPositions(f.model->config(), *kv, moved, 0, 7, -5);
      const int kv_dim = kv->kv_dim();
      std::vector<float> got(7 * kv_dim), want(7 * kv_dim);  // [7, kv_dim]
      DequantizeRow(kv_type, kv->K(0, moved), got.data(), 7 * kv_dim);
      DequantizeRow(kv_type, kv->K(0, fresh), want.data(), 7 * kv_dim);
      float scale = 0.0f;
      for (float x : want) scale = std::max(scale, std::fabs(x));
      const float tolerance = (kv_type == DType::kF16 ? 2e-3f : 1e-5f) * scale;
      for (size_t i = 0; i < got.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], tolerance) << shape << " " << DTypeName(kv_type) << " " << i;
      }
      const size_t v_bytes = RowBytes(kv_type, kv_dim) * 7;
      EXPECT_EQ(std::memcmp(kv->V(0, moved), kv->V(0, fresh), v_bytes), 0) << shape;
    }
  }
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

namespace specd {
namespace {

// A 4-layer tiny model (the tiny shape has 2; layer groups exclude the first and last layer).
std::string DeepTinyModel(DType type) {
  const std::string path =
      testing::TempDir() + "/deep-tiny-" + std::string(DTypeName(type)) + ".gguf";
  ModelShape shape = ShapeByName("tiny");
  shape.n_layer = 4;
  ThreadPool pool(2);
  WriteSyntheticModel(shape, type, 11, path, &pool);
  return path;
}

// A copy of a model with the named tensors' bytes set to zero (a zero matrix in any type).
std::string WithZeroedTensors(const std::string& path, const std::vector<std::string>& names) {
  auto file = GgufFile::Open(path);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.Set(key, value);
  for (const GgufTensorInfo& t : file->tensors()) {
    std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
    if (std::find(names.begin(), names.end(), t.name) != names.end()) {
      std::fill(bytes.begin(), bytes.end(), 0);
    }
    w.AddTensor(t.name, t.type, t.shape, std::move(bytes));
  }
  const std::string out = path + ".zeroed.gguf";
  w.Write(out);
  return out;
}

struct FuzzyRun {
  std::vector<float> logits;
  std::vector<uint8_t> kv;  // every layer's K and V bytes of the sequence
};

// Prefill of 9 tokens, then a 3-row chunk, each forward with `groups` (nullptr: exact).
FuzzyRun RunWithGroups(Model& model, const KernelContext& ctx, const LayerGroups* groups) {
  auto kv = model.NewKvCache({1, 32});
  const int seq = kv->Acquire();
  const std::vector<int32_t> tokens = testing::Prompt(12, 5);
  FuzzyRun run;
  std::vector<float> logits;
  for (auto [begin, end] : {std::pair{0, 9}, std::pair{9, 12}}) {
    Batch b;
    for (int i = begin; i < end; ++i) b.Add(tokens[i], i, seq, true);
    model.Forward(ctx, b, *kv, AttentionMode::kSplit, &logits, groups);
    run.logits.insert(run.logits.end(), logits.begin(), logits.end());
  }
  const int64_t bytes = RowBytes(kv->type(), kv->kv_dim()) * kv->Length(seq);
  for (int il = 0; il < model.config().n_layer; ++il) {
    for (const void* p : {kv->K(il, seq), kv->V(il, seq)}) {
      const auto* b = static_cast<const uint8_t*>(p);
      run.kv.insert(run.kv.end(), b, b + bytes);
    }
  }
  return run;
}

double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  return ab / std::sqrt(aa * bb);
}

TEST(LayerGroups, PackedAndAlignedFollowSection311) {
  // The paper's example: 32 layers, N = 4 -> 1-3, 4-7, ..., 24-27, 28-30.
  const LayerGroups aligned = LayerGroups::Make(32, 4, LayerGroups::Strategy::kAligned);
  EXPECT_EQ(aligned.ToString(), "1-3,4-7,8-11,12-15,16-19,20-23,24-27,28-30");
  EXPECT_EQ(LayerGroups::Make(6, 2, LayerGroups::Strategy::kPacked).ToString(), "1-2,3-4");
  EXPECT_EQ(LayerGroups::Make(6, 2, LayerGroups::Strategy::kAligned).ToString(), "1-1,2-3,4-4");
  EXPECT_EQ(LayerGroups::Make(6, 3, LayerGroups::Strategy::kPacked).ToString(), "1-3,4-4");
  EXPECT_EQ(LayerGroups::Make(6, 3, LayerGroups::Strategy::kPacked).FuzzyLayers(), 3);
  EXPECT_TRUE(LayerGroups::Make(6, 1, LayerGroups::Strategy::kPacked).empty());
  EXPECT_TRUE(LayerGroups::Make(2, 2, LayerGroups::Strategy::kPacked).empty());
  EXPECT_EQ(LayerGroups::Parse("0-1,3-5", 6, 2).ToString(), "0-1,3-5");
  EXPECT_EQ(LayerGroups::Parse("aligned", 6, 2).ToString(), "1-1,2-3,4-4");
  for (const char* bad : {"1-2,2-3", "3-1", "0-6", "a-b", "1-", "-1", "1,,2"}) {
    EXPECT_THROW(LayerGroups::Parse(bad, 6, 2), Error) << bad;
  }
}

class FuzzyForwardTest : public ::testing::TestWithParam<DType> {};

// LP = 1: every layer its own group runs the group machinery (one-thread lanes) and must give
// the exact forward's bits, logits and KV alike.
TEST_P(FuzzyForwardTest, GroupsOfOneAreTheExactForward) {
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(DeepTinyModel(GetParam()), &ctx);
  const LayerGroups singles = LayerGroups::Parse("0-0,1-1,2-2,3-3", 4, 1);
  const FuzzyRun exact = RunWithGroups(*model, ctx, nullptr);
  const FuzzyRun lanes = RunWithGroups(*model, ctx, &singles);
  ASSERT_EQ(exact.logits.size(), lanes.logits.size());
  EXPECT_EQ(std::memcmp(exact.logits.data(), lanes.logits.data(), exact.logits.size() * 4), 0);
  EXPECT_EQ(exact.kv, lanes.kv);
}

// Algorithm 2: in group 1-2, layer 2's attention reads layer 1's input. With layer 1 an identity
// (its attention and MLP outputs zero) that is the exact input, so the fuzzy forward is exact;
// on the unmodified model it is not, but stays close.
TEST_P(FuzzyForwardTest, GroupedAttentionReadsTheGroupInput) {
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  const LayerGroups group = LayerGroups::Parse("1-2", 4, 2);
  const std::string path = DeepTinyModel(GetParam());
  auto identity = Model::Load(
      WithZeroedTensors(path, {"blk.1.attn_output.weight", "blk.1.ffn_down.weight"}), &ctx);
  const FuzzyRun exact_identity = RunWithGroups(*identity, ctx, nullptr);
  const FuzzyRun fuzzy_identity = RunWithGroups(*identity, ctx, &group);
  EXPECT_EQ(exact_identity.logits, fuzzy_identity.logits);
  EXPECT_EQ(exact_identity.kv, fuzzy_identity.kv);

  auto model = Model::Load(path, &ctx);
  const FuzzyRun exact = RunWithGroups(*model, ctx, nullptr);
  const FuzzyRun fuzzy = RunWithGroups(*model, ctx, &group);
  EXPECT_NE(exact.logits, fuzzy.logits);
  EXPECT_GT(Cosine(exact.logits, fuzzy.logits), 0.5);
  // Layers before the group are untouched: layer 0's keys and values are exact.
  const size_t layer_bytes = exact.kv.size() / 8;
  EXPECT_TRUE(std::equal(exact.kv.begin(), exact.kv.begin() + 2 * layer_bytes, fuzzy.kv.begin()));
}

// Whether two layers' normalized attention inputs ([rows, 64]) come from one hidden state: then
// they differ only by the layers' norm weights, a per-column ratio the same in every row.
bool SameNormalizedInput(const std::vector<float>& a, const std::vector<float>& b) {
  const size_t d = 64;
  for (size_t r = 1; r < a.size() / d; ++r) {
    for (size_t i = 0; i < d; ++i) {
      const double first = double{b[i]} / a[i];
      const double here = double{b[r * d + i]} / a[r * d + i];
      if (std::abs(here - first) > 1e-5 * std::abs(first)) return false;
    }
  }
  return true;
}

// The trace records what each attention block read: in a fuzzy group, the group's input.
TEST(FuzzyForward, TraceShowsTheGroupInput) {
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(DeepTinyModel(DType::kF32), &ctx);
  const LayerGroups group = LayerGroups::Parse("1-2", 4, 2);
  ForwardTrace exact, fuzzy;
  model->SetTrace(&exact);
  RunWithGroups(*model, ctx, nullptr);
  model->SetTrace(&fuzzy);
  RunWithGroups(*model, ctx, &group);
  model->SetTrace(nullptr);
  ASSERT_EQ(fuzzy.hidden.size(), 4u);
  EXPECT_FALSE(SameNormalizedInput(exact.attn_input[1], exact.attn_input[2]));
  EXPECT_TRUE(SameNormalizedInput(fuzzy.attn_input[1], fuzzy.attn_input[2]));
  EXPECT_FALSE(SameNormalizedInput(fuzzy.attn_input[2], fuzzy.attn_input[3]));
  EXPECT_NE(fuzzy.hidden[1], fuzzy.hidden[2]);  // the residual stream still moved on
  EXPECT_EQ(fuzzy.q[2].size(), 3u * 64);        // the last forward's 3 rows
}

// `specd quantize --restrict-input-embedding` keeps the rows of a draft's head tokens and control
// tokens byte for byte and gives every other token one shared row, the mean of theirs; the
// loader maps tokens to those rows, and speculation with such a draft stays lossless.
TEST(InputEmbedding, RestrictedDraftKeepsListedRowsAndSharesTheMeanOfTheRest) {
  std::vector<int32_t> head;
  for (int32_t t = 0; t < 384; t += 3) head.push_back(t);
  const std::string source =
      testing::WithRestrictedHead(testing::TinyModel("tiny", DType::kQ8_0, 11), head);
  const std::string out = testing::TempDir() + "/restricted-input.gguf";
  const auto run = testing::RunSpecd("quantize " + source + " " + out +
                                     " --type copy --restrict-input-embedding");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  auto in_file = GgufFile::Open(source), out_file = GgufFile::Open(out);
  std::vector<int32_t> listed = head;  // the head and the control tokens <s>, </s>
  listed.insert(listed.end(), {1, 2});
  std::sort(listed.begin(), listed.end());
  std::vector<int32_t> got;
  for (const GgufValue& v : out_file->Get("specd.input_tokens").AsArray("ids").items) {
    got.push_back(static_cast<int32_t>(v.AsInt("ids")));
  }
  ASSERT_EQ(got, listed);
  const GgufTensorInfo& e_in = in_file->GetTensor("token_embd.weight");
  const GgufTensorInfo& e_out = out_file->GetTensor("token_embd.weight");
  const int64_t d = e_in.shape[0], row_bytes = RowBytes(e_in.type, d);
  ASSERT_EQ(e_out.shape, (std::vector<int64_t>{d, static_cast<int64_t>(listed.size()) + 1}));
  for (size_t r = 0; r < listed.size(); ++r) {
    ASSERT_EQ(std::memcmp(e_out.data + r * row_bytes, e_in.data + listed[r] * row_bytes, row_bytes),
              0);
  }
  std::vector<double> sum(d, 0.0);
  std::vector<float> row(d);
  int n_shared = 0;
  for (int32_t t = 0; t < 384; ++t) {
    if (std::binary_search(listed.begin(), listed.end(), t)) continue;
    DequantizeRow(e_in.type, e_in.data + t * row_bytes, row.data(), d);
    for (int64_t i = 0; i < d; ++i) sum[i] += row[i];
    ++n_shared;
  }
  for (int64_t i = 0; i < d; ++i) row[i] = static_cast<float>(sum[i] / n_shared);
  std::vector<uint8_t> mean(row_bytes);
  QuantizeRow(e_in.type, row.data(), mean.data(), d);
  EXPECT_EQ(std::memcmp(e_out.data + listed.size() * row_bytes, mean.data(), row_bytes), 0);

  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto full = Model::Load(source, &ctx), restricted = Model::Load(out, &ctx);
  ASSERT_EQ(restricted->config().n_vocab, 384);
  EXPECT_EQ(SequenceLogits(*full, ctx, {1, 3, 9, 27}),
            SequenceLogits(*restricted, ctx, {1, 3, 9, 27}));
  // Tokens 5 and 7 are not listed: one row for both, unlike in the full draft.
  EXPECT_EQ(SequenceLogits(*restricted, ctx, {1, 5, 9}),
            SequenceLogits(*restricted, ctx, {1, 7, 9}));
  EXPECT_NE(SequenceLogits(*full, ctx, {1, 5, 9}), SequenceLogits(*full, ctx, {1, 7, 9}));

  const std::string common = " --tokens 1,5,9,33,7 -n 24 --temp 0 --ignore-eos --json -m " +
                             testing::TinyModel("tiny", DType::kQ8_0, 7);
  const auto plain = testing::RunSpecd("generate" + common + " --strategy ar");
  const auto spec = testing::RunSpecd("generate" + common + " -md " + out + " --draft-max 3");
  ASSERT_EQ(spec.exit_code, 0) << spec.out;
  EXPECT_EQ(testing::FirstJsonLine(plain)["tokens"], testing::FirstJsonLine(spec)["tokens"]);

  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {out + " /tmp/x.gguf --type copy --restrict-input-embedding", "already restricted"},
           {testing::TinyModel("tiny", DType::kQ8_0, 11) + " /tmp/x.gguf --type copy "
                                                           "--restrict-input-embedding",
            "no specd.head_tokens"},
           {source + " /tmp/x.gguf --type copy", "changes nothing"}}) {
    const auto bad = testing::RunSpecd("quantize " + args);
    EXPECT_EQ(bad.exit_code, 1) << args;
    EXPECT_NE(bad.out.find(message), std::string::npos) << bad.out;
  }
}

// A listed token twice or outside the vocabulary is a clear error at load.
TEST(InputEmbedding, BadTokenListsAreClearErrors) {
  std::vector<int32_t> head = {0, 3, 6};
  const std::string source =
      testing::WithRestrictedHead(testing::TinyModel("tiny", DType::kQ8_0, 11), head);
  const std::string good = testing::TempDir() + "/restricted-input-bad-source.gguf";
  ASSERT_EQ(testing::RunSpecd("quantize " + source + " " + good +
                              " --type copy --restrict-input-embedding")
                .exit_code,
            0);
  auto file = GgufFile::Open(good);
  for (const std::vector<int64_t>& ids :
       {std::vector<int64_t>{0, 1, 2, 3, 3}, std::vector<int64_t>{0, 1, 2, 3, 384}}) {
    GgufWriter w;
    for (const auto& [key, value] : file->metadata()) w.Set(key, value);
    std::vector<GgufValue> items;
    for (int64_t id : ids) items.push_back(GgufValue::I32(static_cast<int32_t>(id)));
    w.Set("specd.input_tokens", GgufValue::Array(GgufType::kInt32, std::move(items)));
    for (const GgufTensorInfo& t : file->tensors()) {
      w.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
    }
    const std::string bad = testing::TempDir() + "/restricted-input-bad.gguf";
    w.Write(bad);
    try {
      Model::Load(bad, nullptr);
      ADD_FAILURE() << "loaded a file whose specd.input_tokens is bad";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("specd.input_tokens"), std::string::npos) << e.what();
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Types, FuzzyForwardTest, ::testing::Values(DType::kF32, DType::kQ8_0),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

}  // namespace
}  // namespace specd

std::string WriteRanking(const std::string& name, const std::string& text) {
  const std::string path = testing::TempDir() + "/" + name;
  std::ofstream(path) << text;
  return path;
}

// FR-Spec at load (--draft-vocab): the head keeps the listed tokens' rows and the end-of-
// generation tokens, and its logits are those of a file whose head lists the same tokens
// (specd.head_tokens), bit for bit: the listed tokens' logits of the full model, -inf elsewhere.
TEST(DraftVocab, AHeadRestrictedAtLoadEqualsTheSameHeadInTheFile) {
  const std::string path = testing::TinyModel("tiny", DType::kQ8_0, 11);
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  const std::vector<int32_t> listed = {40, 7, 300, 7, 12};  // a repeat is kept once
  ModelLoadOptions options;
  options.head_tokens = listed;
  auto full = Model::Load(path, &ctx);
  auto restricted = Model::Load(path, &ctx, options);
  std::vector<int32_t> kept = {40, 7, 300, 12};
  for (int32_t t : full->config().end_of_generation) {
    if (std::find(kept.begin(), kept.end(), t) == kept.end()) kept.push_back(t);
  }
  ASSERT_EQ(restricted->config().head_tokens, kept);
  auto from_file = Model::Load(testing::WithRestrictedHead(path, kept), &ctx);
  const std::vector<int32_t> tokens = {1, 3, 9, 27};
  const std::vector<float> got = SequenceLogits(*restricted, ctx, tokens);
  EXPECT_EQ(got, SequenceLogits(*from_file, ctx, tokens));
  const std::vector<float> all = SequenceLogits(*full, ctx, tokens);
  const int64_t n_vocab = full->config().n_vocab;
  for (int64_t t = 0; t < n_vocab; ++t) {
    const bool in_head = std::find(kept.begin(), kept.end(), t) != kept.end();
    EXPECT_EQ(got[3 * n_vocab + t],
              in_head ? all[3 * n_vocab + t] : -std::numeric_limits<float>::infinity())
        << t;
  }
  // A head that grows with its context: the tokens it read have their full logits too (the
  // first two of them: the limit), and the rest stays -inf.
  options.head_context_tokens = 2;
  auto grown = Model::Load(path, &ctx, options);
  const std::vector<float> grown_logits = SequenceLogits(*grown, ctx, tokens);
  for (int64_t t = 0; t < n_vocab; ++t) {
    const bool in_head = std::find(kept.begin(), kept.end(), t) != kept.end() || t == 1 || t == 3;
    EXPECT_EQ(grown_logits[3 * n_vocab + t],
              in_head ? all[3 * n_vocab + t] : -std::numeric_limits<float>::infinity())
        << t;
  }
  options.head_tokens = {5, 384};
  EXPECT_THROW(Model::Load(path, &ctx, options), Error);
}

// Speculation with a draft restricted by --draft-vocab gives plain decoding's tokens (greedy and
// coupled sampling); a size without a ranking, a ranking of another vocabulary and a malformed
// ranking are clear errors.
TEST(DraftVocab, RestrictedDraftsAreLosslessAndBadRankingsAreClearErrors) {
  std::string ids;
  for (int t = 383; t >= 0; t -= 2) ids += std::to_string(t) + "\n";
  const std::string ranking = WriteRanking(
      "ranking.txt", "specd-token-ranking 1 n_vocab=384\n# odd tokens, highest first\n" + ids);
  const std::string plain_args = " --tokens 1,5,9,33,7 -n 24 --ignore-eos --json -m " +
                                 testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string common =
      plain_args + " -md " + testing::TinyModel("tiny", DType::kQ8_0, 11) + " --draft-max 3";
  for (const std::string sampling : {" --temp 0", " --temp 0.8 --seed 5"}) {
    const auto plain = testing::RunSpecd("generate" + plain_args + sampling + " --strategy ar");
    const auto spec = testing::RunSpecd("generate" + common + sampling +
                                        " --draft-vocab 64 --draft-vocab-file " + ranking);
    ASSERT_EQ(spec.exit_code, 0) << spec.out;
    EXPECT_EQ(testing::FirstJsonLine(plain)["tokens"], testing::FirstJsonLine(spec)["tokens"]);
  }
  const std::string other =
      WriteRanking("ranking-other.txt", "specd-token-ranking 1 n_vocab=500\n1\n2\n");
  const std::string repeated =
      WriteRanking("ranking-repeated.txt", "specd-token-ranking 1 n_vocab=384\n1\n2\n1\n");
  const std::string no_header = WriteRanking("ranking-no-header.txt", "1\n2\n");
  for (const auto& [args, message] : std::vector<std::pair<std::string, std::string>>{
           {" --draft-vocab 64", "--draft-vocab 64 needs a token ranking (--draft-vocab-file)"},
           {" --draft-vocab-file " + other, "ranks a vocabulary of 500 tokens"},
           {" --draft-vocab-file " + repeated,
            ":4: expected a token id in 0..383 not listed before"},
           {" --draft-vocab-file " + no_header, "not a token ranking"},
           {" --strategy ar --draft-vocab 8 --draft-vocab-file " + ranking,
            "only speculative decoding reads these"}}) {
    const auto bad = testing::RunSpecd("generate" + common + " --temp 0" + args);
    EXPECT_EQ(bad.exit_code, 1) << args;
    EXPECT_NE(bad.out.find(message), std::string::npos) << bad.out;
  }
}

}  // namespace
}  // namespace specd
