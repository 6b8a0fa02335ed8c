// i8 matmul on AMX tiles (BASS's INT8 on CPUs with AMX-INT8).
//
// The packed i8 layout (PackInt8) already is AMX's B-tile layout: within a group of 16 output
// rows, a 32-block holds 8 lines of 64 bytes, line g = the 16 rows' elements 4g..4g+3, so two
// consecutive blocks are one 16 x 64-byte tile of K = 64 (tdpbsud: signed activations times the
// unsigned stored bytes q + 128). The integer sums are exact and the float steps after them are
// reference::MatmulI8's in its order, so the result is the VNNI kernel's bits for any row count,
// thread split or blocking.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "base/error.h"
#include "kernels/amx_packed_matmul.h"
#include "kernels/amx_tiles.h"
#include "kernels/kernels.h"

namespace specd {
namespace amx {
namespace {

constexpr int64_t kTileK = 64;           // int8 values per tile line
constexpr int64_t kTileBytes = 1024;     // one B tile: 16 lines of 64 bytes
constexpr int64_t kGroupsPerChunk = 16;  // row groups whose weights stay in L2 across M-blocks
// How far ahead of a pass's weights the kernel asks for them. A pass walks 2 or 4 row groups
// side by side, but their weights are contiguous, so the prefetch runs linearly through the
// pass's bytes at the pass's pace and on into the next pass: prefetching each group's own
// stream left every group's first tiles unrequested. 8 KiB ahead: 4-row forwards of the 16.5M
// target took 0.54 / 0.49 / 0.49 / 0.47 ms with 1 / 4 / 8 / 16 KiB.
constexpr int64_t kPrefetchBytes = 8192;

// Two tilings of the 8 tile registers (the intrinsics paste their tile arguments into the
// assembly, so the code spells tile numbers as literals):
//   wide, M-blocks of up to 16 rows: passes of 2 row groups, C[j] = A x B[j], accumulators
//     alternating between C0 / C1 and C2 / C3 from pass to pass; A 4, B 5 and 6.
//   tall, M-blocks of 17-32 rows: C[i][j] = A[i] x B[j], 2 activation tiles x 2 row groups:
//     C00 0, C01 1, C10 2, C11 3, A0 4, A1 5, B0 6, B1 7.
constexpr int kTallGroups = 2;

// The configuration for an M-block of rows0 (1..16) + rows1 (0..16) activation rows: wide
// when rows1 == 0, tall otherwise.
TileConfig ConfigFor(int rows0, int rows1) {
  TileConfig c;
  auto set = [&](int tile, int rows) {
    c.rows[tile] = static_cast<uint8_t>(rows);
    c.bytes_per_row[tile] = rows > 0 ? 64 : 0;
  };
  if (rows1 == 0) {
    for (int tile : {0, 1, 2, 3, 4}) set(tile, rows0);
    for (int tile : {5, 6}) set(tile, 16);
  } else {
    for (int tile : {0, 1, 4}) set(tile, rows0);
    for (int tile : {2, 3, 5}) set(tile, rows1);
    for (int tile : {6, 7}) set(tile, 16);
  }
  return c;
}

// Prefetches one tile's worth of bytes kPrefetchBytes ahead of `at`.
inline void Prefetch(const uint8_t* at) {
  for (int64_t line = 0; line < kTileBytes; line += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(at) + kPrefetchBytes + line, _MM_HINT_T0);
  }
}

struct Activations {
  const int8_t* q = nullptr;      // [m, k_padded], zero beyond k
  const float* d = nullptr;       // [m] row scales
  const int32_t* corr = nullptr;  // [m] -offset * sum of the row's q
  int64_t k_padded = 0;
};

// The integer sums of one C tile: [rows, 16].
using TileSums = int32_t[kMaxTileRows][16];

// Stores C tile `tile` (0-3). Storing one tile and using its sums before storing the next
// measured faster than storing all first (9.3 vs 11 us for a 16-row [960 x 576] product).
void StoreTile(int tile, TileSums& sums) {
  switch (tile) {
    case 0:
      _tile_stored(0, sums, 64);
      break;
    case 1:
      _tile_stored(1, sums, 64);
      break;
    case 2:
      _tile_stored(2, sums, 64);
      break;
    default:
      _tile_stored(3, sums, 64);
      break;
  }
}

// Writes the sums of group g as floats: (float(s + corr) * scale_w) * d_a.
void StoreGroup(const TileSums& sums, const Activations& a, const PackedInt8Weights& w, int64_t g,
                int64_t m0, int rows, float* y) {
  const uint8_t* group = w.data.data() + g * w.GroupBytes();
  const __m512 scale = _mm512_loadu_ps(reinterpret_cast<const float*>(group + w.TrailerOffset()));
  const int64_t n0 = g * 16;
  const int64_t valid = std::min<int64_t>(16, w.rows - n0);
  const __mmask16 mask = valid >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << valid) - 1);
  for (int r = 0; r < rows; ++r) {
    const __m512i s =
        _mm512_add_epi32(_mm512_load_si512(sums[r]), _mm512_set1_epi32(a.corr[m0 + r]));
    const __m512 t = _mm512_mul_ps(_mm512_cvtepi32_ps(s), scale);
    _mm512_mask_storeu_ps(y + (m0 + r) * w.rows + n0, mask,
                          _mm512_mul_ps(t, _mm512_set1_ps(a.d[m0 + r])));
  }
}

