// AVX2 kernels (with FMA and F16C) for the packed int8 layout (PackedInt8Weights), for CPUs
// without AVX-512: without them every quantized matmul would dequantize each weight row to f32.
// Compiled with those ISA flags and called only after a run-time check.
//
// A packed 64-byte lane chunk holds 4 bytes of each of a row group's 16 rows; this kernel reads
// it as two 32-byte halves of 8 rows and runs the whole block loop once per half. vpmaddubsw +
// vpmaddwd stand in for vpdpbusd: exact while each byte pair's sum fits int16, which holds for
// levels up to 6 bits (2 * 63 * 128 < 32768). Bytes with offset 128 (q8_0, i8) could not: there
// the signed level q = u - 128 multiplies (|q| unsigned, a with q's sign; 2 * 128 * 127 < 32768)
// and the sum is seeded with 0 instead of -128 * sum(a), which is the same integer.
//
// Every integer sum is exact and every float step is the AVX-512 kernel's, in its order, per
// output row: results equal the AVX-512 kernels' bit for bit and do not depend on the number of
// activation rows or the thread split (batch invariance).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "kernels/block_activations.h"
#include "kernels/kernels.h"

namespace specd::avx2 {
namespace {

// Measured on a Zen 2 EPYC (SmolLM2 Q4_1): 8 KB and 16 KB alike, 4 KB within noise, 2 KB slower.
constexpr int64_t kPrefetchBytes = 8192;

// A tile reads its row group twice (one pass per half of 8 rows), so a prefetch per block of
// half 0 alone would leave the memory idle for all of half 1. Instead each of the group's 2 * nb
// (half, block) steps prefetches an equal share of the group's bytes, kPrefetchBytes ahead of
// where an even stream through the group would be (near its end: into the next group). Only the
// first tile of activation rows prefetches: later tiles re-read the same groups from cache.
class GroupPrefetcher {
 public:
  GroupPrefetcher(const uint8_t* group, int64_t group_bytes, int64_t n_steps, bool enabled)
      : base_(reinterpret_cast<uintptr_t>(group) + kPrefetchBytes),
        end_(base_ + group_bytes),
        step_bytes_(enabled ? group_bytes / n_steps : 0),
        last_step_(n_steps - 1) {}

  // Prefetches the lines that start in this step's share.
  void Step(int64_t step) const {
    if (step_bytes_ == 0) return;
    const uintptr_t from = base_ + step * step_bytes_;
    const uintptr_t to = step == last_step_ ? end_ : from + step_bytes_;
    for (uintptr_t line = (from + 63) & ~uintptr_t{63}; line < to; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T0);
    }
  }

 private:
  uintptr_t base_, end_;
  int64_t step_bytes_, last_step_;
};

typedef int32_t UnalignedInt32 __attribute__((may_alias, aligned(1)));

// Lane `lane`'s kBits high bits of rows 8h..8h+7 placed at bit 4 of its 32 bytes, from the
// block's HighBits::kFields for half h (`fields`, kBits vectors of 32 bytes): the lane's field
// starts at bit (lane * kBits) % 8 of its vector, so one 16-bit shift (bits it carries in from
// the neighbouring byte land below bit 4 or above the field) and an and.
template <int kBits>
inline __m256i LaneHighBits(const uint8_t* fields, int lane) {
  const int at = lane * kBits;
  const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(fields + at / 8 * 32));
  const int shift = 4 - at % 8;
  const __m256i placed = shift > 0   ? _mm256_slli_epi16(v, shift)
                         : shift < 0 ? _mm256_srli_epi16(v, -shift)
                                     : v;
  return _mm256_and_si256(placed, _mm256_set1_epi8(static_cast<char>(((1 << kBits) - 1) << 4)));
}

// Lanes g and g + 4 (elements 4g..4g+3 and 16+4g..16+4g+3) of rows 8h..8h+7 of a packed block's
// values, as unsigned bytes: two loads, or one load of nibbles (low: lane g, high: lane g + 4)
// with kPlanes high bits per level (HighBits::kFields), or with kLut the nibbles' IQ4 grid
// levels + 128 (looked up with vpshufb).
template <bool kNibbles, int kPlanes, bool kLut = false>
inline void LoadLanePair(const uint8_t* values, int g, int h, __m256i* lo, __m256i* hi) {
  if constexpr (!kNibbles) {
    *lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + g * 64 + 32 * h));
    *hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + (g + 4) * 64 + 32 * h));
    return;
  }
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m256i z = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(values + g * 64 + 32 * h));
  *lo = _mm256_and_si256(z, low4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(z, 4), low4);
  if constexpr (kLut) {
    const __m256i levels = _mm256_broadcastsi128_si256(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4LevelBytes.data())));
    *lo = _mm256_shuffle_epi8(levels, *lo);
    *hi = _mm256_shuffle_epi8(levels, *hi);
  }
  if constexpr (kPlanes > 0) {
    const uint8_t* fields = values + 256 + 32 * kPlanes * h;
    *lo = _mm256_or_si256(*lo, LaneHighBits<kPlanes>(fields, g));
    *hi = _mm256_or_si256(*hi, LaneHighBits<kPlanes>(fields, g + 4));
  }
}

