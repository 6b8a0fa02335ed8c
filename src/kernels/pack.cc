// Packing of quantized weights into the VNNI kernel's layout (kernels.h, PackedInt8Weights): each
// 32-block of a row is read as exact unsigned levels with its scales and mins, then interleaved
// with the other 15 rows of its group.
#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "kernels/block_activations.h"
#include "kernels/kernels.h"
#include "tensor/dequantize_blocks.h"

namespace specd {
namespace {

// One 32-block of a row as levels u (w = scale[s] * (u - offset) + min[s], s = element / 16 when
// there are two sub-blocks, else 0; with a level lookup, u is the grid index and the level byte
// is kIq4Levels[u] + 128).
struct BlockLevels {
  uint8_t u[32];
  float scale[2] = {0, 0};
  float min[2] = {0, 0};
  // q4_K / q5_K / q6_K / iq4_xs as stored: the scale of each sub-block (and min) of this
  // 32-block, f16 d and dmin of its super-block (scale[s] = d * sc[s], min[0] = -(dmin * m));
  // signed: iq4_xs's ls - 32, q6_K's scales.
  int8_t k_sc[2] = {0, 0};
  uint8_t k_m = 0;
  uint16_t k_d = 0, k_dmin = 0;
};

// The layout each type is packed in (header of f16 or f32, nibbles or bytes, offset).
PackedInt8Weights FormatFor(DType t) {
  PackedInt8Weights p;
  p.source_type = t;
  switch (t) {
    case DType::kQ8_0:
      p.offset = 128;
      break;
    case DType::kIQ4_NL:  // grid indices as nibbles, looked up as the level + 128
      p.nibbles = true;
      p.level_lut = true;
      p.offset = 128;
      break;
    case DType::kIQ4_XS:
      p.nibbles = true;
      p.level_lut = true;
      p.k_scales = true;
      p.offset = 128;
      break;
    case DType::kQ4_0:
      p.nibbles = true;
      p.offset = 8;
      break;
    case DType::kQ4_1:
      p.nibbles = true;
      p.has_mins = true;
      p.offset = 0;
      break;
    case DType::kQ5_0:
      p.nibbles = true;
      p.high_planes = 1;
      p.offset = 16;
      break;
    case DType::kQ5_1:
      p.nibbles = true;
      p.high_planes = 1;
      p.has_mins = true;
      p.offset = 0;
      break;
    case DType::kQ2_K:  // levels 0..3
      p.nibbles = true;
      p.sub_blocks = 2;
      p.has_mins = true;
      p.f32_scales = true;
      p.offset = 0;
      break;
    case DType::kQ3_K:  // levels 0..7
      p.nibbles = true;
      p.sub_blocks = 2;
      p.f32_scales = true;
      p.offset = 4;
      break;
    case DType::kQ4_K:
      p.nibbles = true;
      p.has_mins = true;
      p.k_scales = true;
      p.offset = 0;
      break;
    case DType::kQ5_K:
      p.nibbles = true;
      p.high_planes = 1;
      p.has_mins = true;
      p.k_scales = true;
      p.offset = 0;
      break;
    case DType::kI8:  // bytes q + 128, the row's scale in the group's trailer
      p.row_scales = true;
      p.offset = 128;
      break;
    case DType::kQ6_K:  // nibbles + 2 bit planes, byte scales per 16: the file's size
      p.nibbles = true;
      p.high_planes = 2;
      p.sub_blocks = 2;
      p.k_scales = true;
      p.offset = 32;
      break;
    default:
      Fail("PackInt8: type ", DTypeName(t), " is not quantized");
  }
  // The packed kernels start the sums of layouts with mins from zero (no offset seed).
  SPECD_CHECK(!p.has_mins || p.offset == 0, "PackInt8: a layout with mins has no offset");
  return p;
}

// 5-bit levels of a q5_0 / q5_1 block.
void FiveBitLevels(const uint8_t qs[16], const uint8_t qh_bytes[4], uint8_t u[32]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, 4);
  for (int j = 0; j < 16; ++j) {
    u[j] = static_cast<uint8_t>((qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10));
    u[j + 16] = static_cast<uint8_t>((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
  }
}

void NibbleLevels(const uint8_t qs[16], uint8_t u[32]) {
  for (int j = 0; j < 16; ++j) {
    u[j] = qs[j] & 0x0F;
    u[j + 16] = qs[j] >> 4;
  }
}

// Levels of 32-block b (b-th 32 values) of a K-quant super-block.
void KQuantLevels(DType t, const uint8_t* super, int b, BlockLevels* out) {
  switch (t) {
    case DType::kQ2_K: {
      const auto& k = *reinterpret_cast<const BlockQ2_K*>(super);
      const float d = Fp16ToFp32(k.d), dmin = Fp16ToFp32(k.dmin);
      // Values 128 * (b / 4) + 32 * shift-step: qs[32 * (b / 4) + l] >> (2 * (b % 4)).
      const uint8_t* q = k.qs + 32 * (b / 4);
      const int shift = 2 * (b % 4);
      for (int l = 0; l < 32; ++l) out->u[l] = (q[l] >> shift) & 3;
      for (int s = 0; s < 2; ++s) {
        const uint8_t sc = k.scales[2 * b + s];
        out->scale[s] = d * (sc & 0xF);
        out->min[s] = -(dmin * (sc >> 4));
      }
      return;
    }
    case DType::kQ3_K: {
      const auto& k = *reinterpret_cast<const BlockQ3_K*>(super);
      int8_t scales[16];
      UnpackQ3_KScales(k.scales, scales);
      const float d = Fp16ToFp32(k.d);
      const uint8_t* q = k.qs + 32 * (b / 4);
      const int shift = 2 * (b % 4);
      const uint8_t m = static_cast<uint8_t>(1u << b);
      for (int l = 0; l < 32; ++l) {
        out->u[l] = static_cast<uint8_t>(((q[l] >> shift) & 3) + ((k.hmask[l] & m) ? 4 : 0));
      }
      for (int s = 0; s < 2; ++s) out->scale[s] = d * scales[2 * b + s];
      return;
    }
    case DType::kQ4_K:
    case DType::kQ5_K: {
      const bool q5 = t == DType::kQ5_K;
      const uint8_t* scales_packed = q5 ? reinterpret_cast<const BlockQ5_K*>(super)->scales
                                        : reinterpret_cast<const BlockQ4_K*>(super)->scales;
      const uint16_t d16 = *reinterpret_cast<const uint16_t*>(super);
      const uint16_t dmin16 = *reinterpret_cast<const uint16_t*>(super + 2);
      uint8_t sc[8], mn[8];
      ScalesMinsK4(scales_packed, sc, mn);
      // 64 values per 32 bytes of qs: the even 32-block in low nibbles, the odd one in high.
      const uint8_t* qs = (q5 ? reinterpret_cast<const BlockQ5_K*>(super)->qs
                              : reinterpret_cast<const BlockQ4_K*>(super)->qs) +
                          32 * (b / 2);
      const int shift = 4 * (b % 2);
      for (int l = 0; l < 32; ++l) out->u[l] = (qs[l] >> shift) & 0x0F;
      if (q5) {
        const uint8_t* qh = reinterpret_cast<const BlockQ5_K*>(super)->qh;
        for (int l = 0; l < 32; ++l) out->u[l] |= ((qh[l] >> b) & 1) << 4;
      }
      out->scale[0] = Fp16ToFp32(d16) * sc[b];
      out->min[0] = -(Fp16ToFp32(dmin16) * mn[b]);
      out->k_sc[0] = static_cast<int8_t>(sc[b]);
      out->k_m = mn[b];
      out->k_d = d16;
      out->k_dmin = dmin16;
      return;
    }
    case DType::kQ6_K: {
      const auto& k = *reinterpret_cast<const BlockQ6_K*>(super);
      const float d = Fp16ToFp32(k.d);
      // Block b: half h = b / 4 (128 values), quarter r = b % 4 within it.
      const int h = b / 4, r = b % 4;
      const uint8_t* ql = k.ql + 64 * h + 32 * (r % 2);
      const uint8_t* qh = k.qh + 32 * h;
      const int lshift = 4 * (r / 2);
      const int hshift = 2 * r;
      for (int l = 0; l < 32; ++l) {
        out->u[l] =
            static_cast<uint8_t>(((ql[l] >> lshift) & 0xF) | (((qh[l] >> hshift) & 3) << 4));
      }
      for (int s = 0; s < 2; ++s) {
        out->k_sc[s] = k.scales[8 * h + 2 * r + s];
        out->scale[s] = d * out->k_sc[s];
      }
      out->k_d = k.d;
      return;
    }
    default:
      Fail("KQuantLevels: ", DTypeName(t), " is not a K-quant");
  }
}

// Levels of 32-block b of a row of type t.
void RowBlockLevels(DType t, const uint8_t* row, int64_t b, BlockLevels* out) {
  switch (t) {
    case DType::kI8: {
      const auto* q = reinterpret_cast<const int8_t*>(row) + b * 32;
      for (int l = 0; l < 32; ++l) out->u[l] = static_cast<uint8_t>(q[l] + 128);
      return;
    }
    case DType::kQ8_0: {
      const auto& k = reinterpret_cast<const BlockQ8_0*>(row)[b];
      for (int l = 0; l < 32; ++l) out->u[l] = static_cast<uint8_t>(k.qs[l] + 128);
      out->scale[0] = Fp16ToFp32(k.d);
      return;
    }
    case DType::kIQ4_NL: {
      const auto& k = reinterpret_cast<const BlockIQ4_NL*>(row)[b];
      NibbleLevels(k.qs, out->u);
      out->scale[0] = Fp16ToFp32(k.d);
      return;
    }
    case DType::kIQ4_XS: {
      const auto& k = reinterpret_cast<const BlockIQ4_XS*>(row)[b / 8];
      const int ib = static_cast<int>(b % 8);
      NibbleLevels(k.qs + 16 * ib, out->u);
      const int ls =
          ((k.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((k.scales_h >> (2 * ib)) & 3) << 4);
      out->k_sc[0] = static_cast<int8_t>(ls - 32);
      out->k_d = k.d;
      out->scale[0] = Fp16ToFp32(k.d) * static_cast<float>(ls - 32);
      return;
    }
    case DType::kQ4_0: {
      const auto& k = reinterpret_cast<const BlockQ4_0*>(row)[b];
      NibbleLevels(k.qs, out->u);
      out->scale[0] = Fp16ToFp32(k.d);
      return;
    }
    case DType::kQ4_1: {
      const auto& k = reinterpret_cast<const BlockQ4_1*>(row)[b];
      NibbleLevels(k.qs, out->u);
      out->scale[0] = Fp16ToFp32(k.d);
      out->min[0] = Fp16ToFp32(k.m);
      return;
    }
    case DType::kQ5_0: {
      const auto& k = reinterpret_cast<const BlockQ5_0*>(row)[b];
      FiveBitLevels(k.qs, k.qh, out->u);
      out->scale[0] = Fp16ToFp32(k.d);
      return;
    }
    case DType::kQ5_1: {
      const auto& k = reinterpret_cast<const BlockQ5_1*>(row)[b];
      FiveBitLevels(k.qs, k.qh, out->u);
      out->scale[0] = Fp16ToFp32(k.d);
      out->min[0] = Fp16ToFp32(k.m);
      return;
    }
    default: {
      const int64_t super = b / 8;
      KQuantLevels(t, row + super * BlockBytes(t), static_cast<int>(b % 8), out);
      return;
    }
  }
}

// The bits above the nibbles of a block's lanes [8][64] (lanes[g][4j + t]: element 4g+t of row
// j) as HighBits::kFields: k bits per level, or-ed into `out` [2][k][32] (zeroed by the caller).
void WriteHighBitFields(int k, const uint8_t (&lanes)[8][64], uint8_t* out) {
  for (int h = 0; h < 2; ++h) {
    for (int i = 0; i < 32; ++i) {
      for (int l = 0; l < 8; ++l) {
        const int bits = (lanes[l][32 * h + i] >> 4) & ((1 << k) - 1);
        out[(h * k + l * k / 8) * 32 + i] |= static_cast<uint8_t>(bits << (l * k % 8));
      }
    }
  }
}

// Writes one (row group, block) of p from the levels of its 16 rows.
void WriteBlock(const PackedInt8Weights& p, const BlockLevels rows[16], uint8_t* out) {
  const int n_floats = 16 * p.sub_blocks;
  for (int j = 0; j < 16 && p.k_scales; ++j) {  // scales [sub_blocks][16], then mins [16]
    for (int s = 0; s < p.sub_blocks; ++s) out[16 * s + j] = static_cast<uint8_t>(rows[j].k_sc[s]);
    if (p.has_mins) out[16 * p.sub_blocks + j] = rows[j].k_m;
  }
  for (int s = 0; s < p.sub_blocks && !p.k_scales; ++s) {
    for (int j = 0; j < 16; ++j) {
      const int at = s * 16 + j;
      if (p.f32_scales) {
        auto* f = reinterpret_cast<float*>(out);
        f[at] = rows[j].scale[s];
        if (p.has_mins) f[n_floats + at] = rows[j].min[s];
      } else {
        // f16 sources: the values came from f16, so this is exact.
        auto* h = reinterpret_cast<uint16_t*>(out);
        h[at] = Fp32ToFp16(rows[j].scale[s]);
        if (p.has_mins) h[n_floats + at] = Fp32ToFp16(rows[j].min[s]);
      }
    }
  }
  // lanes[g][j * 4 + t]: row j's value g * 4 + t, the byte layout (one 64-byte load holds the
  // same 4-value group of the 16 rows).
  uint8_t lanes[8][64];
  for (int j = 0; j < 16; ++j) {
    for (int g = 0; g < 8; ++g) std::memcpy(&lanes[g][j * 4], &rows[j].u[g * 4], 4);
  }
  uint8_t* values = out + p.HeaderBytes();
  std::fill(values, out + p.BlockBytes(), 0);
  if (!p.nibbles) {
    std::memcpy(values, lanes, sizeof(lanes));
    return;
  }
  // Low nibble for groups 0..3, high nibble for groups 4..7 of the same byte.
  for (int q = 0; q < 4; ++q) {
    for (int byte = 0; byte < 64; ++byte) {
      values[q * 64 + byte] =
          static_cast<uint8_t>((lanes[q][byte] & 15) | ((lanes[q + 4][byte] & 15) << 4));
    }
  }
  if (p.high_planes > 0 && p.high_bits == HighBits::kFields) {
    return WriteHighBitFields(p.high_planes, lanes, values + 256);
  }
  // Bit planes of the levels' 5th and 6th bits: bit (byte % 8) of byte g * 8 + byte / 8.
  for (int plane = 0; plane < p.high_planes; ++plane) {
    uint8_t* bits = values + 256 + plane * 64;
    for (int g = 0; g < 8; ++g) {
      for (int k = 0; k < 8; ++k) {
        unsigned packed = 0;
        for (int i = 0; i < 8; ++i) packed |= ((lanes[g][8 * k + i] >> (4 + plane)) & 1u) << i;
        bits[g * 8 + k] = static_cast<uint8_t>(packed);
      }
    }
  }
}

}  // namespace

bool IsPackable(DType t) { return t != DType::kF32 && t != DType::kF16 && t != DType::kBF16; }

namespace {

void CheckPackable(const WeightView& w) {
  SPECD_CHECK(IsPackable(w.type) && w.cols % 32 == 0 && w.cols % BlockElements(w.type) == 0,
              "PackInt8: needs quantized weights with a multiple of 32 columns, got ",
              DTypeName(w.type), " with ", w.cols);
  SPECD_CHECK(w.type != DType::kI8 || w.row_scales != nullptr, "PackInt8: i8 weights without ",
              "row scales");
}

// Writes w's ceil(rows / 16) row groups in p's layout (FormatFor(w.type)) at `out`.
void PackRowGroups(const WeightView& w, const PackedInt8Weights& p, ThreadPool* pool,
                   uint8_t* out) {
  const int64_t nb = w.cols / 32;
  pool->ParallelFor((w.rows + 15) / 16, 1, [&](int64_t g0, int64_t g1) {
    BlockLevels rows[16];
    for (int64_t group = g0; group < g1; ++group) {
      for (int64_t b = 0; b < nb; ++b) {
        for (int j = 0; j < 16; ++j) {
          const int64_t n = group * 16 + j;
          if (n < w.rows) {
            RowBlockLevels(w.type, w.Row(n), b, &rows[j]);
          } else {  // padding rows: level 0, scale 0
            rows[j] = BlockLevels{};
            std::fill(rows[j].u, rows[j].u + 32, static_cast<uint8_t>(p.offset));
          }
        }
        uint8_t* group_data = out + group * p.GroupBytes();
        WriteBlock(p, rows, group_data + b * p.BlockBytes());
        if (p.k_scales && b % 8 == 0) {  // the super-block's d (and dmin) of the 16 rows
          auto* trailer = reinterpret_cast<uint16_t*>(group_data + p.TrailerOffset() +
                                                      b / 8 * p.TrailerBytesPerSuper());
          for (int j = 0; j < 16; ++j) {
            trailer[j] = rows[j].k_d;
            if (p.has_mins) trailer[16 + j] = rows[j].k_dmin;
          }
        }
      }
      if (p.row_scales) {
        auto* scales =
            reinterpret_cast<float*>(out + group * p.GroupBytes() + p.TrailerOffset());  // [16]
        for (int j = 0; j < 16; ++j) {
          const int64_t n = group * 16 + j;
          scales[j] = n < w.rows ? w.row_scales[n] : 0.0f;
        }
      }
    }
  });
}

}  // namespace

HighBits HighBitsFor(const CpuFeatures& cpu) {
  return cpu.avx512 ? HighBits::kPlanes : HighBits::kFields;
}

void CheckHighBitsForm(const PackedInt8Weights& w, HighBits form, const char* kernel) {
  SPECD_CHECK(w.high_planes == 0 || w.high_bits == form, kernel, ": ", DTypeName(w.source_type),
              " packed with its high bits in the other form (HighBitsFor another CPU)");
}

PackedInt8Weights PackInt8(const WeightView& w, ThreadPool* pool, HighBits high_bits) {
  CheckPackable(w);
  PackedInt8Weights p = FormatFor(w.type);
  p.high_bits = high_bits;
  p.rows = w.rows;
  p.cols = w.cols;
  p.row_groups = (w.rows + 15) / 16;
  p.data.Resize(p.row_groups * p.GroupBytes() + p.SlackBytes());
  std::fill(p.data.data() + p.row_groups * p.GroupBytes(), p.data.data() + p.data.size(), 0);
  PackRowGroups(w, p, pool, p.data.data());
  return p;
}

bool StackPackedInt8(const std::vector<const WeightView*>& parts, ThreadPool* pool,
                     HighBits high_bits, PackedInt8Weights* out) {
  if (parts.empty()) return false;
  for (size_t i = 0; i < parts.size(); ++i) {
    const WeightView& w = *parts[i];
    if (w.type != parts[0]->type || w.cols != parts[0]->cols) return false;
    if (!IsPackable(w.type) || w.cols % 32 != 0 || w.cols % BlockElements(w.type) != 0) {
      return false;
    }
    if (i + 1 < parts.size() && w.rows % 16 != 0) return false;
  }
  PackedInt8Weights stacked = FormatFor(parts[0]->type);
  stacked.high_bits = high_bits;
  stacked.cols = parts[0]->cols;
  for (const WeightView* w : parts) stacked.rows += w->rows;
  stacked.row_groups = (stacked.rows + 15) / 16;
  stacked.data.Resize(stacked.row_groups * stacked.GroupBytes() + stacked.SlackBytes());
  std::fill(stacked.data.data() + stacked.row_groups * stacked.GroupBytes(),
            stacked.data.data() + stacked.data.size(), 0);
  // Each part straight into its place (every part but the last has whole row groups).
  uint8_t* at = stacked.data.data();
  for (const WeightView* w : parts) {
    CheckPackable(*w);
    PackRowGroups(*w, stacked, pool, at);
    at += (w->rows + 15) / 16 * stacked.GroupBytes();
  }
  *out = std::move(stacked);
  return true;
}

int64_t Int8ActivationSpan(DType type) { return ActivationSpan(FormatFor(type)); }

PackedLayout LayoutOf(const PackedInt8Weights& w) {
  const bool sub16 = w.sub_blocks == 2;
  if (w.level_lut) {
    if (w.nibbles && w.high_planes == 0 && !w.has_mins && !w.f32_scales && !sub16) {
      return w.k_scales ? PackedLayout::kIq4XS : PackedLayout::kIq4NL;
    }
    Fail("packed matmul: no kernel for the layout of ", DTypeName(w.source_type));
  }
  if (!w.has_mins && !w.f32_scales && !w.k_scales && !sub16) {
    if (!w.nibbles && w.high_planes == 0) return PackedLayout::kBlockBytes;
    if (w.nibbles && w.high_planes == 0) return PackedLayout::kBlockNibbles;
    if (w.nibbles && w.high_planes == 1) return PackedLayout::kBlockNibbles5;
  }
  enum Scales { kF16, kF32, kK };  // header scales as f16, as f32, or K-quant bytes + trailer
  const Scales scales = w.k_scales ? kK : w.f32_scales ? kF32 : kF16;
  struct Shape {
    bool nibbles;
    int planes;
    bool sub16, mins;
    Scales scales;
    PackedLayout layout;
  };
  static constexpr Shape kShapes[] = {
      {true, 0, false, true, kF16, PackedLayout::kQ4_1},
      {true, 1, false, true, kF16, PackedLayout::kQ5_1},
      {true, 0, false, true, kK, PackedLayout::kQ4_K},
      {true, 1, false, true, kK, PackedLayout::kQ5_K},
      {true, 2, true, false, kK, PackedLayout::kQ6_K},
      {true, 0, true, false, kF32, PackedLayout::kQ3_K},
      {true, 0, true, true, kF32, PackedLayout::kQ2_K},
  };
  for (const Shape& shape : kShapes) {
    if (shape.nibbles == w.nibbles && shape.planes == w.high_planes && shape.sub16 == sub16 &&
        shape.mins == w.has_mins && shape.scales == scales) {
      return shape.layout;
    }
  }
  Fail("packed matmul: no kernel for the layout of ", DTypeName(w.source_type));
}

}  // namespace specd
