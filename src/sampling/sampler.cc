#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"

namespace specd {

void ValidateSamplingParams(const SamplingParams& p) {
  SPECD_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f && p.temperature <= 100.0f,
              "--temp must be in [0, 100], got ", p.temperature);
  SPECD_CHECK(p.top_k >= 0, "--top-k must be >= 0 (0 disables it), got ", p.top_k);
  SPECD_CHECK(std::isfinite(p.top_p) && p.top_p > 0.0f && p.top_p <= 1.0f,
              "--top-p must be in (0, 1], got ", p.top_p);
}

int32_t Argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

std::vector<TokenProb> ProcessLogits(std::span<const float> logits, const SamplingParams& params) {
  SPECD_CHECK(!logits.empty(), "cannot sample from an empty vocabulary");
  if (params.greedy()) return {{Argmax(logits), 1.0f}};
  const size_t n = logits.size();
  const double inv_t = 1.0 / params.temperature;
  double max = -std::numeric_limits<double>::infinity();
  for (float l : logits) max = std::max(max, static_cast<double>(l) * inv_t);
  std::vector<TokenProb> all(n);
  std::vector<double> weight(n);
  double total = 0.0;
  for (size_t i = 0; i < n; ++i) {
    weight[i] = std::exp(static_cast<double>(logits[i]) * inv_t - max);
    total += weight[i];
  }
  for (size_t i = 0; i < n; ++i) {
    all[i] = {static_cast<int32_t>(i), static_cast<float>(weight[i] / total)};
  }
  const auto before = [&](const TokenProb& a, const TokenProb& b) {
    return weight[a.token] != weight[b.token] ? weight[a.token] > weight[b.token]
                                              : a.token < b.token;
  };
  size_t keep = n;
  if (params.top_k > 0 && static_cast<size_t>(params.top_k) < n) {
    keep = params.top_k;
    std::partial_sort(all.begin(), all.begin() + keep, all.end(), before);
  } else {
    std::sort(all.begin(), all.end(), before);
  }
  double kept_total = 0.0;
  for (size_t i = 0; i < keep; ++i) kept_total += weight[all[i].token];
  if (params.top_p < 1.0f) {
    double cumulative = 0.0;
    size_t i = 0;
    while (i < keep) {
      cumulative += weight[all[i].token] / kept_total;
      ++i;
      if (cumulative >= params.top_p) break;
    }
    keep = i;
  }
  all.resize(keep);
  double norm = 0.0;
  for (const auto& tp : all) norm += weight[tp.token];
  for (auto& tp : all) tp.prob = static_cast<float>(weight[tp.token] / norm);
  return all;
}

std::vector<float> ProcessedProbs(std::span<const float> logits, const SamplingParams& params) {
  std::vector<float> probs(logits.size(), 0.0f);
  for (const auto& tp : ProcessLogits(logits, params)) probs[tp.token] = tp.prob;
  return probs;
}

int32_t SampleFrom(const std::vector<TokenProb>& kept, double u) {
  SPECD_CHECK(!kept.empty(), "cannot sample from an empty set");
  double cumulative = 0.0;
  for (const auto& tp : kept) {
    cumulative += tp.prob;
    if (u < cumulative) return tp.token;
  }
  return kept.back().token;  // rounding: u fell past the last cumulative sum
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params,
                    const RngKey& key) {
  if (params.greedy()) return Argmax(logits);
  return SampleFrom(ProcessLogits(logits, params), UniformDouble(key));
}

double LogProb(std::span<const float> logits, int32_t token) {
  double max = -std::numeric_limits<double>::infinity();
  for (float l : logits) max = std::max(max, static_cast<double>(l));
  double total = 0.0;
  for (float l : logits) total += std::exp(static_cast<double>(l) - max);
  return static_cast<double>(logits[token]) - max - std::log(total);
}

}  // namespace specd