// Byte-pair sums (vpmaddubsw's int16) of how many lanes one int16 can add up before vpmaddwd
// widens them: each lane adds at most 2 * max_level * 128, so 8 lanes for 4-bit levels, 4 for
// 5-bit, 2 for 6-bit; 1 for the signed 8-bit products (2 * 128 * 127 already fills an int16).
template <bool kNibbles, int kPlanes, bool kSigned>
constexpr int kLanesPerInt16 = kSigned        ? 1
                               : !kNibbles    ? 2
                               : kPlanes == 0 ? 8
                               : kPlanes == 1 ? 4
                                              : 2;

// An opaque use of v: GCC 12 reassociates a chain of integer adds into a tree, which needs every
// row's products live at once and spilled most of them to the stack; after this it cannot.
inline void Opaque(__m256i& v) { __asm__("" : "+x"(v)); }

// Signed levels (bytes u = q + 128, as lo / hi): each row's products |q| x (a with q's sign) of
// lanes g and g + 4, widened and added to its sums at once (2 * 128 * 127 fills an int16).
template <int MT, int kHalves, int kSub>
inline void AddSignedProducts(__m256i (&lo)[kHalves], __m256i (&hi)[kHalves], int g,
                              const int8_t* rows, int64_t row_stride,
                              const __m256i (&widen)[kHalves][kSub],
                              __m256i (&isum)[MT][kHalves][kSub]) {
  const __m256i sign_bit = _mm256_set1_epi8(static_cast<char>(0x80));
  __m256i q_lo[kHalves], q_hi[kHalves];
#pragma GCC unroll 2
  for (int h = 0; h < kHalves; ++h) {
    q_lo[h] = _mm256_xor_si256(lo[h], sign_bit);
    q_hi[h] = _mm256_xor_si256(hi[h], sign_bit);
    lo[h] = _mm256_abs_epi8(q_lo[h]);
    hi[h] = _mm256_abs_epi8(q_hi[h]);
  }
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) {
    const auto* a = reinterpret_cast<const UnalignedInt32*>(rows + r * row_stride);
    const __m256i a_lo = _mm256_set1_epi32(a[g]), a_hi = _mm256_set1_epi32(a[g + 4]);
#pragma GCC unroll 2
    for (int h = 0; h < kHalves; ++h) {
      const __m256i p_lo = _mm256_maddubs_epi16(lo[h], _mm256_sign_epi8(a_lo, q_lo[h]));
      const __m256i p_hi = _mm256_maddubs_epi16(hi[h], _mm256_sign_epi8(a_hi, q_hi[h]));
      __m256i(&sum)[kSub] = isum[r][h];
      sum[0] = _mm256_add_epi32(sum[0], _mm256_madd_epi16(p_lo, widen[h][0]));
      sum[kSub - 1] = _mm256_add_epi32(sum[kSub - 1], _mm256_madd_epi16(p_hi, widen[h][kSub - 1]));
      for (int s = 0; s < kSub; ++s) Opaque(sum[s]);
    }
  }
}

// Unsigned levels: each row's byte-pair products of lanes g and g + 4 added to its int16 sums
// (acc16, restarted where a run starts), which are widened into its sums where the run ends.
template <int MT, int kHalves, int kSub>
inline void AddUnsignedProducts(const __m256i (&lo)[kHalves], const __m256i (&hi)[kHalves], int g,
                                bool run_starts, bool run_ends, const int8_t* rows,
                                int64_t row_stride, const __m256i (&widen)[kHalves][kSub],
                                __m256i (&acc16)[MT][kHalves][kSub],
                                __m256i (&isum)[MT][kHalves][kSub]) {
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) {
    const auto* a = reinterpret_cast<const UnalignedInt32*>(rows + r * row_stride);
    const __m256i a_lo = _mm256_set1_epi32(a[g]), a_hi = _mm256_set1_epi32(a[g + 4]);
#pragma GCC unroll 2
    for (int h = 0; h < kHalves; ++h) {
      const __m256i p_lo = _mm256_maddubs_epi16(lo[h], a_lo);
      const __m256i p_hi = _mm256_maddubs_epi16(hi[h], a_hi);
      __m256i(&acc)[kSub] = acc16[r][h];
      if constexpr (kSub == 1) {
        const __m256i pair = _mm256_add_epi16(p_lo, p_hi);
        acc[0] = run_starts ? pair : _mm256_add_epi16(acc[0], pair);
      } else {
        acc[0] = run_starts ? p_lo : _mm256_add_epi16(acc[0], p_lo);
        acc[1] = run_starts ? p_hi : _mm256_add_epi16(acc[1], p_hi);
      }
      for (int s = 0; s < kSub; ++s) Opaque(acc[s]);
      if (run_ends) {
        for (int s = 0; s < kSub; ++s) {
          isum[r][h][s] = _mm256_add_epi32(isum[r][h][s], _mm256_madd_epi16(acc[s], widen[h][s]));
        }
      }
    }
  }
}

