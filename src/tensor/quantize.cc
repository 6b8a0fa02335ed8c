#include "tensor/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"

namespace specd {

void QuantizeRow(DType t, const float* src, void* dst, int64_t n) {
  SPECD_CHECK(n % BlockElements(t) == 0, "cannot quantize a row of ", n, " values to ",
              DTypeName(t));
  switch (t) {
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
  }
}

void DequantizeRow(DType t, const void* src, float* dst, int64_t n) {
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
  }
}

}  // namespace specd
