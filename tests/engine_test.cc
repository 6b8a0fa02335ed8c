// The step-based engine: sequences that join mid-run, leave by cancellation, or mix greedy and
// sampled decoding give exactly what each would give alone; coupled speculative sampling gives
// plain sampling's output token for token whatever the draft lengths.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "draft/draft_model_proposer.h"
#include "engine/generate.h"
#include "tests/test_util.h"

namespace specd {
namespace {

using testing::ModelPair;
using testing::Prompt;

SequenceRequest Request(const std::vector<int32_t>& prompt, int n, float temperature,
                        uint64_t seed) {
  SequenceRequest r;
  r.prompt = prompt;
  r.n_predict = n;
  r.stop_at_eos = false;
  r.sampling = {temperature, 0, 1.0f, seed, SamplingMethod::kGumbel};
  return r;
}

// The tokens plain decoding gives a request alone.
std::vector<int32_t> Alone(ModelPair& p, const SequenceRequest& r) {
  auto kv = p.target->NewKvCache({1, 256});
  Engine engine(*p.target, *kv, p.ctx, StepOptions{});
  const int id = engine.Add(r);
  while (engine.HasWork()) engine.Step();
  return engine.sequence(id).tokens;
}

// Speculative engine with coupled sampling, a draft-length policy, and its draft's KV.
struct SpecEngine {
  SpecEngine(ModelPair& p, std::unique_ptr<DraftLengthPolicy> policy_in, int slots = 4)
      : target_kv(p.target->NewKvCache({slots, 256})),
        draft_kv(p.draft->NewKvCache({slots, 256})),
        proposer(*p.draft, *draft_kv, p.ctx, AttentionMode::kSplit),
        policy(std::move(policy_in)),
        engine(*p.target, *target_kv, p.ctx, Options(), &proposer, policy.get()) {}
  static StepOptions Options() {
    StepOptions o;
    o.spec_sampling = SpecSampling::kCoupled;
    return o;
  }
  std::unique_ptr<KvCache> target_kv, draft_kv;
  DraftModelProposer proposer;
  std::unique_ptr<DraftLengthPolicy> policy;
  Engine engine;
};

TEST(Engine, SequencesJoiningMidRunAndMixingGreedyAndSampledEqualEachAlone) {
  ModelPair p(DType::kQ8_0, /*draft_seed=*/7);  // the target as its own draft: long acceptances
  ModelPair other(DType::kQ8_0, /*draft_seed=*/99);
  for (ModelPair* pair : {&p, &other}) {
    const SequenceRequest greedy = Request(Prompt(5, 1), 30, 0.0f, 1);
    const SequenceRequest sampled = Request(Prompt(9, 2), 30, 0.9f, 1234);
    const SequenceRequest late = Request(Prompt(3, 3), 20, 0.7f, 99);
    SpecEngine e(*pair, std::make_unique<FixedDraftLength>(3));
    const int a = e.engine.Add(greedy);
    const int b = e.engine.Add(sampled);
    for (int i = 0; i < 3; ++i) e.engine.Step();
    const int c = e.engine.Add(late);  // joins while the others decode
    while (e.engine.HasWork()) e.engine.Step();
    EXPECT_EQ(e.engine.sequence(a).tokens, Alone(*pair, greedy));
    EXPECT_EQ(e.engine.sequence(b).tokens, Alone(*pair, sampled));
    EXPECT_EQ(e.engine.sequence(c).tokens, Alone(*pair, late));
    EXPECT_GT(e.engine.stats().n_accepted, 0);
  }
}

TEST(Engine, CancelFreesTheSlotsAndLeavesTheOthersAlone) {
  ModelPair p(DType::kF32, 99);
  SpecEngine e(p, std::make_unique<FixedDraftLength>(2), 2);
  const SequenceRequest r1 = Request(Prompt(6, 4), 40, 0.0f, 0);
  const SequenceRequest r2 = Request(Prompt(4, 5), 40, 0.8f, 5);
  const int a = e.engine.Add(r1);
  const int b = e.engine.Add(r2);
  e.engine.Step();
  e.engine.Step();
  EXPECT_THROW(e.engine.Add(r1), Error);  // both slots in use: a clear error, nothing changed
  e.engine.Cancel(a);
  EXPECT_EQ(e.engine.sequence(a).finish_reason, "cancelled");
  const int c = e.engine.Add(r1);  // its slots are free again at once
  while (e.engine.HasWork()) e.engine.Step();
  EXPECT_EQ(e.engine.sequence(b).tokens, Alone(p, r2));
  EXPECT_EQ(e.engine.sequence(c).tokens, Alone(p, r1));
}

TEST(Engine, CompletionsShareTheirPromptEvenWhenTheFirstIsCancelled) {
  ModelPair p(DType::kF32, 99);
  SpecEngine e(p, std::make_unique<FixedDraftLength>(2));
  SequenceRequest r = Request(Prompt(7, 6), 12, 0.9f, 77);
  const std::vector<int> ids = e.engine.AddCompletions(r, 3);
  e.engine.Cancel(ids[0]);  // before its prompt was read: the next completion reads it
  while (e.engine.HasWork()) e.engine.Step();
  for (int i = 1; i < 3; ++i) {
    SequenceRequest alone = r;
    alone.rng_sequence = i;
    EXPECT_EQ(e.engine.sequence(ids[i]).tokens, Alone(p, alone)) << i;
  }
  EXPECT_NE(e.engine.sequence(ids[1]).tokens, e.engine.sequence(ids[2]).tokens);
}

// Coupled sampling: every token is the target's own Gumbel-max sample at its position, so the
// output is plain sampling's whatever the draft lengths — fixed, adaptive, cost-aware (chosen
// from wall-clock timings), or switching drafting off and on.
TEST(Engine, CoupledSpeculativeSamplingEqualsPlainSamplingTokenForToken) {
  ModelPair p(DType::kQ8_0, 99);
  std::vector<std::unique_ptr<DraftLengthPolicy>> policies;
  policies.push_back(std::make_unique<FixedDraftLength>(4));
  policies.push_back(std::make_unique<AdaptiveDraftLength>());
  policies.push_back(std::make_unique<CostAwarePolicy>(6));
  policies.push_back(std::make_unique<ScheduledDraftLength>(std::vector<int>{0, 3, 0, 5, 1, 2}));
  for (auto& policy : policies) {
    const std::string name = policy->name();
    SpecEngine e(p, std::move(policy));
    std::vector<SequenceRequest> requests;
    std::vector<int> ids;
    for (int i = 0; i < 4; ++i) {
      requests.push_back(Request(Prompt(4 + i, 10 + i), 48, 0.6f + 0.2f * i, 100 + i));
      requests.back().sampling.top_k = i == 3 ? 20 : 0;
      ids.push_back(e.engine.Add(requests.back()));
    }
    while (e.engine.HasWork()) e.engine.Step();
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(e.engine.sequence(ids[i]).tokens, Alone(p, requests[i])) << name << " " << i;
    }
    // The cost-aware policy may find that drafting does not pay on this tiny pair.
    if (name != "cost") {
      EXPECT_GT(e.engine.stats().n_accepted, 0) << name;
    }
  }
}

}  // namespace
}  // namespace specd
