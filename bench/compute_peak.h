#pragma once

#include "threading/thread_pool.h"

namespace specd::bench {

// Peak int8 multiply-accumulates per second (in billions) of AVX-512 VNNI (vpdpbusd on 512-bit
// registers, 12 independent accumulators, operands in registers) with every pool thread busy:
// the ceiling of any int8 matmul here. 0 when the CPU has no AVX-512 VNNI.
double MeasureInt8PeakGmacs(ThreadPool& pool, int reps);

// The same for AMX-INT8 (tdpbssd on full 16 x 64-byte tiles, four independent accumulators,
// operands in tiles): the ceiling of the AMX i8 kernel. 0 when the CPU or OS offers no AMX.
double MeasureAmxInt8PeakGmacs(ThreadPool& pool, int reps);

}  // namespace specd::bench
