#include "draft/proposer.h"

#include "verify/verify.h"

namespace specd {

int32_t DrawDraftToken(const DraftInput& in, int i, std::span<const float> row, Proposal* out) {
  const SamplingParams& sampling = *in.sampling;
  if (sampling.greedy()) return Argmax(row);
  const uint64_t position = static_cast<uint64_t>(in.first_position + i);
  if (in.mode == SpecSampling::kCoupled) {
    // The target's own noise at this position: the draft's Gumbel-max sample agrees with the
    // target's whenever the two distributions put the same token on top of that noise.
    const RngKey key{sampling.seed, in.rng_sequence, position, RngPurpose::kSample};
    return GumbelArgmax(ProcessLogits(row, sampling), key);
  }
  out->probs.push_back(ProcessedProbs(row, sampling));
  const RngKey key{sampling.seed, in.rng_sequence, position, RngPurpose::kDraft};
  return DrawFrom(out->probs.back(), UniformDouble(key));
}

}  // namespace specd