// Adds halves h0..h0 + kHalves - 1 of a block to each activation row's integer sums: lanes 0..3
// (elements 0..15) to sub-block 0, lanes 4..7 to sub-block kSub - 1. rows: the block's 32
// activation bytes of the tile's first row, the next rows row_stride apart; a row's broadcast
// activations serve every half. Unsigned byte-pair products are summed in int16 over as many
// lanes as stay exact, then widened once by vpmaddwd with `widen` (int16 pairs per output row and
// sub-block: ones, or the K-quants' byte scales). The loops are unrolled by pragma, as in the
// AVX-512 kernel, and the sums made opaque after each add (Opaque).
template <int MT, int kHalves, int kSub, bool kNibbles, int kPlanes, bool kSigned,
          bool kLut = false>
inline void DotBlockHalves(const uint8_t* values, int h0, const int8_t* rows, int64_t row_stride,
                           const __m256i (&widen)[kHalves][kSub],
                           __m256i (&isum)[MT][kHalves][kSub]) {
  constexpr int kRun = kLanesPerInt16<kNibbles, kPlanes, kSigned>;
  constexpr int kLanesPerLoad = kSub == 1 ? 2 : 1;  // lanes a pair adds to each sub-block
  __m256i acc16[MT][kHalves][kSub];
#pragma GCC unroll 4
  for (int g = 0; g < 4; ++g) {
    __m256i lo[kHalves], hi[kHalves];
#pragma GCC unroll 2
    for (int h = 0; h < kHalves; ++h) {
      LoadLanePair<kNibbles, kPlanes, kLut>(values, g, h0 + h, &lo[h], &hi[h]);
    }
    if constexpr (kSigned) {
      AddSignedProducts<MT, kHalves, kSub>(lo, hi, g, rows, row_stride, widen, isum);
    } else {
      const bool run_starts = (g * kLanesPerLoad) % kRun == 0;
      const bool run_ends = ((g + 1) * kLanesPerLoad) % kRun == 0 || g == 3;
      AddUnsignedProducts<MT, kHalves, kSub>(lo, hi, g, run_starts, run_ends, rows, row_stride,
                                             widen, acc16, isum);
    }
  }
}

// vpmaddwd multipliers that only widen: int16 ones for every half and sub-block.
template <int kHalves, int kSub>
struct Ones {
  __m256i v[kHalves][kSub];
  Ones() {
    for (auto& half : v) {
      for (__m256i& sub : half) sub = _mm256_set1_epi16(1);
    }
  }
};

// Halves of a row group a tile computes in one pass over its blocks: both for one activation row
// (the weights are read once and each broadcast activation serves 16 outputs), one at a time for
// more (their sums and accumulators fill the 16 registers). In a group of 8 or fewer valid rows
// the second half is then computed from the group's padding and not stored.
template <int MT>
constexpr int kHalvesPerPass = MT == 1 ? 2 : 1;

// Stores acc's first `valid` floats at y (none if valid <= 0, all 8 if valid >= 8).
inline void StoreRows(float* y, __m256 acc, int64_t valid) {
  if (valid <= 0) return;
  if (valid >= 8) {
    _mm256_storeu_ps(y, acc);
    return;
  }
  alignas(32) float out[8];
  _mm256_store_ps(out, acc);
  std::copy(out, out + valid, y);
}

// A pass's float accumulators [rows][halves], zeroed.
template <int MT, int kHalves>
inline void ZeroAccumulators(__m256 (&acc)[MT][kHalves]) {
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) {
    for (int h = 0; h < kHalves; ++h) acc[r][h] = _mm256_setzero_ps();
  }
}

// Stores a pass's accumulators (halves h0.. of rows 0..MT-1) at y [MT, y_stride], the first
// rows_valid outputs of the group.
template <int MT, int kHalves>
inline void StoreAccumulators(const __m256 (&acc)[MT][kHalves], int h0, float* y, int64_t y_stride,
                              int64_t rows_valid) {
#pragma GCC unroll 16
  for (int r = 0; r < MT; ++r) {
    for (int h = 0; h < kHalves; ++h) {
      StoreRows(y + r * y_stride + 8 * (h0 + h), acc[r][h], rows_valid - 8 * (h0 + h));
    }
  }
}

