// q4_K, q5_K and q6_K on AMX tiles from 16 activation rows (prompts, verification batches),
// with the byte scales folded into the tile products.
//
// The per-block kernel (amx_packed_kernel.h) stores a C tile per block and multiplies each
// activation row's 16 sums by the block's byte scales with vector steps; from 16 rows on that
// step is most of its time on a Sapphire Rapids class Xeon (bench/results/amx-gguf/NOTES.md).
// Here a block's 16 scales (one per weight row) split into small parts, the levels times each
// part are bytes, made once per super-block and row group into B tiles that serve every
// activation row; each part's C tile sums a whole super-block, and the parts' sums shifted and
// added are exactly the super-block sums of sc * isum that the per-block kernel forms, so
// AddSuper's float steps give the VNNI kernel's bits. For q4_K and q5_K (scales 0..63, levels
// w 0..31): sc = 8 sh + sl (sh, sl 0..7), w sh and w sl <= 217. Two blocks make one K = 64
// product (the tile unit takes the time of a K = 32 one), from activations laid out pair-major.
//
// Include only from files compiled with SPECD_AVX512_FLAGS.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "base/aligned_buffer.h"
#include "kernels/amx_packed_kernel.h"

namespace specd::amx::packed {

// How many parts a layout's byte scales fold into (0: they do not fold). Two for the K-quants
// with mins and one scale per 32 values, levels of 4 or 5 bits (q4_K, q5_K): sc = 8 sh + sl as
// above. Four for q6_K, whose scales are signed and apply per 16 values to levels q - 32 (q
// 0..63): sc = 64 u3 + 16 u2 + 4 u1 + u0 with u0..u2 its bits in pairs (0..3) and u3 = sc >> 6
// (-2..1); q u0..q u2 are unsigned bytes (<= 189), q u3 a signed one (-126..63, multiplied by
// TDPBSSD), and the offset's -32 q-independent part is added per super-block from the
// activations' sums (as the per-block kernel's seeds add it).
template <class L>
inline constexpr int kFoldParts = L::kScales != avx512::kScalesK || L::kLut      ? 0
                                  : L::kMins&& L::kSub == 1 && L::kPlanes <= 1   ? 2
                                  : !L::kMins && L::kSub == 2 && L::kPlanes == 2 ? 4
                                                                                 : 0;
template <class L>
inline constexpr bool kFoldsScales = kFoldParts<L> > 0;
// A part's weight in the super-block sum, as a shift: S = sum of C_part << shift.
template <class L>
inline constexpr int PartShift(int part) {
  return kFoldParts<L> == 2 ? (part == 0 ? 3 : 0) : 2 * part;
}
// M-blocks of a pass: the four C tiles hold kFoldParts sums per M-block.
template <class L>
inline constexpr int kFoldedPassMBlocks = kAccumulatorTiles / kFoldParts<L>;

// From this many rows the folded kernel runs (below, the per-block kernel). At 16 rows, where a
// super-block's B tiles serve one A tile, it is ~10% faster than the per-block kernel; at 32
// and 64, 1.5x and 1.8x (bench matmul, q4_K [17920 x 1536], Sapphire Rapids class Xeon).
inline constexpr int64_t kFoldedMinRows = kMaxTileRows;

// The activations of BlockActivations pair-major, for K = 64 A tiles: [nb / 2, m + 15, 64],
// row r of pair p = block 2p's 32 bytes of row r, then block 2p + 1's. The 15 zero rows past
// each pair's rows are what a partial last M-block's 16-row A tile reads.
struct PairActivations {
  const int8_t* q = nullptr;
  int64_t rows_per_pair = 0;  // m + 15

