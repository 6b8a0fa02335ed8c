#include "bench/compute_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/timer.h"

namespace specd::bench {
namespace {

constexpr int kChains = 12;  // enough independent sums to hide vpdpbusd's latency
constexpr int64_t kIters = 4'000'000;

// Returns a value that depends on every accumulator so nothing is optimized away.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int32_t VnniLoop(int32_t seed) {
  const __m512i w = _mm512_set1_epi8(static_cast<char>(seed | 1));
  const __m512i a = _mm512_set1_epi32(seed * 3 + 1);
  __m512i acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_epi32(j + seed);
  for (int64_t i = 0; i < kIters; ++i) {
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], w, a);
      // Keeps the accumulators in registers and the loop from being folded.
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) __asm__ volatile("" : "+v"(acc[j]));
  }
  __m512i sum = acc[0];
  for (int j = 1; j < kChains; ++j) sum = _mm512_add_epi32(sum, acc[j]);
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, sum);
  int32_t total = 0;
  for (int32_t v : lanes) total += v;
  return total;
}

}  // namespace

double MeasureInt8PeakGmacs(ThreadPool& pool, int reps) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni")) return 0.0;
  std::vector<int32_t> sinks(pool.size());
  double best_s = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    pool.RunOnAll([&](int thread) { sinks[thread] = VnniLoop(thread + rep); });
    best_s = std::min(best_s, t.ElapsedMs() / 1000.0);
  }
  volatile int32_t keep = sinks[0];
  (void)keep;
  // Each vpdpbusd on 512 bits does 64 multiply-accumulates.
  const double macs = 64.0 * kChains * static_cast<double>(kIters) * pool.size();
  return macs / best_s / 1e9;
}

}  // namespace specd::bench
