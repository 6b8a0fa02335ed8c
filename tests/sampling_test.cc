#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "base/error.h"
#include "base/rng.h"
#include "sampling/sampler.h"

namespace specd {
namespace {

std::set<int32_t> KeptSet(const std::vector<float>& logits, SamplingParams p) {
  std::set<int32_t> s;
  for (const auto& tp : ProcessLogits(logits, p)) s.insert(tp.token);
  return s;
}

// Lower layers name options by field; each edge renders them (the CLI as flags).
TEST(Errors, FieldNamesAreRenderedByTheEdgeAndOtherBracesStay) {
  const auto flag = [](std::string_view f) { return "--" + std::string(f); };
  EXPECT_EQ(RenderFieldNames("{top_k} must be >= 0, got {x} {} {Top} {a-b} {", flag),
            "--top_k must be >= 0, got --x {} {Top} {a-b} {");
  try {
    ValidateSamplingParams({.top_k = -1});
    ADD_FAILURE() << "top_k -1 was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(RenderFieldNames(e.what(), flag).rfind("--top_k must be >= 0", 0), 0u) << e.what();
  }
}

TEST(Sampling, TopKKeepsExactlyTheKMostLikelyWithTiesToLowerIds) {
  const std::vector<float> logits = {1.0f, 5.0f, 3.0f, 5.0f, 2.0f, 3.0f};
  SamplingParams p{1.0f, 3, 1.0f, 0};
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1, 3, 2}));  // 5, 5, then 3 (id 2 < 5)
  p.top_k = 1;
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1}));
  p.top_k = 0;
  EXPECT_EQ(KeptSet(logits, p).size(), 6u);
  p.top_k = 100;
  EXPECT_EQ(KeptSet(logits, p).size(), 6u);
}

TEST(Sampling, TopPKeepsTheShortestPrefixReachingP) {
  // Probabilities 0.5, 0.25, 0.125, 0.125 (logits are logs).
  const std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.25f),
                                     std::log(0.125f)};
  SamplingParams p{1.0f, 0, 0.5f, 0};
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1}));
  p.top_p = 0.6f;
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1, 2}));
  p.top_p = 0.75f;
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1, 2}));
  p.top_p = 0.8f;
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1, 2, 0}));  // tie 0.125: lower id first
  p.top_p = 0.01f;
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1}));  // always at least one
  const auto kept = ProcessLogits(logits, {1.0f, 0, 0.6f, 0});
  EXPECT_NEAR(kept[0].prob, 2.0 / 3.0, 1e-6);  // renormalized
  EXPECT_NEAR(kept[1].prob, 1.0 / 3.0, 1e-6);
}

TEST(Sampling, TopKAppliesBeforeTopP) {
  const std::vector<float> logits = {std::log(0.4f), std::log(0.3f), std::log(0.2f),
                                     std::log(0.1f)};
  // top-k 2 leaves {0.4, 0.3} -> renormalized {0.571, 0.429}; top-p 0.5 then keeps only token 0.
  EXPECT_EQ(KeptSet(logits, {1.0f, 2, 0.5f, 0}), (std::set<int32_t>{0}));
}

TEST(Sampling, TemperatureSharpensAndGreedyIsArgmax) {
  const std::vector<float> logits = {0.0f, 1.0f, 0.5f};
  const auto hot = ProcessedProbs(logits, {2.0f, 0, 1.0f, 0});
  const auto cold = ProcessedProbs(logits, {0.5f, 0, 1.0f, 0});
  EXPECT_GT(cold[1], hot[1]);
  EXPECT_NEAR(hot[0] + hot[1] + hot[2], 1.0, 1e-6);
  EXPECT_EQ(SampleToken(logits, {0.0f, 0, 1.0f, 0}, {}), 1);
  EXPECT_EQ(Argmax(std::vector<float>{3.0f, 7.0f, 7.0f}), 1);
}

