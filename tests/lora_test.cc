// LoRA adapters in llama.cpp's GGUF layout, merged at load or applied at run time: either way the
// model computes what a model with W + (alpha / rank) B A written out in full computes; at run
// time coarse matrices keep their type and the forward stays batch invariant; bad adapters are
// named errors.
#include "model/lora.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "base/error.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "tensor/quantize.h"
#include "tests/test_util.h"

namespace specd {
namespace {

// One adapter pair, in ggml order as llama.cpp writes it: for a matrix of ggml shape [in, out],
// lora_a is [in, rank] and lora_b [rank, out]; for token_embd ([n_embd, n_vocab]) lora_a is
// [rank, n_vocab] and lora_b [rank, n_embd].
struct TestPair {
  std::string target;
  std::vector<int64_t> a_shape, b_shape;
  std::vector<float> a, b;
};

std::vector<uint8_t> F32Bytes(const std::vector<float>& v) {
  std::vector<uint8_t> bytes(v.size() * sizeof(float));
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return bytes;
}

std::string WriteAdapter(const std::string& name, const std::vector<TestPair>& pairs, float alpha,
                         const std::string& arch = "llama", const std::string& type = "adapter") {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str(arch));
  w.Set("general.type", GgufValue::Str(type));
  w.Set("adapter.type", GgufValue::Str("lora"));
  w.Set("adapter.lora.alpha", GgufValue::F32(alpha));
  w.Set("specd.sdsat.adaptive_token", GgufValue::U32(17));
  for (const TestPair& p : pairs) {
    if (!p.a.empty()) w.AddTensor(p.target + ".lora_a", DType::kF32, p.a_shape, F32Bytes(p.a));
    if (!p.b.empty()) w.AddTensor(p.target + ".lora_b", DType::kF32, p.b_shape, F32Bytes(p.b));
  }
  const std::string path = testing::TempDir() + "/" + name + ".gguf";
  w.Write(path);
  return path;
}

// The merge written out by hand from the ggml-order arrays: W[o][i] += s sum_k B[o][k] A[k][i]
// with A[k][i] = a[k * in + i] and B[o][k] = b[o * rank + k]; for token_embd,
// E[t][e] += s sum_k a[t * rank + k] b[e * rank + k].
std::string WriteMergedByHand(const std::string& base, const std::vector<TestPair>& pairs,
                              float alpha, const std::string& name) {
  auto file = GgufFile::Open(base);
  std::map<std::string, const TestPair*> by_target;
  for (const TestPair& p : pairs) by_target[p.target] = &p;
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.Set(key, value);
  for (const GgufTensorInfo& t : file->tensors()) {
    std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
    if (const auto it = by_target.find(t.name); it != by_target.end()) {
      EXPECT_EQ(t.type, DType::kF32);
      const TestPair& p = *it->second;
      auto* w_values = reinterpret_cast<float*>(bytes.data());
      const int64_t cols = t.shape[0], rows = t.shape[1];
      const bool embd = t.name == "token_embd.weight";
      const int64_t rank = embd ? p.a_shape[0] : p.a_shape[1];
      const double s = alpha / static_cast<double>(rank);
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t c = 0; c < cols; ++c) {
          double sum = 0.0;
          for (int64_t k = 0; k < rank; ++k) {
            sum += embd ? double(p.a[r * rank + k]) * p.b[c * rank + k]
                        : double(p.b[r * rank + k]) * p.a[k * cols + c];
          }
          w_values[r * cols + c] += static_cast<float>(s * sum);
        }
      }
    }
    w.AddTensor(t.name, t.type, t.shape, std::move(bytes));
  }
  const std::string path = testing::TempDir() + "/" + name + ".gguf";
  w.Write(path);
  return path;
}

