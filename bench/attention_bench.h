// `specd bench attention`: BASS-PAD vs BASS-SPLIT vs the per-(row, head) routine on a synthetic
// KV cache — B sequences with ragged contexts around C keys, each verifying R rows — for
// contexts from 256 to 8k, where attention is a real share of a step.
#pragma once

#include <string>
#include <vector>

namespace specd::bench {

struct AttentionBenchOptions {
  std::vector<int> contexts = {256, 1024, 2048, 4096, 8192};
  std::vector<int> batches = {1, 4};
  int rows = 5;              // rows per sequence (a verification of 4 drafts)
  int n_head = 9, n_head_kv = 3, head_dim = 64;  // SmolLM2-135M's attention
  int threads = 2;
  int reps = 7;
  std::string out_dir = "bench/results/attention";
};

void RunAttentionBench(const AttentionBenchOptions& options);

}  // namespace specd::bench
