// Speculative decoding with a draft model: the draft proposes K tokens one at a time, the target
// scores [last, d1..dK] in one forward, and the verifier keeps a prefix of the drafts plus one
// token of the target's (recovered or bonus); both KV caches roll back to what was kept.
// Greedy (temperature 0): the longest prefix equal to the target's argmax, so the output equals
// plain greedy decoding token for token. Sampled: modified rejection sampling (verify/), so the
// output is distributed exactly as the target's own samples under the same temperature, top-k
// and top-p. This file handles one sequence; batches of sequences (BASS) build on it.
#pragma once

#include <cstdint>
#include <vector>

#include "decode/generation.h"
#include "kv/kv_cache.h"
#include "model/model.h"
#include "verify/verify.h"

namespace specd {

struct SpeculativeStats {
  int64_t n_drafted = 0;
  int64_t n_accepted = 0;
  int64_t n_steps = 0;                        // verification forwards
  std::vector<int64_t> accepted_at_position;  // [K]: drafts accepted at position i
  std::vector<int64_t> drafted_at_position;   // [K]: drafts proposed at position i
  double t_draft_ms = 0.0;
  double t_verify_ms = 0.0;

  double acceptance_rate() const { return n_drafted ? double(n_accepted) / n_drafted : 0.0; }
  // 1 + accepted per verification step (the bonus / correction token included).
  double mean_accepted_length() const { return n_steps ? 1.0 + double(n_accepted) / n_steps : 0.0; }
  void Add(const SpeculativeStats& other);
};

// Checks that the draft can serve the target (same vocabulary); throws Error otherwise.
void CheckDraftCompatible(const Model& target, const Model& draft);

// Speculative decoding of one sequence: n_predict tokens (or up to EOS when stop_at_eos), greedy
// or sampled by request.sampling. Each model needs one free KV slot with room for the prompt +
// n_predict + draft_length tokens.
// `verify` decides the sampled case (tests pass deliberately wrong verifiers to show that the
// distribution test would catch them).
using VerifyFunction = VerifyOutcome (*)(std::span<const std::vector<float>>,
                                         std::span<const std::vector<float>>,
                                         std::span<const int32_t>, const RngKey&);
GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request, int draft_length,
                                   SpeculativeStats* stats, VerifyFunction verify = VerifySampled);

// The same with greedy decoding (the request's sampling parameters are ignored).
GenerateResult GenerateSpeculativeGreedy(Model& target, Model& draft, const KernelContext& ctx,
                                         KvCache& target_kv, KvCache& draft_kv,
                                         const GenerateRequest& request, int draft_length,
                                         SpeculativeStats* stats);

}  // namespace specd
