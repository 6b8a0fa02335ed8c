// AVX-512 kernels (F/BW/VL/BF16/VNNI). Compiled with those ISA flags and called only after a
// run-time check. One weight row is decoded once and applied to a tile of up to kTileRows
// activation rows; every (activation row, weight row) pair accumulates in the same order
// whatever the tile, the row count or the thread split, so results are batch invariant.
//
// Activations are prepared per call for the weight type:
//   f32, f16 weights: activations stay f32 (f16 weights widen to f32, FMA).
//   bf16 weights: activations rounded to bf16, vdpbf16ps.
//   q8_0 / q4_0 weights: activations quantized to int8 per 32-block (like ggml's q8_0), vpdpbusd.
//   packed weights (every quantized type): int8 per 32-block, or per 256 values for the K-quants
//   (like ggml's q8_K), block-major (block_activations.h), vpdpbusd.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "kernels/kernels.h"
#include "kernels/packed_avx512.h"

namespace specd::avx512 {
namespace {

constexpr int kTileRows = 4;
constexpr int64_t kWeightChunk = 16;

// How far ahead of the block being multiplied the packed kernels ask for weights: they stream
// from DRAM once per matmul, and with several activation rows the arithmetic should overlap the
// stream instead of waiting on it. Measured on SmolLM2 i8 (Xeon, 2 threads): M=8 forward 9.3 ms
// without, 7.1 ms at 4 KiB (1-16 KiB within noise of each other), decode 201 -> 218 tok/s.
// Far ahead into L2 only (T2), near ahead into L1 (T0): an L1 prefetch holds one of the core's
// few L1 fill buffers until its line arrives from DRAM, so prefetching the whole stream into L1
// starved the demand loads. Measured on a Sapphire Rapids class Xeon (2026-12-03, 1.5B Q4_K_M):
// all T0 at 4 KiB 22.8-23.3 tok/s decode, T2 at 4 KiB + T0 at 2 KiB 27.2-27.5
// (bench/results/amx-gguf/2026-12-03-xeon-prefetch-hints.md).
constexpr int64_t kPrefetchBytes = 4096;
constexpr int64_t kNearPrefetchBytes = 2048;

// Prefetches the `bytes` of a block kPrefetchBytes ahead of `block` into L2 and
// kNearPrefetchBytes ahead into L1 (packed row groups are contiguous, so near a group's end this
// reaches into the next group).
inline void PrefetchAhead(const uint8_t* block, int64_t bytes) {
  const char* at = reinterpret_cast<const char*>(block);
  for (int64_t line = 0; line < bytes; line += 64) {
    _mm_prefetch(at + kPrefetchBytes + line, _MM_HINT_T2);
    _mm_prefetch(at + kNearPrefetchBytes + line, _MM_HINT_T0);
  }
}

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// 4 activation bytes read as one int32 for a broadcast operand (folds into vpdpbusd's m32bcst).
typedef int32_t UnalignedInt32 __attribute__((may_alias, aligned(1)));

// Activation row r of a prepared matrix.
struct Prepared {
  const float* f32 = nullptr;      // [m, K]            f32 / f16 weights
  const uint16_t* bf16 = nullptr;  // [m, K]            bf16 weights
  const uint8_t* q = nullptr;      // [m, K]            int8 (q4_0) or int8 + 128 (q8_0)
  const float* dexp = nullptr;     // [m, K / 4]        block scale, repeated for 8 int32 lanes
  const int32_t* corr = nullptr;   // [m, K / 4]        -8 * (sum of 4 activations), q4_0 only
  int64_t k = 0;
};

inline __m512i ClampToInt8(__m512i v) {
  return _mm512_max_epi32(_mm512_min_epi32(v, _mm512_set1_epi32(127)), _mm512_set1_epi32(-128));
}

// Quantizes one activation row to int8 blocks of 32 with a float scale per block.
void QuantizeActivationRow(const float* x, int64_t k, bool offset_128, uint8_t* q, float* dexp,
                           int32_t* corr) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const __m512 x0 = _mm512_loadu_ps(x + b * 32);
    const __m512 x1 = _mm512_loadu_ps(x + b * 32 + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const __m512i i0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, _mm512_set1_ps(id)));
    const __m512i i1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, _mm512_set1_ps(id)));
    __m128i q0 = _mm512_cvtsepi32_epi8(i0);
    __m128i q1 = _mm512_cvtsepi32_epi8(i1);
    if (corr != nullptr) {
      // Sum of each group of 4 int8 values, times -8 (the q4_0 zero point).
      alignas(16) int8_t vals[32];
      _mm_store_si128(reinterpret_cast<__m128i*>(vals), q0);
      _mm_store_si128(reinterpret_cast<__m128i*>(vals + 16), q1);
      for (int j = 0; j < 8; ++j) {
        corr[b * 8 + j] = -8 * (vals[4 * j] + vals[4 * j + 1] + vals[4 * j + 2] + vals[4 * j + 3]);
      }
    }
    if (offset_128) {
      q0 = _mm_xor_si128(q0, _mm_set1_epi8(static_cast<char>(0x80)));
      q1 = _mm_xor_si128(q1, _mm_set1_epi8(static_cast<char>(0x80)));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32), q0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * 32 + 16), q1);
    for (int j = 0; j < 8; ++j) dexp[b * 8 + j] = d;
  }
}

