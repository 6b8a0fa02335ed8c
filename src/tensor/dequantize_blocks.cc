// Dequantization of ggml's block types beyond q8_0 / q4_0: q4_1, q5_0, q5_1 and the K-quants
// q2_K..q6_K. Each follows ggml's reference (dequantize_row_*), including its order of float
// operations, so a value read here equals the value llama.cpp reads from the same bytes.
#include "tensor/dequantize_blocks.h"

#include <cstring>

#include "base/vector_clones.h"

namespace specd {
namespace {

inline float Half(uint16_t h) { return Fp16ToFp32(h); }

// The 5th bits of a q5_0 / q5_1 block, bit j for element j.
inline uint32_t HighBits(const uint8_t qh[4]) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  return bits;
}

// Scale and min j (0..7) of a q4_K / q5_K block: 6 bits each, packed into 12 bytes.
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

}  // namespace

SPECD_VECTOR_CLONES void DequantizeQ4_1(const BlockQ4_1& b, float* y) {
  const float d = Half(b.d), m = Half(b.m);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    y[j] = (b.qs[j] & 0x0F) * d + m;
    y[j + 16] = (b.qs[j] >> 4) * d + m;
  }
}

SPECD_VECTOR_CLONES void DequantizeQ5_0(const BlockQ5_0& b, float* y) {
  const float d = Half(b.d);
  const uint32_t qh = HighBits(b.qh);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    const int x0 = ((b.qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10)) - 16;
    const int x1 = ((b.qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
    y[j] = x0 * d;
    y[j + 16] = x1 * d;
  }
}

SPECD_VECTOR_CLONES void DequantizeQ5_1(const BlockQ5_1& b, float* y) {
  const float d = Half(b.d), m = Half(b.m);
  const uint32_t qh = HighBits(b.qh);
  for (int j = 0; j < kQuantBlock / 2; ++j) {
    const int x0 = (b.qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
    const int x1 = (b.qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
    y[j] = x0 * d + m;
    y[j + 16] = x1 * d + m;
  }
}

SPECD_VECTOR_CLONES void DequantizeQ2_K(const BlockQ2_K& b, float* y) {
  const float d = Half(b.d), min = Half(b.dmin);
  const uint8_t* q = b.qs;
  int is = 0;
  for (int n = 0; n < kSuperBlock; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = b.scales[is++];
        const float dl = d * (sc & 0xF), ml = min * (sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
      }
      shift += 2;
    }
    q += 32;
  }
}

// The 16 signed 6-bit scales of a q3_K block (stored biased by 32).
void UnpackQ3_KScales(const uint8_t packed[12], int8_t scales[16]) {
  constexpr uint32_t kMask1 = 0x03030303, kMask2 = 0x0f0f0f0f;
  uint32_t aux[4];
  std::memcpy(aux, packed, 12);
  const uint32_t tmp = aux[2];
  aux[2] = ((aux[0] >> 4) & kMask2) | (((tmp >> 4) & kMask1) << 4);
  aux[3] = ((aux[1] >> 4) & kMask2) | (((tmp >> 6) & kMask1) << 4);
  aux[0] = (aux[0] & kMask2) | (((tmp >> 0) & kMask1) << 4);
  aux[1] = (aux[1] & kMask2) | (((tmp >> 2) & kMask1) << 4);
  uint8_t bytes[16];
  std::memcpy(bytes, aux, 16);
  for (int i = 0; i < 16; ++i) scales[i] = static_cast<int8_t>(bytes[i] - 32);
}

SPECD_VECTOR_CLONES void DequantizeQ3_K(const BlockQ3_K& b, float* y) {
  const float d_all = Half(b.d);
  int8_t scales[16];
  UnpackQ3_KScales(b.scales, scales);
  const uint8_t* q = b.qs;
  uint8_t m = 1;
  int is = 0;
  for (int n = 0; n < kSuperBlock; n += 128) {
    int shift = 0;
    for (int j = 0; j < 4; ++j) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * scales[is++];
        for (int l = 16 * half; l < 16 * half + 16; ++l) {
          *y++ = dl * (((q[l] >> shift) & 3) - ((b.hmask[l] & m) ? 0 : 4));
        }
      }
      shift += 2;
      m <<= 1;
    }
    q += 32;
  }
}

void ScalesMinsK4(const uint8_t packed[12], uint8_t scales[8], uint8_t mins[8]) {
  for (int j = 0; j < 8; ++j) ScaleMinK4(j, packed, &scales[j], &mins[j]);
}

SPECD_VECTOR_CLONES void DequantizeQ4_K(const BlockQ4_K& b, float* y) {
  const float d = Half(b.d), min = Half(b.dmin);
  uint8_t sc[8], mn[8];
  ScalesMinsK4(b.scales, sc, mn);
  const uint8_t* q = b.qs;
  for (int j = 0; j < kSuperBlock / 64; ++j) {
    const float d1 = d * sc[2 * j], m1 = min * mn[2 * j];
    const float d2 = d * sc[2 * j + 1], m2 = min * mn[2 * j + 1];
    for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 0xF) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    q += 32;
  }
}

SPECD_VECTOR_CLONES void DequantizeQ5_K(const BlockQ5_K& b, float* y) {
  const float d = Half(b.d), min = Half(b.dmin);
  uint8_t sc[8], mn[8];
  ScalesMinsK4(b.scales, sc, mn);
  const uint8_t* ql = b.qs;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0; j < kSuperBlock / 64; ++j) {
    const float d1 = d * sc[2 * j], m1 = min * mn[2 * j];
    const float d2 = d * sc[2 * j + 1], m2 = min * mn[2 * j + 1];
    for (int l = 0; l < 32; ++l) *y++ = d1 * ((ql[l] & 0xF) + (b.qh[l] & u1 ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * ((ql[l] >> 4) + (b.qh[l] & u2 ? 16 : 0)) - m2;
    ql += 32;
    u1 <<= 2;
    u2 <<= 2;
  }
}

SPECD_VECTOR_CLONES void DequantizeQ6_K(const BlockQ6_K& b, float* y) {
  const float d = Half(b.d);
  const uint8_t* ql = b.ql;
  const uint8_t* qh = b.qh;
  const int8_t* sc = b.scales;
  for (int n = 0; n < kSuperBlock; n += 128) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l] = d * sc[is] * q1;
      y[l + 32] = d * sc[is + 2] * q2;
      y[l + 64] = d * sc[is + 4] * q3;
      y[l + 96] = d * sc[is + 6] * q4;
    }
    y += 128;
    ql += 64;
    qh += 32;
    sc += 8;
  }
}

}  // namespace specd
