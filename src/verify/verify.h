// Verification of drafted tokens, as pure functions over probability vectors (no model, no KV).
//
// Speculative sampling (Leviathan et al. 2023; Chen et al. 2023), with p the target's processed
// distribution and q the draft's (the same temperature / top-k / top-p applied to both):
//   draft token d_i is accepted with probability min(1, p_i(d_i) / q_i(d_i));
//   at the first rejection the token is drawn instead from the residual norm(max(0, p_i - q_i));
//   if all K drafts are accepted, a bonus token is drawn from p_K.
// The tokens that come out are distributed exactly as samples from p alone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/rng.h"

namespace specd {

struct VerifyOutcome {
  int n_accepted = 0;  // drafts kept
  int32_t next = -1;   // the recovered token (after a rejection) or the bonus token
  bool bonus = false;  // true when all drafts were accepted
};

// The residual distribution norm(max(0, p - q)); if p == q (nothing left), returns p.
std::vector<float> Residual(std::span<const float> p, std::span<const float> q);

// Draws a token from a probability vector with a uniform number u in [0, 1).
int32_t DrawFrom(std::span<const float> probs, double u);

// q with `token` removed and the rest renormalized: the distribution of the next of a node's
// children when they are drawn without replacement. All zeros when nothing is left.
std::vector<float> WithoutToken(std::span<const float> q, int32_t token);

// target_probs: K + 1 rows of p (the last for the bonus token); draft_probs: K rows of q;
// drafted: K tokens. Random draws use `key` with purposes kAccept / kResidual / kBonus and the
// draft position as the index, so every decision reproduces.
VerifyOutcome VerifySampled(std::span<const std::vector<float>> target_probs,
                            std::span<const std::vector<float>> draft_probs,
                            std::span<const int32_t> drafted, const RngKey& key);

}  // namespace specd
