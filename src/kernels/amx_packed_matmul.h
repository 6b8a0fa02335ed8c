// The packed GGUF-type matmul on AMX tiles: per layout and row count, the per-block kernel
// (amx_packed_kernel.h) or, for q4_K, q5_K and q6_K from 16 rows, the folded one
// (amx_folded_kernel.h). Written over a Tiles type: the hardware's in matmul_amx.cc, the
// software model's in amx_emulated.cc.
//
// Include only from files compiled with SPECD_AVX512_FLAGS.
#pragma once

#include <cstdint>

#include "base/error.h"
#include "kernels/amx_folded_kernel.h"
#include "kernels/amx_packed_kernel.h"
#include "kernels/kernels.h"

namespace specd::amx::packed {

// fn(L{}) for w's layout as the kernels' compile-time shape L.
template <class Fn>
auto VisitLayout(const PackedInt8Weights& w, Fn&& fn) {
  using avx512::kScalesF16, avx512::kScalesF32, avx512::kScalesK;
  switch (LayoutOf(w)) {
    case PackedLayout::kBlockBytes:
      return fn(Layout<false, 0, false, false>{});
    case PackedLayout::kBlockNibbles:
      return fn(Layout<true, 0, false, false>{});
    case PackedLayout::kBlockNibbles5:
      return fn(Layout<true, 1, false, false>{});
    case PackedLayout::kIq4NL:
      return fn(Layout<true, 0, true, false>{});
    case PackedLayout::kQ4_1:
      return fn(Layout<true, 0, false, true, false, true, kScalesF16>{});
    case PackedLayout::kQ5_1:
      return fn(Layout<true, 1, false, true, false, true, kScalesF16>{});
    case PackedLayout::kQ4_K:
      return fn(Layout<true, 0, false, true, false, true, kScalesK>{});
    case PackedLayout::kQ5_K:
      return fn(Layout<true, 1, false, true, false, true, kScalesK>{});
    case PackedLayout::kQ6_K:
      return fn(Layout<true, 2, false, true, true, false, kScalesK>{});
    case PackedLayout::kQ3_K:
      return fn(Layout<true, 0, false, true, true, false, kScalesF32>{});
    case PackedLayout::kQ2_K:
      return fn(Layout<true, 0, false, true, true, true, kScalesF32>{});
    case PackedLayout::kIq4XS:
      break;
  }
  return fn(Layout<true, 0, true, true, false, false, kScalesK>{});  // iq4_xs
}

// MultiplyRange for w's layout; pairs: the pair-major activations where the folded kernel runs
// (else null).
template <class Tiles>
void MultiplyPackedRange(Tiles& tiles, const BlockActivations& a, const PairActivations* pairs,
                         const PackedInt8Weights& w, int64_t m, int64_t g0, int64_t g1, float* y) {
  VisitLayout(w, [&](auto layout) {
    using L = decltype(layout);
    if constexpr (kFoldsScales<L>) {
      if (pairs != nullptr) return MultiplyRangeFolded<L>(tiles, a, *pairs, w, g0, g1, y);
    }
    MultiplyRange<L>(tiles, a, w, m, g0, g1, y);
  });
}

// Whether w's layout is one the folded kernel takes (q4_K, q5_K, q6_K).
inline bool FoldsScales(const PackedInt8Weights& w) {
  return VisitLayout(w, [](auto layout) { return kFoldsScales<decltype(layout)>; });
}

// y = x W^T for packed GGUF-type weights on a fresh Tiles per thread's range of row groups.
template <class Tiles>
void MatmulPacked(ThreadPool* pool, const float* x, int64_t m, const PackedInt8Weights& w, float* y,
                  MatmulScratch* scratch) {
  SPECD_CHECK(!w.row_scales && w.cols % 32 == 0, "AMX matmul: needs packed GGUF-type weights");
  CheckHighBitsForm(w, HighBits::kPlanes, "AMX matmul");
  const BlockActivations a = avx512::QuantizeBlockActivations(x, m, w, scratch);
  PairActivations pairs;
  const bool folded = m >= kFoldedMinRows && FoldsScales(w);
  if (folded) pairs = PairUp(a, &scratch->tile_pairs);
  pool->ParallelFor(
      w.row_groups, 1,
      [&](int64_t g0, int64_t g1) {
        Tiles tiles;
        MultiplyPackedRange(tiles, a, folded ? &pairs : nullptr, w, m, g0, g1, y);
      },
      MinItemsPerThread(16 * m * w.cols));
}

}  // namespace specd::amx::packed
