#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "base/error.h"
#include "base/vector_clones.h"

namespace specd {

void ValidateSamplingParams(const SamplingParams& p) {
  SPECD_CHECK(std::isfinite(p.temperature) && p.temperature >= 0.0f && p.temperature <= 100.0f,
              "{temperature} must be in [0, 100], got ", p.temperature);
  SPECD_CHECK(p.top_k >= 0, "{top_k} must be >= 0 (0 disables it), got ", p.top_k);
  SPECD_CHECK(std::isfinite(p.top_p) && p.top_p > 0.0f && p.top_p <= 1.0f,
              "{top_p} must be in (0, 1], got ", p.top_p);
  SPECD_CHECK(std::isfinite(p.min_p) && p.min_p >= 0.0f && p.min_p <= 1.0f,
              "{min_p} must be in [0, 1] (0 disables it), got ", p.min_p);
  SPECD_CHECK(
      std::isfinite(p.repeat_penalty) && p.repeat_penalty > 0.0f && p.repeat_penalty <= 100.0f,
      "{repeat_penalty} must be in (0, 100] (1 disables it), got ", p.repeat_penalty);
  SPECD_CHECK(p.repeat_last_n >= -1,
              "{repeat_last_n} must be >= -1 (-1: the whole history, 0: none), got ",
              p.repeat_last_n);
}

void PenalizeRepeats(std::span<float> logits, std::span<const int32_t> recent, float penalty) {
  if (penalty == 1.0f || recent.empty()) return;
  std::vector<int32_t> distinct(recent.begin(), recent.end());
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  for (int32_t t : distinct) {
    if (t < 0 || static_cast<size_t>(t) >= logits.size()) continue;
    float& x = logits[t];
    x = x > 0.0f ? x / penalty : x * penalty;
  }
}

namespace {

// exp(x) in float, branch-free so that the loops below vectorize (one clone per ISA): x = n ln2
// + r, a degree-6 polynomial for exp(r), 2^n built in the exponent bits. Relative error ~2e-7;
// below -87 the result is exactly 0.
inline float FastExp(float x) {
  // Written so that NaN clamps to -87 (a float-to-int conversion of NaN is undefined).
  const float low_clamped = x > -87.0f ? x : -87.0f;
  const float clamped = low_clamped < 88.0f ? low_clamped : 88.0f;
  const float t = clamped * 1.44269504088896341f;
  const float n = (t + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23 trick)
  float r = clamped - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + (r + 1.0f);
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return x < -87.0f ? 0.0f : p * scale;
}

// weights[i] = exp(logits[i] * inv_t - max); returns their sum.
SPECD_VECTOR_CLONES double ExpWeights(const float* logits, int64_t n, float inv_t, float max,
                                      float* weights) {
  float partial[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) {
      weights[i + j] = FastExp(logits[i + j] * inv_t - max);
      partial[j] += weights[i + j];
    }
  }
  double total = 0.0;
  for (; i < n; ++i) total += (weights[i] = FastExp(logits[i] * inv_t - max));
  for (float v : partial) total += v;
  return total;
}

// The sum ExpWeights returns, in its order, without storing the weights: a token's log-probability
// needs only the sum, and a vocabulary-sized buffer per call (196 KB for 49152 tokens: an mmap,
// page faults and an munmap each time) cost more than the exponentials.
SPECD_VECTOR_CLONES double SumExp(const float* logits, int64_t n, float inv_t, float max) {
  float partial[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int j = 0; j < 16; ++j) partial[j] += FastExp(logits[i + j] * inv_t - max);
  }
  double total = 0.0;
  for (; i < n; ++i) total += FastExp(logits[i] * inv_t - max);
  for (float v : partial) total += v;
  return total;
}

