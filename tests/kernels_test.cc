// Every fast kernel against its scalar reference, and the batch invariance of matmul.
#include "kernels/kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "kernels/amx_tiles.h"
#include "tensor/quantize.h"
#include "tests/test_util.h"

namespace specd {
namespace {

using testing::RandomVector;
using testing::RelativeError;

struct Weights {
  std::vector<uint8_t> bytes;
  WeightView view;
};

// Byte offsets of the fp16 super-block scales of the K-quants specd reads but does not write.
std::vector<int> KQuantScaleOffsets(DType type) {
  switch (type) {
    case DType::kQ2_K:
      return {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)};
    case DType::kQ3_K:
      return {offsetof(BlockQ3_K, d)};
    case DType::kQ5_K:
      return {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)};
    default:
      return {};
  }
}

Weights MakeWeights(DType type, int64_t rows, int64_t cols, uint64_t seed) {
  Weights w;
  w.bytes.resize(RowBytes(type, cols) * rows);
  const std::vector<int> scale_offsets = KQuantScaleOffsets(type);
  if (scale_offsets.empty()) {
    const auto values = RandomVector(rows * cols, seed, 0.5f);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeRow(type, values.data() + r * cols, w.bytes.data() + r * RowBytes(type, cols), cols);
    }
  } else {  // random levels and sub-block scales, super-block scales of a sane size
    SplitMix64 rng(seed);
    for (auto& b : w.bytes) b = static_cast<uint8_t>(rng.Next());
    for (size_t at = 0; at < w.bytes.size(); at += BlockBytes(type)) {
      for (int off : scale_offsets) {
        const uint16_t h = Fp32ToFp16(0.01f * (1.0f + rng.NextSymmetric()));
        std::memcpy(&w.bytes[at + off], &h, 2);
      }
    }
  }
  w.view = WeightView{type, w.bytes.data(), rows, cols};
  return w;
}

// Tolerances, relative (L2) to the f64 reference on dequantized weights: the fast path rounds
// activations to bf16 for bf16 weights (2^-9 per element) and to int8 per 32-block for
// quantized weights (1/254 of the block maximum per element).
double Tolerance(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
      return 1e-6;
    case DType::kBF16:
      return 6e-3;
    default:
      return 1.5e-2;
  }
}

// The int8 kernels against a reference that quantizes activations the same way (a scale per 32
// values, or per 256 for the K-quants): integer sums are exact, so only float rounding of the
// scales and the accumulation remains (~1e-7). A reference quantizing with amax / 128 instead,
// or over the other span (plausible bugs), is far outside that.
void ExpectInt8ActivationsExact(const std::vector<float>& x, int64_t m, const WeightView& w,
                                const std::vector<float>& got) {
  constexpr double kTolerance = 2e-6;
  std::vector<float> want(m * w.rows), off_by_one(m * w.rows);
  const int64_t span = Int8ActivationSpan(w.type);
  reference::Matmul(reference::Int8Activations(x.data(), m, w.cols, 127.0f, span).data(), m, w,
                    want.data());
  EXPECT_LT(RelativeError(got, want), kTolerance) << DTypeName(w.type) << " cols=" << w.cols;
  reference::Matmul(reference::Int8Activations(x.data(), m, w.cols, 128.0f, span).data(), m, w,
                    off_by_one.data());
  EXPECT_GT(RelativeError(got, off_by_one), 10 * kTolerance) << DTypeName(w.type);
  // A scale per 32 values where the kernels take one per 256 (or the reverse) is far outside too.
  const int64_t other_span = span == 256 ? 32 : 256;
  if (w.cols % other_span == 0) {
    reference::Matmul(reference::Int8Activations(x.data(), m, w.cols, 127.0f, other_span).data(), m,
                      w, off_by_one.data());
    EXPECT_GT(RelativeError(got, off_by_one), 10 * kTolerance) << DTypeName(w.type) << " span";
  }
}

// The matmul kernels a type can run on: AVX-512 on the source layout (f32 / f16 / bf16 / q8_0 /
// q4_0), AVX-512 or AVX2 on the packed layout (every quantized type), scalar.
enum class MatmulPath { kAvx512Source, kAvx512Packed, kAvx2Packed, kScalar };

const char* MatmulPathName(MatmulPath p) {
  switch (p) {
    case MatmulPath::kAvx512Source:
      return "avx512_source";
    case MatmulPath::kAvx512Packed:
      return "avx512_packed";
    case MatmulPath::kAvx2Packed:
      return "avx2_packed";
    case MatmulPath::kScalar:
      return "scalar";
  }
  return "?";
}

bool PathApplies(DType type, MatmulPath p) {
  const bool packed = p == MatmulPath::kAvx512Packed || p == MatmulPath::kAvx2Packed;
  if (packed) return IsPackable(type);
  if (p == MatmulPath::kAvx512Source) {
    return !IsPackable(type) || type == DType::kQ8_0 || type == DType::kQ4_0;
  }
  return true;
}

// A context running `path`, or "" when this CPU can; else the reason it cannot.
std::string ContextFor(MatmulPath path, ThreadPool* pool, KernelContext* ctx) {
  *ctx = KernelContext{pool, CpuFeatures::Detect()};
  const bool avx512 = path == MatmulPath::kAvx512Source || path == MatmulPath::kAvx512Packed;
  if (avx512 && !ctx->cpu.avx512) return "this CPU has no AVX-512";
  if (path == MatmulPath::kAvx2Packed && !ctx->cpu.avx2) return "this CPU has no AVX2";
  ctx->cpu.avx512 = avx512;
  ctx->cpu.avx2 = path == MatmulPath::kAvx2Packed;
  return "";
}

// 96: an odd number of 32-blocks (the tail path); K-quants come in rows of 256.
std::vector<int64_t> MatmulWidths(DType type) {
  return BlockElements(type) == kSuperBlock ? std::vector<int64_t>{256, 512}
                                            : std::vector<int64_t>{32, 96, 256};
}