template <int MT>
void DotF32(const float* w, const Prepared& p, int64_t m0, float* out) {
  __m512 acc[MT];
  for (int r = 0; r < MT; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < p.k; k += 16) {
    const __m512 wv = _mm512_loadu_ps(w + k);
    for (int r = 0; r < MT; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(p.f32 + (m0 + r) * p.k + k), wv, acc[r]);
    }
  }
  for (int r = 0; r < MT; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

template <int MT>
void DotF16(const uint16_t* w, const Prepared& p, int64_t m0, float* out) {
  __m512 acc[MT];
  for (int r = 0; r < MT; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t k = 0; k < p.k; k += 16) {
    const __m512 wv = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + k)));
    for (int r = 0; r < MT; ++r) {
      acc[r] = _mm512_fmadd_ps(_mm512_loadu_ps(p.f32 + (m0 + r) * p.k + k), wv, acc[r]);
    }
  }
  for (int r = 0; r < MT; ++r) out[r] = _mm512_reduce_add_ps(acc[r]);
}

template <int MT>
void DotBF16(const uint16_t* w, const Prepared& p, int64_t m0, float* out) {
  // Two accumulators per row (even / odd 32-chunks) keep enough vdpbf16ps chains in flight to
  // hide its latency when MT is small.
  __m512 acc[MT][2];
  for (int r = 0; r < MT; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 64 <= p.k; k += 64) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + k);
    const __m512bh w1 = (__m512bh)_mm512_loadu_si512(w + k + 32);
    for (int r = 0; r < MT; ++r) {
      const uint16_t* a = p.bf16 + (m0 + r) * p.k + k;
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)_mm512_loadu_si512(a), w0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)_mm512_loadu_si512(a + 32), w1);
    }
  }
  if (k < p.k) {
    const __m512bh w0 = (__m512bh)_mm512_loadu_si512(w + k);
    for (int r = 0; r < MT; ++r) {
      const uint16_t* a = p.bf16 + (m0 + r) * p.k + k;
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)_mm512_loadu_si512(a), w0);
    }
  }
  for (int r = 0; r < MT; ++r) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc[r][0], acc[r][1]));
}

template <int MT>
void DotQ8(const BlockQ8_0* w, const Prepared& p, int64_t m0, float* out) {
  const int64_t nb = p.k / 32;
  const int64_t lanes = p.k / 4;
  __m512 acc[MT];
  for (int r = 0; r < MT; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i c128 = _mm512_set1_epi8(static_cast<char>(0x80));
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m256i w0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
    const __m256i w1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b + 1].qs));
    const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1);
    const __m512 dw =
        _mm512_insertf32x8(_mm512_set1_ps(Half(w[b].d)), _mm256_set1_ps(Half(w[b + 1].d)), 1);
    // Activations are stored as a + 128 (unsigned, as vpdpbusd needs): subtract 128 * sum(w).
    const __m512i neg = _mm512_sub_epi32(_mm512_setzero_si512(),
                                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), c128, wv));
    for (int r = 0; r < MT; ++r) {
      const __m512i a = _mm512_loadu_si512(p.q + (m0 + r) * p.k + b * 32);
      const __m512i s = _mm512_dpbusd_epi32(neg, a, wv);
      const __m512 t =
          _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_loadu_ps(p.dexp + (m0 + r) * lanes + b * 8));
      acc[r] = _mm512_fmadd_ps(t, dw, acc[r]);
    }
  }
  for (int r = 0; r < MT; ++r) {
    float tail = 0.0f;
    if (b < nb) {
      // Explicit intrinsics: GCC 12 miscompiles the auto-vectorized scalar form of this
      // mixed-sign (uint8 - 128) * int8 dot product under -mavx512vnni (found by the kernel test).
      const __m256i a =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p.q + (m0 + r) * p.k + b * 32));
      const __m256i wt = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[b].qs));
      const __m256i corr = _mm256_dpbusd_epi32(_mm256_setzero_si256(),
                                               _mm256_set1_epi8(static_cast<char>(0x80)), wt);
      const __m256i s = _mm256_sub_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), a, wt), corr);
      const __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      const __m128i s2 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
      const int32_t sum = _mm_cvtsi128_si32(_mm_add_epi32(s2, _mm_shuffle_epi32(s2, 0xB1)));
      tail = static_cast<float>(sum) * p.dexp[(m0 + r) * lanes + b * 8] * Half(w[b].d);
    }
    out[r] = _mm512_reduce_add_ps(acc[r]) + tail;
  }
}

