// Conversion of rows between f32 and every supported storage type (ggml's rounding rules, so a
// file quantized here matches one quantized by llama.cpp).
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace specd {

// Writes n values of src in type t to dst (RowBytes(t, n) bytes).
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);
// QuantizeRow for the K-quants (q4_K and q6_K; the others are read, not written).
void QuantizeRowK(DType t, const float* src, void* dst, int64_t n);
// Reads a row of n values of type t into f32.
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);

}  // namespace specd
