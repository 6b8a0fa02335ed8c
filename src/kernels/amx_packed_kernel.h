// The packed GGUF types (every PackedLayout: q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, the K-quants,
// iq4_xs) on AMX tiles, written once over a Tiles type (amx_tiles.h): the hardware's in
// matmul_amx.cc, the software model's in amx_emulated.cc.
//
// The weights stay in the packed layout the VNNI kernel reads (no repack, no extra memory).
// A packed 32-block of a row group is B's layout already: 8 lines of 64 bytes, line g = the 16
// rows' elements 4g..4g+3. Bytes (q8_0) are multiplied where they lie; nibbles (and their high
// bit planes, or the IQ4 grid) are unpacked into a 512-byte buffer first. Per block (or per
// 16-value sub-block) one tdpbsud forms the exact integer sums of up to 16 activation rows x the
// group's 16 rows, and the VNNI kernel's steps (packed_avx512.h) apply the scales in its order
// (for the K-quants: the byte scales in int32 per block, the floats per super-block): the
// results are the VNNI kernel's bits for any row count, tiling or thread split.
//
// Include only from files compiled with SPECD_AVX512_FLAGS.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "base/error.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernels.h"
#include "kernels/packed_avx512.h"

namespace specd::amx::packed {

// C tiles 0..3 hold the products of kBlocksInFlight blocks (one per block and sub-block), so
// the tile unit works on the next products while the float steps read the last ones.
inline constexpr int kAccumulatorTiles = 4;
// How far ahead the kernel asks for a group's weights (its blocks are contiguous).
inline constexpr int64_t kPrefetchBytes = 4096;

// A packed layout as the kernel's compile-time shape (the VNNI kernel's template arguments).
template <bool kNibblesV, int kPlanesV, bool kLutV, bool kGeneralV, bool kSub16V = false,
          bool kMinsV = false, int kScalesV = avx512::kScalesF16>
struct Layout {
  static constexpr bool kNibbles = kNibblesV;  // values as nibbles (else bytes)
  static constexpr int kPlanes = kPlanesV;     // high bit planes above the nibbles
  static constexpr bool kLut = kLutV;          // nibbles index the IQ4 grid
  static constexpr bool kGeneral = kGeneralV;  // mins, f32 or K-quant scales, or sub-blocks
  static constexpr bool kSub16 = kSub16V;      // a scale per 16 values
  static constexpr bool kMins = kMinsV;
  static constexpr int kScales = kScalesV;
  static constexpr int kSub = kSub16 ? 2 : 1;  // products per block
  static constexpr int kBlocksInFlight = kAccumulatorTiles / kSub;
  static constexpr int kSubBytes = 32 / kSub;  // activation bytes (K) of one product
};

// Tiles for `rows` activation rows of layout L: C [rows, 16 int32], A [rows, kSubBytes],
// B [kSubBytes / 4 lines, 64 bytes].
template <class L>
TileConfig ConfigFor(int rows) {
  TileConfig c;
  for (int t = 0; t < kAccumulatorTiles; ++t) {
    c.rows[t] = static_cast<uint8_t>(rows);
    c.bytes_per_row[t] = kTileLineBytes;
  }
  for (int t : {4, 5}) {
    c.rows[t] = static_cast<uint8_t>(rows);
    c.bytes_per_row[t] = L::kSubBytes;
  }
  for (int t : {6, 7}) {
    c.rows[t] = L::kSubBytes / 4;
    c.bytes_per_row[t] = kTileLineBytes;
  }
  return c;
}

// A block's unsigned levels in B's layout [8 lines, 64 bytes]: the packed bytes themselves, or
// the nibbles (with planes / grid) unpacked into `buffer` (64-byte aligned, 512 bytes).
template <class L>
const uint8_t* BlockLevels(const uint8_t* values, uint8_t* buffer) {
  if constexpr (!L::kNibbles) {
    return values;
  } else {
    for (int half = 0; half < 2; ++half) {
      __m512i w[4];
      avx512::LoadLanes<L::kNibbles, L::kPlanes, L::kLut>(values, 2 * half, w);
      const int lanes[4] = {2 * half, 2 * half + 1, 2 * half + 4, 2 * half + 5};
      for (int j = 0; j < 4; ++j) _mm512_store_si512(buffer + lanes[j] * 64, w[j]);
    }
    return buffer;
  }
}

// One row group times an M-block of activation rows.
struct GroupTask {
  const BlockActivations* a = nullptr;
  const PackedInt8Weights* w = nullptr;
  const uint8_t* group = nullptr;  // the row group's packed bytes
  int64_t m0 = 0;                  // first activation row
  int rows = 0;                    // activation rows (1..16)
};

// Issues C[j * kSub + s] = A(block b0 + j, sub-block s) x B(the same) for j < n.
template <class L, class Tiles>
void MultiplyBlocks(Tiles& tiles, const GroupTask& task, int64_t b0, int n,
                    uint8_t (*buffers)[512]) {
  const BlockActivations& a = *task.a;
  const int64_t block_bytes = task.w->BlockBytes();
  for (int j = 0; j < n; ++j) {
    const uint8_t* blk = task.group + (b0 + j) * block_bytes;
    for (int64_t line = 0; line < block_bytes; line += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchBytes + line, _MM_HINT_T0);
    }
    const uint8_t* levels = BlockLevels<L>(blk + task.w->HeaderBytes(), buffers[j]);
    for (int s = 0; s < L::kSub; ++s) {
      const int c = j * L::kSub + s, slot = c % 2;
      tiles.Zero(c);
      tiles.LoadA(slot, a.Rows(task.m0, b0 + j) + s * L::kSubBytes, 32);
      tiles.LoadB(slot, levels + s * L::kSubBytes * 16, kTileLineBytes);
      tiles.Multiply(c, slot);
    }
  }
}