template <int MT>
void DotQ4(const BlockQ4_0* w, const Prepared& p, int64_t m0, float* out) {
  const int64_t nb = p.k / 32;
  const int64_t lanes = p.k / 4;
  __m512 acc[MT];
  for (int r = 0; r < MT; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    const __m128i v0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b].qs));
    const __m128i v1 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[b + 1].qs));
    // 128-bit lanes [v0, v0, v1, v1]: low nibbles from lanes 0 and 2, high from 1 and 3, giving
    // the 64 values of both blocks in element order, as unsigned 0..15 (zero point 8).
    __m512i z = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set_m128i(v0, v0)),
                                   _mm256_set_m128i(v1, v1), 1);
    z = _mm512_mask_blend_epi8(0xFFFF0000FFFF0000ull, z, _mm512_srli_epi16(z, 4));
    z = _mm512_and_si512(z, low4);
    const __m512 dw =
        _mm512_insertf32x8(_mm512_set1_ps(Half(w[b].d)), _mm256_set1_ps(Half(w[b + 1].d)), 1);
    for (int r = 0; r < MT; ++r) {
      const __m512i a = _mm512_loadu_si512(p.q + (m0 + r) * p.k + b * 32);
      const __m512i c = _mm512_loadu_si512(p.corr + (m0 + r) * lanes + b * 8);
      const __m512i s = _mm512_dpbusd_epi32(c, z, a);
      const __m512 t =
          _mm512_mul_ps(_mm512_cvtepi32_ps(s), _mm512_loadu_ps(p.dexp + (m0 + r) * lanes + b * 8));
      acc[r] = _mm512_fmadd_ps(t, dw, acc[r]);
    }
  }
  for (int r = 0; r < MT; ++r) {
    float tail = 0.0f;
    if (b < nb) {
      const auto* a = reinterpret_cast<const int8_t*>(p.q + (m0 + r) * p.k + b * 32);
      int32_t s = 0;
      for (int j = 0; j < 16; ++j) {
        s += ((w[b].qs[j] & 15) - 8) * a[j] + ((w[b].qs[j] >> 4) - 8) * a[j + 16];
      }
      tail = static_cast<float>(s) * p.dexp[(m0 + r) * lanes + b * 8] * Half(w[b].d);
    }
    out[r] = _mm512_reduce_add_ps(acc[r]) + tail;
  }
}

// Runs kernel over weight rows [n0, n1) and all activation rows, writing y [m, n_out].
template <typename RowT, void (*K1)(const RowT*, const Prepared&, int64_t, float*),
          void (*K2)(const RowT*, const Prepared&, int64_t, float*),
          void (*K3)(const RowT*, const Prepared&, int64_t, float*),
          void (*K4)(const RowT*, const Prepared&, int64_t, float*)>
void RunRange(const WeightView& w, const Prepared& p, int64_t m, int64_t n0, int64_t n1, float* y) {
  const int64_t row_bytes = RowBytes(w.type, w.cols);
  float out[kTileRows];
  for (int64_t c0 = n0; c0 < n1; c0 += kWeightChunk) {
    const int64_t c1 = std::min(n1, c0 + kWeightChunk);
    for (int64_t m0 = 0; m0 < m; m0 += kTileRows) {
      const int64_t mt = std::min<int64_t>(kTileRows, m - m0);
      for (int64_t n = c0; n < c1; ++n) {
        const auto* row =
            reinterpret_cast<const RowT*>(static_cast<const uint8_t*>(w.data) + n * row_bytes);
        switch (mt) {
          case 1:
            K1(row, p, m0, out);
            break;
          case 2:
            K2(row, p, m0, out);
            break;
          case 3:
            K3(row, p, m0, out);
            break;
          default:
            K4(row, p, m0, out);
            break;
        }
        for (int64_t r = 0; r < mt; ++r) y[(m0 + r) * w.rows + n] = out[r];
      }
    }
  }
}

// sum += w (unsigned bytes) x the 4 signed bytes at a, broadcast, with the broadcast folded into
// vpdpbusd's memory operand ({1to16}). GCC 12 never folds it and issues a separate vpbroadcastd
// per product.
inline void DpbusdBroadcast(__m512i& sum, __m512i w, const UnalignedInt32* a) {
  __asm__("vpdpbusd %[a]%{1to16%}, %[w], %[sum]" : [sum] "+v"(sum) : [w] "v"(w), [a] "m"(*a));
}

// Adds one block's products over lanes {g0, g0 + 1, g0 + 4, g0 + 5} (w) to each activation
// row's integer sums: lanes 0..3 (elements 0..15) to sub-block 0, lanes 4..7 to sub-block
// kSub - 1, and spread over kChains independent sums so that few rows are not bound by
// vpdpbusd's latency. rows: the block's 32 bytes of the first row, the next rows row_stride apart.
template <int MT, int kSub, int kChains>
inline void DotLanes(const __m512i w[4], int g0, const int8_t* rows, int64_t row_stride,
                     __m512i (&isum)[MT][kSub][kChains]) {
  const int lanes[4] = {g0, g0 + 1, g0 + 4, g0 + 5};
  for (int r = 0; r < MT; ++r) {
    const auto* a = reinterpret_cast<const UnalignedInt32*>(rows + r * row_stride);
    for (int j = 0; j < 4; ++j) {
      __m512i& sum = isum[r][j >= 2 ? kSub - 1 : 0][j % kChains];
      DpbusdBroadcast(sum, w[j], a + lanes[j]);
    }
  }
}