std::vector<TestPair> SomePairs(const ModelConfig& c) {
  std::vector<TestPair> pairs;
  auto matrix = [&](const std::string& target, int64_t in, int64_t out, int64_t rank, int seed) {
    pairs.push_back({target,
                     {in, rank},
                     {rank, out},
                     testing::RandomVector(in * rank, seed, 0.3f),
                     testing::RandomVector(rank * out, seed + 1, 0.3f)});
  };
  matrix("blk.0.attn_q.weight", c.n_embd, c.n_head * c.head_dim, 2, 1);
  matrix("blk.1.ffn_down.weight", c.n_ff, c.n_embd, 3, 3);
  matrix("blk.1.attn_v.weight", c.n_embd, c.kv_dim(), 2, 5);
  // token_embd: rank 1, only token 9's row.
  std::vector<float> a(c.n_vocab, 0.0f);
  a[9] = 1.0f;
  pairs.push_back({"token_embd.weight",
                   {1, c.n_vocab},
                   {1, c.n_embd},
                   a,
                   testing::RandomVector(c.n_embd, 7, 0.5f)});
  return pairs;
}

// Logits of every token of `tokens`, in one forward or (`one_at_a_time`) one forward per token.
std::vector<float> Logits(const std::string& path, const std::vector<LoraSpec>& lora,
                          const std::vector<int32_t>& tokens, LoraApply apply = LoraApply::kAuto,
                          bool one_at_a_time = false) {
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  ModelLoadOptions options;
  options.lora = lora;
  options.lora_apply = apply;
  auto model = Model::Load(path, &ctx, options);
  auto kv = model->NewKvCache({1, 64});
  const int seq = kv->Acquire();
  std::vector<float> all, logits;
  for (size_t begin = 0; begin < tokens.size();) {
    const size_t end = one_at_a_time ? begin + 1 : tokens.size();
    Batch batch;
    for (size_t i = begin; i < end; ++i) batch.Add(tokens[i], int(i), seq, true);
    model->Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
    all.insert(all.end(), logits.begin(), logits.end());
    begin = end;
  }
  return all;
}

const std::vector<int32_t> kTokens = {1, 9, 40, 9, 200, 77, 9, 3};

TEST(Lora, MergedAtLoadComputesTheMatricesWrittenOutInFull) {
  const std::string base = testing::TinyModel("tiny", DType::kF32);
  ThreadPool pool(1);
  const ModelConfig c = Model::Load(base)->config();
  const auto pairs = SomePairs(c);
  const float alpha = 4.0f;
  const std::string adapter = WriteAdapter("adapter", pairs, alpha);
  const std::string by_hand = WriteMergedByHand(base, pairs, alpha, "merged_by_hand");

  const auto merged = Logits(base, {{adapter, 1.0f}}, kTokens);
  const auto expected = Logits(by_hand, {}, kTokens);
  const auto plain = Logits(base, {}, kTokens);
  EXPECT_LT(testing::RelativeError(merged, expected), 1e-5);
  EXPECT_GT(testing::RelativeError(plain, expected), 1e-2);  // the adapter changes the model

  // Scale 0 is the base model; scale 2 is alpha 8.
  EXPECT_EQ(Logits(base, {{adapter, 0.0f}}, kTokens), plain);
  const std::string by_hand_2 = WriteMergedByHand(base, pairs, 2 * alpha, "merged_by_hand_2");
  EXPECT_LT(testing::RelativeError(Logits(base, {{adapter, 2.0f}}, kTokens),
                                   Logits(by_hand_2, {}, kTokens)),
            1e-5);
  // The adapter's metadata is the model's, ahead of the file's.
  ModelLoadOptions options;
  options.lora = {{adapter, 1.0f}};
  auto model = Model::Load(base, nullptr, options);
  ASSERT_NE(model->FindMetadata("specd.sdsat.adaptive_token"), nullptr);
  EXPECT_EQ(model->FindMetadata("specd.sdsat.adaptive_token")->AsInt("t"), 17);
  EXPECT_EQ(model->FindMetadata("general.architecture")->AsString("a"), "llama");
}

