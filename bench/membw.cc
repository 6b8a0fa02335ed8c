#include "bench/membw.h"

#include <algorithm>
#include <vector>

#include "base/aligned_buffer.h"
#include "base/timer.h"

namespace specd::bench {

double MeasureReadBandwidthGBs(ThreadPool& pool, size_t bytes, int reps) {
  const size_t n = bytes / sizeof(float);
  AlignedBuffer<float> buffer(n);
  pool.ParallelFor(static_cast<int64_t>(n), 4096, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) buffer[i] = static_cast<float>(i & 7);
  });
  std::vector<float> sinks(pool.size());
  double best_s = 1e30;
  for (int rep = 0; rep < reps; ++rep) {
    Timer t;
    pool.RunOnAll([&](int thread) {
      const size_t begin = n * thread / pool.size(), end = n * (thread + 1) / pool.size();
      float acc[16] = {};
      for (size_t i = begin; i + 16 <= end; i += 16) {
        for (int j = 0; j < 16; ++j) acc[j] += buffer[i + j];
      }
      float sum = 0;
      for (float a : acc) sum += a;
      sinks[thread] = sum;
    });
    best_s = std::min(best_s, t.ElapsedMs() / 1000.0);
  }
  volatile float keep = sinks[0];
  (void)keep;
  return static_cast<double>(n * sizeof(float)) / best_s / 1e9;
}

}  // namespace specd::bench