// Packed int8 kernel: 16 output rows (one row group) x MT activation rows [m0, m0 + MT), all
// blocks. isum = sum over the block of w_u * a, where w_u = w + offset (offset 128 for q8_0, 8
// for q4_0 nibbles); the offset's contribution, offset * sum(a), is the activation block's seed
// and starts the sum. Integer sums are exact, and the float accumulation order per output is
// fixed, so the result does not depend on MT, m or the thread split.
template <int MT, bool kNibbles, int kPlanes, bool kLut>
void PackedTile(const uint8_t* group, int64_t block_bytes, const BlockActivations& a, int64_t m0,
                float* y, int64_t y_stride, int64_t n0, int64_t rows_valid) {
  // The block's 8 weight registers are used in two halves of 4, so that MT integer sums, MT
  // float accumulators and 4 weights fit the 32 registers without spills up to MT = 8. Integer
  // sums are exact in any order, so the halves do not change results. The loops over rows that
  // touch acc are unrolled by pragma: left to GCC 12, it stores acc to the stack every block.
  __m512 acc[MT];
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < a.nb; ++b) {
    const uint8_t* blk = group + b * block_bytes;
    const uint8_t* values = blk + 32;
    const RowBlockTerms* terms = &a.Terms(m0, b);
    PrefetchAhead(blk, block_bytes);
    // Few activation rows leave one chain of dependent vpdpbusd per row, bound by its latency:
    // split it into kChains independent sums (integer sums are exact in any order).
    constexpr int kChains = MT == 1 ? 4 : (MT == 2 ? 2 : 1);
    __m512i isum[MT][1][kChains];
#pragma GCC unroll 16
    for (int r = 0; r < MT; ++r) {
      isum[r][0][0] = _mm512_set1_epi32(terms[r].seeds[0]);
      for (int c = 1; c < kChains; ++c) isum[r][0][c] = _mm512_setzero_si512();
    }
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      // Lanes g of this half: {2h, 2h+1, 2h+4, 2h+5} (nibbles keep lanes g and g+4 in one load).
      __m512i w[4];
      LoadLanes<kNibbles, kPlanes, kLut>(values, 2 * half, w);
      DotLanes<MT, 1, kChains>(w, 2 * half, a.Rows(m0, b), 32, isum);
    }
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
#pragma GCC unroll 16
    for (int r = 0; r < MT; ++r) {
      for (int c = 1; c < kChains; ++c) {
        isum[r][0][0] = _mm512_add_epi32(isum[r][0][0], isum[r][0][c]);
      }
      acc[r] = AddSimpleBlock(isum[r][0][0], dw, terms[r].d, acc[r]);
    }
  }
  const __mmask16 mask = rows_valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << rows_valid) - 1);
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) _mm512_mask_storeu_ps(y + (m0 + r) * y_stride + n0, mask, acc[r]);
}

// Up to 8 activation rows share each loaded weight block (8 weight registers + 8 accumulators
// fit the 32 zmm registers), so a verification of up to 7 drafted tokens reads the weights once.
constexpr int kPackedTileRows = 8;

using PackedTileFn = void (*)(const uint8_t*, int64_t, const BlockActivations&, int64_t, float*,
                              int64_t, int64_t, int64_t);

template <bool kNibbles, int kPlanes, bool kLut>
constexpr PackedTileFn kPackedTiles[kPackedTileRows] = {
    PackedTile<1, kNibbles, kPlanes, kLut>, PackedTile<2, kNibbles, kPlanes, kLut>,
    PackedTile<3, kNibbles, kPlanes, kLut>, PackedTile<4, kNibbles, kPlanes, kLut>,
    PackedTile<5, kNibbles, kPlanes, kLut>, PackedTile<6, kNibbles, kPlanes, kLut>,
    PackedTile<7, kNibbles, kPlanes, kLut>, PackedTile<8, kNibbles, kPlanes, kLut>};

// One block's exact integer sums for MT rows, per sub-block and split over kChains: seeded with
// the offset's -offset * sum(a) (terms of the block, one per row) where the layout has no mins,
// plus the products of the block's values (the header skipped) with rows' 32 bytes each.
template <int MT, int kSub, int kChains, bool kNibbles, int kPlanes, bool kLut, bool kMins>
inline void SeededBlockSums(const uint8_t* values, const RowBlockTerms* terms, const int8_t* rows,
                            __m512i (&isum)[MT][kSub][kChains]) {
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) {
    for (int s = 0; s < kSub; ++s) {
      for (int c = 0; c < kChains; ++c) isum[r][s][c] = _mm512_setzero_si512();
      if constexpr (!kMins) isum[r][s][0] = _mm512_set1_epi32(terms[r].seeds[s]);
    }
  }
#pragma GCC unroll 2
  for (int half = 0; half < 2; ++half) {
    __m512i w[4];
    LoadLanes<kNibbles, kPlanes, kLut>(values, 2 * half, w);
    DotLanes<MT, kSub, kChains>(w, 2 * half, rows, 32, isum);
  }
}

// Packed tile for the formats with mins, f32 scales or 16-value sub-blocks (q4_1, q5_1, q2_K,
// q3_K): per sub-block s, t = scale_s * (isum_s) [+ min_s * sum_s(a)], then acc += t * da.
// isum_s starts from the seed -offset * sum_s(a) as in PackedTile (the layouts with mins have
// offset 0: their sums start from zero); the float steps run in one fixed order, so results do
// not depend on MT, m or the thread split.
template <int MT, bool kNibbles, int kPlanes, bool kSub16, bool kMins, int kScales, bool kLut>
void PackedTileGeneral(const uint8_t* group, int64_t block_bytes, int64_t header_bytes,
                       const BlockActivations& a, int64_t m0, float* y, int64_t y_stride,
                       int64_t n0, int64_t rows_valid) {
  constexpr int kSub = kSub16 ? 2 : 1;
  // Independent integer sums per row: per sub-block, and for few rows split further so that
  // dependent vpdpbusd chains do not bound the time (exact in any order).
  constexpr int kChains = MT == 1 ? (kSub16 ? 2 : 4) : (MT == 2 && !kSub16 ? 2 : 1);
  const int64_t nb = a.nb;
  __m512 acc[MT];
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) acc[r] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* blk = group + b * block_bytes;
    const RowBlockTerms* terms = &a.Terms(m0, b);
    PrefetchAhead(blk, block_bytes);
    __m512i isum[MT][kSub][kChains];
    SeededBlockSums<MT, kSub, kChains, kNibbles, kPlanes, kLut, kMins>(blk + header_bytes, terms,
                                                                       a.Rows(m0, b), isum);
    __m512 scale[kSub], min[kSub];
    BlockScales<kSub, kMins, kScales>(blk, scale, min);