// AVX-512's PackedTile (f16 block scales, no mins, one scale per 32): for 8 output rows of a
// half, acc += float(isum) * (dw * da) per block; isum starts from the block's seed (signed
// levels: from 0, the same integer).
template <int MT, bool kNibbles, int kPlanes, bool kSigned, bool kLut>
void PackedTile(const uint8_t* group, int64_t group_bytes, int64_t block_bytes,
                const BlockActivations& a, int64_t m0, float* y, int64_t y_stride, int64_t n0,
                int64_t rows_valid) {
  constexpr int kHalves = kHalvesPerPass<MT>;
  const GroupPrefetcher prefetch(group, group_bytes, 2 / kHalves * a.nb, m0 == 0);
  for (int h0 = 0; h0 < 2 && 8 * h0 < rows_valid; h0 += kHalves) {
    __m256 acc[MT][kHalves];
    ZeroAccumulators(acc);
    for (int64_t b = 0; b < a.nb; ++b) {
      const uint8_t* blk = group + b * block_bytes;
      const RowBlockTerms* terms = &a.Terms(m0, b);
      prefetch.Step(h0 / kHalves * a.nb + b);
      __m256i isum[MT][kHalves][1];
#pragma GCC unroll 16
      for (int r = 0; r < MT; ++r) {
        for (int h = 0; h < kHalves; ++h) {
          isum[r][h][0] = kSigned ? _mm256_setzero_si256() : _mm256_set1_epi32(terms[r].seeds[0]);
        }
      }
      DotBlockHalves<MT, kHalves, 1, kNibbles, kPlanes, kSigned, kLut>(
          blk + 32, h0, a.Rows(m0, b), 32, Ones<kHalves, 1>().v, isum);
#pragma GCC unroll 2
      for (int h = 0; h < kHalves; ++h) {
        const __m256 dw =
            _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk) + h0 + h));
#pragma GCC unroll 16
        for (int r = 0; r < MT; ++r) {
          acc[r][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][h][0]),
                                      _mm256_mul_ps(dw, _mm256_set1_ps(terms[r].d)), acc[r][h]);
        }
      }
    }
    StoreAccumulators(acc, h0, y + m0 * y_stride + n0, y_stride, rows_valid);
  }
}

enum ScaleKind { kScalesF16, kScalesF32 };

// This half's 8 rows' scales (and mins) of block `blk` per sub-block, as AVX-512's BlockScales
// makes them: the header's f16 / f32 floats.
template <int kSub, bool kMins, int kScales>
inline void HalfScales(const uint8_t* blk, int h, __m256 (&scale)[kSub], __m256 (&min)[kSub]) {
  auto load8 = [&](int index) {  // this half's 8 of the header's 16 floats number `index`
    if constexpr (kScales == kScalesF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(blk) + 16 * index + 8 * h);
    } else {
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk) + 2 * index + h));
    }
  };
  for (int s = 0; s < kSub; ++s) {
    scale[s] = load8(s);
    if constexpr (kMins) min[s] = load8(kSub + s);
  }
}

// AVX-512's BlockValue for 8 output rows: t = sum_s scale_s * isum_s [+ min_s * min_sums_s].
template <int kSub, bool kMins>
inline __m256 HalfBlockValue(const __m256i (&isum)[kSub], const float* min_sums,
                             const __m256 (&scale)[kSub], const __m256 (&min)[kSub]) {
  __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[0]), scale[0]);
  if constexpr (kSub == 2) t = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[1]), scale[1], t);
  if constexpr (kMins) {
    for (int s = 0; s < kSub; ++s) t = _mm256_fmadd_ps(_mm256_set1_ps(min_sums[s]), min[s], t);
  }
  return t;
}

// AVX-512's PackedTileGeneral (mins, f32 scales, 16-value sub-blocks: q4_1, q5_1, q2_K, q3_K),
// the same float steps in the same order. Grid levels (kLut) are bytes with offset 128, multiplied
// signed as in PackedTile; the layouts with mins have offset 0: their sums start from zero.
template <int MT, bool kNibbles, int kPlanes, bool kSub16, bool kMins, int kScales, bool kLut>
void PackedTileGeneral(const uint8_t* group, int64_t group_bytes, int64_t block_bytes,
                       int64_t header_bytes, const BlockActivations& a, int64_t m0, float* y,
                       int64_t y_stride, int64_t n0, int64_t rows_valid) {
  constexpr int kSub = kSub16 ? 2 : 1;
  constexpr int kHalves = kHalvesPerPass<MT>;
  const GroupPrefetcher prefetch(group, group_bytes, 2 / kHalves * a.nb, m0 == 0);
  for (int h0 = 0; h0 < 2 && 8 * h0 < rows_valid; h0 += kHalves) {
    __m256 acc[MT][kHalves];
    ZeroAccumulators(acc);
    for (int64_t b = 0; b < a.nb; ++b) {
      const uint8_t* blk = group + b * block_bytes;
      const RowBlockTerms* terms = &a.Terms(m0, b);
      prefetch.Step(h0 / kHalves * a.nb + b);
      __m256i isum[MT][kHalves][kSub];
#pragma GCC unroll 16
      for (int r = 0; r < MT; ++r) {
        for (int h = 0; h < kHalves; ++h) {
          for (int s = 0; s < kSub; ++s) {
            isum[r][h][s] =
                kLut || kMins ? _mm256_setzero_si256() : _mm256_set1_epi32(terms[r].seeds[s]);
          }
        }
      }
      DotBlockHalves<MT, kHalves, kSub, kNibbles, kPlanes, /*kSigned=*/kLut, kLut>(
          blk + header_bytes, h0, a.Rows(m0, b), 32, Ones<kHalves, kSub>().v, isum);
#pragma GCC unroll 2
      for (int h = 0; h < kHalves; ++h) {
        __m256 scale[kSub], min[kSub];
        HalfScales<kSub, kMins, kScales>(blk, h0 + h, scale, min);
#pragma GCC unroll 16
        for (int r = 0; r < MT; ++r) {
          const __m256 t = HalfBlockValue<kSub, kMins>(isum[r][h], terms[r].min_sums, scale, min);
          acc[r][h] = _mm256_fmadd_ps(t, _mm256_set1_ps(terms[r].d), acc[r][h]);
        }
      }
    }
    StoreAccumulators(acc, h0, y + m0 * y_stride + n0, y_stride, rows_valid);
  }
}