// `type`'s test weights of `cols` columns, 37 rows (not a multiple of 16: a partial row group),
// packed when the path reads the packed layout; and max_m activation rows.
struct MatmulCase {
  static constexpr int64_t kRows = 37;
  static constexpr int64_t kMaxM = 17;  // two full 8-row tiles and a remainder
  MatmulCase(DType type, int64_t cols, MatmulPath path, ThreadPool* pool)
      : w(MakeWeights(type, kRows, cols, 11 + cols)), x(RandomVector(kMaxM * cols, 3 + cols)) {
    if (path == MatmulPath::kAvx512Packed || path == MatmulPath::kAvx2Packed) {
      const bool avx2 = path == MatmulPath::kAvx2Packed;
      packed_weights = PackInt8(w.view, pool, avx2 ? HighBits::kFields : HighBits::kPlanes);
      w.view.packed = &packed_weights;
    }
  }
  std::vector<float> Run(const KernelContext& ctx, int64_t m) {
    std::vector<float> out(m * kRows);
    const int64_t cols = w.view.cols;
    Matmul(ctx, x.data() + (kMaxM - m) * cols, m, w.view, out.data(), &scratch);
    return out;
  }
  Weights w;
  PackedInt8Weights packed_weights;
  std::vector<float> x;  // [kMaxM, cols]
  MatmulScratch scratch;
};

class MatmulTest : public ::testing::TestWithParam<std::tuple<DType, int, MatmulPath>> {};

TEST_P(MatmulTest, FastEqualsReferenceAndIsBatchInvariant) {
  const auto [type, threads, path] = GetParam();
  ThreadPool pool(threads);
  KernelContext ctx;
  if (const std::string why = ContextFor(path, &pool, &ctx); !why.empty()) GTEST_SKIP() << why;
  for (int64_t cols : MatmulWidths(type)) {
    MatmulCase c(type, cols, path, &pool);
    std::vector<float> expected(MatmulCase::kMaxM * MatmulCase::kRows);
    reference::Matmul(c.x.data(), MatmulCase::kMaxM, c.w.view, expected.data());
    const std::vector<float> all = c.Run(ctx, MatmulCase::kMaxM);
    EXPECT_LT(RelativeError(all, expected), Tolerance(type))
        << DTypeName(type) << " cols=" << cols << " " << MatmulPathName(path);
    if (path != MatmulPath::kScalar && IsPackable(type)) {
      ExpectInt8ActivationsExact(c.x, MatmulCase::kMaxM, c.w.view, all);
    }
    // Each row computed alone, or in any smaller batch, gives bit-identical results.
    for (int64_t m = 1; m <= MatmulCase::kMaxM; ++m) {
      const std::vector<float> part = c.Run(ctx, m);
      ASSERT_EQ(0,
                std::memcmp(part.data(), all.data() + (MatmulCase::kMaxM - m) * MatmulCase::kRows,
                            part.size() * sizeof(float)))
          << DTypeName(type) << " m=" << m << " cols=" << cols << " " << MatmulPathName(path);
    }
  }
}

std::vector<std::tuple<DType, int, MatmulPath>> ApplicableMatmulCases() {
  std::vector<std::tuple<DType, int, MatmulPath>> cases;
  for (DType type : kAllDTypes) {
    for (int threads : {1, 2}) {
      for (MatmulPath p : {MatmulPath::kAvx512Source, MatmulPath::kAvx512Packed,
                           MatmulPath::kAvx2Packed, MatmulPath::kScalar}) {
        if (PathApplies(type, p)) cases.emplace_back(type, threads, p);
      }
    }
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypes, MatmulTest, ::testing::ValuesIn(ApplicableMatmulCases()),
                         [](const auto& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) + "_" +
                                  std::to_string(std::get<1>(info.param)) + "threads_" +
                                  MatmulPathName(std::get<2>(info.param));
                         });

// The two packed kernels give the same bits.
class PackedKernelsTest : public ::testing::TestWithParam<DType> {};

TEST_P(PackedKernelsTest, Avx2AndAvx512AgreeBitForBit) {
  const DType type = GetParam();
  ThreadPool pool(2);
  KernelContext avx512, avx2;
  for (const auto& [path, ctx] :
       {std::pair{MatmulPath::kAvx512Packed, &avx512}, std::pair{MatmulPath::kAvx2Packed, &avx2}}) {
    if (const std::string why = ContextFor(path, &pool, ctx); !why.empty()) GTEST_SKIP() << why;
  }
  for (int64_t cols : MatmulWidths(type)) {  // each packed in the form its kernel reads
    MatmulCase on_avx512(type, cols, MatmulPath::kAvx512Packed, &pool);
    MatmulCase on_avx2(type, cols, MatmulPath::kAvx2Packed, &pool);
    EXPECT_EQ(on_avx512.Run(avx512, MatmulCase::kMaxM), on_avx2.Run(avx2, MatmulCase::kMaxM))
        << DTypeName(type) << " cols=" << cols;
  }
}

std::vector<DType> PackableTypes() {
  std::vector<DType> types;
  for (DType t : kAllDTypes) {
    if (IsPackable(t)) types.push_back(t);
  }
  return types;
}

INSTANTIATE_TEST_SUITE_P(Packable, PackedKernelsTest, ::testing::ValuesIn(PackableTypes()),
                         [](const auto& info) { return std::string(DTypeName(info.param)); });

// The AMX tile kernel of the packed GGUF types: on the tile unit where the CPU has AMX-INT8, and
// on the software model of it everywhere with AVX-512, so the kernel's layouts, configurations
// and float steps are tested on every CPU (amx_tiles.h).
enum class AmxTiles { kEmulated, kHardware };

class AmxPackedTest : public ::testing::TestWithParam<std::tuple<DType, AmxTiles>> {
 protected:
  // Skips (visibly) where the CPU cannot run the kernel; the VNNI path's context otherwise.
  void SetUp() override {
    const CpuFeatures cpu = CpuFeatures::Detect();
    if (!cpu.avx512) GTEST_SKIP() << "this CPU has no AVX-512";
    if (tiles() == AmxTiles::kHardware && !cpu.amx_int8) {
      GTEST_SKIP() << "this CPU has no AMX-INT8 (the emulated instance ran the same kernel)";
    }
  }
  AmxTiles tiles() const { return std::get<1>(GetParam()); }
  std::vector<float> RunAmx(ThreadPool* pool, MatmulCase& c, const float* x, int64_t m) {
    std::vector<float> out(m * MatmulCase::kRows);
    if (tiles() == AmxTiles::kEmulated) {
      amx::MatmulPackedEmulated(pool, x, m, c.packed_weights, out.data(), &c.scratch);
    } else {  // through the dispatcher, as the model calls it
      KernelContext ctx{pool, CpuFeatures::Detect(), Int8Backend::kAmx};
      EXPECT_TRUE(PackedRunsOnAmx(ctx, m));
      Matmul(ctx, x, m, c.w.view, out.data(), &c.scratch);
    }
    return out;
  }
};

