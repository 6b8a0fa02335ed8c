#include "train/sdsat_data.h"

#include <algorithm>

#include "base/error.h"
#include "base/rng.h"

namespace specd::train {
namespace {

double Uniform(SplitMix64& rng) { return static_cast<double>(rng.Next() >> 11) * 0x1.0p-53; }

SdsatRow EmptyRow(int64_t length) {
  SdsatRow row;
  row.tokens.reserve(length);
  row.positions.reserve(length);
  row.labels.reserve(length);
  row.offsets.assign(length, 0);
  row.visible.assign(length * length, 0);
  return row;
}

}  // namespace

SdsatRow PlainRow(std::span<const int32_t> real, int64_t length) {
  SPECD_CHECK(static_cast<int64_t>(real.size()) >= length + 1, "a plain row of ", length,
              " slots needs ", length + 1, " tokens, got ", real.size());
  SdsatRow row = EmptyRow(length);
  for (int64_t t = 0; t < length; ++t) {
    row.tokens.push_back(real[t]);
    row.positions.push_back(t);
    row.labels.push_back(real[t + 1]);
    std::fill_n(row.visible.begin() + t * length, t + 1, 1);
  }
  return row;
}

SdsatRow MixedRow(std::span<const int32_t> real, int64_t length, const SdsatLayout& layout,
                  uint64_t seed) {
  SPECD_CHECK(layout.max_window >= 1 && layout.max_window <= 64,
              "the adaptive window must be in 1..64, got ", layout.max_window);
  SPECD_CHECK(static_cast<int64_t>(real.size()) >= length + layout.max_window + 1,
              "a mixed row of ", length, " slots needs ", length + layout.max_window + 1,
              " tokens, got ", real.size());
  SplitMix64 rng(Philox4x32({seed, 0, 0, RngPurpose::kDraft}, 0)[0] ^ seed);
  SdsatRow row = EmptyRow(length);
  std::vector<int64_t> real_slots;  // slot of real token p
  for (int64_t p = 0; row.length() < length; ++p) {
    const int64_t slot = row.length();
    real_slots.push_back(slot);
    row.tokens.push_back(real[p]);
    row.positions.push_back(p);
    row.labels.push_back(-1);
    for (int64_t q = 0; q <= p; ++q) row.visible[slot * length + real_slots[q]] = 1;
    if (Uniform(rng) >= layout.window_share) continue;
    const int window = 1 + static_cast<int>(Uniform(rng) * layout.max_window);
    for (int j = 1; j <= window && row.length() < length; ++j) {
      const int64_t a = row.length();
      row.tokens.push_back(layout.adaptive_token);
      row.positions.push_back(p + j);
      row.labels.push_back(real[p + 1 + j]);
      row.offsets[a] = static_cast<int8_t>(j);
      ++row.n_adaptive;
      // The real prefix r[0..p] and this window's tokens up to itself.
      for (int64_t q = 0; q <= p; ++q) row.visible[a * length + real_slots[q]] = 1;
      for (int64_t b = slot + 1; b <= a; ++b) row.visible[a * length + b] = 1;
    }
  }
  return row;
}

std::vector<int32_t> FimReorder(std::span<const int32_t> tokens, FimMode mode, const FimTokens& fim,
                                int64_t cut_a, int64_t cut_b) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (mode == FimMode::kNone) return {tokens.begin(), tokens.end()};
  SPECD_CHECK(fim.ok() && 0 <= cut_a && cut_a <= cut_b && cut_b <= n, "bad FIM cut ", cut_a, " ",
              cut_b, " of ", n);
  const auto prefix = tokens.subspan(0, cut_a), middle = tokens.subspan(cut_a, cut_b - cut_a),
             suffix = tokens.subspan(cut_b);
  std::vector<int32_t> out;
  out.reserve(n + 3);
  auto append = [&](std::span<const int32_t> part) {
    out.insert(out.end(), part.begin(), part.end());
  };
  out.push_back(fim.prefix);
  if (mode == FimMode::kPsm) {
    append(prefix);
    out.push_back(fim.suffix);
    append(suffix);
    out.push_back(fim.middle);
  } else {
    out.push_back(fim.suffix);
    append(suffix);
    out.push_back(fim.middle);
    append(prefix);
  }
  append(middle);
  return out;
}

FimChoice ChooseFim(int64_t n_tokens, const FimTokens& fim, uint64_t seed) {
  FimChoice c;
  if (!fim.ok()) return c;
  SplitMix64 rng(Philox4x32({seed, 1, 0, RngPurpose::kDraft}, 0)[0] ^ (seed << 1));
  const double r = Uniform(rng);
  if (r >= 0.5) return c;
  c.mode = r < 0.25 ? FimMode::kPsm : FimMode::kSpm;
  int64_t a = static_cast<int64_t>(Uniform(rng) * (n_tokens + 1));
  int64_t b = static_cast<int64_t>(Uniform(rng) * (n_tokens + 1));
  c.cut_a = std::min(a, b);
  c.cut_b = std::max(a, b);
  return c;
}

}  // namespace specd::train
