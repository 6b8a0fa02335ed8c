#include "verify/verify.h"

#include <algorithm>

#include "base/error.h"

namespace specd {

std::vector<float> Residual(std::span<const float> p, std::span<const float> q) {
  SPECD_CHECK(p.size() == q.size(), "residual: distributions of different sizes");
  std::vector<float> r(p.size());
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) {
    r[i] = std::max(0.0f, p[i] - q[i]);
    total += r[i];
  }
  if (total <= 0.0) return std::vector<float>(p.begin(), p.end());
  for (float& x : r) x = static_cast<float>(x / total);
  return r;
}

int32_t DrawFrom(std::span<const float> probs, double u) {
  SPECD_CHECK(!probs.empty(), "cannot draw from an empty distribution");
  double total = 0.0;
  for (float p : probs) total += p;
  const double target = u * total;
  double cumulative = 0.0;
  int32_t last_nonzero = 0;
  for (size_t i = 0; i < probs.size(); ++i) {
    if (probs[i] <= 0.0f) continue;
    cumulative += probs[i];
    last_nonzero = static_cast<int32_t>(i);
    if (target < cumulative) return last_nonzero;
  }
  return last_nonzero;  // rounding: u fell past the last cumulative sum
}

std::vector<float> WithoutToken(std::span<const float> q, int32_t token) {
  SPECD_CHECK(token >= 0 && static_cast<size_t>(token) < q.size(), "token ", token,
              " is outside the distribution");
  std::vector<float> out(q.begin(), q.end());
  out[token] = 0.0f;
  double total = 0.0;
  for (float x : out) total += x;
  if (total <= 0.0) return std::vector<float>(q.size(), 0.0f);
  for (float& x : out) x = static_cast<float>(x / total);
  return out;
}

VerifyOutcome VerifySampled(std::span<const std::vector<float>> target_probs,
                            std::span<const std::vector<float>> draft_probs,
                            std::span<const int32_t> drafted, const RngKey& key) {
  const size_t k = drafted.size();
  SPECD_CHECK(draft_probs.size() == k && target_probs.size() == k + 1,
              "verify: need K draft rows and K + 1 target rows");
  VerifyOutcome out;
  for (size_t i = 0; i < k; ++i) {
    const int32_t d = drafted[i];
    const float p = target_probs[i][d], q = draft_probs[i][d];
    RngKey accept_key = key;
    accept_key.purpose = RngPurpose::kAccept;
    const double u = UniformDouble(accept_key, static_cast<uint32_t>(i));
    // Accept with probability min(1, p / q). q > 0 because the draft sampled d from q.
    if (q > 0.0f && u * q < p) {
      ++out.n_accepted;
      continue;
    }
    RngKey residual_key = key;
    residual_key.purpose = RngPurpose::kResidual;
    out.next = DrawFrom(Residual(target_probs[i], draft_probs[i]),
                        UniformDouble(residual_key, static_cast<uint32_t>(i)));
    return out;
  }
  RngKey bonus_key = key;
  bonus_key.purpose = RngPurpose::kBonus;
  out.next = DrawFrom(target_probs[k], UniformDouble(bonus_key, static_cast<uint32_t>(k)));
  out.bonus = true;
  return out;
}

}  // namespace specd
