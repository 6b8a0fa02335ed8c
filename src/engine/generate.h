// Whole requests on the engine: plain and speculative generation of one or more sequences, as
// `specd generate` and `bench spec` run them.
#pragma once

#include <string>
#include <vector>

#include "engine/generation.h"
#include "engine/step.h"
#include "draft/draft_model_proposer.h"
#include "engine/engine.h"

namespace specd {

struct SpeculativeOptions {
  int draft_max = 4;        // fixed draft length, the starting one (l0) when adaptive, the cap
                            // when cost-aware
  bool adaptive = false;    // BASS Algorithm 1
  bool cost_aware = false;  // CostAwarePolicy: K in 0..draft_max
  // Draft lengths step by step (cycled; 0 = a plain step), overriding the policies above.
  std::vector<int> schedule;
  int l_incre = 2;
  int l_mod = 10;
  int l_limit = 32;
  SpecSampling spec_sampling = SpecSampling::kRejection;
  DraftModelOptions draft;       // how a draft model drafts (fuzzy, calibration, trees)
  std::string trace_steps_path;  // non-empty: every step appended there as a JSON line
  std::string trace_label;       // written on each of those lines
};

// The draft-length policy the options ask for.
std::unique_ptr<DraftLengthPolicy> MakeDraftLengthPolicy(const SpeculativeOptions& o);

// BASS Algorithm 1's next length from the accepted counts of the last step.
int NextDraftLength(int current, const std::vector<int>& accepted, const SpeculativeOptions& o,
                    int* decreasing);

// Checks that the draft can serve the target (same vocabulary); throws Error otherwise.
void CheckDraftCompatible(const Model& target, const Model& draft);

// Runs a request to completion on `engine`: its sequences added (completions of one prompt
// sharing it), steps until all finish or the time budget passes.
GenerateResult RunRequest(Engine& engine, const GenerateRequest& request);

// BASS 4.5's answer to a time budget: drops the sequences that did not finish within it and
// orders the rest by mean log-probability, best first (ties keep their order). Returns how
// many were dropped.
int KeepFinishedRankedByLogProb(GenerateResult* result);

// Plain decoding (the engine without a proposer).
GenerateResult GenerateAutoregressive(Model& model, const KernelContext& ctx, KvCache& kv,
                                      const GenerateRequest& request);

// Speculative decoding with any proposer (it must know no sequences yet).
GenerateResult GenerateWithProposer(Model& target, const KernelContext& ctx, KvCache& target_kv,
                                    Proposer& proposer, const GenerateRequest& request,
                                    const SpeculativeOptions& options, SpeculativeStats* stats,
                                    VerifyFunction verify = VerifySampled);

// Speculative decoding with a draft model; each model needs a free KV slot per sequence with
// room for its prompt + n_predict + the longest draft + 1 tokens. `verify` decides sampled
// verification by rejection sampling.
GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request,
                                   const SpeculativeOptions& options, SpeculativeStats* stats,
                                   VerifyFunction verify = VerifySampled);
GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request, int draft_length,
                                   SpeculativeStats* stats, VerifyFunction verify = VerifySampled);
GenerateResult GenerateSpeculativeGreedy(Model& target, Model& draft, const KernelContext& ctx,
                                         KvCache& target_kv, KvCache& draft_kv,
                                         const GenerateRequest& request, int draft_length,
                                         SpeculativeStats* stats);

}  // namespace specd