// At run time (y = W x + s B (A x); token_embd's few rows as deltas, also on a tied head) the
// model computes the same as the matrices merged by hand, and scale 0 is the base bit for bit.
TEST(Lora, AppliedAtRunTimeComputesTheMatricesWrittenOutInFull) {
  for (const std::string arch : {"llama", "qwen2"}) {  // tiny-qwen2 ties its head to token_embd
    const std::string base = testing::TinyModel(arch == "llama" ? "tiny" : "tiny-qwen2");
    const ModelConfig c = Model::Load(base)->config();
    const auto pairs = SomePairs(c);
    const std::string adapter = WriteAdapter("run_time_" + arch, pairs, 4.0f, arch);
    const auto expected =
        Logits(WriteMergedByHand(base, pairs, 4.0f, "run_time_by_hand_" + arch), {}, kTokens);
    const auto run_time = Logits(base, {{adapter, 1.0f}}, kTokens, LoraApply::kRunTime);
    EXPECT_LT(testing::RelativeError(run_time, expected), 1e-5) << arch;
    EXPECT_GT(testing::RelativeError(Logits(base, {}, kTokens), expected), 1e-2) << arch;
    EXPECT_EQ(Logits(base, {{adapter, 0.0f}}, kTokens, LoraApply::kRunTime),
              Logits(base, {}, kTokens))
        << arch;
  }
}

// Where merging would widen a matrix (q4_0 -> q8_0), the default keeps it in its own type and
// applies the update at run time: the bytes read per token grow by the adapter's only; a token's
// logits do not depend on the batch it is in (greedy speculation's equality needs it); and the
// result is the by-hand merge up to the 4-bit kernel's int8 activations.
TEST(Lora, CoarseMatricesKeepTheirTypeAndTheForwardStaysBatchInvariant) {
  const std::string base = testing::TinyModel("tiny", DType::kQ4_0);
  ThreadPool pool(1);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto plain = Model::Load(base, &ctx);
  const ModelConfig c = plain->config();
  const auto pairs = SomePairs(c);
  const std::string adapter = WriteAdapter("coarse_run_time", pairs, 4.0f);
  ModelLoadOptions options;
  options.lora = {{adapter, 1.0f}};
  auto adapted = Model::Load(base, &ctx, options);
  EXPECT_EQ(adapted->MatrixType(), DType::kQ4_0);
  // f32 A [2, n_embd] and B [n_head * head_dim, 2] of blk.0.attn_q, and the other two pairs.
  EXPECT_GT(adapted->WeightBytesPerToken(), plain->WeightBytesPerToken());
  options.lora_apply = LoraApply::kMerge;
  EXPECT_EQ(Model::Load(base, &ctx, options)->MatrixType(), DType::kQ8_0);

  const auto batched = Logits(base, {{adapter, 1.0f}}, kTokens);
  const auto one_by_one = Logits(base, {{adapter, 1.0f}}, kTokens, LoraApply::kAuto, true);
  EXPECT_EQ(batched, one_by_one);
  EXPECT_GT(testing::RelativeError(batched, Logits(base, {}, kTokens)), 1e-2);
}

// A file stored in i8 (specd quantize --type i8) takes an adapter at run time; merging into its
// matrices is refused by name.
TEST(Lora, I8FilesTakeAdaptersAtRunTimeOnly) {
  const std::string source = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string path = testing::TempDir() + "/lora-tiny-i8.gguf";
  const testing::CliRun run = testing::RunSpecd("quantize " + source + " " + path + " --type i8");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  const ModelConfig c = Model::Load(path)->config();
  const std::string adapter = WriteAdapter("adapter_for_i8", SomePairs(c), 4.0f);
  ModelLoadOptions options;
  options.lora = {{adapter, 1.0f}};
  EXPECT_EQ(Model::Load(path, nullptr, options)->MatrixType(), DType::kI8);
  EXPECT_GT(
      testing::RelativeError(Logits(path, {{adapter, 1.0f}}, kTokens), Logits(path, {}, kTokens)),
      1e-2);
  options.lora_apply = LoraApply::kMerge;
  try {
    Model::Load(path, nullptr, options);
    ADD_FAILURE() << "merging into i8 matrices loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot merge a LoRA into the i8 matrix"),
              std::string::npos)
        << e.what();
  }
}

