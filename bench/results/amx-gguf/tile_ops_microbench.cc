// What one 32-block of the packed GGUF AMX kernel costs in tile operations alone, on one core,
// with everything in L1: tilezero + A load [16 rows, K bytes] + B load [K / 4 lines, 64 bytes]
// + tdpbsud per block, four C tiles in turn, then (variants 1-3) the C tile stored and its 16
// rows read back by vector loads: at once (1), the tile stored one block earlier (2) or three
// blocks earlier (3). A lab-notebook program, not part of the build:
//   g++ -O2 -mamx-tile -mamx-int8 -mavx512f -o /tmp/tile_ops tile_ops_microbench.cc
//   /tmp/tile_ops
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};
alignas(64) int8_t a_tiles[64][16 * 64];
alignas(64) uint8_t b_tiles[64][16 * 64];
alignas(64) int32_t c_sums[4][16][16];

// The tile intrinsics take register numbers as literals, hence a macro.
#define BLOCK(C, A, B)                                                              \
  do {                                                                              \
    _tile_zero(C);                                                                  \
    _tile_loadd(A, a_tiles[(j + C) & 63], k_bytes);                                 \
    _tile_loadd(B, b_tiles[(j + C) & 63], 64);                                      \
    _tile_dpbsud(C, A, B);                                                          \
    if (variant != 0) {                                                             \
      _tile_stored(C, c_sums[C], 64);                                               \
      const int read = variant == 1 ? C : variant == 2 ? (C + 3) & 3 : (C + 1) & 3; \
      for (int r = 0; r < 16; ++r) {                                                \
        sum = _mm512_add_epi32(sum, _mm512_load_si512(c_sums[read][r]));            \
      }                                                                             \
    }                                                                               \
  } while (0)

int main() {
  syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */);
  for (int k_bytes : {32, 64}) {
    TileConfig config;
    for (int t = 0; t < 4; ++t) config.rows[t] = 16, config.bytes_per_row[t] = 64;
    for (int t : {4, 5}) config.rows[t] = 16, config.bytes_per_row[t] = k_bytes;
    for (int t : {6, 7}) config.rows[t] = k_bytes / 4, config.bytes_per_row[t] = 64;
    _tile_loadconfig(&config);
    for (int variant = 0; variant < 4; ++variant) {
      const int blocks = 2000000;
      __m512i sum = _mm512_setzero_si512();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < blocks; i += 4) {
        const int j = i & 63;
        BLOCK(0, 4, 6);
        BLOCK(1, 5, 7);
        BLOCK(2, 4, 6);
        BLOCK(3, 5, 7);
      }
      _mm512_store_si512(c_sums[0][0], sum);
      const double ns =
          std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
          blocks;
      std::printf("K=%d variant %d: %.2f ns/block = %.0f GMAC/s\n", k_bytes, variant, ns,
                  16 * 16 * k_bytes / ns);
    }
    _tile_release();
  }
}