// 16 running maxima in two 8-float vectors (GCC's vector extension: every clone gets its own
// compare-and-blend; written as a loop over 16 floats, GCC kept the AVX2 clone scalar). Lane j
// holds the maximum of elements j mod 16, each kept as (v > m ? v : m), so NaNs are skipped.
SPECD_VECTOR_CLONES float MaxScaled(const float* logits, int64_t n, float inv_t) {
  typedef float Float8 __attribute__((vector_size(32)));
  constexpr float kLowest = -std::numeric_limits<float>::infinity();
  Float8 lane[2] = {{kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest},
                    {kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest, kLowest}};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int h = 0; h < 2; ++h) {
      Float8 v;
      std::memcpy(&v, logits + i + 8 * h, sizeof(v));
      v *= inv_t;
      lane[h] = v > lane[h] ? v : lane[h];
    }
  }
  float max = kLowest;
  for (; i < n; ++i) max = std::max(max, logits[i] * inv_t);
  for (const Float8& half : lane) {
    for (int j = 0; j < 8; ++j) max = std::max(max, half[j]);
  }
  return max;
}

// Index of the first element equal to `value`, or -1.
SPECD_VECTOR_CLONES int64_t FindFirst(const float* x, int64_t n, float value) {
  // Blocks of 64 compare without branches (vectorized); the block holding it is then scanned.
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    int hits = 0;
    for (int j = 0; j < 64; ++j) hits += x[i + j] == value;
    if (hits != 0) break;
  }
  for (; i < n; ++i) {
    if (x[i] == value) return i;
  }
  return -1;
}

// Sorts the first elements of order[0, count) by `before` until they hold at least `mass`
// (with a margin over the rounding of summing in another order) or all of them, and returns how
// many are sorted; the rest stay after them, unsorted. A flat distribution's top-p set may be
// thousands of tokens out of tens of thousands of candidates: only its top needs sorting.
template <typename Before>
int64_t SortTopReaching(std::vector<int32_t>& order, int64_t count, const float* weight,
                        double mass, Before before) {
  constexpr int64_t kFirstTop = 256;
  const double enough = mass * (1.0 + 1e-9);
  int64_t top = 0;
  double top_mass = 0.0;
  for (int64_t end = kFirstTop;; end *= 4) {
    if (end >= count) {
      end = count;
    } else {
      std::nth_element(order.begin() + top, order.begin() + end, order.begin() + count, before);
    }
    for (int64_t i = top; i < end; ++i) top_mass += weight[order[i]];
    top = end;
    if (top == count || top_mass >= enough) break;
  }
  std::sort(order.begin(), order.begin() + top, before);
  return top;
}

}  // namespace

int32_t Argmax(std::span<const float> logits) {
  // Two vectorized passes (the maximum, then its first position) instead of a dependent
  // compare chain: ties still go to the lowest id.
  const int64_t n = static_cast<int64_t>(logits.size());
  const int64_t at = FindFirst(logits.data(), n, MaxScaled(logits.data(), n, 1.0f));
  return at < 0 ? 0 : static_cast<int32_t>(at);  // -1: no comparable value (all NaN)
}

