// The pieces of the packed int8 matmul that the AVX-512 VNNI kernel (matmul_avx512.cc) and the
// AMX tile kernel for GGUF types (amx_packed_kernel.h) share: reading a packed block's levels, its
// scales, and the float steps after the exact integer sums. Sharing them is what makes the two
// kernels' results the same bits. Include only from files compiled with SPECD_AVX512_FLAGS.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "kernels/block_activations.h"
#include "kernels/kernels.h"

namespace specd::avx512 {

// Quantizes x [m, w.cols] for w's layout into scratch (reference::Int8Activations' bits).
BlockActivations QuantizeBlockActivations(const float* x, int64_t m, const PackedInt8Weights& w,
                                          MatmulScratch* scratch);

// The IQ4 grid's levels + 128 in each 128-bit lane, for vpshufb (indices are 0..15).
inline __m512i Iq4LevelBytes() {
  return _mm512_broadcast_i32x4(
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4LevelBytes.data())));
}

// Lanes {g0, g0 + 1, g0 + 4, g0 + 5} of a packed block's values as unsigned bytes: loaded, or
// unpacked from nibbles (lanes g and g + 4 share a load) plus kPlanes high bit planes, or with
// kLut the nibbles' grid levels + 128.
template <bool kNibbles, int kPlanes, bool kLut = false>
inline void LoadLanes(const uint8_t* values, int g0, __m512i w[4]) {
  const int lanes[4] = {g0, g0 + 1, g0 + 4, g0 + 5};
  if constexpr (!kNibbles) {
    for (int j = 0; j < 4; ++j) w[j] = _mm512_loadu_si512(values + lanes[j] * 64);
    return;
  }
  const __m512i low4 = _mm512_set1_epi8(0x0F);
  const __m512i z0 = _mm512_loadu_si512(values + g0 * 64);
  const __m512i z1 = _mm512_loadu_si512(values + (g0 + 1) * 64);
  w[0] = _mm512_and_si512(z0, low4);
  w[1] = _mm512_and_si512(z1, low4);
  w[2] = _mm512_and_si512(_mm512_srli_epi16(z0, 4), low4);
  w[3] = _mm512_and_si512(_mm512_srli_epi16(z1, 4), low4);
  if constexpr (kLut) {
    const __m512i levels = Iq4LevelBytes();
    for (int j = 0; j < 4; ++j) w[j] = _mm512_shuffle_epi8(levels, w[j]);
  }
  for (int plane = 0; plane < kPlanes; ++plane) {
    const __m512i bit = _mm512_set1_epi8(static_cast<char>(16 << plane));
    for (int j = 0; j < 4; ++j) {
      uint64_t bits;
      std::memcpy(&bits, values + 256 + plane * 64 + lanes[j] * 8, 8);
      w[j] = _mm512_mask_add_epi8(w[j], _cvtu64_mask64(bits), w[j], bit);
    }
  }
}

// Header kinds: f16 or f32 scales (and mins), or K-quant byte scales with a trailer.
enum ScaleKind { kScalesF16, kScalesF32, kScalesK };

// K-quant scales: the 16 rows' super-block d and -dmin, read from the row group's trailer once
// per 8 blocks. (-dmin) * da is -(dmin * da) to the bit (rounding is symmetric).
struct SuperScales {
  __m512 d = _mm512_setzero_ps();
  __m512 neg_dmin = _mm512_setzero_ps();
};

template <bool kMins>
inline void LoadSuperScales(const uint8_t* trailer_bytes, SuperScales* super) {
  const auto* trailer = reinterpret_cast<const __m256i*>(trailer_bytes);
  super->d = _mm512_cvtph_ps(_mm256_loadu_si256(trailer));
  if constexpr (kMins) {
    super->neg_dmin = _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(_mm512_cvtph_ps(_mm256_loadu_si256(trailer + 1))),
                         _mm512_set1_epi32(INT32_MIN)));
  }
}

