// Activations quantized per 32-block as the packed int8 kernels read them (AVX2, AVX-512 VNNI and
// the AMX tile kernel for GGUF types): the layout and the per-block terms, without intrinsics, so
// that every kernel's quantizer writes the same bytes whatever ISA it is compiled for.
#pragma once

#include <cstdint>

#include "kernels/kernels.h"

namespace specd {

// One activation row's terms of one 32-block for the packed GGUF layouts (not i8): its scale,
// the sums its weights' mins multiply, and the seeds -offset * the same sums that make the
// integer sums of unsigned levels the sums of the levels. Per 16 values where the layout has
// two sub-blocks, else [0] holds the 32 values' sums. The float sums are the integers' exact
// conversions, stored so that the kernels read them as broadcast memory operands.
struct RowBlockTerms {
  float d = 0.0f;
  float min_sums[2] = {};
  int32_t seeds[2] = {};
};

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
  } else {
    t.min_sums[0] = static_cast<float>(sum0 + sum1);
    t.seeds[0] = -w.offset * (sum0 + sum1);
  }
  return t;
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
  const int64_t q_bytes = (m * nb * 32 + 63) / 64 * 64;
  scratch->bytes.ResizeForOverwrite(q_bytes + m * nb * static_cast<int64_t>(sizeof(RowBlockTerms)));
  return {reinterpret_cast<int8_t*>(scratch->bytes.data()),
          reinterpret_cast<RowBlockTerms*>(scratch->bytes.data() + q_bytes)};
}

}  // namespace specd