// Bit for bit the VNNI kernel's results, for row counts within one M-block of 16 and across
// passes of several (a partial last M-block, one or two passes: 64 rows are one pass of the
// one-product layouts and two of q6_K's; from 16 rows q4_K and q5_K take the folded kernel),
// two threads, a partial last row group; and the reference's to float rounding.
TEST_P(AmxPackedTest, EqualsTheVnniKernelBitForBit) {
  const DType type = std::get<0>(GetParam());
  ThreadPool pool(2);
  constexpr int64_t kM = 70;
  for (int64_t cols : MatmulWidths(type)) {
    MatmulCase c(type, cols, MatmulPath::kAvx512Packed, &pool);  // planes, as AMX reads
    const std::vector<float> x = RandomVector(kM * cols, 7 + cols);
    std::vector<float> vnni(kM * MatmulCase::kRows);
    avx512::MatmulPacked(&pool, x.data(), kM, c.packed_weights, vnni.data(), &c.scratch);
    const std::vector<float> all = RunAmx(&pool, c, x.data(), kM);
    ASSERT_EQ(vnni, all) << DTypeName(type) << " cols=" << cols;
    ExpectInt8ActivationsExact(x, kM, c.w.view, all);
    for (int64_t m : {1, 2, 7, 8, 15, 16, 17, 32, 33, 40, 64}) {
      const std::vector<float> part = RunAmx(&pool, c, x.data() + (kM - m) * cols, m);
      ASSERT_EQ(0, std::memcmp(part.data(), vnni.data() + (kM - m) * MatmulCase::kRows,
                               part.size() * sizeof(float)))
          << DTypeName(type) << " m=" << m << " cols=" << cols;
    }
  }
}

