// Whole requests on the engine: plain and speculative generation of one or more sequences, as
// `specd generate` and `bench spec` run them.
#pragma once

#include <string>
#include <vector>

#include "draft/draft_model_proposer.h"
#include "engine/engine.h"
#include "engine/request.h"
#include "engine/speculation_config.h"
#include "engine/step.h"

namespace specd {

// BASS Algorithm 1's next length from the accepted counts of the last step.
int NextDraftLength(int current, const std::vector<int>& accepted, const BassParameters& bass,
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

// Plain decoding (the engine without a proposer); sampled tokens drawn as a speculative run
// verifying by `sampling` would draw them (coupled: by Gumbel-max, so the output is what coupled
// speculation writes for the seed).
GenerateResult GenerateAutoregressive(Model& model, const KernelContext& ctx, KvCache& kv,
                                      const GenerateRequest& request,
                                      SpecSampling sampling = SpecSampling::kRejection);

// Speculative decoding with any proposer (it must know no sequences yet); `config`'s draft-length
// policy and verification (resolved here), its proposer fields unread.
GenerateResult GenerateWithProposer(Model& target, const KernelContext& ctx, KvCache& target_kv,
                                    Proposer& proposer, const GenerateRequest& request,
                                    const SpeculationConfig& config, SpeculativeStats* stats,
                                    VerifyFunction verify = VerifySampled);

// Speculative decoding with a draft model; each model needs a free KV slot per sequence with
// room for its prompt + n_predict + the longest draft + 1 tokens. `verify` decides sampled
// verification by rejection sampling; `drafting` is how the draft drafts (fuzzy, trees).
GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request, const SpeculationConfig& config,
                                   SpeculativeStats* stats, VerifyFunction verify = VerifySampled,
                                   const DraftModelOptions& drafting = {});
GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request, int draft_length,
                                   SpeculativeStats* stats, VerifyFunction verify = VerifySampled);
GenerateResult GenerateSpeculativeGreedy(Model& target, Model& draft, const KernelContext& ctx,
                                         KvCache& target_kv, KvCache& draft_kv,
                                         const GenerateRequest& request, int draft_length,
                                         SpeculativeStats* stats);

}  // namespace specd