#pragma GCC unroll 16
    for (int r = 0; r < MT; ++r) {
      const __m512 t = BlockValue<kSub, kMins, kChains>(isum[r], terms[r].min_sums, scale, min);
      acc[r] = _mm512_fmadd_ps(t, _mm512_set1_ps(terms[r].d), acc[r]);
    }
  }
  const __mmask16 mask = rows_valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << rows_valid) - 1);
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) _mm512_mask_storeu_ps(y + (m0 + r) * y_stride + n0, mask, acc[r]);
}

// Packed tile for the K-quant layouts (q4_K, q5_K, q6_K, iq4_xs), whose activations share a
// scale per 256 values: a super-block's sum S = sum over its 8 blocks and their sub-blocks of
// sc * isum (isum seeded as in PackedTile) is exact in int32 (|S| < 2^28), so after its products
// a block costs one vpmulld per sub-block and row, and the float steps (AddSuperBlock) run once
// per super-block in one fixed order: results do not depend on MT, m or the thread split.
template <int MT, int kPlanes, bool kSub16, bool kMins, bool kLut>
void PackedTileSuper(const uint8_t* group, int64_t block_bytes, int64_t header_bytes,
                     const BlockActivations& a, int64_t m0, float* y, int64_t y_stride, int64_t n0,
                     int64_t rows_valid) {
  constexpr int kSub = kSub16 ? 2 : 1;
  constexpr int kChains = MT == 1 ? (kSub16 ? 2 : 4) : (MT == 2 && !kSub16 ? 2 : 1);
  constexpr int64_t kTrailerBytes = kMins ? 64 : 32;
  // The float sums change once per super-block: in memory, leaving the registers to the
  // integer sums and the weights.
  alignas(64) float acc[MT][16] = {};
  for (int64_t b0 = 0; b0 < a.nb; b0 += 8) {
    const uint8_t* trailer = group + a.nb * block_bytes + b0 / 8 * kTrailerBytes;
    // The trailer lies past the group's blocks, beyond the stream's prefetch: asked for now, it
    // arrives while the 8 blocks are multiplied (read at the end, it stalled one-row decode).
    _mm_prefetch(reinterpret_cast<const char*>(trailer), _MM_HINT_T0);
    __m512i super_sum[MT];
#pragma GCC unroll 16
    for (int r = 0; r < MT; ++r) super_sum[r] = _mm512_setzero_si512();
    for (int64_t b = b0; b < b0 + 8; ++b) {
      const uint8_t* blk = group + b * block_bytes;
      const RowBlockTerms* terms = &a.Terms(m0, b);
      PrefetchAhead(blk, block_bytes);
      __m512i isum[MT][kSub][kChains];
      SeededBlockSums<MT, kSub, kChains, true, kPlanes, kLut, kMins>(blk + header_bytes, terms,
                                                                     a.Rows(m0, b), isum);
      __m512i sc[kSub];
      BlockScaleInts<kSub>(blk, sc);
#pragma GCC unroll 16
      for (int r = 0; r < MT; ++r) {
        for (int s = 0; s < kSub; ++s) {
          __m512i whole = isum[r][s][0];
          for (int c = 1; c < kChains; ++c) whole = _mm512_add_epi32(whole, isum[r][s][c]);
          super_sum[r] = _mm512_add_epi32(super_sum[r], _mm512_mullo_epi32(whole, sc[s]));
        }
      }
    }
    SuperScales super;
    LoadSuperScales<kMins>(trailer, &super);
    __m512i min_pairs[4];
    if constexpr (kMins) LoadMinPairs(group + b0 * block_bytes, block_bytes, min_pairs);
#pragma GCC unroll 16
    for (int r = 0; r < MT; ++r) {
      _mm512_store_ps(acc[r], AddSuperBlock<kMins>(super_sum[r], &a.Terms(m0 + r, b0), a.m, super,
                                                   min_pairs, _mm512_load_ps(acc[r])));
    }
  }
  const __mmask16 mask = rows_valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << rows_valid) - 1);
  for (int r = 0; r < MT; ++r) {
    _mm512_mask_storeu_ps(y + (m0 + r) * y_stride + n0, mask, _mm512_load_ps(acc[r]));
  }
}

using GeneralTileFn = void (*)(const uint8_t*, int64_t, int64_t, const BlockActivations&, int64_t,
                               float*, int64_t, int64_t, int64_t);

