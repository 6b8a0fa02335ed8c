#include "draft/proposer.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "verify/verify.h"

namespace specd {

namespace {
int32_t DrawUnconstrained(const DraftInput& in, int i, std::span<const float> row, Proposal* out) {
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

}  // namespace

int32_t DrawDraftToken(const DraftInput& in, int i, std::span<const float> row, Proposal* out) {
  if (in.constraint == nullptr) return DrawUnconstrained(in, i, row, out);
  std::vector<float> masked(row.begin(), row.end());  // [n_vocab]
  in.constraint->Mask(masked);
  if (!AnyAllowed(masked)) return kNoDraft;
  const size_t n_probs = out->probs.size();
  const int32_t token = DrawUnconstrained(in, i, masked, out);
  if (!in.constraint->Advance(token)) {  // cannot happen for a token of the masked row
    out->probs.resize(n_probs);
    return kNoDraft;
  }
  return token;
}

std::vector<std::pair<int32_t, float>> RankedDraftTokens(const DraftInput& in, int i,
                                                         std::span<const float> row, int width) {
  if (in.sampling->greedy()) return TopLogProbs(row, width);
  const std::vector<TokenProb> kept = ProcessLogits(row, *in.sampling);
  const RngKey key{in.sampling->seed, in.rng_sequence, static_cast<uint64_t>(in.first_position + i),
                   RngPurpose::kSample};
  std::vector<std::pair<int32_t, float>> ranked;
  for (int32_t token : GumbelTop(kept, key, width)) {
    float prob = 0.0f;
    for (const TokenProb& tp : kept) prob = tp.token == token ? tp.prob : prob;
    ranked.emplace_back(token, std::log(std::max(prob, 1e-30f)));
  }
  return ranked;
}

std::optional<std::pair<int, int>> ParseNumberPair(const std::string& text, int max_first,
                                                   int max_second) {
  auto number = [](const std::string& part, int max) -> int {
    size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(part, &used);
    } catch (const std::exception&) {
      return -1;
    }
    return used == part.size() && value >= 1 && value <= max ? value : -1;
  };
  const size_t comma = text.find(',');
  const int first = number(text.substr(0, comma), max_first);
  const int second = comma == std::string::npos ? 0 : number(text.substr(comma + 1), max_second);
  if (first < 0 || second < 0) return std::nullopt;
  return std::pair{first, second};
}

}  // namespace specd
