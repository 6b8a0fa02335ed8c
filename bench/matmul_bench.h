// `specd bench matmul`: specd's matmul kernels side by side with oneDNN's on one weight shape,
// for M rows (1..2048), so the choice of kernel per type rests on a measurement on this machine.
#pragma once

#include <string>
#include <vector>

#include "kernels/kernels.h"
#include "tensor/dtype.h"

namespace specd::bench {

struct MatmulBenchOptions {
  int rows_n = 2048;  // output features
  int cols_k = 2048;  // input features
  int threads = 2;
  std::vector<int> m = {1, 4, 8, 16, 32, 64};
  // Distinct copies of the weights, used in turn: enough of them stream from memory, as a
  // forward's layers do, while one copy sits in cache.
  int copies = 1;
  double min_ms = 300;  // time per measurement
  // specd's packed kernels are run for each of these weight types (bf16 on its own kernel).
  std::vector<DType> types = {DType::kBF16, DType::kQ8_0, DType::kQ4_0};
  bool skip_int8_and_onednn = false;  // only the `types` rows
  // The kernels the `types` rows run on (auto: the engine's choice by row count). Two or more
  // are timed call by call in turn, each reported as the median of its calls, with the median
  // ratio of each one's call time to the first kernel's call just before it.
  struct NamedKernel {
    std::string name;  // as --int8-kernel spells it
    Int8Backend backend = Int8Backend::kAuto;
  };
  std::vector<NamedKernel> packed_kernels = {{"auto", Int8Backend::kAuto}};
};

void RunMatmulBench(const MatmulBenchOptions& options);

}  // namespace specd::bench