std::vector<std::tuple<DType, AmxTiles>> AmxPackedCases() {
  std::vector<std::tuple<DType, AmxTiles>> cases;
  for (DType t : PackableTypes()) {
    if (t == DType::kI8) continue;  // i8 has its own AMX kernel (int8_test.cc)
    for (AmxTiles tiles : {AmxTiles::kEmulated, AmxTiles::kHardware}) cases.emplace_back(t, tiles);
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(Packable, AmxPackedTest, ::testing::ValuesIn(AmxPackedCases()),
                         [](const auto& info) {
                           return std::string(DTypeName(std::get<0>(info.param))) +
                                  (std::get<1>(info.param) == AmxTiles::kEmulated ? "_emulated"
                                                                                  : "_hardware");
                         });

// The measured choice between the AMX and VNNI kernels: VNNI and AMX calls in turn, the first
// (cold) pair left out, the lower median ratio of paired times wins, per key.
TEST(PackedKernelChooser, AlternatesThenKeepsTheFasterByTheMedianOfPairedRatios) {
  EXPECT_EQ(0, PackedKernelChooser::RowBucket(16));
  EXPECT_EQ(0, PackedKernelChooser::RowBucket(31));
  EXPECT_EQ(1, PackedKernelChooser::RowBucket(32));
  EXPECT_EQ(3, PackedKernelChooser::RowBucket(255));
  EXPECT_EQ(4, PackedKernelChooser::RowBucket(256));
  EXPECT_EQ(4, PackedKernelChooser::RowBucket(4096));

  PackedKernelChooser chooser;
  const PackedKernelChooser::Key slow_amx{static_cast<int>(DType::kQ6_K), 1536, 8960, 0};
  const PackedKernelChooser::Key fast_amx{static_cast<int>(DType::kQ4_K), 1536, 8960, 0};
  // Pair i: VNNI 10 ms; AMX 13 ms (q6_K) or 8 ms (q4_K), except a cold first pair that says the
  // opposite and one slow spell per key that a mean would follow.
  for (int pair = 0; pair <= PackedKernelChooser::kTrialPairs; ++pair) {
    for (const auto& key : {slow_amx, fast_amx}) {
      const bool q6 = key.type == slow_amx.type;
      ASSERT_FALSE(chooser.UseAmx(key)) << "pair " << pair;
      chooser.Record(key, false, 10.0);
      ASSERT_TRUE(chooser.UseAmx(key)) << "pair " << pair;
      const double amx_ms = pair == 0   ? (q6 ? 5.0 : 30.0)
                            : pair == 3 ? (q6 ? 1.0 : 90.0)
                            : q6        ? 13.0
                                        : 8.0;
      chooser.Record(key, true, amx_ms);
    }
    EXPECT_EQ(pair == PackedKernelChooser::kTrialPairs ? 2u : 0u, chooser.Decisions().size());
  }
  EXPECT_EQ((std::map<PackedKernelChooser::Key, bool>{{slow_amx, false}, {fast_amx, true}}),
            chooser.Decisions());
  for (int call = 0; call < 3; ++call) {  // decided: no more alternation, records ignored
    EXPECT_FALSE(chooser.UseAmx(slow_amx));
    EXPECT_TRUE(chooser.UseAmx(fast_amx));
    chooser.Record(slow_amx, false, 1000.0);
  }
  EXPECT_FALSE(chooser.UseAmx(slow_amx));
  // Another bucket of the same weights is measured on its own.
  PackedKernelChooser::Key next_bucket = fast_amx;
  next_bucket.bucket = 1;
  EXPECT_FALSE(chooser.UseAmx(next_bucket));
}

// Through Matmul, the chooser's alternating calls and its decided ones give the VNNI kernel's
// bits at every call.
TEST(PackedKernelChooser, EveryCallThroughMatmulGivesTheVnniKernelsBits) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (!cpu.amx_int8 || !cpu.avx512) GTEST_SKIP() << "this CPU has no AMX-INT8: nothing to choose";
  ThreadPool pool(2);
  for (DType type : {DType::kQ4_K, DType::kQ6_K, DType::kQ8_0}) {
    const int64_t cols = 512;
    MatmulCase c(type, cols, MatmulPath::kAvx512Packed, &pool);
    constexpr int64_t kM = 17;  // MatmulCase's rows: over the tile kernels' 16
    std::vector<float> vnni(kM * MatmulCase::kRows);
    avx512::MatmulPacked(&pool, c.x.data(), kM, c.packed_weights, vnni.data(), &c.scratch);
    KernelContext ctx{&pool, cpu};
    ctx.packed_chooser = std::make_shared<PackedKernelChooser>();
    for (int call = 0; call < 2 * PackedKernelChooser::kTrialPairs + 6; ++call) {
      ASSERT_EQ(vnni, c.Run(ctx, kM)) << DTypeName(type) << " call " << call;
    }
    EXPECT_EQ(1u, ctx.packed_chooser->Decisions().size()) << DTypeName(type);
  }
}

// The software tile unit itself: TDPBSUD's signed A times unsigned B, the configured shapes,
// and the faults the hardware raises.
TEST(AmxEmulator, MultipliesSignedByUnsignedBytesAndRefusesWhatTheHardwareFaultsOn) {
  amx::EmulatedTiles tiles;
  amx::TileConfig config;
  for (int t = 0; t < 4; ++t) config.rows[t] = 2, config.bytes_per_row[t] = 64;
  config.rows[4] = 2, config.bytes_per_row[4] = 8;   // A [2 rows, K = 8]
  config.rows[6] = 2, config.bytes_per_row[6] = 64;  // B [K / 4 = 2 lines, 16 columns]
  EXPECT_THROW(tiles.Zero(0), Error);                // before LDTILECFG
  tiles.Configure(config);
  int8_t a[2][8];
  uint8_t b[2][64];
  for (int i = 0; i < 8; ++i) a[0][i] = static_cast<int8_t>(i - 4), a[1][i] = -128;
  for (int k = 0; k < 2; ++k) {
    for (int i = 0; i < 64; ++i) b[k][i] = static_cast<uint8_t>(255 - 3 * i - k);
  }
  tiles.Zero(1);
  tiles.LoadA(0, a, 8);
  tiles.LoadB(0, b, 64);
  tiles.Multiply(1, 0, 0);
  tiles.Multiply(1, 0, 0);  // accumulates
  int32_t sums[2][16];
  tiles.Store(1, sums[0]);
  for (int m = 0; m < 2; ++m) {
    for (int n = 0; n < 16; ++n) {
      int32_t want = 0;
      for (int k = 0; k < 2; ++k) {
        for (int i = 0; i < 4; ++i) want += a[m][4 * k + i] * b[k][4 * n + i];
      }
      EXPECT_EQ(sums[m][n], 2 * want) << "m=" << m << " n=" << n;
    }
  }
  EXPECT_THROW(tiles.Multiply(0, 1, 0), Error);  // A 5 is not configured
  EXPECT_THROW(tiles.Multiply(0, 0, 1), Error);  // nor B 7
  config.rows[6] = 3;                            // B's 3 lines do not meet A's K = 8
  tiles.Configure(config);
  EXPECT_THROW(tiles.Multiply(0, 0, 0), Error);
  config.rows[16 - 1] = 1, config.bytes_per_row[16 - 1] = 4;  // palette 1 has 8 tiles
  EXPECT_THROW(tiles.Configure(config), Error);
}

// Every packable type with each form of high bits.
std::vector<std::pair<DType, HighBits>> PackableTypesAndForms() {
  std::vector<std::pair<DType, HighBits>> out;
  for (DType type : PackableTypes()) {
    for (HighBits form : {HighBits::kPlanes, HighBits::kFields}) out.emplace_back(type, form);
  }
  return out;
}

// The high bits of element 4g+t of row j (at = 4j + t) of a block's values, in p's form.
int PackedHighBits(const PackedInt8Weights& p, const uint8_t* values, int g, int at) {
  const int k = p.high_planes;
  if (k == 0) return 0;  // no high bits: nothing is stored past the nibbles
  if (p.high_bits == HighBits::kFields) {
    const int h = at / 32, i = at % 32;
    const uint8_t byte = values[256 + (h * k + g * k / 8) * 32 + i];
    return (byte >> (g * k % 8)) & ((1 << k) - 1);
  }
  int bits = 0;
  for (int plane = 0; plane < k; ++plane) {
    bits |= ((values[256 + plane * 64 + g * 8 + at / 8] >> (at % 8)) & 1) << plane;
  }
  return bits;
}

// Packing reads every type's levels and scales exactly, in either form of high bits: the packed
// values, scale * (u - offset) + min, equal ggml's dequantization to float rounding (the two
// round the same real number in different orders).
TEST(Kernels, PackedLevelsReproduceDequantizedWeights) {
  ThreadPool pool(1);
  for (const auto& [type, high_bits] : PackableTypesAndForms()) {
    const int64_t rows = 19, cols = 512;
    Weights w = MakeWeights(type, rows, cols, 5);
    const PackedInt8Weights p = PackInt8(w.view, &pool, high_bits);
    std::vector<float> want(cols);
    const int64_t nb = cols / 32;
    for (int64_t n = 0; n < rows; ++n) {
      DequantizeRow(type, w.view.Row(n), want.data(), cols);
      for (int64_t b = 0; b < nb; ++b) {
        const uint8_t* group = p.data.data() + n / 16 * p.GroupBytes();
        const uint8_t* blk = group + b * p.BlockBytes();
        auto header = [&](int index) {  // float number `index` of the header
          if (p.k_scales) {  // d * sc, then -(dmin * m), from the signed bytes and the trailer
            const auto* trailer = reinterpret_cast<const uint16_t*>(
                group + p.TrailerOffset() + b / 8 * p.TrailerBytesPerSuper());
            const int j = index % 16;
            return index < 16 * p.sub_blocks
                       ? Fp16ToFp32(trailer[j]) * static_cast<int8_t>(blk[index])
                       : -(Fp16ToFp32(trailer[16 + j]) * static_cast<int8_t>(blk[index]));
          }
          if (p.f32_scales) return reinterpret_cast<const float*>(blk)[index];
          return Fp16ToFp32(reinterpret_cast<const uint16_t*>(blk)[index]);
        };
        const uint8_t* values = blk + p.HeaderBytes();
        for (int e = 0; e < 32; ++e) {
          const int g = e / 4, t = e % 4, j = static_cast<int>(n % 16);
          int u;
          const int at = j * 4 + t;
          if (!p.nibbles) {
            u = values[g * 64 + at];
          } else {
            const uint8_t byte = values[(g % 4) * 64 + at];
            u = (g < 4 ? (byte & 15) : (byte >> 4)) | PackedHighBits(p, values, g, at) << 4;
            if (p.level_lut) u = kIq4LevelBytes[u];
          }
          const int s = p.sub_blocks == 2 ? e / 16 : 0;
          const int n_floats = 16 * p.sub_blocks;
          const float scale = header(s * 16 + j);
          const float min = p.has_mins ? header(n_floats + s * 16 + j) : 0.0f;
          const float got = scale * static_cast<float>(u - p.offset) + min;
          const float expected = want[b * 32 + e];
          ASSERT_NEAR(got, expected, 1e-6f * std::max(1.0f, std::fabs(expected)))
              << DTypeName(type) << " row " << n << " element " << b * 32 + e
              << (high_bits == HighBits::kFields ? " (fields)" : " (planes)");
        }
      }
    }
  }
}

// Weights packed in the other form of high bits are refused by a kernel with a message, not read
// as wrong levels.
TEST(Kernels, PackedKernelsRefuseTheOtherFormOfHighBits) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (!cpu.packed_kernels()) GTEST_SKIP() << "no packed kernels (AVX-512 or AVX2) on this CPU";
  ThreadPool pool(1);
  Weights w = MakeWeights(DType::kQ6_K, 16, 256, 9);
  const HighBits other =
      HighBitsFor(cpu) == HighBits::kPlanes ? HighBits::kFields : HighBits::kPlanes;
  const PackedInt8Weights packed = PackInt8(w.view, &pool, other);
  w.view.packed = &packed;
  const std::vector<float> x = RandomVector(256, 1);
  std::vector<float> y(16);
  MatmulScratch scratch;
  EXPECT_THROW(Matmul(KernelContext{&pool, cpu}, x.data(), 1, w.view, y.data(), &scratch), Error);
}

