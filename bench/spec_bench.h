// `specd bench spec`: plain decoding against speculative decoding (spec at batch 1, BASS above)
// on a model pair and a set of Python prompts, at several batch sizes, greedy and sampled:
// tokens/s, per-token latency of the first / last / all sequences, acceptance, and the speedup
// over plain decoding at the same batch size. Writes Markdown, JSON and an SVG plot.
#pragma once

#include <string>
#include <vector>

#include "engine/model_options.h"
#include "engine/speculation_config.h"
#include "tensor/dtype.h"

namespace specd::bench {

struct SpecBenchOptions {
  WeightOptions weights;  // --weights i8 for both models, --int8-kernel
  std::string target;     // default: the shipped pair
  // The proposer of every speculative run (draft, ngram or draft+ngram), the draft model and how
  // it drafts, the n-gram sizes, the trace file, and the caps of the policies' runs (draft_max).
  SpeculationConfig speculation;
  std::vector<int> batches = {1, 2, 4, 8, 16};
  std::vector<int> draft_lengths = {1, 2, 3, 4, 6};  // fixed lengths tried besides the policies
  int n_predict = 64;
  int threads = 2;
  int reps = 3;  // runs of each configuration, round-robin; the median is reported
  std::string out_dir = "bench/results";
  DType cache_type = DType::kF32;            // KV caches of both models
  std::vector<float> temperatures = {0.2f};  // sampled settings (top-p 0.95), besides greedy
  // How sampled drafts are verified: rejection sampling and / or coupled (shared Gumbel noise).
  std::vector<SpecSampling> spec_samplings = {SpecSampling::kRejection, SpecSampling::kCoupled};
  // Prompts: "code" (Python openings) or "chat" (questions in the target's chat template).
  std::string prompt_set = "code";
  // Batch B runs the prompts in groups of B, one group after the other: every prompt at every
  // batch size (0), or at most this many groups.
  int prompt_groups = 0;
};

void RunSpecBench(const SpecBenchOptions& options);

}  // namespace specd::bench