TEST(Lora, QuantizedMatricesAreMergedInTheirOwnTypeAndUntouchedRowsKeepTheirBytes) {
  const std::string base = testing::TinyModel("tiny", DType::kQ8_0);
  const ModelConfig c = Model::Load(base)->config();
  const std::string adapter = WriteAdapter("adapter_q8", SomePairs(c), 4.0f);
  const auto plain = Logits(base, {}, kTokens);
  EXPECT_EQ(Logits(base, {{adapter, 0.0f}}, kTokens), plain);  // nothing re-quantized
  const auto merged = Logits(base, {{adapter, 1.0f}}, kTokens);
  EXPECT_GT(testing::RelativeError(merged, plain), 1e-2);

  // The merge of one q8_0 matrix, row by row: W + delta re-quantized; rows with no delta copied.
  auto file = GgufFile::Open(base);
  const GgufTensorInfo& embd = file->GetTensor("token_embd.weight");
  auto adapter_file = ReadLoraAdapter({adapter, 1.0f}, "llama");
  const LoraUpdate* update = nullptr;
  for (const auto& u : adapter_file.updates) update = u.target == embd.name ? &u : update;
  ASSERT_NE(update, nullptr);
  const auto bytes = MergeLoraUpdate(embd.type, embd.data, *update);
  const int64_t row_bytes = RowBytes(embd.type, embd.shape[0]);
  for (int64_t r = 0; r < embd.shape[1]; ++r) {
    const bool same = std::equal(bytes.begin() + r * row_bytes, bytes.begin() + (r + 1) * row_bytes,
                                 embd.data + r * row_bytes);
    EXPECT_EQ(same, r != 9) << "row " << r;
  }
}

// A q4_0 matrix merged back into q4_0 would lose a small update to its grid: coarse types are
// merged (--lora-merge) into q8_0, which keeps it.
TEST(Lora, CoarseTypesAreMergedIntoQ8_0) {
  EXPECT_EQ(LoraMergedType(DType::kQ4_0), DType::kQ8_0);
  EXPECT_EQ(LoraMergedType(DType::kQ6_K), DType::kQ8_0);
  EXPECT_EQ(LoraMergedType(DType::kF16), DType::kF16);
  const std::string base = testing::TinyModel("tiny", DType::kQ4_0);
  const ModelConfig c = Model::Load(base)->config();
  auto pairs = SomePairs(c);
  const std::string adapter = WriteAdapter("adapter_q4", pairs, 4.0f);
  // The reference: the base dequantized to f32, merged by hand.
  auto file = GgufFile::Open(base);
  GgufWriter w;
  for (const auto& [key, value] : file->metadata()) w.Set(key, value);
  for (const GgufTensorInfo& t : file->tensors()) {
    const int64_t cols = t.shape[0], rows = t.NumElements() / cols;
    std::vector<float> values(rows * cols);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t.type, t.data + r * RowBytes(t.type, cols), values.data() + r * cols, cols);
    }
    w.AddTensor(t.name, DType::kF32, t.shape, F32Bytes(values));
  }
  const std::string f32_base = testing::TempDir() + "/q4_as_f32.gguf";
  w.Write(f32_base);
  const auto expected = Logits(WriteMergedByHand(f32_base, pairs, 4.0f, "q4_by_hand"), {}, kTokens);
  const auto merged = Logits(base, {{adapter, 1.0f}}, kTokens, LoraApply::kMerge);
  // q8_0's rounding of the merged matrices only.
  EXPECT_LT(testing::RelativeError(merged, expected), 2e-2);
  EXPECT_GT(testing::RelativeError(Logits(base, {}, kTokens), expected), 5e-2);
  // At run time, the same up to the 4-bit kernel's int8 activations.
  EXPECT_LT(testing::RelativeError(Logits(base, {{adapter, 1.0f}}, kTokens), expected), 2e-2);
}