  const int8_t* Rows(int64_t row, int64_t pair) const {
    return q + (pair * rows_per_pair + row) * 64;
  }
};

inline PairActivations PairUp(const BlockActivations& a, AlignedBuffer<uint8_t>* buffer) {
  const int64_t rows_per_pair = a.m + kMaxTileRows - 1, pairs = a.nb / 2;
  buffer->ResizeForOverwrite(pairs * rows_per_pair * 64);
  auto* q = reinterpret_cast<int8_t*>(buffer->data());
  for (int64_t p = 0; p < pairs; ++p) {
    int8_t* out = q + p * rows_per_pair * 64;
    for (int64_t r = 0; r < a.m; ++r) {
      std::memcpy(out + r * 64, a.Rows(r, 2 * p), 32);
      std::memcpy(out + r * 64 + 32, a.Rows(r, 2 * p + 1), 32);
    }
    std::memset(out + a.m * 64, 0, (kMaxTileRows - 1) * 64);
  }
  return {q, rows_per_pair};
}

// Tiles of the folded kernel: C [16 rows, 16 int32] x 4 (the parts' sums of a pass's
// M-blocks), A [16 rows, 64 bytes] x 2, B [16 lines, 64 bytes] x 2.
inline TileConfig FoldedConfig() {
  TileConfig c;
  for (int t = 0; t < kTileRegisters; ++t) {
    c.rows[t] = kMaxTileRows;
    c.bytes_per_row[t] = kTileLineBytes;
  }
  return c;
}

// A super-block's B tiles: [4 block pairs][part][16 lines][64 bytes]; lines 0..7 of a pair are
// its first block's (K 0..31), 8..15 its second's.
template <class L>
using SuperLevels = uint8_t[4][kFoldParts<L>][16 * kTileLineBytes];

// Weight row n's value in both 16-bit words of dword n, so one vpmullw multiplies a line's
// bytes by their rows' values (exact while no byte's product exceeds 255).
inline __m512i WordPairs(__m512i dwords) {
  return _mm512_or_si512(dwords, _mm512_slli_epi32(dwords, 16));
}

// q4_K, q5_K: one block's parts sh and sl as word pairs for vpmullw (w * part <= 31 * 7).
struct TwoParts {
  __m512i words[2];

  explicit TwoParts(const uint8_t* blk) {
    const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    words[0] = WordPairs(_mm512_srli_epi32(sc, 3));
    words[1] = WordPairs(_mm512_and_si512(sc, _mm512_set1_epi32(7)));
  }
  // Line i of a LoadLanes half (levels q) into each part's B tile at `offset`.
  void Store(int /*i*/, __m512i q, uint8_t* const (&b)[2], int offset) const {
    for (int part = 0; part < 2; ++part) {
      _mm512_store_si512(b[part] + offset, _mm512_mullo_epi16(q, words[part]));
    }
  }
};

// q6_K: one sub-block's scale digits (see kFoldParts): u0..u2 as word pairs for vpmullw (q * u
// <= 63 * 3), u3 as byte masks of its values 1, -1 and -2.
struct Q6Digits {
  __m512i low_words[3];
  __mmask64 plus_one = 0, minus = 0, minus_two = 0;

  explicit Q6Digits(const uint8_t* scales) {
    const __m512i sc =
        _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(scales)));
    for (int i = 0; i < 3; ++i) {
      low_words[i] =
          WordPairs(_mm512_and_si512(_mm512_srai_epi32(sc, 2 * i), _mm512_set1_epi32(3)));
    }
    // u3 in each byte of its row's dword.
    const __m512i top =
        _mm512_mullo_epi32(_mm512_and_si512(_mm512_srai_epi32(sc, 6), _mm512_set1_epi32(0xFF)),
                           _mm512_set1_epi32(0x01010101));
    plus_one = _mm512_cmpeq_epi8_mask(top, _mm512_set1_epi8(1));
    minus_two = _mm512_cmpeq_epi8_mask(top, _mm512_set1_epi8(-2));
    minus = minus_two | _mm512_cmpeq_epi8_mask(top, _mm512_set1_epi8(-1));
  }
};

// q6_K: one block's digits per sub-block; a LoadLanes half's lines 0, 1 are the first
// sub-block's (K 0..15), lines 2, 3 the second's.
struct FourParts {
  Q6Digits sub[2];

  explicit FourParts(const uint8_t* blk) : sub{Q6Digits(blk), Q6Digits(blk + 16)} {}
  void Store(int i, __m512i q, uint8_t* const (&b)[4], int offset) const {
    const Q6Digits& d = sub[i / 2];
    for (int part = 0; part < 3; ++part) {
      _mm512_store_si512(b[part] + offset, _mm512_mullo_epi16(q, d.low_words[part]));
    }
    const __m512i q_or_twice = _mm512_mask_add_epi8(q, d.minus_two, q, q);
    const __m512i top = _mm512_mask_sub_epi8(_mm512_maskz_mov_epi8(d.plus_one, q), d.minus,
                                             _mm512_setzero_si512(), q_or_twice);
    _mm512_store_si512(b[3] + offset, top);
  }
};

