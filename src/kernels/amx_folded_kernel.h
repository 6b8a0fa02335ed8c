// q4_K and q5_K on AMX tiles for many activation rows (prompts, wide verification batches),
// with the byte scales folded into the tile products.
//
// The per-block kernel (amx_packed_kernel.h) stores a C tile per block and multiplies each
// activation row's 16 sums by the block's byte scales with vector steps; from 16 rows on that
// step is most of its time on a Sapphire Rapids class Xeon (bench/results/amx-gguf/NOTES.md).
// Here a block's 16 scales sc (0..63, one per weight row) split as sc = 8 sh + sl (sh, sl
// 0..7), and the levels w (0..31) times either part are unsigned bytes (<= 217): two B tiles
// per block, C_h += A (w sh) and C_l += A (w sl) over a whole super-block, and 8 C_h + C_l is
// exactly the super-block sum of sc * isum that the per-block kernel forms, so AddSuper's float
// steps give the VNNI kernel's bits. Two blocks make one K = 64 product (the tile unit takes
// the time of a K = 32 one), from activations laid out pair-major. A super-block's B tiles are
// made once per row group and serve every activation row.
//
// Include only from files compiled with SPECD_AVX512_FLAGS.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "base/aligned_buffer.h"
#include "kernels/amx_packed_kernel.h"

namespace specd::amx::packed {

// The layouts whose scales fold: the K-quants with mins and one scale per 32 values, levels of
// 4 or 5 bits (q4_K, q5_K). q6_K's scales are signed, so its B tiles could not be unsigned.
template <class L>
inline constexpr bool kFoldsScales =
    L::kScales == avx512::kScalesK&& L::kMins && !L::kLut && L::kSub == 1 && L::kPlanes <= 1;

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

// Tiles of the folded kernel: C [16 rows, 16 int32] x 4 (w sh and w sl for two M-blocks),
// A [16 rows, 64 bytes] x 2, B [16 lines, 64 bytes] x 2.
inline TileConfig FoldedConfig() {
  TileConfig c;
  for (int t = 0; t < kTileRegisters; ++t) {
    c.rows[t] = kMaxTileRows;
    c.bytes_per_row[t] = kTileLineBytes;
  }
  return c;
}

// A super-block's B tiles: [4 block pairs][w sh, w sl][16 lines][64 bytes]; lines 0..7 of a
// pair are its first block's (K 0..31), 8..15 its second's.
using SuperLevels = uint8_t[4][2][16 * kTileLineBytes];

// Blocks b0..b0 + 7 of the task's row group, unpacked and scaled into B tiles.
template <class L>
void MakeSuperLevels(const GroupTask& task, int64_t b0, SuperLevels& out) {
  const PackedInt8Weights& w = *task.w;
  for (int j = 0; j < 8; ++j) {
    const uint8_t* blk = task.group + (b0 + j) * w.BlockBytes();
    for (int64_t line = 0; line < w.BlockBytes(); line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchBytes + line, _MM_HINT_T0);
    }
    // Weight row n's part in both 16-bit words of dword n: one vpmullw scales a line's bytes,
    // as w * part <= 217 never carries into the next byte.
    const __m512i sc = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(blk)));
    const __m512i high = _mm512_srli_epi32(sc, 3), low = _mm512_and_si512(sc, _mm512_set1_epi32(7));
    const __m512i high_words = _mm512_or_si512(high, _mm512_slli_epi32(high, 16));
    const __m512i low_words = _mm512_or_si512(low, _mm512_slli_epi32(low, 16));
    uint8_t* b_high = out[j / 2][0] + (j % 2) * 8 * kTileLineBytes;
    uint8_t* b_low = out[j / 2][1] + (j % 2) * 8 * kTileLineBytes;
    for (int half = 0; half < 2; ++half) {
      __m512i levels[4];
      avx512::LoadLanes<true, L::kPlanes, false>(blk + w.HeaderBytes(), 2 * half, levels);
      const int lanes[4] = {2 * half, 2 * half + 1, 2 * half + 4, 2 * half + 5};
      for (int i = 0; i < 4; ++i) {
        _mm512_store_si512(b_high + lanes[i] * 64, _mm512_mullo_epi16(levels[i], high_words));
        _mm512_store_si512(b_low + lanes[i] * 64, _mm512_mullo_epi16(levels[i], low_words));
      }
    }
  }
}

// One pass (up to 32 rows: two M-blocks) through the super-block at b0: its products on C tiles
// 2i (w sh) and 2i + 1 (w sl) for M-block i, then the super-block's float steps into acc
// [pass.rows][16].
template <class L, class Tiles>
void MultiplyFoldedPass(Tiles& tiles, const GroupTask& pass, const PairActivations& pairs,
                        int64_t b0, const SuperLevels& levels, float (*acc)[16]) {
  const int n_mblocks = pass.MBlocks();
  for (int c = 0; c < 2 * n_mblocks; ++c) tiles.Zero(c);
  for (int p = 0; p < 4; ++p) {
    tiles.LoadB(0, levels[p][0], kTileLineBytes);
    tiles.LoadB(1, levels[p][1], kTileLineBytes);
    for (int i = 0; i < n_mblocks; ++i) {
      tiles.LoadA(i, pairs.Rows(pass.m0 + i * kMaxTileRows, b0 / 2 + p), kTileLineBytes);
      tiles.Multiply(2 * i, i, 0);
      tiles.Multiply(2 * i + 1, i, 1);
    }
  }
  alignas(64) int32_t sums[kAccumulatorTiles][kMaxTileRows][16];
  alignas(64) int32_t super_sums[kMaxTileRows][16];
  for (int c = 0; c < 2 * n_mblocks; ++c) tiles.Store(c, sums[c][0]);
  for (int i = 0; i < n_mblocks; ++i) {
    const GroupTask part = pass.MBlock(i);
    for (int r = 0; r < part.rows; ++r) {
      const __m512i high = _mm512_load_si512(sums[2 * i][r]);
      const __m512i low = _mm512_load_si512(sums[2 * i + 1][r]);
      _mm512_store_si512(super_sums[r], _mm512_add_epi32(_mm512_slli_epi32(high, 3), low));
    }
    AddSuper<L>(part, b0, super_sums, acc + i * kMaxTileRows);
  }
}

// y [m, w.rows] for row group g and all m activation rows; acc: scratch [m][16].
template <class L, class Tiles>
void MultiplyGroupFolded(Tiles& tiles, const GroupTask& task, const PairActivations& pairs,
                         int64_t g, float (*acc)[16], float* y) {
  const PackedInt8Weights& w = *task.w;
  std::fill_n(&acc[0][0], task.rows * 16, 0.0f);
  alignas(64) SuperLevels levels;
  for (int64_t b0 = 0; b0 < task.a->nb; b0 += 8) {
    _mm_prefetch(reinterpret_cast<const char*>(task.group + w.TrailerOffset() +
                                               b0 / 8 * w.TrailerBytesPerSuper()),
                 _MM_HINT_T0);
    MakeSuperLevels<L>(task, b0, levels);
    for (int64_t m0 = 0; m0 < task.rows; m0 += 2 * kMaxTileRows) {
      const int rows = static_cast<int>(std::min<int64_t>(2 * kMaxTileRows, task.rows - m0));
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
