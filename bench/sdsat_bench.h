// `specd bench spec --strategy sdsat`: SDSAT's self-drafting against plain decoding of the same
// model, as the paper's Table 4 and Figures 3-4: tokens/s and speedup for each k (adaptive
// tokens per step), greedy and sampled, merged forwards and the paper's two-forward loop, chains
// and token trees, with the acceptance at each draft position. Writes Markdown and JSON.
#pragma once

#include <string>
#include <vector>

#include "bench/spec_bench.h"

namespace specd::bench {

struct SdsatBenchOptions {
  std::vector<int> ks = {1, 2, 3, 5, 7, 9, 11, 13};
  bool unmerged_too = true;  // also the paper's two-forward loop
  // Token trees of these many nodes (two-step loop, width tree_width) besides chains.
  std::vector<int> tree_nodes;
  int tree_width = 10;
};

// Uses `spec`'s target, batches, n_predict, threads, reps, out_dir, prompt_set, temperatures,
// spec_sampling and weights (its draft and draft lengths do not apply).
void RunSdsatBench(const SpecBenchOptions& spec, const SdsatBenchOptions& sdsat);

}  // namespace specd::bench