// Tile t of row group `group`'s weights. With K % 64 == 32 the last tile reads 512 bytes past
// the group's values (its trailer, the next group, the buffer's slack): they meet zero
// activations and add exactly 0.
inline const uint8_t* WeightTile(const uint8_t* group, int64_t t) { return group + t * kTileBytes; }

// Zeroes the two accumulators of parity kParity (C0 / C1 or C2 / C3).
template <int kParity>
inline void ZeroAccumulators() {
  if constexpr (kParity == 0) {
    _tile_zero(0);
    _tile_zero(1);
  } else {
    _tile_zero(2);
    _tile_zero(3);
  }
}

// C[kParity * 2 + j] += A(4) x B_j for the pass's kGroups (1..2) row groups at k-tile t.
template <int kParity, int kGroups>
inline void MultiplyTile(const uint8_t* b0, const uint8_t* b1, int64_t t) {
  _tile_loadd(5, WeightTile(b0, t), 64);
  if constexpr (kParity == 0) {
    _tile_dpbsud(0, 4, 5);
  } else {
    _tile_dpbsud(2, 4, 5);
  }
  if constexpr (kGroups > 1) {
    _tile_loadd(6, WeightTile(b1, t), 64);
    if constexpr (kParity == 0) {
      _tile_dpbsud(1, 4, 6);
    } else {
      _tile_dpbsud(3, 4, 6);
    }
  }
}

// Writes the floats of a finished pass: `groups` row groups from g, accumulators of `parity`.
void StorePass(const Activations& a, const PackedInt8Weights& w, int parity, int64_t g, int groups,
               int64_t m0, int rows, float* y) {
  alignas(64) TileSums sums;
  for (int j = 0; j < groups; ++j) {
    StoreTile(parity * 2 + j, sums);
    StoreGroup(sums, a, w, g + j, m0, rows, y);
  }
}

// One pass of the wide tiling: kGroups (1..2) row groups from g into the accumulators of
// kParity. The previous pass (2 groups from previous_g, the other parity; none if < 0) is
// stored after this pass's first products are issued, so its tile stores and float steps
// overlap this pass's weight loads instead of draining the tile unit between passes.
template <int kParity, int kGroups>
void WidePass(const Activations& a, const PackedInt8Weights& w, int64_t g, int64_t previous_g,
              int64_t m0, int rows, float* y) {
  const uint8_t* b0 = w.data.data() + g * w.GroupBytes();
  const uint8_t* b1 = b0 + w.GroupBytes();
  const int8_t* a0 = a.q + m0 * a.k_padded;
  ZeroAccumulators<kParity>();
  for (int64_t t = 0; t < a.k_padded / kTileK; ++t) {
    _tile_loadd(4, a0 + t * kTileK, a.k_padded);
    for (int j = 0; j < kGroups; ++j) Prefetch(b0 + (t * kGroups + j) * kTileBytes);
    MultiplyTile<kParity, kGroups>(b0, b1, t);
    if (t == 0 && previous_g >= 0) StorePass(a, w, 1 - kParity, previous_g, 2, m0, rows, y);
  }
}

// Wide tiling (M-blocks of up to 16 rows): row groups [g0, g1) in passes of 2 (the last may
// have 1), their accumulators alternating between C0 / C1 and C2 / C3. A is tile 4, B 5 and 6.
// 16 rows of a [92160 x 576] product streamed from memory: storing each pass's sums at its end
// (4 groups a pass) measured 697 GMAC/s, 925 without the stores (the sums unused), and this
// tiling, storing them during the next pass, 750 (1 row: 50 -> 57).
void MultiplyWide(const Activations& a, const PackedInt8Weights& w, int64_t g0, int64_t g1,
                  int64_t m0, int rows, float* y) {
  int64_t previous_g = -1;  // the pass whose sums are still in its accumulators
  int previous_parity = 1, previous_groups = 0;
  for (int64_t g = g0; g < g1; g += 2) {
    const int parity = 1 - previous_parity;
    const int groups = g + 1 < g1 ? 2 : 1;
    if (parity == 0) {
      groups == 2 ? WidePass<0, 2>(a, w, g, previous_g, m0, rows, y)
                  : WidePass<0, 1>(a, w, g, previous_g, m0, rows, y);
    } else {
      groups == 2 ? WidePass<1, 2>(a, w, g, previous_g, m0, rows, y)
                  : WidePass<1, 1>(a, w, g, previous_g, m0, rows, y);
    }
    previous_g = g;
    previous_parity = parity;
    previous_groups = groups;
  }
  if (previous_g >= 0) StorePass(a, w, previous_parity, previous_g, previous_groups, m0, rows, y);
}

