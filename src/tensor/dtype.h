// Element types of weights, with ggml's numeric ids and block layouts so that GGUF files written by
// llama.cpp's tools are read as they are.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace specd {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  // Plain int8 values (ggml's I8). As a weight matrix specd pairs it with one f32 scale per row,
  // w[n, k] = scale[n] * q[n, k], in a "<name>.scale" tensor (I8ScaleTensorName, in
  // tensor/quantize.h). Not in kAllDTypes: a row of it means nothing without its scale.
  kI8 = 24,
  kBF16 = 30,
};

inline constexpr int kQuantBlock = 32;   // elements per q8_0 / q4_0 / q4_1 / q5_0 / q5_1 block
inline constexpr int kSuperBlock = 256;  // elements per K-quant super-block (ggml's QK_K)

// q8_0: 32 int8 values sharing one fp16 scale: x[i] = d * qs[i].
struct BlockQ8_0 {
  uint16_t d;  // fp16
  int8_t qs[kQuantBlock];
};
static_assert(sizeof(BlockQ8_0) == 34);

// q4_0: 32 4-bit values sharing one fp16 scale: x[j] = d * ((qs[j] & 15) - 8) for j < 16 and
// x[j + 16] = d * ((qs[j] >> 4) - 8).
struct BlockQ4_0 {
  uint16_t d;  // fp16
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

// q4_1: x[j] = d * (qs[j] & 15) + m, x[j + 16] = d * (qs[j] >> 4) + m.
struct BlockQ4_1 {
  uint16_t d, m;  // fp16
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

// q5_0: 5-bit values, the fifth bit of element j in bit j of qh (little-endian uint32):
// x[j] = d * (((qs[j] & 15) | bit j << 4) - 16), x[j + 16] = d * (((qs[j] >> 4) | bit j+16 << 4) -
// 16).
struct BlockQ5_0 {
  uint16_t d;  // fp16
  uint8_t qh[4];
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

// q5_1: as q5_0 without the -16, plus a minimum: x = d * q + m.
struct BlockQ5_1 {
  uint16_t d, m;  // fp16
  uint8_t qh[4];
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// K-quants: super-blocks of 256 values in sub-blocks of 16 or 32, with quantized sub-block scales
// (ggml's layouts; the dequantization in quantize.cc spells out each bit field).
struct BlockQ2_K {
  uint8_t scales[kSuperBlock / 16];  // low 4 bits scale, high 4 bits min, per 16 values
  uint8_t qs[kSuperBlock / 4];       // 2-bit values
  uint16_t d, dmin;                  // fp16 super-block scales of the scales and mins
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ3_K {
  uint8_t hmask[kSuperBlock / 8];  // third bit of each value
  uint8_t qs[kSuperBlock / 4];     // low 2 bits
  uint8_t scales[12];              // 16 6-bit scales, packed
  uint16_t d;                      // fp16
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ4_K {
  uint16_t d, dmin;             // fp16
  uint8_t scales[12];           // 8 6-bit scales and 8 6-bit mins, packed
  uint8_t qs[kSuperBlock / 2];  // 4-bit values
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d, dmin;             // fp16
  uint8_t scales[12];           // as q4_K
  uint8_t qh[kSuperBlock / 8];  // fifth bit
  uint8_t qs[kSuperBlock / 2];  // low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kSuperBlock / 2];      // low 4 bits
  uint8_t qh[kSuperBlock / 4];      // high 2 bits
  int8_t scales[kSuperBlock / 16];  // per 16 values
  uint16_t d;                       // fp16
};
static_assert(sizeof(BlockQ6_K) == 210);

// The non-linear grid of the IQ4 types (ggml's kvalues_iq4nl): a 4-bit index picks a level.
inline constexpr int8_t kIq4Levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

// iq4_nl: x[j] = d * levels[qs[j] & 15] and x[j + 16] = d * levels[qs[j] >> 4].
struct BlockIQ4_NL {
  uint16_t d;  // fp16
  uint8_t qs[kQuantBlock / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// iq4_xs: eight 32-blocks, each with a 6-bit scale ls (low 4 bits in scales_l, high 2 in
// scales_h): block ib's values are d * (ls - 32) * levels[index], indexed as iq4_nl's.
struct BlockIQ4_XS {
  uint16_t d;  // fp16
  uint16_t scales_h;
  uint8_t scales_l[kSuperBlock / 64];
  uint8_t qs[kSuperBlock / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// Every supported type, for loops over them.
inline constexpr DType kAllDTypes[] = {DType::kF32,  DType::kF16,    DType::kBF16,  DType::kQ8_0,
                                       DType::kQ4_0, DType::kQ4_1,   DType::kQ5_0,  DType::kQ5_1,
                                       DType::kQ2_K, DType::kQ3_K,   DType::kQ4_K,  DType::kQ5_K,
                                       DType::kQ6_K, DType::kIQ4_NL, DType::kIQ4_XS};

// Returns the type for a ggml id, or nothing if specd does not support it.
std::optional<DType> DTypeFromId(uint32_t id);
// The ggml name of a type id ("q4_K" etc.) for error messages, also for unsupported ones.
std::string GgmlTypeName(uint32_t id);
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);

// llama.cpp's general.file_type id of a file whose matrices are mostly of type t (K-quants: the
// _M variant, as llama-quantize names them).
uint32_t LlamaFileType(DType t);

// Elements per block (1 for plain types) and bytes per block.
int64_t BlockElements(DType t);
int64_t BlockBytes(DType t);
// Bytes of a row of n elements; n must be a multiple of BlockElements(t).
int64_t RowBytes(DType t, int64_t n);

// IEEE half and bfloat16 conversions (exact, round-to-nearest-even, NaN preserved).
// Branch-free (so that loops over it vectorize): the half's exponent and mantissa moved into a
// float's fields give the value times 2^-112 for normal and subnormal halves alike, and the
// multiplication by 2^112 is exact; infinities and NaNs are put back by a select.
inline float Fp16ToFp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t magnitude = static_cast<uint32_t>(h & 0x7fffu) << 13;
  float scaled;
  std::memcpy(&scaled, &magnitude, 4);
  scaled *= 0x1p112f;
  uint32_t bits;
  std::memcpy(&bits, &scaled, 4);
  bits = (h & 0x7c00u) == 0x7c00u ? 0x7f800000u | magnitude : bits;
  bits |= sign;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t Fp32ToFp16(float f);
inline float Bf16ToFp32(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
inline uint16_t Fp32ToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

}  // namespace specd