TEST(Kernels, StackedPackedMatmulEqualsSeparateMatmulsBitForBit) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (!cpu.packed_kernels()) GTEST_SKIP() << "no packed kernels (AVX-512 or AVX2) on this CPU";
  ThreadPool pool(2);
  const KernelContext ctx{&pool, cpu};
  for (DType type : {DType::kQ8_0, DType::kQ4_0, DType::kQ6_K}) {
    const int64_t cols = type == DType::kQ6_K ? 256 : 96;
    Weights a = MakeWeights(type, 32, cols, 1), b = MakeWeights(type, 16, cols, 2),
            c = MakeWeights(type, 21, cols, 3);  // the last part may have a partial group
    PackedInt8Weights stacked;
    ASSERT_TRUE(StackPackedInt8({&a.view, &b.view, &c.view}, &pool, HighBitsFor(cpu), &stacked));
    const WeightView stacked_view{type, nullptr, stacked.rows, cols, &stacked};
    const int64_t m = 5, width = 32 + 16 + 21;
    const auto x = RandomVector(m * cols, 7);
    MatmulScratch scratch;
    std::vector<float> together(m * width);
    Matmul(ctx, x.data(), m, stacked_view, together.data(), &scratch);
    int64_t offset = 0;
    for (Weights* w : {&a, &b, &c}) {
      const PackedInt8Weights own = PackInt8(w->view, &pool, HighBitsFor(cpu));
      w->view.packed = &own;
      std::vector<float> alone(m * w->view.rows);
      Matmul(ctx, x.data(), m, w->view, alone.data(), &scratch);
      for (int64_t r = 0; r < m; ++r) {
        ASSERT_EQ(0,
                  std::memcmp(alone.data() + r * w->view.rows, together.data() + r * width + offset,
                              w->view.rows * sizeof(float)))
            << DTypeName(type) << " row " << r << " part at " << offset;
      }
      offset += w->view.rows;
      w->view.packed = nullptr;
    }
  }
  // Parts that cannot be stacked are refused: a partial group in the middle, mixed types.
  Weights odd = MakeWeights(DType::kQ8_0, 20, 64, 4), even = MakeWeights(DType::kQ8_0, 16, 64, 5),
          q4 = MakeWeights(DType::kQ4_0, 16, 64, 6);
  PackedInt8Weights out;
  EXPECT_FALSE(StackPackedInt8({&odd.view, &even.view}, &pool, HighBits::kPlanes, &out));
  EXPECT_FALSE(StackPackedInt8({&even.view, &q4.view}, &pool, HighBits::kPlanes, &out));
}

// A LoRA's second product: the fast loop against the double-precision reference, for f32 and f16
// B, a width that is not a whole number of blocks, a strided output; and each row's result does
// not depend on how many rows share the call.
TEST(Kernels, LowRankProductMatchesReferenceAndIsBatchInvariant) {
  ThreadPool pool(1);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  const int64_t m = 5, rank = 6, n = 300, stride = 310;
  const int64_t blocks = (n + kLowRankBlock - 1) / kLowRankBlock;
  const auto t = RandomVector(m * rank, 1, 1.0f);             // [m, rank]
  auto b32 = RandomVector(blocks * rank * kLowRankBlock, 2);  // blocked B^T
  for (int64_t o = n; o < blocks * kLowRankBlock; ++o) {      // the last block's padding
    for (int64_t k = 0; k < rank; ++k)
      b32[(blocks - 1) * rank * kLowRankBlock + k * kLowRankBlock + o % kLowRankBlock] = 0.0f;
  }
  std::vector<uint16_t> b16(b32.size());
  for (size_t i = 0; i < b32.size(); ++i) b16[i] = Fp32ToFp16(b32[i]);
  for (const DType type : {DType::kF32, DType::kF16}) {
    const void* b = type == DType::kF32 ? static_cast<const void*>(b32.data()) : b16.data();
    const auto y0 = RandomVector(m * stride, 3);  // [m, stride], added to
    std::vector<float> fast = y0, ref = y0;
    AddLowRankProduct(ctx, t.data(), m, rank, type, b, n, fast.data(), stride);
    reference::AddLowRankProduct(t.data(), m, rank, type, b, n, ref.data(), stride);
    EXPECT_LT(RelativeError(fast, ref), 1e-6) << DTypeName(type);
    for (int64_t i = 0; i < m; ++i) {  // outside [0, n) of each row: untouched
      for (int64_t o = n; o < stride; ++o) EXPECT_EQ(fast[i * stride + o], y0[i * stride + o]);
    }
    for (int64_t i = 0; i < m; ++i) {
      std::vector<float> alone(y0.begin() + i * stride, y0.begin() + (i + 1) * stride);
      AddLowRankProduct(ctx, t.data() + i * rank, 1, rank, type, b, n, alone.data(), stride);
      EXPECT_TRUE(std::equal(alone.begin(), alone.end(), fast.begin() + i * stride)) << i;
    }
  }
}