// The integer sums of one block: [kSub][rows][16 outputs].
template <class L>
using BlockSums = int32_t[L::kSub][kMaxTileRows][16];

// Adds block b (its sums, header at blk) to the rows' accumulators acc [rows][16] with the VNNI
// kernel's float steps: the offset's seed added to the exact sums, then PackedTile's or
// PackedTileGeneral's arithmetic in its order.
template <class L>
void AddBlock(const BlockSums<L>& sums, const GroupTask& task, const uint8_t* blk, int64_t b,
              float (*acc)[16]) {
  const BlockActivations& a = *task.a;
  if constexpr (!L::kGeneral) {
    const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk)));
    for (int r = 0; r < task.rows; ++r) {
      const RowBlockTerms& terms = a.Terms(task.m0 + r, b);
      const __m512i isum =
          _mm512_add_epi32(_mm512_set1_epi32(terms.seeds[0]), _mm512_load_si512(sums[0][r]));
      _mm512_store_ps(acc[r], avx512::AddSimpleBlock(isum, dw, terms.d, _mm512_load_ps(acc[r])));
    }
  } else {
    __m512 scale[L::kSub], min[L::kSub];
    avx512::BlockScales<L::kSub, L::kMins, L::kScales>(blk, scale, min);
    for (int r = 0; r < task.rows; ++r) {
      const RowBlockTerms& terms = a.Terms(task.m0 + r, b);
      __m512i isum[L::kSub][1];
      for (int s = 0; s < L::kSub; ++s) {
        isum[s][0] =
            _mm512_add_epi32(_mm512_set1_epi32(terms.seeds[s]), _mm512_load_si512(sums[s][r]));
      }
      const __m512 t = avx512::BlockValue<L::kSub, L::kMins, 1>(isum, terms.min_sums, scale, min);
      _mm512_store_ps(acc[r], _mm512_fmadd_ps(t, _mm512_set1_ps(terms.d), _mm512_load_ps(acc[r])));
    }
  }
}