template <bool kNibbles, int kPlanes, bool kSub16, bool kMins, int kScales, bool kLut = false>
constexpr GeneralTileFn kGeneralTiles[kPackedTileRows] = {
    PackedTileGeneral<1, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>,
    PackedTileGeneral<2, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>,
    PackedTileGeneral<3, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>,
    PackedTileGeneral<4, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>,
    PackedTileGeneral<5, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>,
    PackedTileGeneral<6, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>,
    PackedTileGeneral<7, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>,
    PackedTileGeneral<8, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>};

template <int kPlanes, bool kSub16, bool kMins, bool kLut = false>
constexpr GeneralTileFn kSuperTiles[kPackedTileRows] = {
    PackedTileSuper<1, kPlanes, kSub16, kMins, kLut>,
    PackedTileSuper<2, kPlanes, kSub16, kMins, kLut>,
    PackedTileSuper<3, kPlanes, kSub16, kMins, kLut>,
    PackedTileSuper<4, kPlanes, kSub16, kMins, kLut>,
    PackedTileSuper<5, kPlanes, kSub16, kMins, kLut>,
    PackedTileSuper<6, kPlanes, kSub16, kMins, kLut>,
    PackedTileSuper<7, kPlanes, kSub16, kMins, kLut>,
    PackedTileSuper<8, kPlanes, kSub16, kMins, kLut>};

// The tiles for a packed layout, or nullptr for the layouts PackedTile handles.
const GeneralTileFn* GeneralTilesFor(const PackedInt8Weights& w) {
  switch (LayoutOf(w)) {
    case PackedLayout::kQ4_1:
      return kGeneralTiles<true, 0, false, true, kScalesF16>;
    case PackedLayout::kQ5_1:
      return kGeneralTiles<true, 1, false, true, kScalesF16>;
    case PackedLayout::kQ4_K:
      return kSuperTiles<0, false, true>;
    case PackedLayout::kQ5_K:
      return kSuperTiles<1, false, true>;
    case PackedLayout::kQ6_K:
      return kSuperTiles<2, true, false>;
    case PackedLayout::kQ3_K:
      return kGeneralTiles<true, 0, true, false, kScalesF32>;
    case PackedLayout::kQ2_K:
      return kGeneralTiles<true, 0, true, true, kScalesF32>;
    case PackedLayout::kIq4XS:
      return kSuperTiles<0, false, false, /*kLut=*/true>;
    default:
      return nullptr;
  }
}

// The order every packed range walks its work in: row groups [g0, g1) in chunks of 4 (their
// weights stay in L1 / L2 while every tile of activation rows passes over them), tiles of up to
// tile_rows activation rows. tile(g, m0, mt) multiplies group g by rows [m0, m0 + mt).
template <typename TileFn>
void ForEachTile(int64_t g0, int64_t g1, int64_t m, int64_t tile_rows, TileFn tile) {
  constexpr int64_t kGroupsPerChunk = 4;
  for (int64_t c0 = g0; c0 < g1; c0 += kGroupsPerChunk) {
    const int64_t c1 = std::min(g1, c0 + kGroupsPerChunk);
    for (int64_t m0 = 0; m0 < m; m0 += tile_rows) {
      const int64_t mt = std::min<int64_t>(tile_rows, m - m0);
      for (int64_t g = c0; g < c1; ++g) tile(g, m0, mt);
    }
  }
}

void GeneralRange(const PackedInt8Weights& w, const GeneralTileFn* tiles, const BlockActivations& a,
                  int64_t g0, int64_t g1, float* y) {
  ForEachTile(g0, g1, a.m, kPackedTileRows, [&](int64_t g, int64_t m0, int64_t mt) {
    const int64_t n0 = g * 16;
    tiles[mt - 1](w.data.data() + g * w.GroupBytes(), w.BlockBytes(), w.HeaderBytes(), a, m0, y,
                  w.rows, n0, std::min<int64_t>(16, w.rows - n0));
  });
}

template <bool kNibbles, int kPlanes, bool kLut = false>
void PackedRange(const PackedInt8Weights& w, const BlockActivations& a, int64_t g0, int64_t g1,
                 float* y) {
  ForEachTile(g0, g1, a.m, kPackedTileRows, [&](int64_t g, int64_t m0, int64_t mt) {
    const int64_t n0 = g * 16;
    kPackedTiles<kNibbles, kPlanes, kLut>[mt - 1](w.data.data() + g * w.GroupBytes(),
                                                  w.BlockBytes(), a, m0, y, w.rows, n0,
                                                  std::min<int64_t>(16, w.rows - n0));
  });
}