namespace {

// ProcessLogits' working set: weights exp((logit - max) / T) in [0, 1], the most likely 1.
struct Weights {
  std::vector<float> weight;  // [n_vocab]
  double total = 0.0;
  // The kept order: by weight, ties by the lower id.
  bool Before(int32_t a, int32_t b) const {
    return weight[a] != weight[b] ? weight[a] > weight[b] : a < b;
  }
};

// The candidates the kept set lies among: order[0, keep) (top-k's k of them selected first)
// with kept_total the mass top-p is relative to.
struct Candidates {
  std::vector<int32_t> order;
  int64_t keep = 0;
  double kept_total = 0.0;
};

// Candidates: tokens whose weight reaches a threshold. Every other token weighs strictly less
// than every candidate, so when the candidates hold k tokens (top-k) and enough mass (top-p),
// the kept set lies among them and only they need sorting. Otherwise the threshold drops, down
// to 0 (every token). With min-p no token below min_p is ever kept: the candidates are complete
// at that threshold.
Candidates SelectCandidates(const Weights& w, const SamplingParams& params) {
  const int64_t n = static_cast<int64_t>(w.weight.size());
  const auto before = [&w](int32_t a, int32_t b) { return w.Before(a, b); };
  const bool top_k = params.top_k > 0 && params.top_k < n;
  const bool top_p = params.top_p < 1.0f;
  const bool min_p = params.min_p > 0.0f;
  float threshold = min_p ? params.min_p : top_k || top_p ? 1e-3f : 0.0f;
  Candidates c;
  c.order.reserve(n);
  for (;;) {
    c.order.clear();
    for (int64_t i = 0; i < n; ++i) {
      if (w.weight[i] >= threshold) c.order.push_back(static_cast<int32_t>(i));
    }
    const int64_t count = static_cast<int64_t>(c.order.size());
    bool enough = true;
    c.keep = count;
    c.kept_total = w.total;
    if (top_k) {
      enough = count >= params.top_k || min_p;
      if (count >= params.top_k) {
        c.keep = params.top_k;
        std::nth_element(c.order.begin(), c.order.begin() + c.keep - 1, c.order.end(), before);
        c.kept_total = 0.0;
        for (int64_t i = 0; i < c.keep; ++i) c.kept_total += w.weight[c.order[i]];
      }
    }
    if (enough && top_p && threshold > 0.0f && !min_p) {
      double mass = 0.0;
      for (int64_t i = 0; i < c.keep; ++i) mass += w.weight[c.order[i]];
      enough = mass >= params.top_p * c.kept_total;
    }
    if (enough || threshold == 0.0f || min_p) break;
    threshold = threshold < 1e-30f ? 0.0f : threshold * 1e-4f;
  }
  // Top-p's mass is over the top-k set (or everything), candidates below the threshold too.
  if (top_k && c.keep < params.top_k) {
    std::vector<float> rest(w.weight);
    std::nth_element(rest.begin(), rest.begin() + params.top_k - 1, rest.end(), std::greater<>());
    c.kept_total = 0.0;
    for (int64_t i = 0; i < params.top_k; ++i) c.kept_total += rest[i];
  }
  return c;
}

// Sorts the candidates' top and returns the length of the shortest sorted prefix whose mass
// reaches top_p of kept_total (at least 1).
int64_t TopPKeep(const Weights& w, float top_p, Candidates& c) {
  const auto before = [&w](int32_t a, int32_t b) { return w.Before(a, b); };
  const double target = top_p * c.kept_total;
  const int64_t sorted = SortTopReaching(c.order, c.keep, w.weight.data(), target, before);
  double cumulative = 0.0;
  int64_t i = 0;
  while (i < sorted && cumulative < target) cumulative += w.weight[c.order[i++]];
  if (cumulative < target && sorted < c.keep) {
    // The sorted top's mass, summed in another order, fell short by rounding: sort it all.
    std::sort(c.order.begin(), c.order.begin() + c.keep, before);
    while (i < c.keep && cumulative < target) cumulative += w.weight[c.order[i++]];
  }
  return std::max<int64_t>(i, 1);
}

}  // namespace