TEST(Kernels, RmsNormMatchesReference) {
  const int64_t n = 200, rows = 3;
  const auto x = RandomVector(rows * n, 1, 3.0f);
  const auto w = RandomVector(n, 2);
  std::vector<float> fast(rows * n), ref(rows * n);
  RmsNorm(x.data(), w.data(), fast.data(), rows, n, 1e-5f);
  reference::RmsNorm(x.data(), w.data(), ref.data(), rows, n, 1e-5f);
  EXPECT_LT(RelativeError(fast, ref), 1e-6);
}

TEST(Kernels, RopeMatchesReference) {
  for (bool neox : {false, true}) {
    RopeConfig c;
    c.head_dim = 64;
    c.rotary_dim = 64;
    c.freq_base = 500000.0f;
    c.neox = neox;
    if (neox) c.freq_factors.assign(32, 2.0f);
    const auto x = RandomVector(4 * 64, 5);
    for (int64_t pos : {0, 1, 17, 1000, 100000}) {
      std::vector<float> fast = x, ref = x;
      std::vector<float> cs(32), sn(32);
      RopeAngles(c, pos, cs.data(), sn.data());
      Rope(c, cs.data(), sn.data(), fast.data(), 4);
      reference::Rope(c, ref.data(), 4, pos);
      EXPECT_LT(RelativeError(fast, ref), 1e-6) << "pos " << pos << " neox " << neox;
    }
  }
}

// A gated activation's scalar, AVX2 and AVX-512 paths against its reference (103 values: the
// vector paths' masked tails are exercised too); the AVX2 and AVX-512 paths agree bit for bit.
void CheckGluMatchesReference(void (*fast_fn)(const KernelContext&, const float*, const float*,
                                              float*, int64_t),
                              void (*reference_fn)(const float*, const float*, float*, int64_t),
                              const std::vector<float>& g, const std::vector<float>& u,
                              testing::UntestedPaths* untested) {
  const int64_t n = static_cast<int64_t>(g.size());
  std::vector<float> ref(n);
  reference_fn(g.data(), u.data(), ref.data(), n);
  ThreadPool pool(1);
  const CpuFeatures cpu = CpuFeatures::Detect();
  std::map<std::string, std::vector<float>> by_isa;
  for (const std::string isa : {"scalar", "avx2", "avx512"}) {
    KernelContext ctx{&pool, cpu};
    if (!untested->Check(!(isa == "avx2" && !cpu.avx2) && !(isa == "avx512" && !cpu.avx512), isa)) {
      continue;
    }
    ctx.cpu.avx512 = isa == "avx512";
    ctx.cpu.avx2 = isa == "avx2";
    std::vector<float> fast(n, 7.0f);
    fast_fn(ctx, g.data(), u.data(), fast.data(), n);
    EXPECT_LT(RelativeError(fast, ref), 1e-6) << isa;
    by_isa[isa] = fast;
  }
  if (by_isa.count("avx2") && by_isa.count("avx512")) {
    EXPECT_EQ(by_isa["avx2"], by_isa["avx512"]);
  }
}