// The 16 rows' scales (and mins) of block `blk` per sub-block, from the header's f16 / f32 floats
// (the K-quant layouts take their scales per super-block: AddSuperBlock).
template <int kSub, bool kMins, int kScales>
inline void BlockScales(const uint8_t* blk, __m512 (&scale)[kSub], __m512 (&min)[kSub]) {
  static_assert(kScales != kScalesK);
  auto load16 = [&](int index) {  // the header's 16 floats number `index`
    if constexpr (kScales == kScalesF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(blk) + 16 * index);
    } else {
      return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk) + index));
    }
  };
  for (int s = 0; s < kSub; ++s) {
    scale[s] = load16(s);
    if constexpr (kMins) min[s] = load16(kSub + s);
  }
}

// K-quant byte scales of block blk's 16 rows per sub-block as int32, for vpmulld (signed: q6_K's
// scales and iq4_xs's ls - 32; q4_K's and q5_K's are 0..63).
template <int kSub>
inline void BlockScaleInts(const uint8_t* blk, __m512i (&sc)[kSub]) {
  for (int s = 0; s < kSub; ++s) {
    sc[s] = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16 * s)));
  }
}

// The byte mins (header bytes 16..31) of a super-block's 8 blocks, the first at `first` and the
// next block_bytes apart, as int16 pairs per row: pairs[j] lane r = (m[2j][r], m[2j + 1][r]).
inline void LoadMinPairs(const uint8_t* first, int64_t block_bytes, __m512i (&pairs)[4]) {
  for (int j = 0; j < 4; ++j) {
    const auto* even = reinterpret_cast<const __m128i*>(first + 2 * j * block_bytes + 16);
    const auto* odd = reinterpret_cast<const __m128i*>(first + (2 * j + 1) * block_bytes + 16);
    const __m128i e = _mm_loadu_si128(even), o = _mm_loadu_si128(odd);
    pairs[j] =
        _mm512_cvtepu8_epi16(_mm256_set_m128i(_mm_unpackhi_epi8(e, o), _mm_unpacklo_epi8(e, o)));
  }
}

// One activation row's super-block of a K-quant layout, for the 16 rows: S = the exact sum over
// its blocks and sub-blocks of sc * isum; terms: the row's terms of the super-block's first
// block, the next blocks' `stride` apart. acc + float(S) * (d * da), then with mins
// + float(M) * (-dmin * da), M = the sum of mins times the activations' block sums (exact).
template <bool kMins>
inline __m512 AddSuperBlock(__m512i super_sum, const RowBlockTerms* terms, int64_t stride,
                            const SuperScales& super, const __m512i (&min_pairs)[4], __m512 acc) {
  const __m512 da = _mm512_set1_ps(terms->d);
  acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(super_sum), _mm512_mul_ps(super.d, da), acc);
  if constexpr (kMins) {
    __m512i min_sum = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j) {
      min_sum = _mm512_dpwssd_epi32(min_sum, min_pairs[j],
                                    _mm512_set1_epi32(terms[2 * j * stride].sum_pair));
    }
    acc = _mm512_fmadd_ps(_mm512_cvtepi32_ps(min_sum), _mm512_mul_ps(super.neg_dmin, da), acc);
  }
  return acc;
}

// One row's value of a block: its chained integer sums per sub-block, scaled, plus the mins
// times the sums of its activations: t = sum_s scale_s * isum_s [+ min_s * min_sums_s].
template <int kSub, bool kMins, int kChains>
inline __m512 BlockValue(const __m512i (&isum)[kSub][kChains], const float* min_sums,
                         const __m512 (&scale)[kSub], const __m512 (&min)[kSub]) {
  __m512i whole[kSub];
  for (int s = 0; s < kSub; ++s) {
    whole[s] = isum[s][0];
    for (int c = 1; c < kChains; ++c) whole[s] = _mm512_add_epi32(whole[s], isum[s][c]);
  }
  __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(whole[0]), scale[0]);
  if constexpr (kSub == 2) t = _mm512_fmadd_ps(_mm512_cvtepi32_ps(whole[1]), scale[1], t);
  if constexpr (kMins) {
    for (int s = 0; s < kSub; ++s) t = _mm512_fmadd_ps(_mm512_set1_ps(min_sums[s]), min[s], t);
  }
  return t;
}

// The simple layouts' step (one f16 scale per 32, no mins): acc + float(isum) * (dw * da).
inline __m512 AddSimpleBlock(__m512i isum, __m512 dw, float da, __m512 acc) {
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(dw, _mm512_set1_ps(da)), acc);
}

}  // namespace specd::avx512
