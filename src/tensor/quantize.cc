#include "tensor/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "base/vector_clones.h"
#include "tensor/dequantize_blocks.h"

namespace specd {
namespace {

template <typename Block, int kElements>
void QuantizeBlocks(const float* src, void* dst, int64_t n, void (*one)(const float*, Block*)) {
  auto* blocks = static_cast<Block*>(dst);
  for (int64_t b = 0; b < n / kElements; ++b) one(src + b * kElements, blocks + b);
}

template <typename Block, int kElements>
void DequantizeBlocks(const void* src, float* dst, int64_t n, void (*one)(const Block&, float*)) {
  const auto* blocks = static_cast<const Block*>(src);
  for (int64_t b = 0; b < n / kElements; ++b) one(blocks[b], dst + b * kElements);
}

// Smallest and largest of 32 values.
void MinMax(const float* x, float* min, float* max) {
  *min = x[0];
  *max = x[0];
  for (int j = 1; j < kQuantBlock; ++j) {
    *min = std::min(*min, x[j]);
    *max = std::max(*max, x[j]);
  }
}

// ggml's quantize_row_q4_1_ref for one block.
void QuantizeQ4_1(const float* x, BlockQ4_1* y) {
  float min, max;
  MinMax(x, &min, &max);
  const float d = (max - min) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = Fp32ToFp16(d);
  y->m = Fp32ToFp16(min);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - min) * id + 0.5f)));
    const int hi =
        std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - min) * id + 0.5f)));
    y->qs[j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

// ggml's quantize_row_q5_0_ref for one block.
void QuantizeQ5_0(const float* x, BlockQ5_0* y) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQuantBlock; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = Fp32ToFp16(d);
  uint32_t qh = 0;
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    const int lo = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    const int hi = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
    y->qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    qh |= ((lo & 0x10u) >> 4) << j;
    qh |= ((hi & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(y->qh, &qh, 4);
}

// ggml's quantize_row_q5_1_ref for one block.
void QuantizeQ5_1(const float* x, BlockQ5_1* y) {
  float min, max;
  MinMax(x, &min, &max);
  const float d = (max - min) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  y->d = Fp32ToFp16(d);
  y->m = Fp32ToFp16(min);
  uint32_t qh = 0;
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    const int lo = static_cast<uint8_t>((x[j] - min) * id + 0.5f);
    const int hi = static_cast<uint8_t>((x[j + 16] - min) * id + 0.5f);
    y->qs[j] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
    qh |= ((lo & 0x10u) >> 4) << j;
    qh |= ((hi & 0x10u) >> 4) << (j + 16);
  }
  std::memcpy(y->qh, &qh, 4);
}

}  // namespace

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  SPECD_CHECK(n % BlockElements(t) == 0, "cannot quantize a row of ", n, " values to ",
              DTypeName(t));
  switch (t) {
    case DType::kI8:
      Fail("an i8 row needs its scale: use QuantizeRowI8");
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = Fp32ToFp16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* out = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = Fp32ToBf16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* blocks = static_cast<BlockQ8_0*>(dst);
      for (int64_t b = 0; b < n / kQuantBlock; ++b) {
        const float* x = src + b * kQuantBlock;
        float amax = 0.0f;
        for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blocks[b].d = Fp32ToFp16(d);
        for (int i = 0; i < kQuantBlock; ++i) {
          blocks[b].qs[i] = static_cast<int8_t>(std::lround(x[i] * id));
        }
      }
      return;
    }
    case DType::kQ4_0: {
      auto* blocks = static_cast<BlockQ4_0*>(dst);
      for (int64_t b = 0; b < n / kQuantBlock; ++b) {
        const float* x = src + b * kQuantBlock;
        float amax = 0.0f, max = 0.0f;  // the value of largest magnitude, with its sign
        for (int i = 0; i < kQuantBlock; ++i) {
          if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            max = x[i];
          }
        }
        const float d = max / -8.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        blocks[b].d = Fp32ToFp16(d);
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          const int lo = std::min(15, static_cast<int>(x[j] * id + 8.5f));
          const int hi = std::min(15, static_cast<int>(x[j + 16] * id + 8.5f));
          blocks[b].qs[j] = static_cast<uint8_t>(lo | (hi << 4));
        }
      }
      return;
    }
    case DType::kQ4_1:
      QuantizeBlocks<BlockQ4_1, kQuantBlock>(src, dst, n, QuantizeQ4_1);
      return;
    case DType::kQ5_0:
      QuantizeBlocks<BlockQ5_0, kQuantBlock>(src, dst, n, QuantizeQ5_0);
      return;
    case DType::kQ5_1:
      QuantizeBlocks<BlockQ5_1, kQuantBlock>(src, dst, n, QuantizeQ5_1);
      return;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      QuantizeRowK(t, src, dst, n);
      return;
    case DType::kIQ4_NL:
      QuantizeBlocks<BlockIQ4_NL, kQuantBlock>(src, dst, n, QuantizeIQ4_NL);
      return;
    case DType::kIQ4_XS:
      QuantizeBlocks<BlockIQ4_XS, kSuperBlock>(src, dst, n, QuantizeIQ4_XS);
      return;
  }
}

