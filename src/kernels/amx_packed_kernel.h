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

// C tiles 0..3 hold the products in flight: of kBlocksInFlight blocks (one per block and
// sub-block) for one M-block of activation rows, or of one block for up to kMBlocks M-blocks,
// which then share the block's unpacked B tile.
inline constexpr int kAccumulatorTiles = 4;
// How far ahead the kernel asks for a group's weights (its blocks are contiguous).
inline constexpr int64_t kPrefetchBytes = 4096;

// Asks for the block_bytes of a block kPrefetchBytes ahead of blk (a group's blocks are
// contiguous, so near its end this reaches into the next group).
inline void PrefetchAhead(const uint8_t* blk, int64_t block_bytes) {
  for (int64_t line = 0; line < block_bytes; line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(blk) + kPrefetchBytes + line, _MM_HINT_T0);
  }
}

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
  static constexpr int kSub = kSub16 ? 2 : 1;                // products per block
  static constexpr int kMBlocks = kAccumulatorTiles / kSub;  // M-blocks a pass can take
  static constexpr int kPassRows = kMBlocks * kMaxTileRows;
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

// One row group times a pass of activation rows: one M-block of up to 16 rows, or up to
// L::kMBlocks M-blocks of 16 (the last may be partial; its A tiles then read past the pass's
// rows into padding, block_activations.h, and its extra product rows are not used).
struct GroupTask {
  const BlockActivations* a = nullptr;
  const PackedInt8Weights* w = nullptr;
  const uint8_t* group = nullptr;  // the row group's packed bytes
  int64_t m0 = 0;                  // first activation row
  int rows = 0;                    // activation rows (1..L::kPassRows; the folded kernel's: m)

  int MBlocks() const { return (rows + kMaxTileRows - 1) / kMaxTileRows; }
  // M-block i of the pass, as a task of its own.
  GroupTask MBlock(int i) const {
    return {a, w, group, m0 + i * kMaxTileRows, std::min(kMaxTileRows, rows - i * kMaxTileRows)};
  }
};

// The C tile of block j (of those in flight), M-block i and sub-block s.
template <class L>
int ProductTile(int j, int i, int n_mblocks, int s) {
  return (j * n_mblocks + i) * L::kSub + s;
}

