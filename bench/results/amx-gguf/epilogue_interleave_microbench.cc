// The folded kernel's pass beside its float steps, on one core: a pass is 16 K = 64 products
// into 4 C tiles (4 block pairs x (2 B loads, 2 A loads, 4 tdpbusd)), its C tiles stored; the
// float steps are a stand-in of the epilogue's shape for 32 activation rows (two part sums
// combined, a convert, 4 vpdpwssd with broadcasts, two FMAs, a load and a store per row).
// Modes: tiles only; float steps only; one after the other; the previous pass's C stored
// first, then this pass issued, then the previous pass's float steps (software pipelining);
// the same with the float steps cut in quarters between the block pairs (interleaved).
// Argument: the span in KiB the A tiles stream through (16: L1, 160: L2, as the kernel's).
// A lab-notebook program, not part of the build:
//   g++ -O2 -march=native -mamx-tile -mamx-int8 -o /tmp/interleave \
//     epilogue_interleave_microbench.cc
//   /tmp/interleave 160
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

alignas(64) static int8_t a_bytes[1 << 20];
alignas(64) static int8_t b_bytes[16 * 1024];
alignas(64) static int32_t c_sums[2][4][256];  // two passes' C tiles
alignas(64) static float acc[64][16];

static double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The float steps of `rows` activation rows from a pass's stored sums.
__attribute__((noinline)) static void FloatSteps(const int32_t* sums, int rows) {
  for (int r = 0; r < rows; ++r) {
    const __m512 da = _mm512_set1_ps(acc[r][0] * 1e-9f);
    const __m512i s =
        _mm512_add_epi32(_mm512_load_si512(sums + r * 16),
                         _mm512_slli_epi32(_mm512_load_si512(sums + 256 + r * 16), 3));
    __m512 a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), da, _mm512_load_ps(acc[r]));
    __m512i mins = _mm512_setzero_si512();
    for (int j = 0; j < 4; ++j)
      mins = _mm512_dpwssd_epi32(mins, s, _mm512_set1_epi32(sums[j * 16 + r]));
    a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(mins), da, a);
    _mm512_store_ps(acc[r], a);
  }
}

// One pass's tile operations; between(p) after block pair p.
template <class Between>
static void Pass(const int8_t* a, Between&& between) {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int p = 0; p < 4; ++p) {
    _tile_loadd(6, b_bytes + p * 2048, 64);
    _tile_loadd(7, b_bytes + p * 2048 + 1024, 64);
    _tile_loadd(4, a + p * 2048, 64);
    _tile_dpbusd(0, 4, 6);
    _tile_dpbusd(1, 4, 7);
    _tile_loadd(5, a + p * 2048 + 1024, 64);
    _tile_dpbusd(2, 5, 6);
    _tile_dpbusd(3, 5, 7);
    between(p);
  }
}

static void Store(int slot) {
  _tile_stored(0, c_sums[slot][0], 64);
  _tile_stored(1, c_sums[slot][1], 64);
  _tile_stored(2, c_sums[slot][2], 64);
  _tile_stored(3, c_sums[slot][3], 64);
}

int main(int argc, char** argv) {
  syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */);
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.rows[t] = 16;
    config.bytes_per_row[t] = 64;
  }
  _tile_loadconfig(&config);
  std::memset(a_bytes, 1, sizeof a_bytes);
  std::memset(b_bytes, 1, sizeof b_bytes);
  const long span_bytes = (argc > 1 ? atol(argv[1]) : 16) * 1024;
  const long passes = 1000000;
  const char* names[] = {"tiles only", "float steps only", "tiles then float steps", "pipelined",
                         "interleaved"};
  auto nothing = [](int) {};
  for (int mode = 0; mode < 5; ++mode) {
    long a_offset = 0;
    const double t0 = NowSeconds();
    for (long i = 0; i < passes; ++i) {
      const int slot = i & 1;
      a_offset = (a_offset + 8192) % span_bytes;
      const int8_t* a = a_bytes + a_offset;
      const int32_t* previous = c_sums[slot ^ 1][0];
      if (mode == 0) Pass(a, nothing), Store(slot);
      if (mode == 1) FloatSteps(c_sums[slot][0], 32);
      if (mode == 2) Pass(a, nothing), Store(slot), FloatSteps(c_sums[slot][0], 32);
      if (mode == 3) Store(slot ^ 1), Pass(a, nothing), FloatSteps(previous, 32);
      if (mode == 4) Store(slot ^ 1), Pass(a, [&](int p) { FloatSteps(previous + p * 128, 8); });
    }
    std::printf("%-24s %.1f ns a pass\n", names[mode], (NowSeconds() - t0) * 1e9 / passes);
  }
  _tile_release();
  std::printf("(checksum %g)\n", acc[3][3]);
}