// Blocks b0..b0 + 7 of the task's row group, unpacked and scaled into B tiles.
template <class L>
void MakeSuperLevels(const GroupTask& task, int64_t b0, SuperLevels<L>& out) {
  using Parts = std::conditional_t<kFoldParts<L> == 2, TwoParts, FourParts>;
  const PackedInt8Weights& w = *task.w;
  for (int j = 0; j < 8; ++j) {
    const uint8_t* blk = task.group + (b0 + j) * w.BlockBytes();
    PrefetchAhead(blk, w.BlockBytes());
    const Parts parts(blk);
    uint8_t* b[kFoldParts<L>];
    for (int part = 0; part < kFoldParts<L>; ++part) {
      b[part] = out[j / 2][part] + (j % 2) * 8 * kTileLineBytes;
    }
    for (int half = 0; half < 2; ++half) {
      __m512i levels[4];
      avx512::LoadLanes<true, L::kPlanes, false>(blk + w.HeaderBytes(), 2 * half, levels);
      const int lanes[4] = {2 * half, 2 * half + 1, 2 * half + 4, 2 * half + 5};
      for (int i = 0; i < 4; ++i) parts.Store(i, levels[i], b, lanes[i] * kTileLineBytes);
    }
  }
}

// q6_K: the offset's part of row r's super-block sum, -offset * sum over the blocks and
// sub-blocks of sc * (the activations' sum), by vpdpwssd of the scale pairs and the sums' pairs.
template <class L>
__m512i OffsetSums(const GroupTask& part, int64_t b0, const __m512i (&scale_pairs)[8], int r) {
  __m512i sum = _mm512_setzero_si512();
  for (int j = 0; j < 8; ++j) {
    const int32_t sums = part.a->Terms(part.m0 + r, b0 + j).sum_pair;
    sum = _mm512_dpwssd_epi32(sum, scale_pairs[j], _mm512_set1_epi32(sums));
  }
  return _mm512_mullo_epi32(sum, _mm512_set1_epi32(-part.w->offset));
}

// q6_K: block b's two sub-block scales per row as int16 pairs (sub-block 0 low).
inline __m512i ScalePairs(const uint8_t* blk) {
  const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk));
  const __m128i second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + 16));
  return _mm512_cvtepi8_epi16(
      _mm256_set_m128i(_mm_unpackhi_epi8(first, second), _mm_unpacklo_epi8(first, second)));
}

// The super-block sums S [part.rows][16] of one M-block from its part sums [kFoldParts][16][16].
template <class L>
void CombineParts(const GroupTask& part, int64_t b0, const int32_t (*sums)[kMaxTileRows][16],
                  int32_t (*super_sums)[16]) {
  __m512i scale_pairs[8];
  if constexpr (kFoldParts<L> == 4) {
    for (int j = 0; j < 8; ++j) {
      scale_pairs[j] = ScalePairs(part.group + (b0 + j) * part.w->BlockBytes());
    }
  }
  for (int r = 0; r < part.rows; ++r) {
    __m512i s = _mm512_setzero_si512();
    for (int k = 0; k < kFoldParts<L>; ++k) {
      s = _mm512_add_epi32(s, _mm512_slli_epi32(_mm512_load_si512(sums[k][r]), PartShift<L>(k)));
    }
    if constexpr (kFoldParts<L> == 4) {
      s = _mm512_add_epi32(s, OffsetSums<L>(part, b0, scale_pairs, r));
    }
    _mm512_store_si512(super_sums[r], s);
  }
}