// Tall tiling: kGroups (1..2) row groups from g times activation rows [m0, m0 + 16 + rows1).
template <int kGroups>
void MultiplyTall(const Activations& a, const PackedInt8Weights& w, int64_t g, int64_t m0,
                  int rows1, float* y) {
  const uint8_t* b0 = w.data.data() + g * w.GroupBytes();
  const uint8_t* b1 = b0 + w.GroupBytes();
  const int8_t* a0 = a.q + m0 * a.k_padded;
  const int8_t* a1 = a0 + kMaxTileRows * a.k_padded;
  _tile_zero(0);
  _tile_zero(2);
  if constexpr (kGroups > 1) {
    _tile_zero(1);
    _tile_zero(3);
  }
  for (int64_t t = 0; t < a.k_padded / kTileK; ++t) {
    _tile_loadd(4, a0 + t * kTileK, a.k_padded);
    _tile_loadd(5, a1 + t * kTileK, a.k_padded);
    for (int j = 0; j < kGroups; ++j) Prefetch(b0 + (t * kGroups + j) * kTileBytes);
    _tile_loadd(6, WeightTile(b0, t), 64);
    _tile_dpbsud(0, 4, 6);
    _tile_dpbsud(2, 5, 6);
    if constexpr (kGroups > 1) {
      _tile_loadd(7, WeightTile(b1, t), 64);
      _tile_dpbsud(1, 4, 7);
      _tile_dpbsud(3, 5, 7);
    }
  }
  alignas(64) TileSums sums;
  for (int j = 0; j < kGroups; ++j) {
    StoreTile(j, sums);  // C0j
    StoreGroup(sums, a, w, g + j, m0, kMaxTileRows, y);
    StoreTile(2 + j, sums);  // C1j
    StoreGroup(sums, a, w, g + j, m0 + kMaxTileRows, rows1, y);
  }
}

// Row groups [g, g1) (at most kTallGroups) times the tall M-block at m0.
void TallPass(const Activations& a, const PackedInt8Weights& w, int64_t g, int64_t g1, int64_t m0,
              int rows1, float* y) {
  g1 - g >= 2 ? MultiplyTall<2>(a, w, g, m0, rows1, y) : MultiplyTall<1>(a, w, g, m0, rows1, y);
}

// Row groups [g0, g1) times all m activation rows, in M-blocks of up to 32 rows. Up to 16 rows
// are one wide M-block over the whole range; more are taken a chunk of groups at a time, whose
// weights are read from memory once and from L2 for the later M-blocks.
void MultiplyRange(const Activations& a, const PackedInt8Weights& w, int64_t m, int64_t g0,
                   int64_t g1, float* y) {
  const int64_t chunk = m <= kMaxTileRows ? g1 - g0 : kGroupsPerChunk;
  int configured_rows = -1;
  for (int64_t c0 = g0; c0 < g1; c0 += chunk) {
    const int64_t c1 = std::min(g1, c0 + chunk);
    for (int64_t m0 = 0; m0 < m; m0 += 2 * kMaxTileRows) {
      const int block_rows = static_cast<int>(std::min<int64_t>(2 * kMaxTileRows, m - m0));
      const int rows0 = std::min(block_rows, kMaxTileRows), rows1 = block_rows - rows0;
      if (block_rows != configured_rows) {
        const TileConfig config = ConfigFor(rows0, rows1);
        _tile_loadconfig(&config);
        configured_rows = block_rows;
      }
      if (rows1 == 0) {
        MultiplyWide(a, w, c0, c1, m0, rows0, y);
        continue;
      }
      for (int64_t g = c0; g < c1; g += kTallGroups) {
        TallPass(a, w, g, std::min(c1, g + kTallGroups), m0, rows1, y);
      }
    }
  }
  if (configured_rows > 0) _tile_release();
}

