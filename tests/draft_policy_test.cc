#include <gtest/gtest.h>

#include "draft/cost_aware.h"

namespace specd {
namespace {

// Feeds `steps` steps at batch b where a target forward over n rows costs target_ms(n), a draft
// forward draft_ms, and every drafted token is accepted with a run of `accepted` of K.
template <typename TargetMs>
int Settle(CostAwareDraftLength& policy, int b, TargetMs target_ms, double draft_ms, double accept,
           int steps) {
  int k = 0;
  for (int i = 0; i < steps; ++i) {
    k = policy.Next(b);
    for (int j = 0; j < k; ++j) policy.ObserveDraftForward(b, draft_ms);
    policy.ObserveTargetForward(b * (k + 1), target_ms(b * (k + 1)));
    // A deterministic run: the first round(accept * K) drafts accepted.
    const int accepted = static_cast<int>(accept * k + 0.5);
    for (int s = 0; s < b; ++s) policy.ObserveAcceptance(k, accepted);
  }
  return k;
}

TEST(CostAwareDraftLength, DraftsLongWhenVerificationIsFlatAndAcceptanceHigh) {
  CostAwareDraftLength policy(8);
  // Memory-bound target: n rows cost the same as one; a cheap draft; 90% acceptance.
  const int k = Settle(
      policy, 1, [](int) { return 1.0; }, 0.02, 0.9, 40);
  EXPECT_GE(k, 5);
  EXPECT_GT(policy.acceptance(), 0.8);
}

TEST(CostAwareDraftLength, TurnsDraftingOffWhenVerificationCostsAsMuchAsPlainSteps) {
  CostAwareDraftLength policy(8);
  // Compute-bound target: n rows cost n times one row; no K can beat plain decoding.
  int plain = 0, probes = 0;
  Settle(
      policy, 4, [](int n) { return 0.1 * n; }, 0.05, 0.7, 10);
  for (int i = 0; i < 128; ++i) {
    const int k = policy.Next(4);
    (k == 0 ? plain : probes) += 1;
    for (int j = 0; j < k; ++j) policy.ObserveDraftForward(4, 0.05);
    policy.ObserveTargetForward(4 * (k + 1), 0.1 * 4 * (k + 1));
    for (int s = 0; s < 4; ++s) policy.ObserveAcceptance(k, k == 0 ? 0 : static_cast<int>(0.7 * k));
  }
  EXPECT_GE(plain, 120);
  EXPECT_GE(probes, 2);  // K = 1 is probed now and then so the estimates stay current
  EXPECT_LE(probes, 4);  // less and less often
  // No probing when the request is about to end.
  CostAwareDraftLength ending(8);
  Settle(
      ending, 4, [](int n) { return 0.1 * n; }, 0.05, 0.7, 10);
  for (int i = 0; i < 100; ++i) EXPECT_EQ(ending.Next(4, /*remaining_tokens=*/8), 0) << i;
}

TEST(CostAwareDraftLength, PicksAnInteriorLengthForAffineCosts) {
  CostAwareDraftLength policy(8);
  // v(n) = 1 + 0.25 n, draft 0.1, acceptance 0.8: E(K)/T(K) peaks at K = 3 or 4.
  const int k = Settle(
      policy, 1, [](int n) { return 1.0 + 0.25 * n; }, 0.1, 0.8, 60);
  EXPECT_GE(k, 2);
  EXPECT_LE(k, 5);
}

TEST(CostAwareDraftLength, RealizedRatesOverrideABiasedModel) {
  CostAwareDraftLength policy(4);
  // The forward costs say drafting pays (flat verification, cheap draft, high acceptance)...
  Settle(
      policy, 2, [](int) { return 1.0; }, 0.01, 0.9, 5);
  EXPECT_GT(policy.Next(2), 0);
  // ...but whole steps show otherwise: plain steps commit 2 tokens per ms, drafting steps
  // (whatever K) 1.5. After two observations of each, the realized rates decide.
  for (int k = 0; k <= 4; ++k) {
    for (int i = 0; i < 2; ++i) {
      policy.ObserveStep(2, k, 1.0, 0.9, k == 0 ? 4 : 3, /*catch_up=*/false);
    }
  }
  EXPECT_EQ(policy.Next(2), 0);
  // Steps where the draft caught up on skipped tokens do not count as typical.
  CostAwareDraftLength other(4);
  Settle(
      other, 2, [](int) { return 1.0; }, 0.01, 0.9, 5);
  for (int k = 1; k <= 4; ++k) other.ObserveStep(2, k, 10.0, 9.0, 1, /*catch_up=*/true);
  EXPECT_GT(other.Next(2), 0);
}

TEST(CostAwareDraftLength, AcceptanceIsTheGeometricEstimate) {
  CostAwareDraftLength policy(8, 0.5);
  for (int i = 0; i < 500; ++i) policy.ObserveAcceptance(4, 3);  // 3 accepted, then a rejection
  EXPECT_NEAR(policy.acceptance(), 0.75, 0.01);
  for (int i = 0; i < 500; ++i) policy.ObserveAcceptance(4, 4);  // no rejections
  EXPECT_GT(policy.acceptance(), 0.95);
}

TEST(ForwardCostCurve, ExtrapolatesThroughMeasuredPoints) {
  ForwardCostCurve curve;
  EXPECT_LT(curve.Predict(3), 0.0);
  curve.Observe(1, 2.0);
  EXPECT_DOUBLE_EQ(curve.Predict(1), 2.0);
  EXPECT_DOUBLE_EQ(curve.Predict(4), 2.0 * 6.0 / 3.0);  // one point: t ~ 2 + n
  curve.Observe(3, 4.0);
  EXPECT_NEAR(curve.Predict(5), 6.0, 1e-9);  // the line through (1, 2) and (3, 4)
  curve.Observe(3, 6.0);                     // moving average: 4 -> 4.4
  EXPECT_NEAR(curve.Predict(3), 4.4, 1e-9);
}

}  // namespace
}  // namespace specd