TEST(Kernels, SoftmaxAndSwiGluMatchReference) {
  auto x = RandomVector(1000, 9, 20.0f);
  auto y = x;
  Softmax(x.data(), 1000);
  reference::Softmax(y.data(), 1000);
  EXPECT_LT(RelativeError(x, y), 1e-5);
  const auto g = RandomVector(103, 1, 8.0f), u = RandomVector(103, 2);
  testing::UntestedPaths untested;
  CheckGluMatchesReference(SwiGlu, reference::SwiGlu, g, u, &untested);
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST(Kernels, GeGluMatchesReference) {
  const auto g = RandomVector(103, 3, 8.0f), u = RandomVector(103, 4);
  // Known values of tanh-GELU: gelu(1) = 0.841192, gelu(-2) = -0.0454023.
  const float x[2] = {1.0f, -2.0f}, one[2] = {1.0f, 1.0f};
  float y[2];
  reference::GeGlu(x, one, y, 2);
  EXPECT_NEAR(y[0], 0.841192f, 1e-6f);
  EXPECT_NEAR(y[1], -0.0454023f, 1e-6f);
  testing::UntestedPaths untested;
  CheckGluMatchesReference(GeGlu, reference::GeGlu, g, u, &untested);
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST(Kernels, VectorExpMatchesStdExpAndUnderflowsToZero) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (!cpu.avx2) GTEST_SKIP() << "no AVX2 on this CPU";
  std::vector<float> x;
  for (float v = -110.0f; v <= 88.0f; v += 0.37f) x.push_back(v);
  x.push_back(-std::numeric_limits<float>::infinity());
  x.push_back(0.0f);  // last, at a tail lane of both kernels (the count is no multiple of 8)
  ASSERT_NE(x.size() % 8, 0u);
  using ExpFn = void (*)(const float*, float*, int64_t);
  std::vector<std::pair<const char*, ExpFn>> kernels = {{"avx2", avx2::Exp}};
  if (cpu.avx512) kernels.push_back({"avx512", avx512::Exp});
  std::vector<std::vector<float>> outputs;
  for (const auto& [isa, exp_fn] : kernels) {
    std::vector<float> y(x.size() + 1, 7.0f);
    exp_fn(x.data(), y.data(), static_cast<int64_t>(x.size()));
    EXPECT_EQ(y.back(), 7.0f) << isa << " wrote past the end";
    y.pop_back();
    for (size_t i = 0; i < x.size(); ++i) {
      const double want = std::exp(static_cast<double>(x[i]));
      if (x[i] < -104.0f) {
        EXPECT_EQ(y[i], 0.0f) << isa << " x " << x[i];  // masked attention keys rely on an exact 0
      } else if (x[i] > -87.0f) {                       // normal range: relative error
        EXPECT_LT(std::abs(y[i] - want) / want, 1e-6) << isa << " x " << x[i];
      } else {  // subnormal results: within a unit of the smallest subnormal
        EXPECT_LE(std::abs(y[i] - want), 1.5e-45) << isa << " x " << x[i];
      }
    }
    EXPECT_EQ(y.back(), 1.0f) << isa;
    outputs.push_back(y);
  }
  if (outputs.size() == 2) {
    EXPECT_EQ(outputs[0], outputs[1]) << "avx2 and avx512 differ";
  }
}

// PAD and SPLIT against the scalar reference over a cache of kv_type (f32 or f16), with every key
// visible or (window > 0) only the last `window` keys of each row, as in Gemma's local layers.
// With tree_seed != 0, each row also gets a token-tree mask: every key but some random ones among
// the last few is visible (a node sees the committed keys, its ancestors and itself).
struct AttentionShape {
  int n_head = 4, n_head_kv = 2, head_dim = 32, n_ctx = 40;
  std::vector<int> lengths = {5, 33, 12};  // per sequence
  std::vector<int> rows_per_seq = {1, 4, 2};
};

void CheckAttentionMatchesReference(testing::UntestedPaths* untested, DType kv_type, int window = 0,
                                    uint64_t tree_seed = 0, const AttentionShape& shape = {}) {
  const int n_head = shape.n_head, n_head_kv = shape.n_head_kv, head_dim = shape.head_dim;
  const int n_ctx = shape.n_ctx;
  const int kv_dim = n_head_kv * head_dim;
  // Sequences with different lengths; rows are the last few positions of each.
  const std::vector<int>& lengths = shape.lengths;
  const std::vector<int>& rows_per_seq = shape.rows_per_seq;
  std::vector<std::vector<uint8_t>> k_cache, v_cache;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const auto k = RandomVector(n_ctx * kv_dim, 100 + s);
    const auto v = RandomVector(n_ctx * kv_dim, 200 + s);
    k_cache.emplace_back(RowBytes(kv_type, n_ctx * kv_dim));
    v_cache.emplace_back(RowBytes(kv_type, n_ctx * kv_dim));
    reference::StoreKvRow(k.data(), k.size(), kv_type, k_cache.back().data());
    reference::StoreKvRow(v.data(), v.size(), kv_type, v_cache.back().data());
  }
  AttentionRows rows;
  rows.n_head = n_head;
  rows.n_head_kv = n_head_kv;
  rows.head_dim = head_dim;
  rows.scale = 1.0f / std::sqrt(float(head_dim));
  rows.kv_type = kv_type;
  for (size_t s = 0; s < lengths.size(); ++s) {
    rows.seq_row_begin.push_back(rows.n_rows);
    for (int i = 0; i < rows_per_seq[s]; ++i) {
      rows.k.push_back(k_cache[s].data());
      rows.v.push_back(v_cache[s].data());
      rows.n_visible.push_back(lengths[s] - rows_per_seq[s] + i + 1);
      if (window > 0) rows.first_visible.push_back(std::max(0, rows.n_visible.back() - window));
      ++rows.n_rows;
    }
  }
  rows.seq_row_begin.push_back(rows.n_rows);
  if (tree_seed != 0) {
    SplitMix64 rng(tree_seed);
    for (int64_t r = 0; r < rows.n_rows; ++r) {
      rows.key_mask_offset.push_back(static_cast<int64_t>(rows.key_mask.size()));
      const int n = rows.n_visible[r];
      for (int t = 0; t < n; ++t) {
        rows.key_mask.push_back(t + 6 < n && t + 1 != n ? 1 : static_cast<uint8_t>(rng.Next() & 1));
      }
      rows.key_mask.back() = 1;  // itself
    }
  }
  const auto q = RandomVector(rows.n_rows * n_head * head_dim, 7, 2.0f);
  rows.q = q.data();
  std::vector<float> ref(q.size()), pad(q.size()), split(q.size());
  rows.out = ref.data();
  reference::Attention(rows);
  // BASS-PAD, BASS-SPLIT (one computation per sequence: blocks over its rows and heads) and the
  // per-(row, head) routine, on 1 and 2 threads (which changes how heads are grouped into work
  // items): all the same bits; with the AVX-512, AVX2 and portable kernels, where the CPU has them.
  std::vector<float> row_wise(q.size());
  for (int threads : {1, 2}) {
    for (const char* isa : {"avx512", "avx2", "scalar"}) {
      ThreadPool pool(threads);
      KernelContext ctx{&pool, CpuFeatures::Detect()};
      if (!untested->Check(!(isa == std::string("avx512") && !ctx.cpu.avx512) &&
                               !(isa == std::string("avx2") && !ctx.cpu.avx2),
                           isa)) {
        continue;
      }
      ctx.cpu.Cap(isa);
      rows.out = pad.data();
      Attention(ctx, rows, AttentionMode::kPad);
      rows.out = split.data();
      Attention(ctx, rows, AttentionMode::kSplit);
      rows.out = row_wise.data();
      Attention(ctx, rows, AttentionMode::kRow);
      EXPECT_LT(RelativeError(split, ref), 1e-5) << isa;
      EXPECT_EQ(0, std::memcmp(pad.data(), split.data(), pad.size() * sizeof(float)))
          << "PAD's masked padding must add exactly nothing " << isa;
      EXPECT_EQ(0, std::memcmp(row_wise.data(), split.data(), pad.size() * sizeof(float)))
          << "the per-sequence blocks must give the per-row routine's bits, threads " << threads
          << " head_dim " << head_dim << " " << isa;
    }
  }
}

