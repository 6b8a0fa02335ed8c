// AMX tile registers as the kernels see them: the configuration operand, and a software model
// of the tile unit that runs the same kernel code on any CPU, so the tile kernels' layouts,
// configurations and products are tested where the hardware is absent (the hardware path is
// the same code over the intrinsics, in matmul_amx.cc).
//
// The "Tiles" interface a tile kernel is written against (tile numbers as AMX's):
//   Configure(config), Release()
//   Zero(c)                 C tiles 0..3
//   LoadA(slot, p, stride)  tile 4 + slot (0..1): the configured rows of colsb bytes from p
//   LoadB(slot, p, stride)  tile 6 + slot
//   Multiply(c, a, b)       tdpbsud: C[c] += A[a] (signed bytes) x B[b] (unsigned bytes), slots
//                           a, b 0..1
//   MultiplySigned(c, a, b) tdpbssd: the same with B's bytes signed
//   Store(c, sums)          C[c]'s rows as int32 [rows, 16], 64 bytes apart
#pragma once

#include <array>
#include <cstdint>

namespace specd::amx {

inline constexpr int kMaxTileRows = 16;    // rows of a tile (activation rows of an A tile)
inline constexpr int kTileLineBytes = 64;  // bytes of a tile row
inline constexpr int kTileRegisters = 8;   // tmm0..tmm7

// LDTILECFG's 64-byte operand (palette 1): per tile, its rows and bytes per row.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// The tile unit in software, one per thread like the hardware's. Each operation checks what
// the hardware faults on (an unconfigured tile, a product whose shapes do not chain) and fails
// with a message (specd::Error), so a kernel that would fault on AMX fails its test here.
class EmulatedTiles {
 public:
  void Configure(const TileConfig& config);
  void Release();
  void Zero(int c);
  void LoadA(int slot, const void* from, int64_t stride) { Load(4 + slot, from, stride); }
  void LoadB(int slot, const void* from, int64_t stride) { Load(6 + slot, from, stride); }
  void Multiply(int c, int a_slot, int b_slot) { Product(c, a_slot, b_slot, false); }
  void MultiplySigned(int c, int a_slot, int b_slot) { Product(c, a_slot, b_slot, true); }
  void Store(int c, int32_t* sums) const;

 private:
  struct Tile {
    int rows = 0;
    int bytes_per_row = 0;
    alignas(64) uint8_t bytes[kMaxTileRows][kTileLineBytes] = {};
  };
  void Load(int tile, const void* from, int64_t stride);
  void Product(int c, int a_slot, int b_slot, bool signed_b);
  const Tile& Configured(int tile, const char* op) const;

  std::array<Tile, kTileRegisters> tiles_;
  bool configured_ = false;
};

}  // namespace specd::amx