// One pass (kFoldedPassMBlocks M-blocks) through the super-block at b0: M-block i's part sums
// on C tiles i * kFoldParts + part, then the super-block's float steps into acc [pass.rows][16].
template <class L, class Tiles>
void MultiplyFoldedPass(Tiles& tiles, const GroupTask& pass, const PairActivations& pairs,
                        int64_t b0, const SuperLevels<L>& levels, float (*acc)[16]) {
  constexpr int kParts = kFoldParts<L>;
  const int n_mblocks = pass.MBlocks();
  for (int c = 0; c < kParts * n_mblocks; ++c) tiles.Zero(c);
  for (int p = 0; p < 4; ++p) {
    if constexpr (kParts == 2) {  // both B tiles serve both M-blocks
      tiles.LoadB(0, levels[p][0], kTileLineBytes);
      tiles.LoadB(1, levels[p][1], kTileLineBytes);
      for (int i = 0; i < n_mblocks; ++i) {
        tiles.LoadA(i, pairs.Rows(pass.m0 + i * kMaxTileRows, b0 / 2 + p), kTileLineBytes);
        tiles.Multiply(2 * i, i, 0);
        tiles.Multiply(2 * i + 1, i, 1);
      }
    } else {  // one M-block; the four parts' B tiles take turns in two slots
      tiles.LoadA(p % 2, pairs.Rows(pass.m0, b0 / 2 + p), kTileLineBytes);
      for (int part = 0; part < 4; ++part) {
        tiles.LoadB(part % 2, levels[p][part], kTileLineBytes);
        if (part < 3) {
          tiles.Multiply(part, p % 2, part % 2);
        } else {
          tiles.MultiplySigned(part, p % 2, part % 2);
        }
      }
    }
  }
  alignas(64) int32_t sums[kAccumulatorTiles][kMaxTileRows][16];
  alignas(64) int32_t super_sums[kMaxTileRows][16];
  for (int c = 0; c < kParts * n_mblocks; ++c) tiles.Store(c, sums[c][0]);
  for (int i = 0; i < n_mblocks; ++i) {
    const GroupTask part = pass.MBlock(i);
    CombineParts<L>(part, b0, sums + i * kParts, super_sums);
    AddSuper<L>(part, b0, super_sums, acc + i * kMaxTileRows);
  }
}

// y [m, w.rows] for row group g and all m activation rows; acc: scratch [m][16].
template <class L, class Tiles>
void MultiplyGroupFolded(Tiles& tiles, const GroupTask& task, const PairActivations& pairs,
                         int64_t g, float (*acc)[16], float* y) {
  const PackedInt8Weights& w = *task.w;
  std::fill_n(&acc[0][0], task.rows * 16, 0.0f);
  alignas(64) SuperLevels<L> levels;
  constexpr int kPassRows = kFoldedPassMBlocks<L> * kMaxTileRows;
  for (int64_t b0 = 0; b0 < task.a->nb; b0 += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(task.group + w.TrailerOffset() +
                                               b0 / 8 * w.TrailerBytesPerSuper()),
                 _MM_HINT_T0);
    MakeSuperLevels<L>(task, b0, levels);
    for (int64_t m0 = 0; m0 < task.rows; m0 += kPassRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kPassRows, task.rows - m0));
      const GroupTask pass{task.a, task.w, task.group, m0, rows};
      MultiplyFoldedPass<L>(tiles, pass, pairs, b0, levels, acc + m0);
    }
  }
  const int64_t n0 = g * 16;
  const int64_t valid = std::min<int64_t>(16, w.rows - n0);
  const __mmask16 mask = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  for (int r = 0; r < task.rows; ++r) {
    _mm512_mask_storeu_ps(y + r * w.rows + n0, mask, _mm512_load_ps(acc[r]));
  }
}

// Row groups [g0, g1) times all m activation rows.
template <class L, class Tiles>
void MultiplyRangeFolded(Tiles& tiles, const BlockActivations& a, const PairActivations& pairs,
                         const PackedInt8Weights& w, int64_t g0, int64_t g1, float* y) {
  SPECD_CHECK(a.nb % 8 == 0, "AMX matmul: K-quant rows of whole super-blocks");
  AlignedBuffer<float> acc(a.m * 16);
  tiles.Configure(FoldedConfig());
  for (int64_t g = g0; g < g1; ++g) {
    const GroupTask task{&a, &w, w.data.data() + g * w.GroupBytes(), 0, static_cast<int>(a.m)};
    MultiplyGroupFolded<L>(tiles, task, pairs, g, reinterpret_cast<float(*)[16]>(acc.data()), y);
  }
  tiles.Release();
}

}  // namespace specd::amx::packed