// The K-quant layouts: adds block b's seeded sums times its byte scales to the rows' super-block
// sums super_sums [rows][16], as PackedTileSuper does.
template <class L>
void AddScaledBlock(const BlockSums<L>& sums, const GroupTask& task, const uint8_t* blk, int64_t b,
                    int32_t (*super_sums)[16]) {
  __m512i sc[L::kSub];
  avx512::BlockScaleInts<L::kSub>(blk, sc);
  for (int r = 0; r < task.rows; ++r) {
    const RowBlockTerms& terms = task.a->Terms(task.m0 + r, b);
    __m512i sum = _mm512_load_si512(super_sums[r]);
    for (int s = 0; s < L::kSub; ++s) {
      const __m512i seed = L::kMins ? _mm512_setzero_si512() : _mm512_set1_epi32(terms.seeds[s]);
      const __m512i isum = _mm512_add_epi32(seed, _mm512_load_si512(sums[s][r]));
      sum = _mm512_add_epi32(sum, _mm512_mullo_epi32(isum, sc[s]));
    }
    _mm512_store_si512(super_sums[r], sum);
  }
}

// The K-quant layouts: the super-block starting at block b0 into acc (AddSuperBlock per row),
// and its sums restarted.
template <class L>
void AddSuper(const GroupTask& task, int64_t b0, int32_t (*super_sums)[16], float (*acc)[16]) {
  const PackedInt8Weights& w = *task.w;
  avx512::SuperScales super;
  avx512::LoadSuperScales<L::kMins>(
      task.group + w.TrailerOffset() + b0 / 8 * w.TrailerBytesPerSuper(), &super);
  __m512i min_pairs[4];
  if constexpr (L::kMins) {
    avx512::LoadMinPairs(task.group + b0 * w.BlockBytes(), w.BlockBytes(), min_pairs);
  }
  for (int r = 0; r < task.rows; ++r) {
    const __m512 sum = avx512::AddSuperBlock<L::kMins>(_mm512_load_si512(super_sums[r]),
                                                       &task.a->Terms(task.m0 + r, b0), task.a->m,
                                                       super, min_pairs, _mm512_load_ps(acc[r]));
    _mm512_store_ps(acc[r], sum);
    _mm512_store_si512(super_sums[r], _mm512_setzero_si512());
  }
}

// y [m, w.rows] for row group g and the task's activation rows.
template <class L, class Tiles>
void MultiplyGroup(Tiles& tiles, const GroupTask& task, int64_t g, float* y) {
  constexpr bool kSuper = L::kScales == avx512::kScalesK;
  const PackedInt8Weights& w = *task.w;
  const int64_t nb = task.a->nb;
  alignas(64) float acc[kMaxTileRows][16] = {};
  alignas(64) int32_t super_sums[kMaxTileRows][16] = {};  // K-quant layouts only
  alignas(64) uint8_t buffers[L::kBlocksInFlight][512];
  alignas(64) BlockSums<L> sums;
  for (int64_t b0 = 0; b0 < nb; b0 += L::kBlocksInFlight) {
    const int n = static_cast<int>(std::min<int64_t>(L::kBlocksInFlight, nb - b0));
    MultiplyBlocks<L>(tiles, task, b0, n, buffers);
    for (int j = 0; j < n; ++j) {
      const int64_t b = b0 + j;
      for (int s = 0; s < L::kSub; ++s) tiles.Store(j * L::kSub + s, sums[s][0]);
      const uint8_t* blk = task.group + b * w.BlockBytes();
      if constexpr (kSuper) {
        if (b % 8 == 0) {  // the trailer lies past the blocks: asked for before it is read
          _mm_prefetch(reinterpret_cast<const char*>(task.group + w.TrailerOffset() +
                                                     b / 8 * w.TrailerBytesPerSuper()),
                       _MM_HINT_T0);
        }
        AddScaledBlock<L>(sums, task, blk, b, super_sums);
        if (b % 8 == 7) AddSuper<L>(task, b - 7, super_sums, acc);
      } else {
        AddBlock<L>(sums, task, blk, b, acc);
      }
    }
  }
  const int64_t n0 = g * 16;
  const int64_t valid = std::min<int64_t>(16, w.rows - n0);
  const __mmask16 mask = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  for (int r = 0; r < task.rows; ++r) {
    _mm512_mask_storeu_ps(y + (task.m0 + r) * w.rows + n0, mask, _mm512_load_ps(acc[r]));
  }
}