// Lane j = (first[j], second[j]) as int16, for 8 bytes each (signed, or zero-extended).
template <bool kSignedBytes>
inline __m256i BytePairs(const uint8_t* first, const uint8_t* second) {
  const __m128i bytes =
      _mm_unpacklo_epi8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(first)),
                        _mm_loadl_epi64(reinterpret_cast<const __m128i*>(second)));
  return kSignedBytes ? _mm256_cvtepi8_epi16(bytes) : _mm256_cvtepu8_epi16(bytes);
}

// AVX-512's AddSuperBlock for 8 output rows of half h: the super-block's d (and -dmin, and the
// mins of its blocks, the first at `first`) against one activation row's terms of its first
// block (the next blocks' `stride` apart).
template <bool kMins>
inline __m256 AddHalfSuperBlock(__m256i super_sum, const RowBlockTerms* terms, int64_t stride,
                                __m256 d, __m256 neg_dmin, const __m256i (&min_pairs)[4],
                                __m256 acc) {
  const __m256 da = _mm256_set1_ps(terms->d);
  acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(super_sum), _mm256_mul_ps(d, da), acc);
  if constexpr (kMins) {
    __m256i min_sum = _mm256_setzero_si256();
    for (int j = 0; j < 4; ++j) {
      const __m256i sums = _mm256_set1_epi32(terms[2 * j * stride].sum_pair);
      min_sum = _mm256_add_epi32(min_sum, _mm256_madd_epi16(min_pairs[j], sums));
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(min_sum), _mm256_mul_ps(neg_dmin, da), acc);
  }
  return acc;
}

// Adds the super-block that starts at block b0 (trailer: its d, then dmin) to a pass's
// accumulators, from the rows' exact sums over its blocks [MT][kHalves][kSub].
template <int MT, int kHalves, int kSub, bool kMins>
inline void AddSuperBlocks(const uint8_t* first, int64_t block_bytes, const uint8_t* trailer,
                           const BlockActivations& a, int64_t m0, int64_t b0, int h0,
                           const __m256i (&isum)[MT][kHalves][kSub], __m256 (&acc)[MT][kHalves]) {
#pragma GCC unroll 2
  for (int h = 0; h < kHalves; ++h) {
    const int half = h0 + h;
    auto halves8 = [&](int at) {
      return _mm256_cvtph_ps(
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(trailer + at + 16 * half)));
    };
    const __m256 d = halves8(0);
    __m256 neg_dmin = d;
    __m256i min_pairs[4];
    if constexpr (kMins) {
      neg_dmin = _mm256_castsi256_ps(
          _mm256_xor_si256(_mm256_castps_si256(halves8(32)), _mm256_set1_epi32(INT32_MIN)));
      for (int j = 0; j < 4; ++j) {
        const uint8_t* even = first + 2 * j * block_bytes + 16 + 8 * half;
        min_pairs[j] = BytePairs<false>(even, even + block_bytes);
      }
    }
#pragma GCC unroll 16
    for (int r = 0; r < MT; ++r) {
      __m256i super_sum = isum[r][h][0];
      if constexpr (kSub == 2) super_sum = _mm256_add_epi32(super_sum, isum[r][h][1]);
      acc[r][h] = AddHalfSuperBlock<kMins>(super_sum, &a.Terms(m0 + r, b0), a.m, d, neg_dmin,
                                           min_pairs, acc[r][h]);
    }
  }
}

