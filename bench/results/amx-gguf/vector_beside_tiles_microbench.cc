// The folded kernel's unpacking pattern beside the tile unit, on one core: per block, `work`
// lines of load + and + two vpermi2b lookups + two 64-byte stores (written three blocks before
// the tile loads read them), and / or the block's tile operations (A load, two B loads, two
// tdpbsud into two chains). Mode 1 vector only, 2 tiles only, 3 both, 5 / 7 the same without
// the stores. A lab-notebook program, not part of the build:
//   g++ -O2 -mamx-tile -mamx-int8 -mavx512f -mavx512bw -mavx512vbmi -o /tmp/beside \
//     vector_beside_tiles_microbench.cc
//   /tmp/beside
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <initializer_list>
struct alignas(64) Cfg {
  uint8_t palette = 1, start = 0, res[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
alignas(64) int8_t A[64][16 * 64];
alignas(64) uint8_t Bbuf[8][2][512];
alignas(64) int32_t C[4][16][16];
alignas(64) uint8_t W[1 << 20];
__attribute__((noinline)) double Run(int mode, int work) {
  const int iters = 1000000;
  __m512i v0 = _mm512_set1_epi8(1), v1 = _mm512_set1_epi8(2), v2 = _mm512_set1_epi8(3),
          v3 = _mm512_set1_epi8(4);
  __m512i t0v = _mm512_set1_epi8(5), t1v = _mm512_set1_epi8(6);
  _tile_zero(0);
  _tile_zero(1);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) {
    if (mode & 1) {  // vector work: unpack-like, from memory W, stores 3 blocks ahead
      const uint8_t* src = W + (i * 256 & ((1 << 20) - 1));
      uint8_t* dst = &Bbuf[(i + 3) & 7][0][0];
      for (int l = 0; l < work; ++l) {
        __m512i z = _mm512_loadu_si512(src + (l & 3) * 64);
        __m512i a = _mm512_and_si512(z, t0v);
        __m512i h = _mm512_permutex2var_epi8(v0, _mm512_or_si512(a, v2), v1);
        __m512i lo = _mm512_permutex2var_epi8(v0, _mm512_or_si512(a, v3), v1);
        if (mode & 4) {
          t1v = _mm512_xor_si512(t1v, _mm512_xor_si512(h, lo));
        } else {
          _mm512_store_si512(dst + (l & 7) * 64, h);
          _mm512_store_si512(dst + 512 + (l & 7) * 64, lo);
        }
      }
    }
    if (mode & 2) {
      _tile_loadd(4, A[i & 63], 32);
      _tile_loadd(6, Bbuf[i & 7][0], 64);
      _tile_loadd(7, Bbuf[i & 7][1], 64);
      _tile_dpbsud(0, 4, 6);
      _tile_dpbsud(1, 4, 7);
    }
  }
  _tile_stored(0, C[0], 64);
  _mm512_store_si512(C[1][0], t1v);
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() /
         iters;
}
int main() {
  syscall(SYS_arch_prctl, 0x1023, 18);
  Cfg c;
  for (int t = 0; t < 4; t++) {
    c.rows[t] = 16;
    c.colsb[t] = 64;
  }
  for (int t : {4, 5}) {
    c.rows[t] = 16;
    c.colsb[t] = 32;
  }
  for (int t : {6, 7}) {
    c.rows[t] = 8;
    c.colsb[t] = 64;
  }
  _tile_loadconfig(&c);
  for (int work : {8, 16}) {
    double v = Run(1, work), t = Run(2, work), b = Run(3, work), ns = Run(5, work),
           nsb = Run(7, work);
    printf("work %d lines: no stores %.2f ns, no stores + tile %.2f ns\n", work, ns, nsb);
    printf("work %d lines: vector only %.2f ns, tile only %.2f ns, both %.2f ns (sum %.2f)\n", work,
           v, t, b, v + t);
  }
  _tile_release();
}
