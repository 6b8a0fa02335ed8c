// Speculative decoding with a draft model: the draft proposes K tokens one at a time, the target
// scores [last, d1..dK] in one forward, and the verifier keeps a prefix of the drafts plus one
// token of the target's (recovered or bonus); both KV caches roll back to what was kept.
// Greedy (temperature 0): the longest prefix equal to the target's argmax, so the output equals
// plain greedy decoding token for token. Sampled: modified rejection sampling (verify/), so the
// output is distributed exactly as the target's own samples under the same temperature, top-k
// and top-p.
//
// Batches follow BASS (Qian et al. 2024): every sequence accepts its own number of tokens per
// step and finishes on its own; each draft step is one draft forward over all unfinished
// sequences and each verification one target forward over all of their [last, drafts] rows
// (ragged KV lengths, PAD or SPLIT attention). The draft length is fixed or adapted by BASS's
// Algorithm 1, or chosen from measured costs and acceptance (draft_policy.h), which may turn
// drafting off (K = 0) when it does not pay.
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
  int64_t n_plain_steps = 0;                  // of which without drafts (cost-aware K = 0)
  std::vector<int64_t> accepted_at_position;  // [K]: drafts accepted at position i
  std::vector<int64_t> drafted_at_position;   // [K]: drafts proposed at position i
  double t_draft_ms = 0.0;
  double t_verify_ms = 0.0;

  double acceptance_rate() const { return n_drafted ? double(n_accepted) / n_drafted : 0.0; }
  // 1 + accepted per verification step (the bonus / correction token included).
  double mean_accepted_length() const { return n_steps ? 1.0 + double(n_accepted) / n_steps : 0.0; }
  void Add(const SpeculativeStats& other);
};

struct SpeculativeOptions {
  int draft_max = 4;        // fixed draft length, the starting one (l0) when adaptive, the cap
                            // when cost-aware
  bool adaptive = false;    // BASS Algorithm 1
  bool cost_aware = false;  // CostAwareDraftLength (draft_policy.h): K in 0..draft_max
  // Draft lengths step by step (cycled; 0 = a plain step), overriding the policies above: for
  // tests and experiments that need a known sequence of lengths.
  std::vector<int> schedule;
  int l_incre = 2;
  int l_mod = 10;
  int l_limit = 32;
};

// The next draft length by BASS Algorithm 1, from the accepted counts of the last step.
// `decreasing` carries the algorithm's s (1 after a decrease).
int NextDraftLength(int current, const std::vector<int>& accepted, const SpeculativeOptions& o,
                    int* decreasing);

// Checks that the draft can serve the target (same vocabulary); throws Error otherwise.
void CheckDraftCompatible(const Model& target, const Model& draft);

// Speculative decoding of the request's sequences: n_predict tokens each (or up to EOS when
// stop_at_eos), greedy or sampled by request.sampling. Each model needs a free KV slot per
// sequence with room for its prompt + n_predict + the longest draft + 1 tokens.
// `verify` decides the sampled case (tests pass deliberately wrong verifiers to show that the
// distribution test would catch them).
using VerifyFunction = VerifyOutcome (*)(std::span<const std::vector<float>>,
                                         std::span<const std::vector<float>>,
                                         std::span<const int32_t>, const RngKey&);
GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request,
                                   const SpeculativeOptions& options, SpeculativeStats* stats,
                                   VerifyFunction verify = VerifySampled);
// With a fixed draft length.
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