// i8 tile (BASS's INT8): 16 output rows x MT activation rows over the whole row. The integer
// sum runs over all K (seeded with -128 * sum(a) for the +128 weight bytes) and is exact, so
// the float work is two multiplies per output, (float(isum) * scale_w) * d_a, in that order as
// in reference::MatmulI8: bit-identical to it for any MT, m or thread split.
template <int MT>
void PackedTileI8(const uint8_t* group, int64_t nb, const int8_t* aq, const float* da,
                  const int32_t* acorr, int64_t k, int64_t m0, float* y, int64_t y_stride,
                  int64_t n0, int64_t rows_valid) {
  constexpr int kChains = MT == 1 ? 4 : (MT == 2 ? 2 : 1);
  __m512i isum[MT][1][kChains];
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) {
    isum[r][0][0] = _mm512_set1_epi32(acorr[m0 + r]);
    for (int c = 1; c < kChains; ++c) isum[r][0][c] = _mm512_setzero_si512();
  }
  for (int64_t b = 0; b < nb; ++b) {
    const uint8_t* values = group + b * 512;
    PrefetchAhead(values, 512);
#pragma GCC unroll 2
    for (int half = 0; half < 2; ++half) {
      __m512i w[4];
      LoadLanes<false, 0>(values, 2 * half, w);
      DotLanes<MT, 1, kChains>(w, 2 * half, aq + m0 * k + b * 32, k, isum);
    }
  }
  const __m512 scale = _mm512_loadu_ps(reinterpret_cast<const float*>(group + nb * 512));
  const __mmask16 mask = rows_valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << rows_valid) - 1);
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) {
    for (int c = 1; c < kChains; ++c)
      isum[r][0][0] = _mm512_add_epi32(isum[r][0][0], isum[r][0][c]);
    const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(isum[r][0][0]), scale);
    _mm512_mask_storeu_ps(y + (m0 + r) * y_stride + n0, mask,
                          _mm512_mul_ps(t, _mm512_set1_ps(da[m0 + r])));
  }
}

// With no per-block float work, 16 integer sums + 4 weight registers fit the 32 zmm registers:
// each loaded weight block serves up to kI8TileRows activation rows.
constexpr int kI8TileRows = 16;

using I8TileFn = void (*)(const uint8_t*, int64_t, const int8_t*, const float*, const int32_t*,
                          int64_t, int64_t, float*, int64_t, int64_t, int64_t);
template <size_t... I>
constexpr std::array<I8TileFn, sizeof...(I)> MakeI8Tiles(std::index_sequence<I...>) {
  return {PackedTileI8<static_cast<int>(I) + 1>...};
}
constexpr std::array<I8TileFn, kI8TileRows> kI8Tiles =
    MakeI8Tiles(std::make_index_sequence<kI8TileRows>());

void I8Range(const PackedInt8Weights& w, const int8_t* aq, const float* da, const int32_t* acorr,
             int64_t m, int64_t g0, int64_t g1, float* y) {
  const int64_t nb = w.cols / 32;
  ForEachTile(g0, g1, m, kI8TileRows, [&](int64_t g, int64_t m0, int64_t mt) {
    const int64_t n0 = g * 16;
    kI8Tiles[mt - 1](w.data.data() + g * w.GroupBytes(), nb, aq, da, acorr, w.cols, m0, y, w.rows,
                     n0, std::min<int64_t>(16, w.rows - n0));
  });
}

}  // namespace

void Matmul(ThreadPool* pool, const float* x, int64_t m, const WeightView& w, float* y,
            MatmulScratch* scratch) {
  const int64_t k = w.cols;
  SPECD_CHECK(k % 32 == 0, "avx512 matmul needs a multiple of 32 inputs, got ", k);
  Prepared p;
  p.k = k;
  switch (w.type) {
    case DType::kF32:
    case DType::kF16:
      p.f32 = x;
      break;
    case DType::kBF16: {
      scratch->bytes.Resize(m * k * 2);
      auto* out = reinterpret_cast<uint16_t*>(scratch->bytes.data());
      for (int64_t i = 0; i < m * k; i += 32) {
        const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(x + i + 16), _mm512_loadu_ps(x + i));
        _mm512_storeu_si512(out + i, (__m512i)v);
      }
      p.bf16 = out;
      break;
    }
    case DType::kQ8_0:
    case DType::kQ4_0: {
      const bool q4 = w.type == DType::kQ4_0;
      const int64_t lanes = k / 4;
      scratch->bytes.Resize(m * k + m * lanes * 4 * (q4 ? 2 : 1));
      uint8_t* q = scratch->bytes.data();
      auto* dexp = reinterpret_cast<float*>(q + m * k);
      int32_t* corr = q4 ? reinterpret_cast<int32_t*>(dexp + m * lanes) : nullptr;
      for (int64_t i = 0; i < m; ++i) {
        QuantizeActivationRow(x + i * k, k, !q4, q + i * k, dexp + i * lanes,
                              q4 ? corr + i * lanes : nullptr);
      }
      p.q = q;
      p.dexp = dexp;
      p.corr = corr;
      break;
    }
    default:
      Fail("avx512 matmul: ", DTypeName(w.type), " weights must be packed (PackInt8)");
  }
  pool->ParallelFor(
      w.rows, kWeightChunk,
      [&](int64_t n0, int64_t n1) {
        switch (w.type) {
          case DType::kF32:
            RunRange<float, DotF32<1>, DotF32<2>, DotF32<3>, DotF32<4>>(w, p, m, n0, n1, y);
            break;
          case DType::kF16:
            RunRange<uint16_t, DotF16<1>, DotF16<2>, DotF16<3>, DotF16<4>>(w, p, m, n0, n1, y);
            break;
          case DType::kBF16:
            RunRange<uint16_t, DotBF16<1>, DotBF16<2>, DotBF16<3>, DotBF16<4>>(w, p, m, n0, n1, y);
            break;
          case DType::kQ8_0:
            RunRange<BlockQ8_0, DotQ8<1>, DotQ8<2>, DotQ8<3>, DotQ8<4>>(w, p, m, n0, n1, y);
            break;
          case DType::kQ4_0:
            RunRange<BlockQ4_0, DotQ4<1>, DotQ4<2>, DotQ4<3>, DotQ4<4>>(w, p, m, n0, n1, y);
            break;
          default:
            break;
        }
      },
      MinItemsPerThread(m * k));
}