// AVX-512's PackedTileSuper (the K-quants, activations scaled per 256) for 8 output rows of a
// half: vpmaddwd widens the products with the block's byte scales in place of ones, so a
// super-block's exact sum S costs nothing beyond the products. The offset of unsigned levels
// without mins (q6_K's 32) is taken off as -offset * sc times the activations' sub-block sums
// (AVX-512 seeds its sums with it: the same integer); grid levels (kLut) multiply signed.
template <int MT, int kPlanes, bool kSub16, bool kMins, bool kLut>
void PackedTileSuper(const uint8_t* group, int64_t group_bytes, int64_t block_bytes,
                     int64_t header_bytes, int32_t offset, const BlockActivations& a, int64_t m0,
                     float* y, int64_t y_stride, int64_t n0, int64_t rows_valid) {
  constexpr int kSub = kSub16 ? 2 : 1;
  constexpr int kHalves = kHalvesPerPass<MT>;
  constexpr int64_t kTrailerBytes = kMins ? 64 : 32;
  constexpr bool kOffset = !kMins && !kLut;
  static_assert(!kOffset || kSub16, "the offset's pairs are a block's two sub-block sums");
  const GroupPrefetcher prefetch(group, group_bytes, 2 / kHalves * a.nb, m0 == 0);
  for (int h0 = 0; h0 < 2 && 8 * h0 < rows_valid; h0 += kHalves) {
    __m256 acc[MT][kHalves];
    ZeroAccumulators(acc);
    for (int64_t b0 = 0; b0 < a.nb; b0 += 8) {
      const uint8_t* trailer = group + a.nb * block_bytes + b0 / 8 * kTrailerBytes;
      // Past the group's blocks, beyond the stream's prefetch: asked for before the 8 blocks.
      _mm_prefetch(reinterpret_cast<const char*>(trailer), _MM_HINT_T0);
      __m256i isum[MT][kHalves][kSub];
#pragma GCC unroll 16
      for (int r = 0; r < MT; ++r) {
        for (int h = 0; h < kHalves; ++h) {
          for (int s = 0; s < kSub; ++s) isum[r][h][s] = _mm256_setzero_si256();
        }
      }
      for (int64_t b = b0; b < b0 + 8; ++b) {
        const uint8_t* blk = group + b * block_bytes;
        prefetch.Step(h0 / kHalves * a.nb + b);
        __m256i widen[kHalves][kSub];
        for (int h = 0; h < kHalves; ++h) {
          for (int s = 0; s < kSub; ++s) {
            const uint8_t* sc = blk + 16 * s + 8 * (h0 + h);
            widen[h][s] = BytePairs<true>(sc, sc);
          }
        }
        DotBlockHalves<MT, kHalves, kSub, true, kPlanes, /*kSigned=*/kLut, kLut>(
            blk + header_bytes, h0, a.Rows(m0, b), 32, widen, isum);
        if constexpr (kOffset) {
          const RowBlockTerms* terms = &a.Terms(m0, b);
          for (int h = 0; h < kHalves; ++h) {
            const uint8_t* sc = blk + 8 * (h0 + h);
            const __m256i neg = _mm256_mullo_epi16(
                BytePairs<true>(sc, sc + 16), _mm256_set1_epi16(static_cast<int16_t>(-offset)));
#pragma GCC unroll 16
            for (int r = 0; r < MT; ++r) {
              const __m256i sums = _mm256_set1_epi32(terms[r].sum_pair);
              isum[r][h][0] = _mm256_add_epi32(isum[r][h][0], _mm256_madd_epi16(neg, sums));
            }
          }
        }
      }
      AddSuperBlocks<MT, kHalves, kSub, kMins>(group + b0 * block_bytes, block_bytes, trailer, a,
                                               m0, b0, h0, isum, acc);
    }
    StoreAccumulators(acc, h0, y + m0 * y_stride + n0, y_stride, rows_valid);
  }
}

// AVX-512's PackedTileI8: one exact integer sum over the whole row, then
// (float(isum) * scale_w) * d_a.
template <int MT>
void PackedTileI8(const uint8_t* group, int64_t group_bytes, int64_t nb, const int8_t* aq,
                  const float* da, int64_t k, int64_t m0, float* y, int64_t y_stride, int64_t n0,
                  int64_t rows_valid) {
  const GroupPrefetcher prefetch(group, group_bytes, 2 * nb, m0 == 0);
  for (int h = 0; h < 2 && 8 * h < rows_valid; ++h) {
    __m256i isum[MT][1][1];
    for (int r = 0; r < MT; ++r) isum[r][0][0] = _mm256_setzero_si256();
    for (int64_t b = 0; b < nb; ++b) {
      const uint8_t* values = group + b * 512;
      prefetch.Step(h * nb + b);
      DotBlockHalves<MT, 1, 1, false, 0, true>(values, h, aq + m0 * k + b * 32, k, Ones<1, 1>().v,
                                               isum);
    }
    const __m256 scale = _mm256_loadu_ps(reinterpret_cast<const float*>(group + nb * 512) + 8 * h);
    for (int r = 0; r < MT; ++r) {
      const __m256 t = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[r][0][0]), scale);
      StoreRows(y + (m0 + r) * y_stride + n0 + 8 * h, _mm256_mul_ps(t, _mm256_set1_ps(da[m0 + r])),
                rows_valid - 8 * h);
    }
  }
}

// Activation rows per tile: 4 keep the 16 ymm registers free of spills for most formats.
constexpr int kTileRows = 4;

// Row groups [g0, g1) in chunks of 4 (their weights stay in cache while every tile of
// activation rows passes over them), tiles of up to kTileRows activation rows.
template <typename TileFn>
void ForEachTile(int64_t g0, int64_t g1, int64_t m, TileFn tile) {
  constexpr int64_t kGroupsPerChunk = 4;
  for (int64_t c0 = g0; c0 < g1; c0 += kGroupsPerChunk) {
    const int64_t c1 = std::min(g1, c0 + kGroupsPerChunk);
    // As few tiles as kTileRows allows, of balanced sizes (5 rows as 3 + 2, not 4 + 1).
    const int64_t n_tiles = (m + kTileRows - 1) / kTileRows;
    for (int64_t t = 0, m0 = 0; t < n_tiles; ++t) {
      const int64_t mt = m / n_tiles + (t < m % n_tiles ? 1 : 0);
      for (int64_t g = c0; g < c1; ++g) tile(g, m0, mt);
      m0 += mt;
    }
  }
}

