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
  kQ8_0 = 8,
  kBF16 = 30,
};

inline constexpr int kQuantBlock = 32;  // elements per q8_0 / q4_0 block

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

// Returns the type for a ggml id, or nothing if specd does not support it.
std::optional<DType> DTypeFromId(uint32_t id);
// The ggml name of a type id ("q4_K" etc.) for error messages, also for unsupported ones.
std::string GgmlTypeName(uint32_t id);
std::string_view DTypeName(DType t);
std::optional<DType> DTypeFromName(std::string_view name);

// Elements per block (1 for plain types) and bytes per block.
int64_t BlockElements(DType t);
int64_t BlockBytes(DType t);
// Bytes of a row of n elements; n must be a multiple of BlockElements(t).
int64_t RowBytes(DType t, int64_t n);

// IEEE half and bfloat16 conversions (exact, round-to-nearest-even, NaN preserved).
float Fp16ToFp32(uint16_t h);
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
