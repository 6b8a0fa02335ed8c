#include "tensor/dtype.h"

#include "base/error.h"

namespace specd {

std::optional<DType> DTypeFromId(uint32_t id) {
  for (DType t : kAllDTypes) {
    if (static_cast<uint32_t>(t) == id) return t;
  }
  if (id == static_cast<uint32_t>(DType::kI8)) return DType::kI8;
  return std::nullopt;
}

std::string GgmlTypeName(uint32_t id) {
  static constexpr const char* kNames[] = {
      "f32",     "f16",    "q4_0",    "q4_1",  "q4_2(removed)", "q4_3(removed)", "q5_0",  "q5_1",
      "q8_0",    "q8_1",   "q2_K",    "q3_K",  "q4_K",          "q5_K",          "q6_K",  "q8_K",
      "iq2_xxs", "iq2_xs", "iq3_xxs", "iq1_s", "iq4_nl",        "iq3_s",         "iq2_s", "iq4_xs",
      "i8",      "i16",    "i32",     "i64",   "f64",           "iq1_m",         "bf16"};
  if (id < sizeof(kNames) / sizeof(kNames[0])) return kNames[id];
  return StrCat("unknown type id ", id);
}

std::string_view DTypeName(DType t) {
  switch (t) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_1:
      return "q4_1";
    case DType::kQ5_0:
      return "q5_0";
    case DType::kQ5_1:
      return "q5_1";
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ2_K:
      return "q2_K";
    case DType::kQ3_K:
      return "q3_K";
    case DType::kQ4_K:
      return "q4_K";
    case DType::kQ5_K:
      return "q5_K";
    case DType::kQ6_K:
      return "q6_K";
    case DType::kIQ4_NL:
      return "iq4_nl";
    case DType::kIQ4_XS:
      return "iq4_xs";
    case DType::kBF16:
      return "bf16";
    case DType::kI8:
      return "i8";
  }
  return "?";
}

std::optional<DType> DTypeFromName(std::string_view name) {
  for (DType t : kAllDTypes) {
    if (DTypeName(t) == name) return t;
  }
  if (name == "i8" || name == "I8") return DType::kI8;
  // llama.cpp spells the K-quants both ways (q4_K in files, Q4_K_M / q4_k on its command line).
  if (name.size() == 4 && name[0] == 'q' && name[2] == '_' && (name[3] == 'k' || name[3] == 'K')) {
    for (DType t : kAllDTypes) {
      const std::string_view n = DTypeName(t);
      if (n.size() == 4 && n[1] == name[1] && n[3] == 'K') return t;
    }
  }
  return std::nullopt;
}

uint32_t LlamaFileType(DType t) {
  switch (t) {
    case DType::kF32:
      return 0;
    case DType::kF16:
      return 1;
    case DType::kQ4_0:
      return 2;
    case DType::kQ4_1:
      return 3;
    case DType::kQ8_0:
      return 7;
    case DType::kQ5_0:
      return 8;
    case DType::kQ5_1:
      return 9;
    case DType::kQ2_K:
      return 10;
    case DType::kQ3_K:
      return 12;
    case DType::kQ4_K:
      return 15;
    case DType::kQ5_K:
      return 17;
    case DType::kQ6_K:
      return 18;
    case DType::kIQ4_NL:
      return 25;
    case DType::kIQ4_XS:
      return 30;
    case DType::kBF16:
      return 32;
    case DType::kI8:
      return 0;  // no llama.cpp file type: other tools do not read specd's i8 files
  }
  return 0;
}

int64_t BlockElements(DType t) {
  switch (t) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kI8:
      return 1;
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ8_0:
    case DType::kIQ4_NL:
      return kQuantBlock;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_XS:
      return kSuperBlock;
  }
  return 1;
}

int64_t BlockBytes(DType t) {
  switch (t) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kI8:
      return 1;
    case DType::kQ4_0:
      return sizeof(BlockQ4_0);
    case DType::kQ4_1:
      return sizeof(BlockQ4_1);
    case DType::kQ5_0:
      return sizeof(BlockQ5_0);
    case DType::kQ5_1:
      return sizeof(BlockQ5_1);
    case DType::kQ8_0:
      return sizeof(BlockQ8_0);
    case DType::kQ2_K:
      return sizeof(BlockQ2_K);
    case DType::kQ3_K:
      return sizeof(BlockQ3_K);
    case DType::kQ4_K:
      return sizeof(BlockQ4_K);
    case DType::kQ5_K:
      return sizeof(BlockQ5_K);
    case DType::kQ6_K:
      return sizeof(BlockQ6_K);
    case DType::kIQ4_NL:
      return sizeof(BlockIQ4_NL);
    case DType::kIQ4_XS:
      return sizeof(BlockIQ4_XS);
  }
  return 0;
}

int64_t RowBytes(DType t, int64_t n) {
  SPECD_CHECK(n % BlockElements(t) == 0, "a row of ", n, " elements does not fit ", DTypeName(t),
              " blocks of ", BlockElements(t));
  return n / BlockElements(t) * BlockBytes(t);
}

uint16_t Fp32ToFp16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (abs_bits >= 0x477ff000u) return sign | 0x7c00u;  // overflow (rounds to inf) or inf
  if (abs_bits < 0x38800000u) {                        // result is subnormal or zero
    if (abs_bits < 0x33000000u) return sign;           // below half the smallest subnormal
    const uint32_t exponent = abs_bits >> 23;
    const uint32_t mantissa = (abs_bits & 0x7fffffu) | 0x800000u;
    const int shift = 126 - static_cast<int>(exponent);  // 14..24
    uint32_t value = mantissa >> shift;
    const uint32_t remainder = mantissa & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (remainder > half || (remainder == half && (value & 1u))) ++value;
    return sign | static_cast<uint16_t>(value);
  }
  uint32_t value = ((abs_bits >> 13) - ((127 - 15) << 10));
  const uint32_t remainder = abs_bits & 0x1fffu;
  if (remainder > 0x1000u || (remainder == 0x1000u && (value & 1u))) ++value;
  return sign | static_cast<uint16_t>(value);
}

}  // namespace specd