// Issues the products of blocks b0 .. b0 + n - 1 for the task's M-blocks: C[ProductTile] =
// A(M-block i, block b0 + j, sub-block s) x B(block b0 + j, sub-block s). Each block is unpacked
// and its B tile loaded once for all the M-blocks.
template <class L, int kPassMBlocks, class Tiles>
void MultiplyBlocks(Tiles& tiles, const GroupTask& task, int64_t b0, int n,
                    uint8_t (*buffers)[512]) {
  const BlockActivations& a = *task.a;
  const int64_t block_bytes = task.w->BlockBytes();
  for (int j = 0; j < n; ++j) {
    const uint8_t* blk = task.group + (b0 + j) * block_bytes;
    PrefetchAhead(blk, block_bytes);
    const uint8_t* levels = BlockLevels<L>(blk + task.w->HeaderBytes(), buffers[j]);
    for (int s = 0; s < L::kSub; ++s) {
      // Alternate B and A tiles, so a load need not wait for the product reading the last.
      const int b_slot = (j * L::kSub + s) & 1;
      tiles.LoadB(b_slot, levels + s * L::kSubBytes * 16, kTileLineBytes);
      for (int i = 0; i < kPassMBlocks; ++i) {
        const int c = ProductTile<L>(j, i, kPassMBlocks, s), a_slot = c & 1;
        tiles.Zero(c);
        tiles.LoadA(a_slot, a.Rows(task.m0 + i * kMaxTileRows, b0 + j) + s * L::kSubBytes, 32);
        tiles.Multiply(c, a_slot, b_slot);
      }
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

// Block b's products (tiles from ProductTile) into the accumulators of the task's M-blocks:
// acc [task.rows][16], and super_sums [task.rows][16] for the K-quant layouts.
template <class L, int kPassMBlocks, class Tiles>
[[gnu::always_inline]] inline void AddProducts(Tiles& tiles, const GroupTask& task, int j,
                                               int64_t b, BlockSums<L>& sums,
                                               int32_t (*super_sums)[16], float (*acc)[16]) {
  const PackedInt8Weights& w = *task.w;
  const uint8_t* blk = task.group + b * w.BlockBytes();
  if constexpr (L::kScales == avx512::kScalesK) {
    if (b % 8 == 0) {  // the trailer lies past the blocks: asked for before it is read
      _mm_prefetch(reinterpret_cast<const char*>(task.group + w.TrailerOffset() +
                                                 b / 8 * w.TrailerBytesPerSuper()),
                   _MM_HINT_T0);
    }
  }
  for (int i = 0; i < kPassMBlocks; ++i) {
    const GroupTask part = task.MBlock(i);
    const int r0 = i * kMaxTileRows;
    for (int s = 0; s < L::kSub; ++s) {
      tiles.Store(ProductTile<L>(j, i, kPassMBlocks, s), sums[s][0]);
    }
    if constexpr (L::kScales == avx512::kScalesK) {
      AddScaledBlock<L>(sums, part, blk, b, super_sums + r0);
      if (b % 8 == 7) AddSuper<L>(part, b - 7, super_sums + r0, acc + r0);
    } else {
      AddBlock<L>(sums, part, blk, b, acc + r0);
    }
  }
}

// y [m, w.rows] for row group g and the task's kPassMBlocks M-blocks (a compile-time count, so
// the tile numbers fold).
template <class L, int kPassMBlocks, class Tiles>
void MultiplyGroupOf(Tiles& tiles, const GroupTask& task, int64_t g, float* y) {
  const PackedInt8Weights& w = *task.w;
  const int64_t nb = task.a->nb;
  alignas(64) float acc[L::kPassRows][16];
  alignas(64) int32_t super_sums[L::kPassRows][16];  // K-quant layouts only
  std::fill_n(&acc[0][0], task.rows * 16, 0.0f);
  std::fill_n(&super_sums[0][0], task.rows * 16, 0);
  constexpr int kBlocksInFlight = L::kMBlocks / kPassMBlocks;
  alignas(64) uint8_t buffers[kBlocksInFlight][512];
  alignas(64) BlockSums<L> sums;
  for (int64_t b0 = 0; b0 < nb; b0 += kBlocksInFlight) {
    const int n = static_cast<int>(std::min<int64_t>(kBlocksInFlight, nb - b0));
    MultiplyBlocks<L, kPassMBlocks>(tiles, task, b0, n, buffers);
    for (int j = 0; j < n; ++j) {
      AddProducts<L, kPassMBlocks>(tiles, task, j, b0 + j, sums, super_sums, acc);
    }
  }
  const int64_t n0 = g * 16;
  const int64_t valid = std::min<int64_t>(16, w.rows - n0);
  const __mmask16 mask = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  for (int r = 0; r < task.rows; ++r) {
    _mm512_mask_storeu_ps(y + (task.m0 + r) * w.rows + n0, mask, _mm512_load_ps(acc[r]));
  }
}

template <class L, class Tiles>
void MultiplyGroup(Tiles& tiles, const GroupTask& task, int64_t g, float* y) {
  static_assert(L::kMBlocks == 2 || L::kMBlocks == 4);
  switch (task.MBlocks()) {
    case 1:
      return MultiplyGroupOf<L, 1>(tiles, task, g, y);
    case 2:
      return MultiplyGroupOf<L, 2>(tiles, task, g, y);
  }
  if constexpr (L::kMBlocks == 4) {
    if (task.MBlocks() == 3) return MultiplyGroupOf<L, 3>(tiles, task, g, y);
    return MultiplyGroupOf<L, 4>(tiles, task, g, y);
  }
}

// Row groups [g0, g1) times all m activation rows, in passes of up to L::kPassRows rows (tiles
// of 16 rows once m > 16). With more than one pass the groups are taken a chunk at a time,
// whose weights come from memory once and from L2 for the later passes.
template <class L, class Tiles>
void MultiplyRange(Tiles& tiles, const BlockActivations& a, const PackedInt8Weights& w, int64_t m,
                   int64_t g0, int64_t g1, float* y) {
  constexpr int64_t kGroupsPerChunk = 16;
  const int64_t chunk = m <= L::kPassRows ? g1 - g0 : kGroupsPerChunk;
  tiles.Configure(ConfigFor<L>(static_cast<int>(std::min<int64_t>(kMaxTileRows, m))));
  for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
    const int64_t c1 = std::min(g1, c0 + chunk);
    for (int64_t m0 = 0; m0 < m; m0 += L::kPassRows) {
      const int rows = static_cast<int>(std::min<int64_t>(L::kPassRows, m - m0));
      for (int64_t g = c0; g < c1; ++g) {
        const GroupTask task{&a, &w, w.data.data() + g * w.GroupBytes(), m0, rows};
        MultiplyGroup<L>(tiles, task, g, y);
      }
    }
  }
  tiles.Release();
}

}  // namespace specd::amx::packed
