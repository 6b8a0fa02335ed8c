// `specd bench spec`: plain decoding against speculative decoding (spec at batch 1, BASS above)
// on a model pair and a set of Python prompts, at several batch sizes, greedy and sampled:
// tokens/s, per-token latency of the first / last / all sequences, acceptance, and the speedup
// over plain decoding at the same batch size. Writes Markdown, JSON and an SVG plot.
#pragma once

#include <string>
#include <vector>

#include "draft/draft_model_proposer.h"
#include "tensor/dtype.h"

namespace specd::bench {

struct SpecBenchOptions {
  WeightFlags weight_flags;  // --weights i8 for both models, --int8-kernel
  std::string target;        // default: the shipped pair
  std::string draft;
  std::vector<int> batches = {1, 2, 4, 8, 16};
  std::vector<int> draft_lengths = {1, 2, 3, 4, 6};  // fixed lengths tried besides the policies
  int n_predict = 64;
  int threads = 2;
  int reps = 3;  // runs of each configuration, round-robin; the median is reported
  std::string out_dir = "bench/results";
  DType cache_type = DType::kF32;            // KV caches of both models
  std::vector<float> temperatures = {0.2f};  // sampled settings (top-p 0.95), besides greedy
  // How sampled drafts are verified: rejection sampling and / or coupled (shared Gumbel noise).
  std::vector<std::string> spec_sampling = {"rejection", "coupled"};
  // Prompts: "code" (Python openings) or "chat" (questions in the target's chat template).
  std::string prompt_set = "code";
  // Batch B runs the prompts in groups of B, one group after the other: every prompt at every
  // batch size (0), or at most this many groups.
  int prompt_groups = 0;
  // Proposer of every speculative run: draft (the draft model), ngram (prompt lookup) or
  // draft+ngram (lookup first, the draft where it finds nothing).
  std::string spec_type = "draft";
  DraftFlags draft_flags;   // how the draft drafts (EasySpec's fuzzy drafting, trees)
  std::string trace_steps;  // every speculative step as a JSON line (labelled by run)
};

void RunSpecBench(const SpecBenchOptions& options);

}  // namespace specd::bench
