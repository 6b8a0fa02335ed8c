// Storage types: ggml's block layouts read exactly as the `gguf` Python package's reference reads
// them (vectors in tests/data, made by make_dequant_vectors.py), and quantization round trips.
#include <gtest/gtest.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <set>
#include <vector>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/rng.h"
#include "tensor/dtype.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

template <typename T>
T Read(const std::vector<uint8_t>& bytes, size_t* at) {
  T v;
  std::memcpy(&v, bytes.data() + *at, sizeof(T));
  *at += sizeof(T);
  return v;
}

// Every half: the branch-free conversion against the CPU's own (F16C's vcvtph2ps, exact), bit
// for bit, subnormals, infinities and NaN payloads included.
__attribute__((target("f16c"))) uint32_t HardwareHalfBits(uint16_t h) {
  const float f = _cvtsh_ss(h);
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

TEST(Tensor, HalfToFloatIsExactForEveryHalf) {
  if (!CpuFeatures::HasF16c()) GTEST_SKIP() << "no F16C to compare with";
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = Fp16ToFp32(static_cast<uint16_t>(h));
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    // The hardware quiets signaling NaNs (sets bit 22); the conversion keeps the payload as is.
    const uint32_t quiet_bit = std::isnan(f) ? 0x00400000u : 0u;
    ASSERT_EQ(bits | quiet_bit, HardwareHalfBits(static_cast<uint16_t>(h))) << std::hex << h;
  }
}

TEST(Tensor, DequantizationMatchesGgufPythonReferenceForEveryType) {
  std::ifstream in(SPECD_SOURCE_DIR "/tests/data/dequant_vectors.bin", std::ios::binary);
  ASSERT_TRUE(in) << "missing tests/data/dequant_vectors.bin";
  const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                   std::istreambuf_iterator<char>());
  std::set<DType> seen;
  size_t at = 0;
  while (at < bytes.size()) {
    const uint32_t id = Read<uint32_t>(bytes, &at);
    const uint32_t n_blocks = Read<uint32_t>(bytes, &at);
    const uint32_t block_bytes = Read<uint32_t>(bytes, &at);
    const auto type = DTypeFromId(id);
    ASSERT_TRUE(type.has_value()) << GgmlTypeName(id);
    ASSERT_EQ(block_bytes, BlockBytes(*type)) << DTypeName(*type);
    const int64_t n = n_blocks * BlockElements(*type);
    const uint8_t* raw = bytes.data() + at;
    at += n_blocks * block_bytes;
    std::vector<float> want(n), got(n);
    std::memcpy(want.data(), bytes.data() + at, n * sizeof(float));
    at += n * sizeof(float);
    DequantizeRow(*type, raw, got.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      // numpy may round an intermediate product differently (e.g. d * sc * q in another order):
      // allow one unit in the last place of the value's magnitude.
      ASSERT_NEAR(got[i], want[i], 1.2e-7f * std::fabs(want[i]) + 1e-12f)
          << DTypeName(*type) << " element " << i;
    }
    seen.insert(*type);
  }
  for (DType t : kAllDTypes) {
    if (BlockElements(t) > 1) {
      EXPECT_TRUE(seen.count(t)) << "no vectors for " << DTypeName(t);
    }
  }
}

// Every writable type: quantize then dequantize stays within the type's expected error, and
// block-structured types keep exact zeros and the block maximum's sign.
TEST(Tensor, QuantizeRoundTripErrorIsWithinEachTypesResolution) {
  const struct {
    DType type;
    double max_rel_rms;
  } cases[] = {{DType::kF16, 1e-3},    {DType::kBF16, 5e-3},  {DType::kQ8_0, 1e-2},
               {DType::kQ4_0, 0.12},   {DType::kQ4_1, 0.1},   {DType::kQ5_0, 0.06},
               {DType::kQ5_1, 0.05},   {DType::kQ4_K, 0.1},   {DType::kQ6_K, 0.03},
               {DType::kIQ4_NL, 0.12}, {DType::kIQ4_XS, 0.12}};
  const int64_t n = 1024;
  SplitMix64 rng(3);
  std::vector<float> x(n);
  for (auto& v : x) v = rng.NextSymmetric() * 0.1f;
  for (const auto& c : cases) {
    std::vector<uint8_t> q(RowBytes(c.type, n));
    std::vector<float> back(n);
    QuantizeRow(c.type, x.data(), q.data(), n);
    DequantizeRow(c.type, q.data(), back.data(), n);
    double err = 0, ref = 0;
    for (int64_t i = 0; i < n; ++i) {
      err += (back[i] - x[i]) * (back[i] - x[i]);
      ref += x[i] * x[i];
    }
    EXPECT_LT(std::sqrt(err / ref), c.max_rel_rms) << DTypeName(c.type);
  }
}

TEST(Tensor, KQuantsSpelledEitherWayAndUnwritableOnesRefused) {
  EXPECT_EQ(DTypeFromName("q4_K"), DType::kQ4_K);
  EXPECT_EQ(DTypeFromName("q4_k"), DType::kQ4_K);
  EXPECT_EQ(DTypeFromName("q6_K"), DType::kQ6_K);
  EXPECT_FALSE(DTypeFromName("q7_K").has_value());
  std::vector<float> x(256, 1.0f);
  std::vector<uint8_t> out(RowBytes(DType::kQ3_K, 256));
  EXPECT_THROW(QuantizeRow(DType::kQ3_K, x.data(), out.data(), 256), Error);
}

}  // namespace
}  // namespace specd
