// `specd bench easyspec`: EasySpec's measurements on a model pair (the paper's section 4 on this
// machine's cores): the draft's forward time by layer-parallel size, how far fuzzy activations
// drift from exact ones per layer (cosine similarity, the paper's table 4), and end-to-end greedy
// decoding at batch 1 with exact, fuzzy (with and without bonus calibration) and tree drafting.
// Writes Markdown and JSON.
#pragma once

#include <string>
#include <vector>

namespace specd::bench {

struct EasySpecBenchOptions {
  std::string target;  // default: SmolLM2 with its draft when fetched, else the shipped pair
  std::string draft;
  std::vector<int> lp_sizes = {1, 2, 3, 4};
  std::string lp_groups = "packed";
  std::vector<int> draft_lengths = {2, 4, 6};  // exact chains
  int draft_max = 4;                           // fuzzy chains
  std::vector<int> tree_widths = {2, 3};
  int tree_nodes = 8;  // draft length of tree runs (nodes per tree)
  int n_predict = 128;
  int n_prompts = 8;
  int threads = 2;
  int reps = 3;
  std::string prompt_set = "code";
  std::string out_dir = "bench/results/easyspec";
};

void RunEasySpecBench(const EasySpecBenchOptions& options);

}  // namespace specd::bench
