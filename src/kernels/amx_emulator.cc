// The software tile unit (amx_tiles.h), written from the instruction descriptions of Intel's
// AMX (palette 1): TILELOADD / TILESTORED move `rows` lines of `bytes_per_row` bytes, TILEZERO
// clears, TDPBSUD adds to C[m][n] the dot products of A's row m (signed bytes) with B's column n
// (unsigned bytes, 4 per 32-bit element): K = A's bytes_per_row / 4 rows of B.
#include <cstring>

#include "base/error.h"
#include "kernels/amx_tiles.h"

namespace specd::amx {

void EmulatedTiles::Configure(const TileConfig& config) {
  SPECD_CHECK(config.palette == 1 && config.start_row == 0, "AMX: palette 1 from row 0 only");
  for (int t = 0; t < kTileRegisters; ++t) {
    const int rows = config.rows[t], bytes = config.bytes_per_row[t];
    SPECD_CHECK(rows <= kMaxTileRows && bytes <= kTileLineBytes, "AMX: tile ", t, " configured as ",
                rows, " x ", bytes, " bytes (max 16 x 64)");
    SPECD_CHECK((rows == 0) == (bytes == 0), "AMX: tile ", t, " half configured");
    tiles_[t] = Tile{rows, bytes};
  }
  for (int t = kTileRegisters; t < 16; ++t) {
    SPECD_CHECK(config.rows[t] == 0 && config.bytes_per_row[t] == 0, "AMX: palette 1 has 8 tiles, ",
                t, " is configured");
  }
  configured_ = true;
}

void EmulatedTiles::Release() {
  tiles_ = {};
  configured_ = false;
}

const EmulatedTiles::Tile& EmulatedTiles::Configured(int tile, const char* op) const {
  SPECD_CHECK(configured_, "AMX: ", op, " before LDTILECFG");
  SPECD_CHECK(tile >= 0 && tile < kTileRegisters && tiles_[tile].rows > 0, "AMX: ", op, " on tile ",
              tile, ", which is not configured");
  return tiles_[tile];
}

void EmulatedTiles::Zero(int c) {
  SPECD_CHECK(c >= 0 && c < 4, "AMX: accumulator ", c, " is not a C tile");
  Configured(c, "TILEZERO");
  std::memset(tiles_[c].bytes, 0, sizeof(tiles_[c].bytes));
}

void EmulatedTiles::Load(int tile, const void* from, int64_t stride) {
  Tile& t = tiles_[tile];
  Configured(tile, "TILELOADD");
  std::memset(t.bytes, 0, sizeof(t.bytes));  // the hardware zeroes what the shape leaves
  const auto* bytes = static_cast<const uint8_t*>(from);
  for (int r = 0; r < t.rows; ++r) std::memcpy(t.bytes[r], bytes + r * stride, t.bytes_per_row);
}

void EmulatedTiles::Product(int c, int a_slot, int b_slot, bool signed_b) {
  SPECD_CHECK(c >= 0 && c < 4 && (a_slot == 0 || a_slot == 1) && (b_slot == 0 || b_slot == 1),
              "AMX: no product C", c, " A slot ", a_slot, " B slot ", b_slot);
  Tile& dst = tiles_[c];
  const char* op = signed_b ? "TDPBSSD" : "TDPBSUD";
  const Tile& a = Configured(4 + a_slot, op);
  const Tile& b = Configured(6 + b_slot, op);
  Configured(c, op);
  // The shape checks TDPBSUD faults on.
  SPECD_CHECK(a.bytes_per_row % 4 == 0 && a.bytes_per_row / 4 == b.rows, "AMX: A's ",
              a.bytes_per_row, " bytes per row do not meet B's ", b.rows, " rows");
  SPECD_CHECK(dst.bytes_per_row == b.bytes_per_row && dst.rows == a.rows, "AMX: C is ", dst.rows,
              " x ", dst.bytes_per_row, " bytes, A x B is ", a.rows, " x ", b.bytes_per_row);
  const int n_columns = dst.bytes_per_row / 4, k_groups = a.bytes_per_row / 4;
  for (int m = 0; m < dst.rows; ++m) {
    for (int n = 0; n < n_columns; ++n) {
      int32_t sum;
      std::memcpy(&sum, dst.bytes[m] + 4 * n, 4);
      for (int k = 0; k < k_groups; ++k) {
        for (int i = 0; i < 4; ++i) {
          const uint8_t b_byte = b.bytes[k][4 * n + i];
          sum += static_cast<int32_t>(static_cast<int8_t>(a.bytes[m][4 * k + i])) *
                 (signed_b ? static_cast<int32_t>(static_cast<int8_t>(b_byte)) : b_byte);
        }
      }
      std::memcpy(dst.bytes[m] + 4 * n, &sum, 4);
    }
  }
}

void EmulatedTiles::Store(int c, int32_t* sums) const {
  const Tile& t = Configured(c, "TILESTORED");
  for (int r = 0; r < t.rows; ++r) {
    std::memcpy(reinterpret_cast<uint8_t*>(sums) + r * kTileLineBytes, t.bytes[r], t.bytes_per_row);
  }
}

}  // namespace specd::amx