// Calls fn.template operator()<MT>() for MT = mt (1..kTileRows).
template <typename Fn>
void WithRows(int64_t mt, Fn&& fn) {
  switch (mt) {
    case 1:
      return fn.template operator()<1>();
    case 2:
      return fn.template operator()<2>();
    case 3:
      return fn.template operator()<3>();
    default:
      return fn.template operator()<4>();
  }
}

// ForEachTile over w's row groups: tile.template operator()<MT>(group, m0, n0, valid) with the
// group's packed bytes, its first output row and how many of its 16 rows are real.
template <typename TileFn>
void ForEachGroupTile(const PackedInt8Weights& w, int64_t m, int64_t g0, int64_t g1,
                      TileFn&& tile) {
  ForEachTile(g0, g1, m, [&](int64_t g, int64_t m0, int64_t mt) {
    const int64_t n0 = g * 16;
    WithRows(mt, [&]<int MT>() {
      tile.template operator()<MT>(w.data.data() + g * w.GroupBytes(), m0, n0,
                                   std::min<int64_t>(16, w.rows - n0));
    });
  });
}

template <bool kNibbles, int kPlanes, bool kSigned, bool kLut>
void PackedRange(const PackedInt8Weights& w, const BlockActivations& a, int64_t g0, int64_t g1,
                 float* y) {
  ForEachGroupTile(w, a.m, g0, g1,
                   [&]<int MT>(const uint8_t* group, int64_t m0, int64_t n0, int64_t valid) {
                     PackedTile<MT, kNibbles, kPlanes, kSigned, kLut>(
                         group, w.GroupBytes(), w.BlockBytes(), a, m0, y, w.rows, n0, valid);
                   });
}

template <bool kNibbles, int kPlanes, bool kSub16, bool kMins, int kScales, bool kLut>
void GeneralRange(const PackedInt8Weights& w, const BlockActivations& a, int64_t g0, int64_t g1,
                  float* y) {
  ForEachGroupTile(
      w, a.m, g0, g1, [&]<int MT>(const uint8_t* group, int64_t m0, int64_t n0, int64_t valid) {
        PackedTileGeneral<MT, kNibbles, kPlanes, kSub16, kMins, kScales, kLut>(
            group, w.GroupBytes(), w.BlockBytes(), w.HeaderBytes(), a, m0, y, w.rows, n0, valid);
      });
}

template <int kPlanes, bool kSub16, bool kMins, bool kLut>
void SuperRange(const PackedInt8Weights& w, const BlockActivations& a, int64_t g0, int64_t g1,
                float* y) {
  ForEachGroupTile(
      w, a.m, g0, g1, [&]<int MT>(const uint8_t* group, int64_t m0, int64_t n0, int64_t valid) {
        PackedTileSuper<MT, kPlanes, kSub16, kMins, kLut>(group, w.GroupBytes(), w.BlockBytes(),
                                                          w.HeaderBytes(), w.offset, a, m0, y,
                                                          w.rows, n0, valid);
      });
}

void I8Range(const PackedInt8Weights& w, const int8_t* aq, const float* da, int64_t m, int64_t g0,
             int64_t g1, float* y) {
  const int64_t nb = w.cols / 32;
  ForEachGroupTile(
      w, m, g0, g1, [&]<int MT>(const uint8_t* group, int64_t m0, int64_t n0, int64_t valid) {
        PackedTileI8<MT>(group, w.GroupBytes(), nb, aq, da, w.cols, m0, y, w.rows, n0, valid);
      });
}

// The packed formats (see GeneralTilesFor in matmul_avx512.cc), as one range function each.
using RangeFn = void (*)(const PackedInt8Weights&, const BlockActivations&, int64_t, int64_t,
                         float*);

RangeFn RangeFor(const PackedInt8Weights& w) {
  switch (LayoutOf(w)) {
    case PackedLayout::kBlockBytes:
      SPECD_CHECK(w.offset == 128, "avx2 packed matmul: bytes with offset ", w.offset);
      return PackedRange<false, 0, true, false>;
    case PackedLayout::kBlockNibbles:
      return PackedRange<true, 0, false, false>;
    case PackedLayout::kBlockNibbles5:
      return PackedRange<true, 1, false, false>;
    case PackedLayout::kIq4NL:  // grid levels + 128: the signed products of the byte layout
      return PackedRange<true, 0, /*kSigned=*/true, /*kLut=*/true>;
    case PackedLayout::kIq4XS:
      return SuperRange<0, false, false, /*kLut=*/true>;
    case PackedLayout::kQ4_1:
      return GeneralRange<true, 0, false, true, kScalesF16, false>;
    case PackedLayout::kQ5_1:
      return GeneralRange<true, 1, false, true, kScalesF16, false>;
    case PackedLayout::kQ4_K:
      return SuperRange<0, false, true, false>;
    case PackedLayout::kQ5_K:
      return SuperRange<1, false, true, false>;
    case PackedLayout::kQ6_K:
      return SuperRange<2, true, false, false>;
    case PackedLayout::kQ3_K:
      return GeneralRange<true, 0, true, false, kScalesF32, false>;
    case PackedLayout::kQ2_K:
      return GeneralRange<true, 0, true, true, kScalesF32, false>;
  }
  Fail("avx2 packed matmul: no kernel for the layout of ", DTypeName(w.source_type));
}

