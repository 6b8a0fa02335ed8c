#include "bench/membw.h"

#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/timer.h"

namespace specd::bench {
namespace {

// 512-bit loads with four independent sums: the plain loop compiles to 128-bit SSE, which cannot
// issue loads fast enough to saturate two cores' DRAM bandwidth.
__attribute__((target("avx512f"))) float SumAvx512(const float* p, size_t n) {
  __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    a0 = _mm512_add_ps(a0, _mm512_load_ps(p + i));
    a1 = _mm512_add_ps(a1, _mm512_load_ps(p + i + 16));
    a2 = _mm512_add_ps(a2, _mm512_load_ps(p + i + 32));
    a3 = _mm512_add_ps(a3, _mm512_load_ps(p + i + 48));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
}

float SumPlain(const float* p, size_t n) {
  float acc[16] = {};
  for (size_t i = 0; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) acc[j] += p[i + j];
  }
  float sum = 0;
  for (float a : acc) sum += a;
  return sum;
}

}  // namespace

double MeasureReadBandwidthGBs(ThreadPool& pool, size_t bytes, int reps) {
  const size_t n = bytes / sizeof(float);
  AlignedBuffer<float> buffer(n);
  pool.ParallelFor(static_cast<int64_t>(n), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buffer[i] = static_cast<float>(i & 7);
  });
  std::vector<float> sinks(pool.size());
  __builtin_cpu_init();
  const bool avx512 = __builtin_cpu_supports("avx512f");
  double best_s = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    pool.RunOnAll([&](int thread) {
      // Shares aligned to 64 floats so the 512-bit loads are aligned.
      const size_t begin = (n * thread / pool.size()) / 64 * 64;
      const size_t end = (n * (thread + 1) / pool.size()) / 64 * 64;
      sinks[thread] = avx512 ? SumAvx512(buffer.data() + begin, end - begin)
                             : SumPlain(buffer.data() + begin, end - begin);
    });
    best_s = std::min(best_s, t.ElapsedMs() / 1000.0);
  }
  volatile float keep = sinks[0];
  (void)keep;
  return static_cast<double>(n * sizeof(float)) / best_s / 1e9;
}

}  // namespace specd::bench
