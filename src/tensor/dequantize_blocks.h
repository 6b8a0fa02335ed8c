// One block of each ggml type beyond q8_0 / q4_0 to f32 (kQuantBlock or kSuperBlock values),
// exactly as ggml's reference reads it.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace specd {

void DequantizeQ4_1(const BlockQ4_1& b, float* y);
void DequantizeQ5_0(const BlockQ5_0& b, float* y);
void DequantizeQ5_1(const BlockQ5_1& b, float* y);
void DequantizeQ2_K(const BlockQ2_K& b, float* y);
void DequantizeQ3_K(const BlockQ3_K& b, float* y);
void DequantizeQ4_K(const BlockQ4_K& b, float* y);
void DequantizeQ5_K(const BlockQ5_K& b, float* y);
void DequantizeQ6_K(const BlockQ6_K& b, float* y);
void DequantizeIQ4_NL(const BlockIQ4_NL& b, float* y);
void DequantizeIQ4_XS(const BlockIQ4_XS& b, float* y);
// IQ4 quantizers (quantize_iq4.cc): ggml's first pass, not its scale search.
void QuantizeIQ4_NL(const float* x, BlockIQ4_NL* y);
void QuantizeIQ4_XS(const float* x, BlockIQ4_XS* y);

// Unpacked sub-block scales: q3_K's 16 signed scales; q4_K / q5_K's 8 scales and 8 mins.
void UnpackQ3_KScales(const uint8_t packed[12], int8_t scales[16]);
void ScalesMinsK4(const uint8_t packed[12], uint8_t scales[8], uint8_t mins[8]);

}  // namespace specd