// The kept set by the definition: sort everything, cut at k, then at the top-p prefix.
std::set<int32_t> KeptByDefinition(const std::vector<float>& logits, const SamplingParams& p) {
  std::vector<std::pair<double, int32_t>> all;
  double max = -1e300;
  for (float l : logits) max = std::max(max, double(l) / p.temperature);
  for (size_t i = 0; i < logits.size(); ++i) {
    all.push_back({std::exp(double(logits[i]) / p.temperature - max), static_cast<int32_t>(i)});
  }
  std::sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (p.top_k > 0 && p.top_k < static_cast<int>(all.size())) all.resize(p.top_k);
  double total = 0.0;
  for (const auto& [w, t] : all) total += w;
  std::set<int32_t> kept;
  double cumulative = 0.0;
  for (const auto& [w, t] : all) {
    kept.insert(t);
    cumulative += w / total;
    if (p.top_p < 1.0f && cumulative >= p.top_p) break;
  }
  // min-p: at least min_p times the most likely token's weight (1).
  std::erase_if(
      kept, [&](int32_t t) { return std::exp(double(logits[t]) / p.temperature - max) < p.min_p; });
  return kept;
}

TEST(Sampling, KeptSetsMatchTheDefinitionOnALargeVocabulary) {
  // Peaked, flat and in-between distributions over 4096 tokens: the candidate threshold must
  // fall back correctly when few tokens carry little mass.
  for (float spread : {0.01f, 1.0f, 4.0f, 12.0f}) {
    std::vector<float> logits(4096);
    for (int i = 0; i < 4096; ++i) logits[i] = spread * std::sin(i * 2.7f + std::cos(i * 0.3f));
    for (SamplingParams p : {SamplingParams{1.0f, 0, 0.95f, 0}, SamplingParams{0.2f, 0, 0.95f, 0},
                             SamplingParams{1.0f, 40, 1.0f, 0}, SamplingParams{0.7f, 50, 0.9f, 0},
                             SamplingParams{1.5f, 3000, 0.99f, 0}}) {
      EXPECT_EQ(KeptSet(logits, p), KeptByDefinition(logits, p))
          << "spread " << spread << " t " << p.temperature << " k " << p.top_k << " p " << p.top_p;
      for (float min_p : {0.001f, 0.05f, 0.3f}) {
        SamplingParams with_min_p = p;
        with_min_p.min_p = min_p;
        EXPECT_EQ(KeptSet(logits, with_min_p), KeptByDefinition(logits, with_min_p))
            << "spread " << spread << " t " << p.temperature << " k " << p.top_k << " p " << p.top_p
            << " min-p " << min_p;
      }
    }
  }
}

TEST(Sampling, TruncatedSetsAreListedByProbabilityAndWholeOnesById) {
  // A vocabulary of SmolLM2's size, flat enough that top-p 0.95 keeps thousands of tokens: the
  // sampler sorts only as much of it as the kept prefix needs, over several rounds.
  constexpr int kVocab = 49152;
  std::vector<float> logits(kVocab);
  for (int i = 0; i < kVocab; ++i) logits[i] = 0.5f * std::sin(i * 1.3f) + 0.002f * (i % 97);
  for (SamplingParams p : {SamplingParams{1.0f, 0, 0.95f, 0}, SamplingParams{1.0f, 0, 0.3f, 0},
                           SamplingParams{0.05f, 0, 0.9f, 0}, SamplingParams{1.0f, 500, 0.8f, 0}}) {
    const std::vector<TokenProb> kept = ProcessLogits(logits, p);
    EXPECT_EQ(KeptSet(logits, p), KeptByDefinition(logits, p))
        << "t " << p.temperature << " k " << p.top_k << " p " << p.top_p;
    ASSERT_GT(kept.size(), 1u);
    for (size_t i = 1; i < kept.size(); ++i) {
      const auto& [a, b] = std::pair(kept[i - 1], kept[i]);
      // (Probabilities are rounded to float: unequal weights may share one.)
      ASSERT_TRUE(a.prob >= b.prob && (logits[a.token] != logits[b.token] || a.token < b.token))
          << "t " << p.temperature << " p " << p.top_p << ": place " << i << " token " << b.token
          << " (" << b.prob << ") after token " << a.token << " (" << a.prob << ")";
    }
  }
  // Nothing cut: every token, in id order, probabilities summing to one.
  const std::vector<TokenProb> all = ProcessLogits(logits, {1.0f, 0, 1.0f, 0});
  ASSERT_EQ(all.size(), static_cast<size_t>(kVocab));
  double total = 0.0;
  for (int i = 0; i < kVocab; ++i) {
    ASSERT_EQ(all[i].token, i);
    total += all[i].prob;
  }
  EXPECT_NEAR(total, 1.0, 1e-4);
}

