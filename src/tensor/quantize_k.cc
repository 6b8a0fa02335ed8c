// Quantization to the K-quants llama-quantize writes most (q4_K, q6_K), following ggml's
// reference quantizers (quantize_row_q4_K_ref / quantize_row_q6_K_ref): a weighted search for each
// sub-block's scale (and min), then the sub-block scales quantized to 6 / 8 bits.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "tensor/dequantize_blocks.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

constexpr float kGroupMaxEps = 1e-15f;

inline int NearestInt(float x) { return static_cast<int>(std::nearbyint(x)); }

// Scale and (negated) min for n values in [0, nmax] minimising the weighted squared error, with
// ggml's grid of nstep candidate scales around the min/max one. L receives the chosen levels.
float ScaleMinSearch(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                     float* the_min, uint8_t* l_aux, float rmin, float rdelta, int nstep) {
  float min = x[0], max = x[0];
  float sum_w = weights[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *the_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * diff * diff;
  }
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      l_aux[i] = static_cast<uint8_t>(l);
      sum_l += weights[i] * l;
      sum_l2 += weights[i] * l * l;
      sum_xl += weights[i] * l * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float cur_error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * l_aux[i] + this_min - x[i];
      cur_error += weights[i] * diff * diff;
    }
    if (cur_error < best_error) {
      std::copy(l_aux, l_aux + n, L);
      best_error = cur_error;
      scale = this_scale;
      min = this_min;
    }
  }
  *the_min = -min;
  return scale;
}

// Symmetric scale for n values in [-nmax, nmax - 1], weighted by x^2, searched over 18 nearby
// scales (ggml's make_qx_quants with rmse_type 1).
float SymmetricScaleSearch(int n, int nmax, const float* x) {
  float max = 0, amax = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax < kGroupMaxEps) return 0.0f;
  auto sums = [&](float iscale, float* sumlx, float* suml2) {
    *sumlx = 0;
    *suml2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
      const float w = x[i] * x[i];
      *sumlx += w * x[i] * l;
      *suml2 += w * l * l;
    }
  };
  float sumlx, suml2;
  sums(-nmax / max, &sumlx, &suml2);
  float scale = suml2 != 0 ? sumlx / suml2 : 0.0f;
  float best = scale * sumlx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    sums(-(nmax + 0.1f * is) / max, &sumlx, &suml2);
    if (suml2 > 0 && sumlx * sumlx > best * suml2) {
      scale = sumlx / suml2;
      best = scale * sumlx;
    }
  }
  return scale;
}

void QuantizeQ4_K(const float* x, BlockQ4_K* y) {
  uint8_t L[kSuperBlock], l_aux[32];
  float weights[32], mins[8], scales[8];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += x[32 * j + l] * x[32 * j + l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(x[32 * j + l]);
    scales[j] =
        ScaleMinSearch(32, 15, x + 32 * j, weights, L + 32 * j, &mins[j], l_aux, -1.f, 0.1f, 20);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
  const float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
  std::memset(y->scales, 0, sizeof(y->scales));
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = static_cast<uint8_t>(std::min(63, NearestInt(inv_scale * scales[j])));
    const uint8_t lm = static_cast<uint8_t>(std::min(63, NearestInt(inv_min * mins[j])));
    if (j < 4) {
      y->scales[j] = ls;
      y->scales[j + 4] = lm;
    } else {
      y->scales[j + 4] = (ls & 0xF) | ((lm & 0xF) << 4);
      y->scales[j - 4] |= ((ls >> 4) << 6);
      y->scales[j] |= ((lm >> 4) << 6);
    }
  }
  y->d = Fp32ToFp16(max_scale / 63.f);
  y->dmin = Fp32ToFp16(max_min / 63.f);
  uint8_t sc[8], mn[8];
  ScalesMinsK4(y->scales, sc, mn);
  for (int j = 0; j < 8; ++j) {
    const float d = Fp16ToFp32(y->d) * sc[j];
    if (d == 0) continue;
    const float dm = Fp16ToFp32(y->dmin) * mn[j];
    for (int i = 0; i < 32; ++i) {
      L[32 * j + i] = static_cast<uint8_t>(std::clamp(NearestInt((x[32 * j + i] + dm) / d), 0, 15));
    }
  }
  uint8_t* q = y->qs;
  for (int j = 0; j < kSuperBlock; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
}

void QuantizeQ6_K(const float* x, BlockQ6_K* y) {
  float scales[16];
  float max_scale = 0, max_abs_scale = 0;
  for (int ib = 0; ib < 16; ++ib) {
    scales[ib] = SymmetricScaleSearch(16, 32, x + 16 * ib);
    if (std::fabs(scales[ib]) > max_abs_scale) {
      max_abs_scale = std::fabs(scales[ib]);
      max_scale = scales[ib];
    }
  }
  std::memset(y, 0, sizeof(*y));
  if (max_abs_scale < kGroupMaxEps) return;  // all zero (d = +0)
  const float iscale = -128.f / max_scale;
  y->d = Fp32ToFp16(1 / iscale);
  for (int ib = 0; ib < 16; ++ib) {
    y->scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
  }
  uint8_t L[kSuperBlock] = {};
  for (int j = 0; j < 16; ++j) {
    const float d = Fp16ToFp32(y->d) * y->scales[j];
    if (d == 0) {
      std::fill(L + 16 * j, L + 16 * j + 16, 32);
      continue;
    }
    for (int i = 0; i < 16; ++i) {
      L[16 * j + i] = static_cast<uint8_t>(std::clamp(NearestInt(x[16 * j + i] / d), -32, 31) + 32);
    }
  }
  uint8_t* ql = y->ql;
  uint8_t* qh = y->qh;
  for (int j = 0; j < kSuperBlock; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t* a = L + j + l;
      ql[l] = static_cast<uint8_t>((a[0] & 0xF) | ((a[64] & 0xF) << 4));
      ql[l + 32] = static_cast<uint8_t>((a[32] & 0xF) | ((a[96] & 0xF) << 4));
      qh[l] = static_cast<uint8_t>((a[0] >> 4) | ((a[32] >> 4) << 2) | ((a[64] >> 4) << 4) |
                                   ((a[96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
}

}  // namespace

void QuantizeRowK(DType t, const float* src, void* dst, int64_t n) {
  SPECD_CHECK(t == DType::kQ4_K || t == DType::kQ6_K, "quantizing to ", DTypeName(t),
              " is not supported (specd reads it; it writes q4_K and q6_K)");
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    if (t == DType::kQ4_K) {
      QuantizeQ4_K(src + b * kSuperBlock, static_cast<BlockQ4_K*>(dst) + b);
    } else {
      QuantizeQ6_K(src + b * kSuperBlock, static_cast<BlockQ6_K*>(dst) + b);
    }
  }
}

}  // namespace specd
