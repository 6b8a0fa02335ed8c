#include <immintrin.h>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <thread>
constexpr int64_t kIters = 2'000'000;
// per "row-block": 8 vpdpbusd into 2 chains (as kernels with MT rows: each row 8 products), then float steps
template <int R, bool kCvt, int kFp, int kInt = 0>
__attribute__((noinline)) float Loop(int32_t seed) {
  const __m512i w = _mm512_set1_epi8(static_cast<char>(seed | 1));
  const __m512i a = _mm512_set1_epi32(seed * 3 + 1);
  const __m512 sc = _mm512_set1_ps(1.0001f), mn = _mm512_set1_ps(0.5f), da = _mm512_set1_ps(0.999f);
  __m512 acc[R];
  for (int r = 0; r < R; ++r) { acc[r] = _mm512_setzero_ps(); __asm__ volatile("" : "+v"(acc[r])); }
  for (int64_t i = 0; i < kIters; ++i) {
    __m512i s[R];
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) { s[r] = _mm512_setzero_si512(); __asm__ volatile("" : "+v"(s[r])); }
#pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
#pragma GCC unroll 16
      for (int r = 0; r < R; ++r) { s[r] = _mm512_dpbusd_epi32(s[r], w, a); __asm__ volatile("" : "+v"(s[r])); }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) {
      if (kInt == 1) s[r] = _mm512_madd_epi16(s[r], w);
      if (kInt == 2) s[r] = _mm512_mullo_epi32(s[r], w);
      __m512 t = kCvt ? _mm512_cvtepi32_ps(s[r]) : _mm512_castsi512_ps(s[r]);
      if (kFp >= 1) t = _mm512_mul_ps(t, sc);
      if (kFp >= 2) t = _mm512_fmadd_ps(mn, sc, t);
      if (kFp >= 3) acc[r] = _mm512_fmadd_ps(t, da, acc[r]);
      else acc[r] = _mm512_castsi512_ps(_mm512_add_epi32(_mm512_castps_si512(acc[r]), _mm512_castps_si512(t)));
      __asm__ volatile("" : "+v"(acc[r]));
    }
  }
  float out = 0;
  for (int r = 0; r < R; ++r) out += _mm512_reduce_add_ps(acc[r]);
  return out;
}
template <typename F>
void Run(const char* name, double macs_per_iter, F f) {
  auto t0 = std::chrono::steady_clock::now();
  std::thread t1(f), t2(f);
  t1.join(); t2.join();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%-34s 2 threads %.0f GMAC/s\n", name, macs_per_iter * kIters * 2 / s / 1e9);
}
int main() {
  volatile float sink;
  for (int rep = 0; rep < 2; ++rep) {
  Run("8 rows: 8 dp + int add", 64.0 * 8 * 8, [&] { sink = Loop<8, false, 0>(3); });
  Run("8 rows: 8 dp + cvt", 64.0 * 8 * 8, [&] { sink = Loop<8, true, 0>(3); });
  Run("8 rows: 8 dp + cvt mul", 64.0 * 8 * 8, [&] { sink = Loop<8, true, 1>(3); });
  Run("8 rows: 8 dp + cvt mul fma", 64.0 * 8 * 8, [&] { sink = Loop<8, true, 2>(3); });
  Run("8 rows: 8 dp + cvt mul fma fma (q4_K)", 64.0 * 8 * 8, [&] { sink = Loop<8, true, 3>(3); });
  Run("8 rows: 8 dp + vpmaddwd", 64.0 * 8 * 8, [&] { sink = Loop<8, false, 0, 1>(3); });
  Run("8 rows: 8 dp + vpmulld", 64.0 * 8 * 8, [&] { sink = Loop<8, false, 0, 2>(3); });
  }
}
