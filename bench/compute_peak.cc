#include "bench/compute_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/cpu_features.h"
#include "base/timer.h"

namespace specd::bench {
namespace {

constexpr int kChains = 12;  // enough independent sums to hide vpdpbusd's latency
constexpr int kSteps = 8;    // products per sum before it is restarted
constexpr int64_t kIters = 500'000;

// Returns a value that depends on every product so nothing is optimized away. The sums are
// restarted every kSteps products, as the kernels' per-block sums are: GCC 12 kept an array of
// sums that lives across the whole loop in memory, a load and a store per product, and the loop
// then measured 210 GMAC/s on 2 Zen 4 threads, where the kernels run at 300-340 and this one at
// 460.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) int32_t VnniLoop(int32_t seed) {
  const __m512i w = _mm512_set1_epi8(static_cast<char>(seed | 1));
  const __m512i a = _mm512_set1_epi32(seed * 3 + 1);
  __m512i total = _mm512_setzero_si512();
  for (int64_t i = 0; i < kIters; ++i) {
    __m512i acc[kChains];
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) {
      acc[j] = _mm512_setzero_si512();
      __asm__ volatile("" : "+v"(acc[j]));  // or the first products, all equal, would be one
    }
#pragma GCC unroll 8
    for (int step = 0; step < kSteps; ++step) {
#pragma GCC unroll 12
      for (int j = 0; j < kChains; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], w, a);
        // Keeps the products from being folded into one per step.
#pragma GCC unroll 12
      for (int j = 0; j < kChains; ++j) __asm__ volatile("" : "+v"(acc[j]));
    }
#pragma GCC unroll 12
    for (int j = 0; j < kChains; ++j) total = _mm512_add_epi32(total, acc[j]);
  }
  alignas(64) int32_t lanes[16];
  _mm512_store_si512(lanes, total);
  // Unsigned: the lanes wrap around by design, and a signed sum of them would overflow.
  uint32_t sum = 0;
  for (int32_t v : lanes) sum += static_cast<uint32_t>(v);
  return static_cast<int32_t>(sum);
}

constexpr int64_t kAmxIters = 1'000'000;
constexpr int kAmxChains = 4;  // tdpbssd per iteration, into tiles 0-3

struct alignas(64) AmxConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {64, 64, 64, 64, 64, 64, 64};
  uint8_t rows[16] = {16, 16, 16, 16, 16, 16, 16};
};

__attribute__((target("amx-tile,amx-int8"))) int32_t AmxLoop(int32_t seed) {
  const AmxConfig config;
  _tile_loadconfig(&config);
  alignas(64) int8_t a[16 * 64];
  for (int i = 0; i < 16 * 64; ++i) a[i] = static_cast<int8_t>(seed + i);
  _tile_loadd(4, a, 64);
  _tile_loadd(5, a, 64);
  _tile_loadd(6, a, 64);
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  for (int64_t i = 0; i < kAmxIters; ++i) {
    _tile_dpbssd(0, 4, 5);
    _tile_dpbssd(1, 4, 6);
    _tile_dpbssd(2, 5, 6);
    _tile_dpbssd(3, 6, 5);
  }
  alignas(64) int32_t sums[kAmxChains][16 * 16];
  _tile_stored(0, sums[0], 64);
  _tile_stored(1, sums[1], 64);
  _tile_stored(2, sums[2], 64);
  _tile_stored(3, sums[3], 64);
  uint32_t total = 0;  // unsigned for the same reason as in VnniLoop
  for (const auto& tile : sums) {
    for (int32_t v : tile) total += static_cast<uint32_t>(v);
  }
  _tile_release();
  return static_cast<int32_t>(total);
}

// Runs loop on every pool thread `reps` times; the best wall time in seconds.
template <typename Loop>
double BestSeconds(ThreadPool& pool, int reps, Loop loop) {
  std::vector<int32_t> sinks(pool.size());
  double best_s = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    pool.RunOnAll([&](int thread) { sinks[thread] = loop(thread + rep); });
    best_s = std::min(best_s, t.ElapsedMs() / 1000.0);
  }
  volatile int32_t keep = sinks[0];
  (void)keep;
  return best_s;
}

}  // namespace

double MeasureAmxInt8PeakGmacs(ThreadPool& pool, int reps) {
  if (!CpuFeatures::Detect().amx_int8) return 0.0;
  const double best_s = BestSeconds(pool, reps, AmxLoop);
  // Each tdpbssd on full tiles does 16 x 16 x 64 multiply-accumulates.
  const double macs = 16.0 * 16 * 64 * kAmxChains * static_cast<double>(kAmxIters) * pool.size();
  return macs / best_s / 1e9;
}

double MeasureInt8PeakGmacs(ThreadPool& pool, int reps) {
  __builtin_cpu_init();
  if (!__builtin_cpu_supports("avx512vnni")) return 0.0;
  const double best_s = BestSeconds(pool, reps, VnniLoop);
  // Each vpdpbusd on 512 bits does 64 multiply-accumulates.
  const double macs = 64.0 * kChains * kSteps * static_cast<double>(kIters) * pool.size();
  return macs / best_s / 1e9;
}

}  // namespace specd::bench