// The block kernel's tiles: head_dim 64 and 128 (one and two 64-wide output chunks), 3 and 5
// heads per KV head (query tiles of 6 split unevenly), a long and a single sequence.
TEST(Kernels, BassAttentionBlocksEqualTheRowRoutineForEveryShape) {
  testing::UntestedPaths untested;
  AttentionShape wide;
  wide.n_head = 9;
  wide.n_head_kv = 3;
  wide.head_dim = 64;
  wide.n_ctx = 300;
  wide.lengths = {280, 17, 96, 1};
  wide.rows_per_seq = {8, 3, 5, 1};
  AttentionShape deep;
  deep.n_head = 10;
  deep.n_head_kv = 2;
  deep.head_dim = 128;
  deep.n_ctx = 70;
  deep.lengths = {64};
  deep.rows_per_seq = {7};
  AttentionShape prompt_chunk;  // a causal chunk of a prompt: early rows skip whole key blocks
  prompt_chunk.n_head = 14;
  prompt_chunk.n_head_kv = 2;
  prompt_chunk.head_dim = 64;
  prompt_chunk.n_ctx = 80;
  prompt_chunk.lengths = {75, 30};
  prompt_chunk.rows_per_seq = {60, 30};
  for (const AttentionShape& shape : {wide, deep, prompt_chunk}) {
    CheckAttentionMatchesReference(&untested, DType::kF32, 0, 0, shape);
    CheckAttentionMatchesReference(&untested, DType::kF16, 0, 0, shape);
  }
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST(Kernels, AttentionPadAndSplitMatchReferenceAndEachOther) {
  testing::UntestedPaths untested;
  CheckAttentionMatchesReference(&untested, DType::kF32);
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST(Kernels, AttentionOverAnF16CacheMatchesReference) {
  testing::UntestedPaths untested;
  CheckAttentionMatchesReference(&untested, DType::kF16);
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST(Kernels, TreeMaskedAttentionMatchesReference) {
  testing::UntestedPaths untested;
  for (uint64_t seed : {1, 2, 3}) {
    CheckAttentionMatchesReference(&untested, DType::kF32, 0, seed);
    CheckAttentionMatchesReference(&untested, DType::kF16, 0, seed);
    CheckAttentionMatchesReference(&untested, DType::kF32, 8, seed);  // with a window as well
  }
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST(Kernels, SlidingWindowAttentionMatchesReference) {
  testing::UntestedPaths untested;
  for (int window : {1, 3, 8, 30}) {
    CheckAttentionMatchesReference(&untested, DType::kF32, window);
    CheckAttentionMatchesReference(&untested, DType::kF16, window);
  }
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST(Kernels, StoreKvRowF16MatchesReferenceRounding) {
  testing::UntestedPaths untested;
  // Ties, subnormals, overflow to infinity, signed zero: the fast conversion rounds like the
  // scalar one (to nearest even), bit for bit.
  auto x = RandomVector(1000, 11, 4.0f);
  const float specials[] = {0.0f,
                            -0.0f,
                            65504.0f,
                            65520.0f,
                            1e6f,
                            -1e6f,
                            6.0e-8f,
                            3.0e-8f,
                            1.0e-5f,
                            1.0009765625f,
                            2049.0f,
                            -0.33333334f,
                            std::numeric_limits<float>::infinity()};
  x.insert(x.begin(), std::begin(specials), std::end(specials));
  x.push_back(1.5f);  // a tail shorter than a vector
  std::vector<uint16_t> fast(x.size()), ref(x.size());
  ThreadPool pool(1);
  reference::StoreKvRow(x.data(), x.size(), DType::kF16, ref.data());
  // AVX-512, F16C (AVX2 CPUs) and the portable conversion, where the CPU has them.
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    KernelContext ctx{&pool, CpuFeatures::Detect()};
    if (!untested.Check(!(isa == std::string("avx512") && !ctx.cpu.avx512) &&
                            !(isa == std::string("avx2") && !ctx.cpu.f16c),
                        isa)) {
      continue;
    }
    ctx.cpu.Cap(isa);
    if (isa == std::string("scalar")) ctx.cpu.f16c = false;
    std::fill(fast.begin(), fast.end(), uint16_t{0});
    StoreKvRow(ctx, x.data(), x.size(), DType::kF16, fast.data());
    EXPECT_EQ(fast, ref) << isa;
  }
  std::vector<float> f32(x.size());
  StoreKvRow(KernelContext{&pool, CpuFeatures::Detect()}, x.data(), x.size(), DType::kF32,
             f32.data());
  EXPECT_EQ(f32, x);
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST(Kernels, AttentionMasksPaddingWithMinusInfinityNotZero) {
  // One query sees 1 key; PAD computes 8 keys of which 7 are padding with large values. If the
  // padding were zeroed instead of masked, it would add e^0 terms to the softmax and change the
  // output away from v[0].
  const int head_dim = 16;
  std::vector<float> k(8 * head_dim, 50.0f), v(8 * head_dim, 1000.0f);
  for (int d = 0; d < head_dim; ++d) v[d] = 1.0f;
  std::vector<float> k2(8 * head_dim, 0.0f), v2(8 * head_dim, 0.0f);
  AttentionRows rows;
  rows.n_rows = 2;
  rows.n_head = rows.n_head_kv = 1;
  rows.head_dim = head_dim;
  rows.scale = 1.0f;
  const auto q = RandomVector(2 * head_dim, 3);
  rows.q = q.data();
  rows.k = {k.data(), k2.data()};
  rows.v = {v.data(), v2.data()};
  rows.n_visible = {1, 8};
  rows.seq_row_begin = {0, 1, 2};
  std::vector<float> out(2 * head_dim);
  rows.out = out.data();
  ThreadPool pool(1);
  Attention(KernelContext{&pool, CpuFeatures::Detect()}, rows, AttentionMode::kPad);
  for (int d = 0; d < head_dim; ++d) EXPECT_FLOAT_EQ(out[d], 1.0f);
}

TEST(Quantize, RoundTripErrorIsBounded) {
  const auto x = RandomVector(256, 42);
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0}) {
    std::vector<uint8_t> bytes(RowBytes(t, 256));
    std::vector<float> back(256);
    QuantizeRow(t, x.data(), bytes.data(), 256);
    DequantizeRow(t, bytes.data(), back.data(), 256);
    const double bound = t == DType::kQ4_0 ? 0.1 : t == DType::kQ8_0 ? 0.01 : 0.005;
    EXPECT_LT(RelativeError(back, x), bound) << DTypeName(t);
  }
  EXPECT_EQ(Fp32ToFp16(1.0f), 0x3c00);
  EXPECT_EQ(Fp16ToFp32(0x3c00), 1.0f);
  EXPECT_EQ(Fp16ToFp32(Fp32ToFp16(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(Fp16ToFp32(Fp32ToFp16(1e6f))));
  EXPECT_EQ(Fp16ToFp32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(Fp32ToFp16(std::ldexp(1.0f, -24)), 0x0001);
  EXPECT_EQ(Bf16ToFp32(Fp32ToBf16(1.5f)), 1.5f);
  EXPECT_TRUE(std::isnan(Bf16ToFp32(Fp32ToBf16(NAN))));
}

}  // namespace
}  // namespace specd
