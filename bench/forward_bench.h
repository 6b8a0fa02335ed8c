// `specd bench forward`: decode speed against the memory roofline, and the cost of one forward
// over M rows relative to one row, for synthetic models of a real shape.
#pragma once

#include <string>
#include <vector>

#include "engine/model_options.h"
#include "model/model.h"
#include "tensor/dtype.h"

namespace specd::bench {

struct ForwardBenchOptions {
  std::string shape = "llama-3.2-1b";
  std::string model_path;  // a model file instead of synthetic shapes (types are then ignored)
  std::vector<DType> types = {DType::kBF16, DType::kQ8_0, DType::kQ4_0};
  std::vector<int> threads = {1, 2};
  std::vector<int> rows = {1, 2, 4, 8, 16, 32, 64};
  int n_decode = 32;  // timed decode steps per configuration
  int n_reps = 5;     // repetitions of each M-row forward (median reported)
  int context = 16;   // positions already in the cache before the M rows (a decode's context)
  DType cache_type = DType::kF16;  // KV cache type (f16: what generate and serve use)
  std::string model_dir = "bench/models";
  std::string out_dir = "bench/results";
  bool verbose = true;
  bool profile = false;  // also time each op of the M-row forwards
  // Also time the engine's measured choice between the AMX and VNNI kernels against AMX at every
  // row count from 16, forward by forward in turn (CPUs with AMX).
  bool kernel_choice_ab = false;
  // Each model is also run converted at load: "" (as stored) and / or "i8" (BASS's INT8).
  std::vector<std::string> weights = {""};
  WeightOptions weight_options;  // --int8-kernel, --lora (int8 is set per form)
};

// Runs the benchmark, prints a Markdown table to stdout and writes forward.md / forward.json
// into out_dir.
void RunForwardBench(const ForwardBenchOptions& options);

}  // namespace specd::bench