std::vector<TokenProb> ProcessLogits(std::span<const float> logits, const SamplingParams& params) {
  SPECD_CHECK(!logits.empty(), "cannot sample from an empty vocabulary");
  if (params.greedy()) return {{Argmax(logits), 1.0f}};
  const int64_t n = static_cast<int64_t>(logits.size());
  const float inv_t = 1.0f / params.temperature;
  Weights w;
  w.weight.resize(n);
  const float max = MaxScaled(logits.data(), n, inv_t);
  w.total = ExpWeights(logits.data(), n, inv_t, max, w.weight.data());
  SPECD_CHECK(std::isfinite(max) && std::isfinite(w.total) && w.total > 0.0,
              "the model's logits are not finite numbers (NaN or infinity): the model file is "
              "probably damaged");
  Candidates c = SelectCandidates(w, params);
  if (params.top_p < 1.0f) {
    c.keep = TopPKeep(w, params.top_p, c);
  } else if ((params.top_k > 0 && params.top_k < n) || params.min_p > 0.0f) {
    std::sort(c.order.begin(), c.order.begin() + c.keep,
              [&w](int32_t a, int32_t b) { return w.Before(a, b); });
  }
  // Otherwise every token is kept, in id order: sorting a whole vocabulary (~5 ms for 49152
  // tokens) for every sampled token would cost more than the model's forward at batch 1.
  if (params.min_p > 0.0f) {
    // Weights are relative to the most likely token's (1), which is always kept.
    int64_t i = 1;
    while (i < c.keep && w.weight[c.order[i]] >= params.min_p) ++i;
    c.keep = i;
  }
  std::vector<TokenProb> kept(c.keep);
  double norm = 0.0;
  for (int64_t i = 0; i < c.keep; ++i) norm += w.weight[c.order[i]];
  for (int64_t i = 0; i < c.keep; ++i) {
    kept[i] = {c.order[i], static_cast<float>(w.weight[c.order[i]] / norm)};
  }
  return kept;
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

namespace {

// G(word) = -log(-log(u)), u = (word + 0.5) / 2^32 in (0, 1): the Gumbel noise of a token.
double GumbelNoise(uint32_t word) {
  const double u = (static_cast<double>(word) + 0.5) / 4294967296.0;
  return -std::log(-std::log(u));
}

// The Philox words of a key for the tokens of a kept set. A whole vocabulary in id order
// (nothing cut) has them all drawn at once, vectorized; otherwise one block of four tokens at a
// time, each drawn once while consecutive tokens share it.
class GumbelWords {
 public:
  GumbelWords(const RngKey& key, const std::vector<TokenProb>& kept) : key_(key) {
    const int64_t n = static_cast<int64_t>(kept.size());
    if (n >= 64 && kept.front().token == 0 && kept.back().token == n - 1) {
      whole_.resize((n + 3) / 4 * 4);
      Philox4x32Blocks(key, 0, (n + 3) / 4, whole_.data());
    }
  }
  uint32_t operator()(int32_t token) {
    if (!whole_.empty()) return whole_[token];
    const uint32_t block = static_cast<uint32_t>(token) / 4;
    if (!valid_ || block != block_) {
      words_ = Philox4x32(key_, block);
      block_ = block;
      valid_ = true;
    }
    return words_[token % 4];
  }

 private:
  RngKey key_;
  std::vector<uint32_t> whole_;  // [vocabulary rounded up to 4], when the set is whole
  std::array<uint32_t, 4> words_{};
  uint32_t block_ = 0;
  bool valid_ = false;
};

// log(p) + G(key, token): the score Gumbel-max ranks tokens by.
double GumbelScore(const TokenProb& tp, GumbelWords& words) {
  return std::log(static_cast<double>(tp.prob)) + GumbelNoise(words(tp.token));
}

}  // namespace

int32_t GumbelArgmax(const std::vector<TokenProb>& kept, const RngKey& key) {
  SPECD_CHECK(!kept.empty(), "cannot sample from an empty set");
  GumbelWords words(key, kept);
  // Token t beats the best score s only if -log(u_t) < p_t e^-s; as -log(u) >= 1 - u, a token
  // with 1 - u_t above p_t e^-s (by a margin for rounding) cannot, and needs no logarithm. No
  // 1 - u is below 0.5 / 2^32, so a token of probability under 2^-33 e^s needs no noise either.
  constexpr double kMargin = 1.0 + 1e-6;
  constexpr double kMinOneMinusU = 0.5 / 4294967296.0;
  int32_t best_token = -1;
  double best = -std::numeric_limits<double>::infinity();
  double scale = std::numeric_limits<double>::infinity();  // e^-best
  float cannot_win_below = 0.0f;
  for (const auto& tp : kept) {
    if (tp.prob <= 0.0f || tp.prob < cannot_win_below) continue;
    const uint32_t word = words(tp.token);
    const double one_minus_u = (4294967296.0 - static_cast<double>(word) - 0.5) / 4294967296.0;
    if (one_minus_u > static_cast<double>(tp.prob) * scale * kMargin) continue;
    const double score = std::log(static_cast<double>(tp.prob)) + GumbelNoise(word);
    if (score > best || (score == best && tp.token < best_token)) {
      best = score;
      best_token = tp.token;
      scale = std::exp(-best);
      // Rounded down to a float, so that no token that might win is skipped.
      const double bound = kMinOneMinusU / (scale * kMargin);
      float as_float = static_cast<float>(bound);
      if (static_cast<double>(as_float) > bound) as_float = std::nextafter(as_float, 0.0f);
      cannot_win_below = as_float;
    }
  }
  return best_token >= 0 ? best_token : kept.front().token;
}

std::vector<int32_t> GumbelTop(const std::vector<TokenProb>& kept, const RngKey& key, int n) {
  GumbelWords words(key, kept);
  std::vector<std::pair<double, int32_t>> scored;
  for (const auto& tp : kept) {
    if (tp.prob > 0.0f) scored.emplace_back(GumbelScore(tp, words), tp.token);
  }
  n = std::min(n, static_cast<int>(scored.size()));
  // Best score first, ties to the lower token id (as GumbelArgmax).
  std::partial_sort(scored.begin(), scored.begin() + n, scored.end(), [](auto& a, auto& b) {
    return a.first > b.first || (a.first == b.first && a.second < b.second);
  });
  std::vector<int32_t> top;
  for (int i = 0; i < n; ++i) top.push_back(scored[i].second);
  return top;
}

int32_t SampleToken(std::span<const float> logits, const SamplingParams& params,
                    const RngKey& key) {
  if (params.greedy()) return Argmax(logits);
  const std::vector<TokenProb> kept = ProcessLogits(logits, params);
  if (params.method == SamplingMethod::kGumbel) return GumbelArgmax(kept, key);
  return SampleFrom(kept, UniformDouble(key));
}

double LogProb(std::span<const float> logits, int32_t token) {
  const int64_t n = static_cast<int64_t>(logits.size());
  const float max = MaxScaled(logits.data(), n, 1.0f);
  const double total = SumExp(logits.data(), n, 1.0f, max);
  return static_cast<double>(logits[token]) - max - std::log(total);
}

std::vector<std::pair<int32_t, float>> TopLogProbs(std::span<const float> logits, int n) {
  const int64_t v = static_cast<int64_t>(logits.size());
  n = static_cast<int>(std::min<int64_t>(std::max(n, 0), v));
  if (n == 0) return {};
  const float max = MaxScaled(logits.data(), v, 1.0f);
  const double log_total = std::log(SumExp(logits.data(), v, 1.0f, max));
  // One pass keeping the n best, best first; NaN ranks last and ties go to the lower id, so the
  // order is strict.
  const auto key = [&](int32_t i) {
    return std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
  };
  const auto before = [&](int32_t a, int32_t b) {
    return key(a) != key(b) ? key(a) > key(b) : a < b;
  };
  std::vector<int32_t> best;
  best.reserve(n + 1);
  float worst = 0.0f;  // key of best.back() once n are kept
  for (int32_t i = 0; i < v; ++i) {
    // Full: only a strictly larger logit gets in (a later id ties after; NaN compares false).
    if (static_cast<int>(best.size()) == n && !(logits[i] > worst)) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), i, before), i);
    if (static_cast<int>(best.size()) > n) best.pop_back();
    worst = key(best.back());
  }
  std::vector<std::pair<int32_t, float>> top;
  for (int32_t id : best) {
    top.emplace_back(id, static_cast<float>(logits[id] - max - log_total));
  }
  return top;
}

}  // namespace specd