// max |x| over n floats (a multiple of 8).
float AbsMax(const float* x, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  __m256 amax = _mm256_setzero_ps();
  for (int64_t j = 0; j < n; j += 8) {
    amax = _mm256_max_ps(amax, _mm256_and_ps(_mm256_loadu_ps(x + j), abs_mask));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, amax);
  float m = lanes[0];
  for (int j = 1; j < 8; ++j) m = std::max(m, lanes[j]);
  return m;
}

// q = x * id rounded half to even and saturated to int8, for n floats (a multiple of 8); returns
// the sum of the q.
int32_t QuantizeSpan(const float* x, int64_t n, float id, int8_t* q) {
  int32_t sum = 0;
  for (int64_t j = 0; j < n; j += 8) {
    __m256i v = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + j), _mm256_set1_ps(id)));
    v = _mm256_max_epi32(_mm256_min_epi32(v, _mm256_set1_epi32(127)), _mm256_set1_epi32(-128));
    alignas(32) int32_t values[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(values), v);
    for (int e = 0; e < 8; ++e) {
      q[j + e] = static_cast<int8_t>(values[e]);
      sum += values[e];
    }
  }
  return sum;
}

// reference::QuantizeActivationsPerRow's bits for one row (k a multiple of 8).
void QuantizeRow(const float* x, int64_t k, int8_t* q, float* d) {
  *d = AbsMax(x, k) / 127.0f;
  QuantizeSpan(x, k, *d != 0.0f ? 1.0f / *d : 0.0f, q);
}

void MatmulPackedI8(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w,
                    float* y, MatmulScratch* scratch) {
  const int64_t k = w.cols;
  scratch->bytes.ResizeForOverwrite(m * k + m * 4);  // [m, K] int8 activations, [m] row scales
  auto* aq = reinterpret_cast<int8_t*>(scratch->bytes.data());
  auto* da = reinterpret_cast<float*>(scratch->bytes.data() + m * k);
  for (int64_t i = 0; i < m; ++i) QuantizeRow(x + i * k, k, aq + i * k, da + i);
  pool->ParallelFor(
      w.row_groups, 1, [&](int64_t g0, int64_t g1) { I8Range(w, aq, da, m, g0, g1, y); },
      MinItemsPerThread(16 * m * k));
}

// Activations for the packed GGUF layouts: reference::Int8Activations' bits (a scale per
// ActivationSpan values: d = amax / 127, q = x / d rounded half to even and saturated), as
// AVX-512's QuantizeBlockActivations writes them.
BlockActivations QuantizeBlockActivations(const float* x, int64_t m, const PackedInt8Weights& w,
                                          MatmulScratch* scratch) {
  const int64_t k = w.cols;
  const int64_t nb = k / 32;
  const int64_t span = ActivationSpan(w);
  const BlockActivationsBuffer out = AllocateBlockActivations(m, nb, scratch);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t s0 = 0; s0 < k; s0 += span) {
      const float d = AbsMax(x + i * k + s0, span) / 127.0f;
      const float id = d != 0.0f ? 1.0f / d : 0.0f;
      for (int64_t b = s0 / 32; b < (s0 + span) / 32; ++b) {
        const float* xb = x + i * k + b * 32;
        int8_t* q = out.q + (b * m + i) * 32;
        const int32_t sum0 = QuantizeSpan(xb, 16, id, q);
        const int32_t sum1 = QuantizeSpan(xb + 16, 16, id, q + 16);
        out.terms[b * m + i] = MakeRowBlockTerms(d, sum0, sum1, w);
      }
    }
    PairBlockSums(w, out.terms + i, nb, m);
  }
  return BlockActivations{out.q, out.terms, nb, m};
}

}  // namespace

void MatmulPacked(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w, float* y,
                  MatmulScratch* scratch) {
  if (w.row_scales) return MatmulPackedI8(pool, x, m, w, y, scratch);
  CheckHighBitsForm(w, HighBits::kFields, "avx2 packed matmul");
  const BlockActivations a = QuantizeBlockActivations(x, m, w, scratch);
  const RangeFn range = RangeFor(w);
  pool->ParallelFor(
      w.row_groups, 1, [&](int64_t g0, int64_t g1) { range(w, a, g0, g1, y); },
      MinItemsPerThread(16 * m * w.cols));
}

}  // namespace specd::avx2