TEST(Lora, BadAdaptersAreNamedErrors) {
  const std::string base = testing::TinyModel("tiny", DType::kF32);
  const ModelConfig c = Model::Load(base)->config();
  auto load = [&](const std::string& adapter) {
    ModelLoadOptions options;
    options.lora = {{adapter, 1.0f}};
    try {
      Model::Load(base, nullptr, options);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  auto pairs = SomePairs(c);
  EXPECT_NE(load(base).find("is not a LoRA adapter"), std::string::npos);
  EXPECT_NE(load(WriteAdapter("qwen", pairs, 4, "qwen2")).find("not for this 'llama' model"),
            std::string::npos);
  auto missing = pairs;
  missing[0].target = "blk.7.attn_q.weight";
  EXPECT_NE(load(WriteAdapter("missing", missing, 4)).find("no matrix of"), std::string::npos);
  auto wrong_shape = pairs;
  wrong_shape[0].b_shape = {2, 8};
  wrong_shape[0].b.resize(16);
  EXPECT_NE(load(WriteAdapter("shape", wrong_shape, 4)).find("the matrix ["), std::string::npos);
  auto unpaired = pairs;
  unpaired[1].b.clear();
  EXPECT_NE(load(WriteAdapter("unpaired", unpaired, 4)).find("only one of lora_a and lora_b"),
            std::string::npos);
  auto ranks = pairs;
  ranks[0].b_shape = {3, ranks[0].b_shape[1]};
  ranks[0].b.resize(3 * ranks[0].b_shape[1]);
  EXPECT_NE(load(WriteAdapter("ranks", ranks, 4)).find("ranks differ"), std::string::npos);
}

TEST(Lora, CliMergesAdaptersForTheTargetOnly) {
  const std::string base = testing::TinyModel("tiny", DType::kF32);
  const ModelConfig c = Model::Load(base)->config();
  const std::string adapter = WriteAdapter("cli_adapter", SomePairs(c), 4.0f);
  const std::string common =
      "generate -m " + base + " --tokens 1,9,40 -n 12 --temp 0 --ignore-eos --json ";
  const auto plain = testing::RunSpecd(common);
  const auto zero = testing::RunSpecd(common + "--lora-scaled " + adapter + " 0");
  const auto merged = testing::RunSpecd(common + "--lora " + adapter);
  ASSERT_EQ(plain.exit_code, 0) << plain.out;
  ASSERT_EQ(merged.exit_code, 0) << merged.out;
  // The first JSON line is the sequence.
  auto sequence = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(0, out.find('\n')));
  };
  auto tokens = [&](const std::string& out) { return sequence(out)["tokens"]; };
  EXPECT_EQ(tokens(zero.out), tokens(plain.out));
  EXPECT_NE(tokens(merged.out), tokens(plain.out));
  // The adapter goes into the target, not the draft: speculative output equals plain output of
  // the merged target.
  const auto spec =
      testing::RunSpecd(common + "--lora " + adapter + " -md " + base + " --draft-max 3");
  ASSERT_EQ(spec.exit_code, 0) << spec.out;
  EXPECT_EQ(tokens(spec.out), tokens(merged.out));
  // The unmerged draft disagrees with the merged target now and then.
  EXPECT_LT(sequence(spec.out)["n_accepted"], sequence(spec.out)["n_drafted"]);
  const auto bad = testing::RunSpecd(common + "--lora " + base);
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.out.find("is not a LoRA adapter"), std::string::npos) << bad.out;
  const auto bad_scale = testing::RunSpecd(common + "--lora-scaled " + adapter + " x");
  EXPECT_NE(bad_scale.exit_code, 0);
}

// A q4_0 target takes the adapter at run time by default, merged with --lora-merge; speculative
// output equals plain output of the adapted target either way.
TEST(Lora, CliAppliesAdaptersAtRunTimeOrMerged) {
  const std::string base = testing::TinyModel("tiny", DType::kQ4_0);
  const ModelConfig c = Model::Load(base)->config();
  const std::string adapter = WriteAdapter("cli_adapter_q4", SomePairs(c), 4.0f);
  const std::string common = "generate -m " + base + " --tokens 1,9,40 -n 16 --temp 0 " +
                             "--ignore-eos --json --lora " + adapter + " ";
  auto tokens = [](const std::string& out) {
    return nlohmann::json::parse(out.substr(0, out.find('\n')))["tokens"];
  };
  for (const std::string mode : {"", "--lora-merge "}) {
    const auto plain = testing::RunSpecd(common + mode);
    const auto spec = testing::RunSpecd(common + mode + "-md " + base + " --draft-max 3");
    ASSERT_EQ(plain.exit_code, 0) << plain.out;
    ASSERT_EQ(spec.exit_code, 0) << spec.out;
    EXPECT_EQ(tokens(spec.out), tokens(plain.out)) << mode;
  }
}

}  // namespace
}  // namespace specd
