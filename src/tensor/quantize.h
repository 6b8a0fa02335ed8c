// Conversion of rows between f32 and every supported storage type (ggml's rounding rules, so a
// file quantized here matches one quantized by llama.cpp).
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace specd {

// Writes n values of src in type t to dst (RowBytes(t, n) bytes).
void QuantizeRow(DType t, const float* src, void* dst, int64_t n);
// QuantizeRow for the K-quants (q4_K and q6_K; the others are read, not written).
void QuantizeRowK(DType t, const float* src, void* dst, int64_t n);
// Symmetric int8 with one scale for the row (the `i8` weight format): scale = amax / 127,
// dst[i] = round(src[i] / scale) in [-127, 127]; returns the scale (0 for an all-zero row).
float QuantizeRowI8(const float* src, int8_t* dst, int64_t n);
// The tensor holding an i8 matrix's row scales: "blk.0.attn_q.weight" -> "blk.0.attn_q.scale"
// (f32, one per row; specd's convention, which other GGUF readers do not know).
std::string I8ScaleTensorName(const std::string& weight_name);
// Its SmoothQuant activation multipliers, when it has them: "blk.0.attn_q.smooth" (f32, [cols]).
std::string I8SmoothTensorName(const std::string& weight_name);
// Reads a row of n values of type t into f32 (i8: the integers, unscaled).
void DequantizeRow(DType t, const void* src, float* dst, int64_t n);

}  // namespace specd
