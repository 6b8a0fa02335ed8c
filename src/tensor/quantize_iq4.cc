// The IQ4 types: ggml's non-linear 4-bit grid (kIq4Levels) with an fp16 scale per 32 values
// (iq4_nl) or a 6-bit scale per 32 under an fp16 scale per 256 (iq4_xs). Reading is exact as
// ggml's reference; quantizing picks each block's scale so that its largest value lands on the
// grid's end, then the nearest level per value, then the least-squares scale for those levels
// (ggml's first pass; its further search over nearby scales is not done, so files quantized here
// may differ from llama-quantize's in a few levels).
#include <cmath>
#include <cstring>

#include "base/error.h"
#include "tensor/dequantize_blocks.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

int NearestLevel(float x) {
  int best = 0;
  float best_err = std::fabs(x - kIq4Levels[0]);
  for (int i = 1; i < 16; ++i) {
    const float err = std::fabs(x - kIq4Levels[i]);
    if (err < best_err) best_err = err, best = i;
  }
  return best;
}

// 32 values to level indices and the scale that fits them best; returns the scale.
float QuantizeIq4Block(const float* x, uint8_t index[32]) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) amax = std::fabs(x[j]), max = x[j];
  }
  if (amax == 0.0f) {
    std::memset(index, 8, 32);  // level 1, times 0
    return 0.0f;
  }
  const float d = max / kIq4Levels[0];  // the largest value on the grid's -127 end
  const float id = 1.0f / d;
  float sum_xl = 0.0f, sum_ll = 0.0f;
  for (int j = 0; j < 32; ++j) {
    index[j] = static_cast<uint8_t>(NearestLevel(x[j] * id));
    const float l = kIq4Levels[index[j]];
    sum_xl += x[j] * l;
    sum_ll += l * l;
  }
  return sum_ll > 0.0f ? sum_xl / sum_ll : d;
}

void PackNibbles(const uint8_t index[32], uint8_t qs[16]) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(index[j] | (index[j + 16] << 4));
}

}  // namespace

void QuantizeIQ4_NL(const float* x, BlockIQ4_NL* y) {
  uint8_t index[32];
  y->d = Fp32ToFp16(QuantizeIq4Block(x, index));
  PackNibbles(index, y->qs);
}

void QuantizeIQ4_XS(const float* x, BlockIQ4_XS* y) {
  float scales[8];
  uint8_t index[8][32];
  float amax = 0.0f, max = 0.0f;
  for (int ib = 0; ib < 8; ++ib) {
    scales[ib] = QuantizeIq4Block(x + 32 * ib, index[ib]);
    if (std::fabs(scales[ib]) > amax) amax = std::fabs(scales[ib]), max = scales[ib];
  }
  // Block scales as d * (ls - 32), ls in 0..63: the largest on the -32 end.
  const float d = amax > 0.0f ? -max / 32.0f : 0.0f;
  y->d = Fp32ToFp16(d);
  const float d_stored = Fp16ToFp32(y->d);
  y->scales_h = 0;
  std::memset(y->scales_l, 0, sizeof(y->scales_l));
  for (int ib = 0; ib < 8; ++ib) {
    int ls = d_stored != 0.0f ? static_cast<int>(std::nearbyint(scales[ib] / d_stored)) + 32 : 32;
    ls = ls < 0 ? 0 : ls > 63 ? 63 : ls;
    y->scales_l[ib / 2] |= static_cast<uint8_t>((ls & 15) << (4 * (ib % 2)));
    y->scales_h |= static_cast<uint16_t>((ls >> 4) << (2 * ib));
    // The values again against the scale as stored.
    const float dl = d_stored * (ls - 32);
    const float idl = dl != 0.0f ? 1.0f / dl : 0.0f;
    for (int j = 0; j < 32; ++j)
      index[ib][j] = static_cast<uint8_t>(NearestLevel(x[32 * ib + j] * idl));
    PackNibbles(index[ib], y->qs + 16 * ib);
  }
}

void DequantizeIQ4_NL(const BlockIQ4_NL& b, float* y) {
  const float d = Fp16ToFp32(b.d);
  for (int j = 0; j < 16; ++j) {
    y[j] = d * kIq4Levels[b.qs[j] & 15];
    y[j + 16] = d * kIq4Levels[b.qs[j] >> 4];
  }
}

void DequantizeIQ4_XS(const BlockIQ4_XS& b, float* y) {
  const float d = Fp16ToFp32(b.d);
  for (int ib = 0; ib < 8; ++ib) {
    const int ls =
        ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((b.scales_h >> (2 * ib)) & 3) << 4);
    const float dl = d * (ls - 32);
    const uint8_t* qs = b.qs + 16 * ib;
    for (int j = 0; j < 16; ++j) {
      y[32 * ib + j] = dl * kIq4Levels[qs[j] & 15];
      y[32 * ib + j + 16] = dl * kIq4Levels[qs[j] >> 4];
    }
  }
}

}  // namespace specd
