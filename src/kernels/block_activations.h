// Activations quantized as the packed int8 kernels read them (AVX2, AVX-512 VNNI and the AMX tile
// kernel for GGUF types): in 32-blocks, with a scale per 32 values, or per 256 for the K-quant
// layouts (w.k_scales: q4_K, q5_K, q6_K, iq4_xs, as ggml's q8_K), whose kernels then sum a
// super-block's 8 blocks times the weights' byte scales exactly in int32 and take the float steps
// once per 256 values instead of per 32. The layout and the per-block terms, without intrinsics,
// so that every kernel's quantizer writes the same bytes whatever ISA it is compiled for.
#pragma once

#include <cstdint>
#include <cstring>

#include "base/error.h"
#include "kernels/kernels.h"

namespace specd {

// One activation row's terms of one 32-block for the packed GGUF layouts (not i8): its scale,
// the sums its weights' mins multiply, and the seeds -offset * the same sums that make the
// integer sums of unsigned levels the sums of the levels. Per 16 values where the layout has
// two sub-blocks, else [0] holds the 32 values' sums. The float sums are the integers' exact
// conversions, stored so that the kernels read them as broadcast memory operands.
struct RowBlockTerms {
  float d = 0.0f;  // the scale of the block's 32 values (k_scales: of its super-block's 256)
  float min_sums[2] = {};
  int32_t seeds[2] = {};
  // k_scales: two sums of quantized activations as int16 halves of one int32 (low, high), for
  // vpdpwssd / vpmaddwd against int16 pairs of the weights' byte scales or mins. With two
  // sub-blocks (q6_K) the block's two halves; with one (q4_K, q5_K, iq4_xs), in an even block
  // this block's and the next block's sums, in an odd block its own sum. |sum| <= 32 * 128 fits.
  int32_t sum_pair = 0;
};

// The int32 whose int16 halves are low and high (each within int16).
inline int32_t Int16Pair(int32_t low, int32_t high) {
  return static_cast<int32_t>((static_cast<uint32_t>(high) << 16) |
                              (static_cast<uint32_t>(low) & 0xFFFFu));
}

// The terms of a block with scale d whose two halves of 16 quantized values sum to sum0 and
// sum1, for w's layout.
inline RowBlockTerms MakeRowBlockTerms(float d, int32_t sum0, int32_t sum1,
                                       const PackedInt8Weights& w) {
  RowBlockTerms t;
  t.d = d;
  if (w.sub_blocks == 2) {
    t.min_sums[0] = static_cast<float>(sum0);
    t.min_sums[1] = static_cast<float>(sum1);
    t.seeds[0] = -w.offset * sum0;
    t.seeds[1] = -w.offset * sum1;
    t.sum_pair = Int16Pair(sum0, sum1);
  } else {
    t.min_sums[0] = static_cast<float>(sum0 + sum1);
    t.seeds[0] = -w.offset * (sum0 + sum1);
    t.sum_pair = sum0 + sum1;
  }
  return t;
}

// Fails unless w's high bits (if any) are in `form`, the one `kernel` reads (HighBitsFor the CPU
// picks it at load; weights packed for another CPU's kernel would read as wrong levels). Out of
// line in pack.cc, so that no copy of it is built with the AVX2 / AVX-512 kernels' flags (error.h).
void CheckHighBitsForm(const PackedInt8Weights& w, HighBits form, const char* kernel);

// Values that share an activation scale: 256 for the K-quant layouts, else 32.
inline int64_t ActivationSpan(const PackedInt8Weights& w) { return w.k_scales ? 256 : 32; }

// After a row's blocks are quantized (terms [nb] of that row, stride m): with one sub-block and
// k_scales, each even block's sum_pair becomes (its sum, the next block's sum).
inline void PairBlockSums(const PackedInt8Weights& w, RowBlockTerms* row_terms, int64_t nb,
                          int64_t m) {
  if (!w.k_scales || w.sub_blocks == 2) return;
  for (int64_t b = 0; b + 1 < nb; b += 2) {
    RowBlockTerms& even = row_terms[b * m];
    even.sum_pair = Int16Pair(even.sum_pair, row_terms[(b + 1) * m].sum_pair);
  }
}

// q [nb, m, 32] int8, block-major so that a tile's rows of one block lie together (one pointer,
// constant offsets), and the terms [nb, m].
struct BlockActivations {
  const int8_t* q = nullptr;
  const RowBlockTerms* terms = nullptr;
  int64_t nb = 0;  // the row length / 32
  int64_t m = 0;
  const RowBlockTerms& Terms(int64_t row, int64_t block) const { return terms[block * m + row]; }
  // The block's 32 values of `row`; the next rows follow 32 bytes apart.
  const int8_t* Rows(int64_t row, int64_t block) const { return q + (block * m + row) * 32; }
};

// Where a quantizer writes BlockActivations for m rows of nb blocks: q, then the terms at a
// 64-byte aligned offset.
struct BlockActivationsBuffer {
  int8_t* q = nullptr;
  RowBlockTerms* terms = nullptr;
};

inline BlockActivationsBuffer AllocateBlockActivations(int64_t m, int64_t nb,
                                                       MatmulScratch* scratch) {
  // 15 rows of slack past the last block: the AMX kernel's 16-row A tile of a partial last
  // M-block reads them (and does not use their products).
  constexpr int64_t kTileSlackRows = 15;
  const int64_t q_bytes = ((m * nb + kTileSlackRows) * 32 + 63) / 64 * 64;
  scratch->bytes.ResizeForOverwrite(q_bytes + m * nb * static_cast<int64_t>(sizeof(RowBlockTerms)));
  std::memset(scratch->bytes.data() + m * nb * 32, 0, q_bytes - m * nb * 32);
  return {reinterpret_cast<int8_t*>(scratch->bytes.data()),
          reinterpret_cast<RowBlockTerms*>(scratch->bytes.data() + q_bytes)};
}

}  // namespace specd