// Gumbel-max by its definition: every kept token scored, log p - log(-log u).
int32_t GumbelArgmaxByDefinition(const std::vector<TokenProb>& kept, const RngKey& key) {
  int32_t best_token = -1;
  double best = -std::numeric_limits<double>::infinity();
  for (const TokenProb& tp : kept) {
    if (tp.prob <= 0.0f) continue;
    const uint32_t word = Philox4x32(key, static_cast<uint32_t>(tp.token) / 4)[tp.token % 4];
    const double u = (static_cast<double>(word) + 0.5) / 4294967296.0;
    const double score = std::log(static_cast<double>(tp.prob)) - std::log(-std::log(u));
    if (score > best || (score == best && tp.token < best_token)) {
      best = score;
      best_token = tp.token;
    }
  }
  return best_token;
}

TEST(Sampling, GumbelArgmaxSkipsOnlyTokensThatCannotWin) {
  // Whole vocabularies (id order) and truncated sets (probability order), peaked to flat, many
  // keys: the sampler's pruned search picks the token the definition picks, every time.
  constexpr int kVocab = 8192;
  for (float spread : {0.3f, 3.0f, 12.0f}) {
    std::vector<float> logits(kVocab);
    for (int i = 0; i < kVocab; ++i) logits[i] = spread * std::sin(i * 0.77f + std::cos(i * 0.1f));
    for (SamplingParams p : {SamplingParams{1.0f, 0, 1.0f, 0}, SamplingParams{0.6f, 0, 0.95f, 0},
                             SamplingParams{1.0f, 50, 1.0f, 0}}) {
      const std::vector<TokenProb> kept = ProcessLogits(logits, p);
      for (uint64_t position = 0; position < 200; ++position) {
        const RngKey key{7, 3, position, RngPurpose::kSample};
        ASSERT_EQ(GumbelArgmax(kept, key), GumbelArgmaxByDefinition(kept, key))
            << "spread " << spread << " top-p " << p.top_p << " top-k " << p.top_k << " position "
            << position;
      }
    }
  }
}

TEST(Sampling, MinPKeepsTokensAtLeastThatShareOfTheMostLikely) {
  // Probabilities 0.5, 0.25, 0.125, 0.125: min-p 0.25 keeps >= 0.125, 0.3 keeps >= 0.15.
  const std::vector<float> logits = {std::log(0.125f), std::log(0.5f), std::log(0.25f),
                                     std::log(0.125f)};
  SamplingParams p{1.0f, 0, 1.0f, 0};
  p.min_p = 0.25f;
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{0, 1, 2, 3}));
  p.min_p = 0.3f;
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1, 2}));
  p.min_p = 1.0f;
  EXPECT_EQ(KeptSet(logits, p), (std::set<int32_t>{1}));
}

TEST(Sampling, RepeatPenaltyDividesPositiveAndMultipliesNegativeLogitsOnce) {
  std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f};
  const std::vector<int32_t> recent = {0, 1, 0, 0};  // token 0 three times: penalized once
  PenalizeRepeats(logits, recent, 2.0f);
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
  PenalizeRepeats(logits, recent, 1.0f);  // off
  EXPECT_EQ(logits, (std::vector<float>{1.0f, -2.0f, 0.5f, 3.0f}));
}

