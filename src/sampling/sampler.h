// Logits -> probabilities -> a token. The processing order (as in Hugging Face and vLLM):
// temperature, softmax, top-k, top-p, renormalize. Temperature 0 means greedy (argmax, ties to
// the lowest token id).
//
// Kept sets, exactly:
//   top-k (k > 0): the k tokens of highest probability; ties at the boundary broken towards
//     lower token ids. k <= 0 or k >= vocabulary keeps everything.
//   top-p (0 < p < 1): after top-k, tokens sorted by probability (desc, ties by id); keep the
//     shortest prefix whose cumulative probability reaches p (at least one token). p >= 1 keeps
//     all.
//   min-p (0 < m <= 1): after top-p, the tokens whose probability is at least m times the
//     largest.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/rng.h"

namespace specd {

// How a token is drawn from the kept set. Inverse CDF uses one uniform number per draw; Gumbel-max
// takes argmax(log p_t + G_t) with one Gumbel number per token id, keyed by (seed, sequence,
// position): the same noise at a position gives the same token for the same distribution, which
// lets a draft and a target share their randomness (coupled speculative sampling).
enum class SamplingMethod { kInverseCdf, kGumbel };

struct SamplingParams {
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  uint64_t seed = 0;
  SamplingMethod method = SamplingMethod::kInverseCdf;
  // After top-p: drop tokens less likely than min_p times the most likely one (0: off).
  float min_p = 0.0f;
  // llama.cpp's repetition penalty, applied to the logits before everything else by whoever
  // holds the history (PenalizeRepeats): 1 is off.
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;  // tokens of history penalized (-1: all of it)

  bool greedy() const { return temperature <= 0.0f; }
};

struct TokenProb {
  int32_t token;
  float prob;
};

// Checks ranges; throws an Error naming the bad parameter.
void ValidateSamplingParams(const SamplingParams& params);

// The kept tokens with their renormalized probabilities, sorted by probability (desc, ties by id)
// when anything was cut, in id order when nothing was. Greedy params give the single argmax token
// with probability 1.
std::vector<TokenProb> ProcessLogits(std::span<const float> logits, const SamplingParams& params);

// The full processed distribution over the vocabulary (zeros outside the kept set).
std::vector<float> ProcessedProbs(std::span<const float> logits, const SamplingParams& params);

// Draws from a kept set with a uniform number u in [0, 1) by inverse CDF.
int32_t SampleFrom(const std::vector<TokenProb>& kept, double u);

// llama.cpp's repetition penalty on one row of logits: every distinct token of `recent` gets
// logit / penalty where the logit is positive, logit * penalty otherwise.
void PenalizeRepeats(std::span<float> logits, std::span<const int32_t> recent, float penalty);

// Argmax with ties to the lowest id.
int32_t Argmax(std::span<const float> logits);

// Gumbel-max over a kept set: argmax of log(prob) + G(key, token), G = -log(-log(U)) with U the
// token's uniform number at `key` (index token / 4, word token % 4). Ties go to the lower id.
int32_t GumbelArgmax(const std::vector<TokenProb>& kept, const RngKey& key);
// The n best tokens by the same Gumbel-max score, best first (the first is GumbelArgmax's).
std::vector<int32_t> GumbelTop(const std::vector<TokenProb>& kept, const RngKey& key, int n);

// One sampling decision: greedy, or drawn with the counter-based RNG at `key` by params.method.
int32_t SampleToken(std::span<const float> logits, const SamplingParams& params, const RngKey& key);

// log softmax(logits)[token] of the raw model distribution (temperature 1, no truncation).
double LogProb(std::span<const float> logits, int32_t token);
// The n tokens of highest log-probability with their log-probabilities, best first (ties: lower
// id first).
std::vector<std::pair<int32_t, float>> TopLogProbs(std::span<const float> logits, int n);

}  // namespace specd