// The tile unit itself, for the packed GGUF-type kernel (amx_packed_kernel.h). The intrinsics
// paste their tile numbers into the assembly, hence the literal cases.
struct HardwareTiles {
  void Configure(const TileConfig& config) { _tile_loadconfig(&config); }
  void Release() { _tile_release(); }
  void Zero(int c) {
    if (c == 0) {
      _tile_zero(0);
    } else if (c == 1) {
      _tile_zero(1);
    } else if (c == 2) {
      _tile_zero(2);
    } else {
      _tile_zero(3);
    }
  }
  void LoadA(int slot, const void* from, int64_t stride) {
    if (slot == 0) {
      _tile_loadd(4, from, stride);
    } else {
      _tile_loadd(5, from, stride);
    }
  }
  void LoadB(int slot, const void* from, int64_t stride) {
    if (slot == 0) {
      _tile_loadd(6, from, stride);
    } else {
      _tile_loadd(7, from, stride);
    }
  }
  // C[c] += A[a_slot] x B[b_slot] (TDPBSUD), or with B's bytes signed (TDPBSSD).
  void Multiply(int c, int a_slot, int b_slot) { Product<false>(c, a_slot, b_slot); }
  void MultiplySigned(int c, int a_slot, int b_slot) { Product<true>(c, a_slot, b_slot); }
  void Store(int c, int32_t* sums) const { StoreTile(c, *reinterpret_cast<TileSums*>(sums)); }

 private:
  // One product on literal tiles: the tile numbers go into the instruction as constants ("i"
  // operands printed bare by %c), one instance per C, A and B tile.
  template <bool kSigned, int kC, int kA, int kB>
  static void ProductAt() {
    if constexpr (kSigned) {
      asm volatile("tdpbssd %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(kC), "i"(kA), "i"(kB));
    } else {
      asm volatile("tdpbsud %%tmm%c2, %%tmm%c1, %%tmm%c0" ::"i"(kC), "i"(kA), "i"(kB));
    }
  }
  // The 16 instances by 4 c + 2 a_slot + b_slot.
  template <bool kSigned, std::size_t... kIndex>
  static constexpr std::array<void (*)(), 16> ProductTable(std::index_sequence<kIndex...>) {
    return {&ProductAt<kSigned, kIndex / 4, 4 + kIndex % 4 / 2, 6 + kIndex % 2>...};
  }
  template <bool kSigned>
  static void Product(int c, int a_slot, int b_slot) {
    static constexpr std::array<void (*)(), 16> kProducts =
        ProductTable<kSigned>(std::make_index_sequence<16>{});
    kProducts[4 * c + 2 * a_slot + b_slot]();
  }
};

}  // namespace

void MatmulPacked(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w, float* y,
                  MatmulScratch* scratch) {
  packed::MatmulPacked<HardwareTiles>(pool, x, m, w, y, scratch);
}

void MatmulPackedI8(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w,
                    const float* col_scales, float* y, MatmulScratch* scratch) {
  SPECD_CHECK(w.row_scales && w.cols % 32 == 0, "AMX matmul: needs packed i8 weights");
  const int64_t k = w.cols;
  const int64_t k_padded = (k + kTileK - 1) / kTileK * kTileK;
  // [m, k_padded] int8 activations, [m] row scales, [m] offset corrections.
  scratch->bytes.ResizeForOverwrite(m * k_padded + m * 8 + 64);
  auto* q = reinterpret_cast<int8_t*>(scratch->bytes.data());
  auto* d = reinterpret_cast<float*>(scratch->bytes.data() + m * k_padded);
  auto* corr = reinterpret_cast<int32_t*>(d + m);
  if (col_scales != nullptr) scratch->smoothed.ResizeForOverwrite(k);  // [k]
  // Serial: splitting the rows over the threads (with a barrier before the products) measured
  // slower here, the rows moving between cores.
  for (int64_t i = 0; i < m; ++i) {
    const float* row = x + i * k;
    if (col_scales != nullptr) {  // SmoothQuant: x * s in f32, as reference::MatmulI8 does
      float* smoothed = scratch->smoothed.data();
      for (int64_t j = 0; j < k; j += 16) {
        _mm512_storeu_ps(smoothed + j,
                         _mm512_mul_ps(_mm512_loadu_ps(row + j), _mm512_loadu_ps(col_scales + j)));
      }
      row = smoothed;
    }
    avx512::QuantizeActivationsPerRow(row, 1, k, q + i * k_padded, d + i, corr + i);
    if (k_padded > k) std::memset(q + i * k_padded + k, 0, k_padded - k);
    corr[i] *= -w.offset;
  }
  const Activations a{q, d, corr, k_padded};
  pool->ParallelFor(
      w.row_groups, 1, [&](int64_t g0, int64_t g1) { MultiplyRange(a, w, m, g0, g1, y); },
      MinItemsPerThread(16 * m * k));
}

}  // namespace amx
}  // namespace specd