void QuantizeActivationsPerRow(const float* x, int64_t m, int64_t k, int8_t* q, float* d,
                               int32_t* sum) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    // Four independent maxima: one chain would wait on vmaxps's latency every 16 values (a
    // maximum is exact in any order).
    __m512 amax[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                      _mm512_setzero_ps()};
    int64_t j = 0;
    for (; j + 64 <= k; j += 64) {
      for (int c = 0; c < 4; ++c) {
        amax[c] = _mm512_max_ps(amax[c], _mm512_abs_ps(_mm512_loadu_ps(xi + j + 16 * c)));
      }
    }
    for (; j < k; j += 16) amax[0] = _mm512_max_ps(amax[0], _mm512_abs_ps(_mm512_loadu_ps(xi + j)));
    amax[0] = _mm512_max_ps(_mm512_max_ps(amax[0], amax[1]), _mm512_max_ps(amax[2], amax[3]));
    d[i] = _mm512_reduce_max_ps(amax[0]) / 127.0f;
    const __m512 id = _mm512_set1_ps(d[i] != 0.0f ? 1.0f / d[i] : 0.0f);
    __m512i s = _mm512_setzero_si512();
    for (int64_t j = 0; j < k; j += 16) {
      const __m512i v = ClampToInt8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xi + j), id)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + i * k + j), _mm512_cvtsepi32_epi8(v));
      s = _mm512_add_epi32(s, v);
    }
    sum[i] = _mm512_reduce_add_epi32(s);
  }
}

void MatmulPackedI8(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w,
                    float* y, MatmulScratch* scratch) {
  const int64_t k = w.cols;
  // [m, K] int8 activations, [m] row scales, [m] -128 * sum of the row's activations.
  scratch->bytes.ResizeForOverwrite(m * k + m * 8);
  auto* aq = reinterpret_cast<int8_t*>(scratch->bytes.data());
  auto* da = reinterpret_cast<float*>(scratch->bytes.data() + m * k);
  auto* acorr = reinterpret_cast<int32_t*>(da + m);
  QuantizeActivationsPerRow(x, m, k, aq, da, acorr);
  for (int64_t i = 0; i < m; ++i) acorr[i] *= -w.offset;
  pool->ParallelFor(
      w.row_groups, 1, [&](int64_t g0, int64_t g1) { I8Range(w, aq, da, acorr, m, g0, g1, y); },
      MinItemsPerThread(16 * m * k));
}

BlockActivations QuantizeBlockActivations(const float* x, int64_t m, const PackedInt8Weights& w,
                                          MatmulScratch* scratch) {
  const int64_t k = w.cols;
  const int64_t nb = k / 32;
  const int64_t span = ActivationSpan(w);
  const BlockActivationsBuffer out = AllocateBlockActivations(m, nb, scratch);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t s0 = 0; s0 < k; s0 += span) {
      const float* xs = x + i * k + s0;
      __m512 amax = _mm512_setzero_ps();
      for (int64_t j = 0; j < span; j += 16) {
        amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(xs + j)));
      }
      const float d = _mm512_reduce_max_ps(amax) / 127.0f;
      const __m512 id = _mm512_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
      for (int64_t b = s0 / 32; b < (s0 + span) / 32; ++b) {
        const float* xb = x + i * k + b * 32;
        // Clamped as the int8 store saturates, so the sums below are of the values the kernel
        // multiplies (they differ only for non-finite activations, which would overflow them).
        const __m512i i0 = ClampToInt8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb), id)));
        const __m512i i1 =
            ClampToInt8(_mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16), id)));
        int8_t* q = out.q + (b * m + i) * 32;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(i0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(i1));
        out.terms[b * m + i] =
            MakeRowBlockTerms(d, _mm512_reduce_add_epi32(i0), _mm512_reduce_add_epi32(i1), w);
      }
    }
    PairBlockSums(w, out.terms + i, nb, m);
  }
  return BlockActivations{out.q, out.terms, nb, m};
}

void MatmulPacked(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w, float* y,
                  MatmulScratch* scratch) {
  if (w.row_scales) return MatmulPackedI8(pool, x, m, w, y, scratch);
  CheckHighBitsForm(w, HighBits::kPlanes, "avx512 packed matmul");
  const BlockActivations a = QuantizeBlockActivations(x, m, w, scratch);
  const GeneralTileFn* general = GeneralTilesFor(w);
  pool->ParallelFor(
      w.row_groups, 1,
      [&](int64_t g0, int64_t g1) {
        if (general != nullptr) {
          GeneralRange(w, general, a, g0, g1, y);
        } else if (w.level_lut) {
          PackedRange<true, 0, true>(w, a, g0, g1, y);
        } else if (!w.nibbles) {
          PackedRange<false, 0>(w, a, g0, g1, y);
        } else if (w.high_planes == 0) {
          PackedRange<true, 0>(w, a, g0, g1, y);
        } else {
          PackedRange<true, 1>(w, a, g0, g1, y);
        }
      },
      MinItemsPerThread(16 * m * w.cols));
}

}  // namespace specd::avx512