// Row groups [g0, g1) times all m activation rows, in M-blocks of up to 16 rows. With more
// than 16 rows the groups are taken a chunk at a time, whose weights come from memory once and
// from L2 for the later M-blocks.
template <class L, class Tiles>
void MultiplyRange(Tiles& tiles, const BlockActivations& a, const PackedInt8Weights& w, int64_t m,
                   int64_t g0, int64_t g1, float* y) {
  constexpr int64_t kGroupsPerChunk = 16;
  const int64_t chunk = m <= kMaxTileRows ? g1 - g0 : kGroupsPerChunk;
  int configured_rows = -1;
  for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
    const int64_t c1 = std::min(g1, c0 + chunk);
    for (int64_t m0 = 0; m0 < m; m0 += kMaxTileRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kMaxTileRows, m - m0));
      if (rows != configured_rows) {
        const TileConfig config = ConfigFor<L>(rows);
        tiles.Configure(config);
        configured_rows = rows;
      }
      for (int64_t g = c0; g < c1; ++g) {
        const GroupTask task{&a, &w, w.data.data() + g * w.GroupBytes(), m0, rows};
        MultiplyGroup<L>(tiles, task, g, y);
      }
    }
  }
  if (configured_rows > 0) tiles.Release();
}

// MultiplyRange for w's layout.
template <class Tiles>
void MultiplyPackedRange(Tiles& tiles, const BlockActivations& a, const PackedInt8Weights& w,
                         int64_t m, int64_t g0, int64_t g1, float* y) {
  using avx512::kScalesF16, avx512::kScalesF32, avx512::kScalesK;
  auto run = [&](auto layout) { MultiplyRange<decltype(layout)>(tiles, a, w, m, g0, g1, y); };
  switch (LayoutOf(w)) {
    case PackedLayout::kBlockBytes:
      return run(Layout<false, 0, false, false>{});
    case PackedLayout::kBlockNibbles:
      return run(Layout<true, 0, false, false>{});
    case PackedLayout::kBlockNibbles5:
      return run(Layout<true, 1, false, false>{});
    case PackedLayout::kIq4NL:
      return run(Layout<true, 0, true, false>{});
    case PackedLayout::kQ4_1:
      return run(Layout<true, 0, false, true, false, true, kScalesF16>{});
    case PackedLayout::kQ5_1:
      return run(Layout<true, 1, false, true, false, true, kScalesF16>{});
    case PackedLayout::kQ4_K:
      return run(Layout<true, 0, false, true, false, true, kScalesK>{});
    case PackedLayout::kQ5_K:
      return run(Layout<true, 1, false, true, false, true, kScalesK>{});
    case PackedLayout::kQ6_K:
      return run(Layout<true, 2, false, true, true, false, kScalesK>{});
    case PackedLayout::kQ3_K:
      return run(Layout<true, 0, false, true, true, false, kScalesF32>{});
    case PackedLayout::kQ2_K:
      return run(Layout<true, 0, false, true, true, true, kScalesF32>{});
    case PackedLayout::kIq4XS:
      return run(Layout<true, 0, true, true, false, false, kScalesK>{});
  }
}

// y = x W^T for packed GGUF-type weights on a fresh Tiles per thread's range of row groups.
template <class Tiles>
void MatmulPacked(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w, float* y,
                  MatmulScratch* scratch) {
  SPECD_CHECK(!w.row_scales && w.cols % 32 == 0, "AMX matmul: needs packed GGUF-type weights");
  CheckHighBitsForm(w, HighBits::kPlanes, "AMX matmul");
  const BlockActivations a = avx512::QuantizeBlockActivations(x, m, w, scratch);
  pool->ParallelFor(
      w.row_groups, 1,
      [&](int64_t g0, int64_t g1) {
        Tiles tiles;
        MultiplyPackedRange(tiles, a, w, m, g0, g1, y);
      },
      MinItemsPerThread(16 * m * w.cols));
}

}  // namespace specd::amx::packed