TEST(Sampling, ArgmaxIsTheFirstMaximumAtAnyPosition) {
  // Sizes around the 64-wide blocks of the vectorized search; the maximum placed everywhere,
  // sometimes twice (the first one wins).
  for (int n : {1, 63, 64, 65, 200, 4096}) {
    for (int at = 0; at < n; at += std::max(1, n / 17)) {
      std::vector<float> x(n);
      for (int i = 0; i < n; ++i) x[i] = std::sin(i * 1.3f);  // all < 2
      x[at] = 2.0f;
      if (at + 5 < n) x[at + 5] = 2.0f;
      EXPECT_EQ(Argmax(x), at) << "n " << n;
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(Argmax(std::vector<float>{nan, 1.0f, nan, 3.0f}), 3);  // NaN never wins
  EXPECT_EQ(Argmax(std::vector<float>{nan, nan}), 0);
}

TEST(Sampling, SeededSamplingReproducesAndStreamsDiffer) {
  std::vector<float> logits(50);
  for (int i = 0; i < 50; ++i) logits[i] = std::sin(i * 0.7f) * 2;
  const SamplingParams p{1.0f, 0, 1.0f, 99};
  std::vector<int32_t> a, b, c;
  for (uint64_t pos = 0; pos < 200; ++pos) {
    a.push_back(SampleToken(logits, p, {99, 0, pos, RngPurpose::kSample}));
    b.push_back(SampleToken(logits, p, {99, 0, pos, RngPurpose::kSample}));
    c.push_back(SampleToken(logits, p, {99, 1, pos, RngPurpose::kSample}));
  }
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  EXPECT_NE(UniformDouble({1, 0, 0, RngPurpose::kDraft}),
            UniformDouble({1, 0, 0, RngPurpose::kAccept}));
}

TEST(Sampling, SamplesFollowTheProcessedDistribution) {
  // Chi-square goodness of fit of 20000 draws against the processed probabilities.
  const std::vector<float> logits = {0.1f, 1.2f, -0.3f, 0.8f, 2.0f, -1.0f};
  const SamplingParams p{0.8f, 5, 0.97f, 3};
  const auto probs = ProcessedProbs(logits, p);
  std::map<int32_t, int> counts;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    ++counts[SampleToken(logits, p, {3, 0, static_cast<uint64_t>(i), RngPurpose::kSample})];
  }
  double chi2 = 0;
  int dof = -1;
  for (size_t t = 0; t < probs.size(); ++t) {
    if (probs[t] == 0) {
      EXPECT_EQ(counts[t], 0) << "token " << t << " is outside the kept set";
      continue;
    }
    const double expected = probs[t] * n;
    chi2 += (counts[t] - expected) * (counts[t] - expected) / expected;
    ++dof;
  }
  ASSERT_EQ(dof, 4);       // 5 kept tokens (top-k drops the least likely)
  EXPECT_LT(chi2, 18.47);  // chi-square critical value, 4 dof, p = 0.001
}

TEST(Sampling, InvalidParametersAreRejected) {
  EXPECT_THROW(ValidateSamplingParams({-1.0f, 0, 1.0f, 0}), Error);
  EXPECT_THROW(ValidateSamplingParams({NAN, 0, 1.0f, 0}), Error);
  EXPECT_THROW(ValidateSamplingParams({1.0f, -2, 1.0f, 0}), Error);
  EXPECT_THROW(ValidateSamplingParams({1.0f, 0, 0.0f, 0}), Error);
  EXPECT_THROW(ValidateSamplingParams({1.0f, 0, 1.5f, 0}), Error);
  EXPECT_NO_THROW(ValidateSamplingParams({0.0f, 0, 1.0f, 0}));
}

TEST(Rng, PhiloxKnownAnswer) {
  // Random123's published known-answer vectors for Philox4x32-10 (its tests/kat_vectors).
  EXPECT_EQ(Philox4x32Block({0, 0, 0, 0}, {0, 0}),
            (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(
      Philox4x32Block({0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff}),
      (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(
      Philox4x32Block({0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0}),
      (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

TEST(Rng, PhiloxBlocksInBulkAreTheBlocksOneByOne) {
  // Runs of every length around the sixteen-block vector path, from counters near wrap-around.
  const RngKey key{0x1234567890abcdefull, 77, (uint64_t{1} << 40) + 5, RngPurpose::kSample};
  for (uint32_t first : {0u, 3u, 0xfffffff0u}) {
    for (int64_t n : {1, 15, 16, 17, 33, 100}) {
      std::vector<uint32_t> words(4 * n);
      Philox4x32Blocks(key, first, n, words.data());
      for (int64_t b = 0; b < n; ++b) {
        const auto block = Philox4x32(key, first + static_cast<uint32_t>(b));
        for (int w = 0; w < 4; ++w) {
          ASSERT_EQ(words[4 * b + w], block[w])
              << "first " << first << " n " << n << " block " << b;
        }
      }
    }
  }
}

TEST(Rng, PhiloxDrawsAreKeyedAndUniform) {
  // Same key and counter always give the same words; a different index changes all four.
  const RngKey key{12345, 6, 7, RngPurpose::kSample};
  const auto a = Philox4x32(key, 0), b = Philox4x32(key, 0), c = Philox4x32(key, 1);
  EXPECT_EQ(a, b);
  for (int i = 0; i < 4; ++i) EXPECT_NE(a[i], c[i]);
  double mean = 0;
  for (uint32_t i = 0; i < 10000; ++i) mean += UniformDouble(key, i);
  EXPECT_NEAR(mean / 10000, 0.5, 0.01);
}

}  // namespace
}  // namespace specd

namespace specd {
namespace {

// The one-pass top-n against sorting everything: ties to the lower id, NaN last, log-softmax
// values (LogProb's); and GumbelTop's first token is GumbelArgmax's.
TEST(Sampling, TopLogProbsAndGumbelTopMatchTheirDefinitions) {
  std::vector<float> logits(3000);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>((i * 7919) % 97) / 10;
  logits[5] = std::numeric_limits<float>::quiet_NaN();
  logits[17] = -std::numeric_limits<float>::infinity();
  double total = 0;
  float max = -1e30f;
  for (float l : logits) max = std::isnan(l) ? max : std::max(max, l);
  for (float l : logits) total += std::isnan(l) ? 0.0 : std::exp(double{l} - max);
  std::vector<int32_t> ids(logits.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
  auto key = [&](int32_t i) { return std::isnan(logits[i]) ? -1e30f : logits[i]; };
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return key(a) > key(b); });
  for (int n : {1, 5, 40}) {
    const auto top = TopLogProbs(logits, n);
    ASSERT_EQ(top.size(), static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      EXPECT_EQ(top[i].first, ids[i]) << "n " << n << " rank " << i;
      EXPECT_NEAR(top[i].second, logits[ids[i]] - max - std::log(total), 1e-4);
      EXPECT_EQ(static_cast<float>(LogProb(logits, ids[i])), top[i].second);
    }
  }
  std::vector<TokenProb> kept;
  for (int32_t t = 0; t < 50; ++t) kept.push_back({t, 0.02f});
  const RngKey key_g{3, 1, 9, RngPurpose::kSample};
  const std::vector<int32_t> gumbel = GumbelTop(kept, key_g, 4);
  ASSERT_EQ(gumbel.size(), 4u);
  EXPECT_EQ(gumbel[0], GumbelArgmax(kept, key_g));
  EXPECT_EQ(std::set<int32_t>(gumbel.begin(), gumbel.end()).size(), 4u);
}

}  // namespace
}  // namespace specd
