// GGUF round trips for every tensor and metadata type, and malformed files rejected with errors
// that name the problem.
#include "gguf/gguf.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>

#include "base/error.h"
#include "base/rng.h"
#include "model/model.h"
#include "tensor/quantize.h"
#include "tests/test_util.h"
#include "threading/thread_pool.h"

namespace specd {
namespace {

GgufWriter SmallWriter() {
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str("llama"));
  w.Set("u8", {GgufType::kUint8, uint64_t{200}});
  w.Set("i8", {GgufType::kInt8, int64_t{-100}});
  w.Set("u16", {GgufType::kUint16, uint64_t{60000}});
  w.Set("i16", {GgufType::kInt16, int64_t{-30000}});
  w.Set("u32", GgufValue::U32(4000000000u));
  w.Set("i32", GgufValue::I32(-2000000000));
  w.Set("u64", GgufValue::U64(1ull << 60));
  w.Set("i64", {GgufType::kInt64, int64_t{-(1ll << 60)}});
  w.Set("f32", GgufValue::F32(1.5f));
  w.Set("f64", {GgufType::kFloat64, 2.25});
  w.Set("bool", GgufValue::Bool(true));
  w.Set("str", GgufValue::Str("h\xC3\xA9llo"));
  w.Set("arr", GgufValue::Array(GgufType::kString, {GgufValue::Str("a"), GgufValue::Str("")}));
  w.Set("nested", GgufValue::Array(GgufType::kArray,
                                   {GgufValue::Array(GgufType::kInt32, {GgufValue::I32(3)})}));
  return w;
}

TEST(Gguf, RoundTripEveryTensorTypeAndMetadataType) {
  GgufWriter w = SmallWriter();
  std::vector<std::vector<float>> originals;
  const std::vector<DType> types = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0,
                                    DType::kQ4_0};
  for (DType t : types) {
    SplitMix64 rng(static_cast<uint64_t>(t) + 1);
    std::vector<float> values(64 * 3);
    for (auto& v : values) v = rng.NextSymmetric();
    std::vector<uint8_t> bytes(RowBytes(t, 64) * 3);
    for (int r = 0; r < 3; ++r)
      QuantizeRow(t, values.data() + r * 64, bytes.data() + r * RowBytes(t, 64), 64);
    w.AddTensor(std::string("t_") + std::string(DTypeName(t)), t, {64, 3}, bytes);
    originals.push_back(values);
  }
  const std::string path = testing::TempDir() + "/roundtrip.gguf";
  w.Write(path);
  auto f = GgufFile::Open(path);
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->Get("u8").AsInt("u8"), 200);
  EXPECT_EQ(f->Get("u8").type, GgufType::kUint8);
  EXPECT_EQ(f->Get("i8").AsInt("i8"), -100);
  EXPECT_EQ(f->Get("u16").AsInt("u16"), 60000);
  EXPECT_EQ(f->Get("i16").AsInt("i16"), -30000);
  EXPECT_EQ(f->Get("u32").AsInt("u32"), 4000000000ll);
  EXPECT_EQ(f->Get("i32").AsInt("i32"), -2000000000);
  EXPECT_EQ(f->Get("u64").AsInt("u64"), 1ll << 60);
  EXPECT_EQ(f->Get("i64").AsInt("i64"), -(1ll << 60));
  EXPECT_EQ(f->Get("f32").AsFloat("f32"), 1.5);
  EXPECT_EQ(f->Get("f64").AsFloat("f64"), 2.25);
  EXPECT_TRUE(f->Get("bool").AsBool("bool"));
  EXPECT_EQ(f->Get("str").AsString("str"), "h\xC3\xA9llo");
  const auto& arr = f->Get("arr").AsArray("arr");
  ASSERT_EQ(arr.items.size(), 2u);
  EXPECT_EQ(arr.items[1].AsString("x"), "");
  EXPECT_EQ(f->Get("nested").AsArray("n").items[0].AsArray("n").items[0].AsInt("n"), 3);
  EXPECT_THROW(f->Get("missing"), Error);
  EXPECT_THROW(f->Get("str").AsInt("str"), Error);
  for (size_t i = 0; i < types.size(); ++i) {
    const auto& t = f->GetTensor(std::string("t_") + std::string(DTypeName(types[i])));
    EXPECT_EQ(t.type, types[i]);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{64, 3}));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 32, 0u);
    std::vector<float> back(64 * 3), expect(64 * 3);
    std::vector<uint8_t> bytes(RowBytes(types[i], 64) * 3);
    for (int r = 0; r < 3; ++r) {
      QuantizeRow(types[i], originals[i].data() + r * 64, bytes.data() + r * RowBytes(types[i], 64),
                  64);
      DequantizeRow(types[i], bytes.data() + r * RowBytes(types[i], 64), expect.data() + r * 64,
                    64);
      DequantizeRow(types[i], t.data + r * RowBytes(types[i], 64), back.data() + r * 64, 64);
    }
    EXPECT_EQ(back, expect) << DTypeName(types[i]);
  }
  // Re-serializing what was read gives the same bytes (types preserved).
  GgufWriter again;
  for (const auto& [k, v] : f->metadata()) again.Set(k, v);
  for (const auto& t : f->tensors()) {
    again.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> original((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(again.Serialize(), original);
}

TEST(Gguf, ReadsVersion2) {
  std::vector<uint8_t> bytes = SmallWriter().Serialize();
  bytes[4] = 2;
  auto f = GgufFile::FromMemory(bytes.data(), bytes.size());
  EXPECT_EQ(f->version(), 2u);
}

// Parses bytes and returns the error message (empty if it parsed).
std::string ParseError(const std::vector<uint8_t>& bytes) {
  try {
    GgufFile::FromMemory(bytes.data(), bytes.size(), "bad.gguf");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Little-endian building blocks for hand-made files.
struct Builder {
  std::vector<uint8_t> b;
  template <typename T>
  Builder& Put(T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
    return *this;
  }
  Builder& Str(const std::string& s) {
    Put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Builder& Header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return Put<uint32_t>(0x46554747)
        .Put<uint32_t>(version)
        .Put<uint64_t>(n_tensors)
        .Put<uint64_t>(n_kv);
  }
  Builder& Tensor(const std::string& name, std::vector<uint64_t> shape, uint32_t type,
                  uint64_t offset) {
    Str(name).Put<uint32_t>(static_cast<uint32_t>(shape.size()));
    for (auto d : shape) Put<uint64_t>(d);
    return Put<uint32_t>(type).Put<uint64_t>(offset);
  }
  Builder& PadTo(size_t alignment) {
    b.resize((b.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
};

TEST(Gguf, MalformedFilesAreRejectedWithTheirError) {
  struct Case {
    const char* name;
    std::vector<uint8_t> bytes;
    const char* expected;
  };
  std::vector<Case> cases;
  cases.push_back({"empty", {}, "too short"});
  cases.push_back(
      {"bad magic", Builder().Put<uint32_t>(0x12345678).Put<uint32_t>(3).b, "bad magic"});
  cases.push_back({"version 1", Builder().Header(0, 0, 1).b, "version 1"});
  cases.push_back({"version 4", Builder().Header(0, 0, 4).b, "version 4"});
  cases.push_back({"truncated header",
                   Builder().Put<uint32_t>(0x46554747).Put<uint32_t>(3).Put<uint32_t>(0).b,
                   "truncated"});
  cases.push_back({"huge metadata count", Builder().Header(0, 1ull << 50).b, "metadata entries"});
  cases.push_back({"huge tensor count", Builder().Header(1ull << 40, 0).b, "tensors"});
  cases.push_back({"key longer than file",
                   Builder().Header(0, 1).Put<uint64_t>(1000).Put<uint32_t>(0).Put<uint64_t>(0).b,
                   "string of 1000 bytes"});
  cases.push_back({"unknown value type",
                   Builder().Header(0, 1).Str("k").Put<uint32_t>(99).Put<uint32_t>(0).b,
                   "unknown value type 99"});
  cases.push_back({"bool out of range",
                   Builder().Header(0, 1).Str("k").Put<uint32_t>(7).Put<uint8_t>(5).b,
                   "bool value"});
  cases.push_back({"array too long",
                   Builder()
                       .Header(0, 1)
                       .Str("k")
                       .Put<uint32_t>(9)
                       .Put<uint32_t>(4)
                       .Put<uint64_t>(1ull << 60)
                       .b,
                   "array elements"});
  cases.push_back(
      {"array of unknown type",
       Builder().Header(0, 1).Str("k").Put<uint32_t>(9).Put<uint32_t>(42).Put<uint64_t>(1).b,
       "unknown type 42"});
  cases.push_back({"string value truncated",
                   Builder().Header(0, 1).Str("k").Put<uint32_t>(8).Put<uint64_t>(50).b,
                   "string of 50 bytes"});
  cases.push_back({"duplicate key",
                   Builder()
                       .Header(0, 2)
                       .Str("k")
                       .Put<uint32_t>(4)
                       .Put<uint32_t>(1)
                       .Str("k")
                       .Put<uint32_t>(4)
                       .Put<uint32_t>(2)
                       .b,
                   "duplicate metadata key 'k'"});
  cases.push_back(
      {"bad alignment",
       Builder().Header(0, 1).Str("general.alignment").Put<uint32_t>(4).Put<uint32_t>(24).b,
       "power of two"});
  cases.push_back({"five dimensions", Builder().Header(1, 0).Tensor("t", {1, 1, 1, 1, 1}, 0, 0).b,
                   "5 dimensions"});
  cases.push_back(
      {"zero dimension", Builder().Header(1, 0).Tensor("t", {0}, 0, 0).b, "dimension 0 of size 0"});
  cases.push_back(
      {"unsupported tensor type", Builder().Header(1, 0).Tensor("t", {256}, 16, 0).b, "iq2_xxs"});
  cases.push_back({"unknown tensor type", Builder().Header(1, 0).Tensor("t", {256}, 1234, 0).b,
                   "unknown type id 1234"});
  cases.push_back({"row not a block multiple", Builder().Header(1, 0).Tensor("t", {33}, 8, 0).b,
                   "not a multiple"});
  cases.push_back(
      {"misaligned offset", Builder().Header(1, 0).Tensor("t", {4}, 0, 3).b, "not aligned"});
  cases.push_back({"overflowing shape",
                   Builder().Header(1, 0).Tensor("t", {1ull << 40, 1ull << 40}, 0, 0).b,
                   "too large"});
  cases.push_back({"data past the end", Builder().Header(1, 0).Tensor("t", {64}, 0, 0).PadTo(32).b,
                   "beyond the end"});
  cases.push_back({"duplicate tensor",
                   Builder()
                       .Header(2, 0)
                       .Tensor("t", {8}, 0, 0)
                       .Tensor("t", {8}, 0, 32)
                       .PadTo(32)
                       .Put<uint64_t>(0)
                       .b,
                   "duplicate tensor 't'"});
  for (const auto& c : cases) {
    const std::string error = ParseError(c.bytes);
    EXPECT_NE(error.find(c.expected), std::string::npos)
        << c.name << ": got '" << error << "', expected it to mention '" << c.expected << "'";
  }
}

TEST(Gguf, EveryTruncationOfAValidModelFailsCleanly) {
  const std::string path = testing::TinyModel("tiny", DType::kQ8_0);
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_NO_THROW(GgufFile::FromMemory(bytes.data(), bytes.size()));
  // Every prefix length in the header region, then a stride through the data.
  for (size_t n = 0; n < bytes.size(); n += (n < 20000 ? 1 : 997)) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + n);
    EXPECT_FALSE(ParseError(prefix).empty()) << "prefix of " << n << " bytes parsed";
  }
}

// Outcome of loading (and, if it loads, decoding one token with) a possibly damaged image.
enum class LoadOutcome { kRejected, kDecoded };

LoadOutcome LoadAndDecode(const std::vector<uint8_t>& bytes) {
  try {
    auto model = Model::FromGguf(GgufFile::FromMemory(bytes.data(), bytes.size()));
    KvCacheConfig kv_config;
    kv_config.n_ctx = 4;
    auto kv = model->NewKvCache(kv_config);
    Batch batch;
    batch.Add(1, 0, kv->Acquire(), true);
    ThreadPool pool(1);
    const KernelContext ctx{&pool, CpuFeatures::Detect()};
    std::vector<float> logits;  // [1, n_vocab]
    model->Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
    EXPECT_EQ(logits.size(), static_cast<size_t>(model->config().n_vocab));
    return LoadOutcome::kDecoded;
  } catch (const Error& e) {
    EXPECT_GT(std::strlen(e.what()), 10u) << "an error must say what is wrong";
    return LoadOutcome::kRejected;
  }
}

// Random byte changes in the header (metadata and tensor table: the first 4 KiB) and anywhere in
// the file, and random truncations: each image is either rejected with an Error or loads and
// decodes; anything else (a crash, another exception) fails the test. The counts show that
// both outcomes were exercised. (fuzz/fuzz_gguf_load does this with coverage guidance.)
TEST(Gguf, RandomCorruptionNeverCrashes) {
  const std::string path = testing::TinyModel("tiny", DType::kQ4_0);
  std::ifstream in(path, std::ios::binary);
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 8192u);
  SplitMix64 rng(5);
  int outcomes[2][2] = {};  // [header or anywhere][rejected or decoded]
  for (int trial = 0; trial < 400; ++trial) {
    const bool header = trial % 2 == 0;
    std::vector<uint8_t> copy = bytes;
    const size_t span = header ? 4096 : copy.size();
    for (int k = 0; k < 4; ++k) copy[rng.Next() % span] = static_cast<uint8_t>(rng.Next());
    ++outcomes[header ? 0 : 1][static_cast<int>(LoadAndDecode(copy))];
  }
  std::printf("header: %d rejected %d decoded; anywhere: %d rejected %d decoded\n", outcomes[0][0],
              outcomes[0][1], outcomes[1][0], outcomes[1][1]);
  EXPECT_GT(outcomes[0][0], 20) << "header damage should often be rejected";
  EXPECT_GT(outcomes[0][1], 0) << "some header bytes (e.g. in names' padding) are harmless";
  EXPECT_GT(outcomes[1][1], 100) << "most data bytes only change weights";
  for (int trial = 0; trial < 50; ++trial) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + rng.Next() % bytes.size());
    EXPECT_EQ(LoadAndDecode(cut), LoadOutcome::kRejected) << "cut at " << cut.size();
  }
}

// Model-level validation on top of a well-formed GGUF.
std::string ModelError(const std::function<void(GgufWriter&)>& edit, bool drop_tensor = false,
                       const std::string& drop = "") {
  auto src = GgufFile::Open(testing::TinyModel());
  GgufWriter w;
  for (const auto& [k, v] : src->metadata()) w.Set(k, v);
  for (const auto& t : src->tensors()) {
    if (drop_tensor && t.name == drop) continue;
    w.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  edit(w);
  const auto bytes = w.Serialize();
  try {
    Model::FromGguf(GgufFile::FromMemory(bytes.data(), bytes.size(), "edited.gguf"));
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Gguf, ModelLevelErrorsNameTheProblem) {
  EXPECT_EQ(ModelError([](GgufWriter&) {}), "");
  EXPECT_NE(ModelError([](GgufWriter& w) {
              w.Set("general.architecture", GgufValue::Str("gptj"));
            }).find("architecture 'gptj' is not supported"),
            std::string::npos);
  EXPECT_NE(ModelError([](GgufWriter&) {}, true, "blk.1.ffn_up.weight")
                .find("required tensor 'blk.1.ffn_up.weight' is missing"),
            std::string::npos);
  EXPECT_NE(ModelError([](GgufWriter& w) {
              w.Set("llama.feed_forward_length", GgufValue::U32(100));
            }).find("has shape"),
            std::string::npos);
  EXPECT_NE(ModelError([](GgufWriter& w) {
              w.Set("llama.attention.head_count_kv", GgufValue::U32(3));
            }).find("cannot be grouped"),
            std::string::npos);
  EXPECT_NE(ModelError([](GgufWriter& w) {
              w.Set("llama.block_count", GgufValue::Str("two"));
            }).find("should be an integer"),
            std::string::npos);
  EXPECT_NE(ModelError([](GgufWriter& w) {
              w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(100000));
            }).find("outside the vocabulary"),
            std::string::npos);
}

TEST(Gguf, MissingFileIsAClearError) {
  try {
    GgufFile::Open("/nonexistent/model.gguf");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot open model file"), std::string::npos);
  }
}

}  // namespace
}  // namespace specd
