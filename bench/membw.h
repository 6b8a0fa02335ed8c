#pragma once

#include "threading/thread_pool.h"

namespace specd::bench {

// Streaming-read bandwidth in GB/s over a buffer of `bytes` (large: DRAM), best of `reps`,
// with the pool's threads each reading a contiguous share.
double MeasureReadBandwidthGBs(ThreadPool& pool, size_t bytes, int reps);

}  // namespace specd::bench