SPECD_VECTOR_CLONES void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
  SPECD_CHECK(n % BlockElements(t) == 0, "cannot read a row of ", n, " values of ", DTypeName(t));
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Fp16ToFp32(in[i]);
      return;
    }
    case DType::kBF16: {
      const auto* in = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = Bf16ToFp32(in[i]);
      return;
    }
    case DType::kQ8_0: {
      const auto* blocks = static_cast<const BlockQ8_0*>(src);
      for (int64_t b = 0; b < n / kQuantBlock; ++b) {
        const float d = Fp16ToFp32(blocks[b].d);
        for (int i = 0; i < kQuantBlock; ++i) dst[b * kQuantBlock + i] = d * blocks[b].qs[i];
      }
      return;
    }
    case DType::kQ4_0: {
      const auto* blocks = static_cast<const BlockQ4_0*>(src);
      for (int64_t b = 0; b < n / kQuantBlock; ++b) {
        const float d = Fp16ToFp32(blocks[b].d);
        float* out = dst + b * kQuantBlock;
        for (int j = 0; j < kQuantBlock / 2; ++j) {
          out[j] = d * ((blocks[b].qs[j] & 15) - 8);
          out[j + 16] = d * ((blocks[b].qs[j] >> 4) - 8);
        }
      }
      return;
    }
    case DType::kQ4_1:
      DequantizeBlocks<BlockQ4_1, kQuantBlock>(src, dst, n, DequantizeQ4_1);
      return;
    case DType::kQ5_0:
      DequantizeBlocks<BlockQ5_0, kQuantBlock>(src, dst, n, DequantizeQ5_0);
      return;
    case DType::kQ5_1:
      DequantizeBlocks<BlockQ5_1, kQuantBlock>(src, dst, n, DequantizeQ5_1);
      return;
    case DType::kQ2_K:
      DequantizeBlocks<BlockQ2_K, kSuperBlock>(src, dst, n, DequantizeQ2_K);
      return;
    case DType::kQ3_K:
      DequantizeBlocks<BlockQ3_K, kSuperBlock>(src, dst, n, DequantizeQ3_K);
      return;
    case DType::kQ4_K:
      DequantizeBlocks<BlockQ4_K, kSuperBlock>(src, dst, n, DequantizeQ4_K);
      return;
    case DType::kQ5_K:
      DequantizeBlocks<BlockQ5_K, kSuperBlock>(src, dst, n, DequantizeQ5_K);
      return;
    case DType::kQ6_K:
      DequantizeBlocks<BlockQ6_K, kSuperBlock>(src, dst, n, DequantizeQ6_K);
      return;
    case DType::kIQ4_NL:
      DequantizeBlocks<BlockIQ4_NL, kQuantBlock>(src, dst, n, DequantizeIQ4_NL);
      return;
    case DType::kIQ4_XS:
      DequantizeBlocks<BlockIQ4_XS, kSuperBlock>(src, dst, n, DequantizeIQ4_XS);
      return;
    case DType::kI8: {  // the integers; their row scale is applied by the caller
      const auto* in = static_cast<const int8_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = in[i];
      return;
    }
  }
}

namespace {
std::string I8CompanionName(const std::string& weight_name, const char* what) {
  const std::string suffix = ".weight";
  if (weight_name.size() > suffix.size() &&
      weight_name.compare(weight_name.size() - suffix.size(), suffix.size(), suffix) == 0) {
    return weight_name.substr(0, weight_name.size() - suffix.size()) + what;
  }
  return weight_name + what;
}
}  // namespace

std::string I8ScaleTensorName(const std::string& weight_name) {
  return I8CompanionName(weight_name, ".scale");
}

std::string I8SmoothTensorName(const std::string& weight_name) {
  return I8CompanionName(weight_name, ".smooth");
}

float QuantizeRowI8(const float* src, int8_t* dst, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(src[i]));
  const float scale = amax / 127.0f;
  for (int64_t i = 0; i < n; ++i) {
    // Rounded in double from the exact quotient, so the level is the nearest one to the weight.
    const double q = scale != 0.0f ? std::nearbyint(static_cast<double>(src[i]) / scale) : 0.0;
    dst[i] = static_cast<int8_t>(std::clamp(q, -127.0, 127.0));
  }
  return scale;
}

}  // namespace specd
