// The step-based engine: sequences that join mid-run, leave by cancellation, or mix greedy and
// sampled decoding give exactly what each would give alone; coupled speculative sampling gives
// plain sampling's output token for token whatever the draft lengths.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>

#include "base/error.h"
#include "draft/combined_proposer.h"
#include "draft/draft_model_proposer.h"
#include "draft/ngram_proposer.h"
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
    // Per sequence and step: at most K + 1 tokens (it used to be summed over the batch).
    EXPECT_LE(e.engine.stats().mean_accepted_length(), 3 + 1);
    EXPECT_GE(e.engine.stats().mean_accepted_length(), 1.0);
  }
}

TEST(Engine, SequencesThatSumNoLogProbabilityDecodeTheSame) {
  // The server turns the sum off (it reports no mean log-probability): nothing else may change.
  ModelPair p(DType::kQ8_0, 99);
  for (float temperature : {0.0f, 0.9f}) {
    SequenceRequest summed = Request(Prompt(6, 8), 24, temperature, 3);
    SequenceRequest unsummed = summed;
    unsummed.sum_logprob = false;
    SpecEngine e(p, std::make_unique<FixedDraftLength>(2));
    const int a = e.engine.Add(summed);
    const int b = e.engine.Add(unsummed);
    while (e.engine.HasWork()) e.engine.Step();
    EXPECT_EQ(e.engine.sequence(a).tokens, e.engine.sequence(b).tokens) << temperature;
    EXPECT_EQ(e.engine.sequence(a).n_logprob, 24);
    EXPECT_LT(e.engine.sequence(a).mean_logprob(), 0.0);
    EXPECT_EQ(e.engine.sequence(b).n_logprob, 0);
  }
}

TEST(Engine, ARequestThatSumsNoLogProbabilityHandsThatToItsSequences) {
  // `generate` without --json or a time budget, the benches and the trainer's teacher text read
  // no mean log-probability and turn the sum off through the request.
  ModelPair p(DType::kQ8_0, 99);
  GenerateRequest r;
  r.prompts = {Prompt(3, 1), Prompt(6, 3)};
  r.n_predict = 12;
  r.stop_at_eos = false;
  auto kv = p.target->NewKvCache({2, 64});
  const GenerateResult summed = GenerateAutoregressive(*p.target, p.ctx, *kv, r);
  r.sum_logprob = false;
  const GenerateResult unsummed = GenerateAutoregressive(*p.target, p.ctx, *kv, r);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(summed.sequences[i].tokens, unsummed.sequences[i].tokens);
    EXPECT_EQ(summed.sequences[i].n_logprob, 12);
    EXPECT_LT(summed.sequences[i].mean_logprob(), 0.0);
    EXPECT_EQ(unsummed.sequences[i].n_logprob, 0);
  }
}

TEST(Engine, PromptsWithTheirOwnLengthsGetThePrefixOfALongerRun) {
  // The trainer's teacher text fills sequences of one length from prompts of many: each sequence
  // stops at its own length, and its tokens must be what a batch run to the longest would give.
  ModelPair p(DType::kQ8_0, 99);
  for (float temperature : {0.0f, 1.0f}) {
    GenerateRequest r;
    r.prompts = {Prompt(3, 1), Prompt(11, 2), Prompt(6, 3)};
    r.n_predict = 24;
    r.stop_at_eos = false;
    r.sampling = {temperature, 0, 1.0f, 5, SamplingMethod::kGumbel};
    auto kv = p.target->NewKvCache({3, 64});
    const GenerateResult longest = GenerateAutoregressive(*p.target, p.ctx, *kv, r);
    r.n_predicts = {24, 7, 15};
    const GenerateResult own = GenerateAutoregressive(*p.target, p.ctx, *kv, r);
    for (int i = 0; i < 3; ++i) {
      const auto& full = longest.sequences[i].tokens;
      ASSERT_EQ(own.sequences[i].tokens.size(), static_cast<size_t>(r.n_predicts[i]));
      EXPECT_EQ(own.sequences[i].tokens,
                std::vector<int32_t>(full.begin(), full.begin() + r.n_predicts[i]))
          << "prompt " << i << ", temperature " << temperature;
    }
    r.n_predicts = {24, 7};
    EXPECT_THROW(GenerateAutoregressive(*p.target, p.ctx, *kv, r), Error);
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
  const int c = e.engine.Add(r1);           // its slots are free again at once
  EXPECT_THROW(e.engine.Forget(b), Error);  // still running
  e.engine.Forget(a);
  EXPECT_THROW(e.engine.sequence(a), Error);
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
  policies.push_back(std::make_unique<BassDraftLength>());
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

// Draft lengths from a plan by step number; records what each step measured.
class PlannedDraftLength : public DraftLengthPolicy {
 public:
  explicit PlannedDraftLength(std::function<int(int)> plan) : plan_(std::move(plan)) {}
  int Next(int, int) override { return plan_(n_next_++); }
  void Observe(const StepObservation& step) override { observed.push_back(step); }
  int max_length() const override { return 4; }
  const char* name() const override { return "planned"; }
  std::vector<StepObservation> observed;

 private:
  std::function<int(int)> plan_;
  int n_next_ = 0;
};

// The draft reads a new prompt only when its sequence first drafts, not in the step where the
// target reads it: while plain steps win, the same engine without speculation would not read it.
// After plain steps that wrote more than a catch-up reads, the draft restarts from the last
// tokens without it. Either way the output is plain decoding's.
TEST(Engine, TheDraftReadsANewPromptWhenItsSequenceFirstDrafts) {
  ModelPair p(DType::kQ8_0, /*draft_seed=*/7);
  for (int plain_steps : {0, 3, 40}) {
    // Steps (Next calls) 0-2 draft, then plain_steps plain steps, then drafting again; the late
    // sequence joins at step 3 (in a plain step unless plain_steps is 0).
    const int draft_from = 3 + plain_steps;
    auto owned = std::make_unique<PlannedDraftLength>(
        [&](int step) { return step < 3 || step >= draft_from ? 3 : 0; });
    PlannedDraftLength* policy = owned.get();
    SpecEngine e(p, std::move(owned));
    const SequenceRequest first = Request(Prompt(5, 41), 80, 0.0f, 0);
    const SequenceRequest late = Request(Prompt(12, 42), 60, 0.0f, 0);
    const int a = e.engine.Add(first);
    int late_id = -1;
    while (e.engine.HasWork()) {
      if (late_id < 0 && policy->observed.size() == 4) late_id = e.engine.Add(late);
      e.engine.Step();
    }
    EXPECT_EQ(e.engine.sequence(a).tokens, Alone(p, first)) << plain_steps;
    EXPECT_EQ(e.engine.sequence(late_id).tokens, Alone(p, late)) << plain_steps;
    int prefill_step = -1, draft_rows_after = 0;
    for (size_t i = 0; i < policy->observed.size(); ++i) {
      const StepObservation& o = policy->observed[i];
      if (o.prefill_target_rows > 0 && o.n_sequences > 0) {
        prefill_step = static_cast<int>(i);
        EXPECT_EQ(o.prefill_draft_rows, 0) << plain_steps;  // not read with the target
      } else if (prefill_step >= 0) {
        draft_rows_after += o.prefill_draft_rows;
      }
    }
    ASSERT_GE(prefill_step, 0);
    EXPECT_EQ(policy->observed[prefill_step].k, plain_steps == 0 ? 3 : 0);
    // The late prompt's 11 rows (all but its last token) are read by its first drafting step,
    // unless the plain steps wrote more than the draft's catch-up limit.
    EXPECT_EQ(draft_rows_after, plain_steps < DraftModelProposer::kDefaultCatchUpLimit ? 11 : 0)
        << plain_steps;
  }
}

// Completions of one prompt (BASS's batches): the draft reads the shared prompt once, and only
// when they first draft; while plain steps win it is not read at all. Output is plain decoding's.
TEST(Engine, CompletionsOfOnePromptShareTheDraftsReadingOfItWhenTheyFirstDraft) {
  ModelPair p(DType::kQ8_0, /*draft_seed=*/7);
  for (int plain_steps : {0, 5, 1000}) {
    auto owned =
        std::make_unique<PlannedDraftLength>([&](int step) { return step >= plain_steps ? 2 : 0; });
    PlannedDraftLength* policy = owned.get();
    SpecEngine e(p, std::move(owned));
    const SequenceRequest r = Request(Prompt(14, 43), 24, 0.8f, 5);
    const std::vector<int> ids = e.engine.AddCompletions(r, 4);
    e.engine.Step();  // the target reads the prompt; the completions fork
    for (int slot = 0; slot < 4 && plain_steps > 0; ++slot) {
      EXPECT_EQ(e.draft_kv->Length(slot), 0) << "the draft read the prompt before drafting";
    }
    while (e.engine.HasWork()) e.engine.Step();
    for (int i = 0; i < 4; ++i) {
      SequenceRequest alone = r;
      alone.rng_sequence = i;
      EXPECT_EQ(e.engine.sequence(ids[i]).tokens, Alone(p, alone)) << plain_steps << " " << i;
    }
    int draft_rows = 0, first_drafting = -1;
    for (size_t i = 0; i < policy->observed.size(); ++i) {
      const StepObservation& o = policy->observed[i];
      draft_rows += o.prefill_draft_rows;
      if (o.k > 0 && first_drafting < 0) first_drafting = static_cast<int>(i);
      if (o.prefill_draft_rows > 0) EXPECT_EQ(static_cast<int>(i), first_drafting) << plain_steps;
    }
    // 13 rows (all but the prompt's last token), once for the four; none without drafting.
    EXPECT_EQ(draft_rows, plain_steps < 24 ? 13 : 0) << plain_steps;
  }
}

TEST(Engine, RepeatPenaltyAndMinPKeepSpeculationEqualToPlainDecoding) {
  // The target as its own (unpenalized) draft: long runs get drafted, and its drafts repeat
  // what the penalty forbids.
  ModelPair p(DType::kF32, 7);
  std::vector<SequenceRequest> requests;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(Request(Prompt(6 + i, 30 + i), 48, i < 2 ? 0.0f : 0.9f, 200 + i));
    // Below 1 the "penalty" favours repeats: on this random model that surely changes output.
    // At 100 over a short window the last few tokens are all but forbidden: a row penalized
    // without its drafted predecessors would pick differently.
    requests.back().sampling.repeat_penalty = i == 0 ? 0.3f : i == 1 ? 100.0f : 1.6f;
    requests.back().sampling.repeat_last_n = i == 1 ? 4 : i == 2 ? -1 : 16;
    requests.back().sampling.min_p = i == 3 ? 0.05f : 0.0f;
  }
  // Not vacuous: the penalty changes what plain decoding writes.
  SequenceRequest unpenalized = requests[0];
  unpenalized.sampling.repeat_penalty = 1.0f;
  EXPECT_NE(Alone(p, unpenalized), Alone(p, requests[0]));
  std::vector<std::unique_ptr<DraftLengthPolicy>> policies;
  policies.push_back(std::make_unique<FixedDraftLength>(5));
  policies.push_back(std::make_unique<ScheduledDraftLength>(std::vector<int>{0, 3, 0, 6, 1}));
  for (auto& policy : policies) {
    const std::string name = policy->name();
    SpecEngine e(p, std::move(policy));
    std::vector<int> ids;
    for (const auto& r : requests) ids.push_back(e.engine.Add(r));
    while (e.engine.HasWork()) e.engine.Step();
    for (size_t i = 0; i < requests.size(); ++i) {
      EXPECT_EQ(e.engine.sequence(ids[i]).tokens, Alone(p, requests[i])) << name << " " << i;
    }
    EXPECT_GT(e.engine.stats().n_accepted, 0) << name;
  }
}

}  // namespace
}  // namespace specd

namespace specd {
namespace {

// A proposer of token trees for the engine's tree path: two children of the root, one child of
// each, from the draft model re-reading each sequence's context (slow, simple). Greedy and
// coupled trees take the draft's top-2 / its top choice; rejection-sampled ones draw every child
// independently from q.
class TestTreeProposer : public Proposer {
 public:
  TestTreeProposer(Model& draft, const KernelContext& ctx) : draft_(draft), ctx_(ctx) {}
  void AddSequence(int seq, std::span<const int32_t> prompt) override {
    context_[seq].assign(prompt.begin(), prompt.end());
  }
  void ForkSequence(int src, int dst) override { context_[dst] = context_.at(src); }
  void RemoveSequence(int seq) override { context_.erase(seq); }
  void Accept(int seq, int n_accepted, int32_t next) override {
    ASSERT_EQ(n_accepted, 0);  // trees come back through AcceptPath
    context_.at(seq).push_back(next);
  }
  void Append(int seq, std::span<const int32_t> tokens) override {
    context_.at(seq).insert(context_.at(seq).end(), tokens.begin(), tokens.end());
  }
  void AcceptPath(int seq, std::span<const int> path, int32_t next) override {
    for (int node : path) context_.at(seq).push_back(last_.at(seq).tokens[node]);
    context_.at(seq).push_back(next);
  }
  void Propose(std::span<const DraftInput> inputs, std::vector<Proposal>* out,
               ProposerTimings*) override {
    out->clear();
    for (const DraftInput& in : inputs) {
      out->push_back(in.k >= 4 ? Tree(in) : Proposal{});
      last_[in.seq] = out->back();
    }
  }
  int trees = 0;

 private:
  Proposal Tree(const DraftInput& in) {
    ++trees;
    const std::vector<int32_t>& ctx = context_.at(in.seq);
    auto kv = draft_.NewKvCache({1, 256});
    const int slot = kv->Acquire();
    Batch b;
    for (size_t i = 0; i < ctx.size(); ++i) b.Add(ctx[i], i, slot, i + 1 == ctx.size());
    std::vector<float> logits;
    draft_.Forward(ctx_, b, *kv, AttentionMode::kSplit, &logits);
    Proposal p;
    const bool sampled = !in.sampling->greedy() && in.mode == SpecSampling::kRejection;
    const std::vector<float> root_q = ProcessedProbs(logits, *in.sampling);
    const auto children = Pick(logits, root_q, sampled, in, 0);
    p.tokens = {children[0], children[1]};
    p.parents = {-1, -1};
    std::vector<std::vector<float>> probs = {root_q};
    for (int c = 0; c < 2; ++c) {
      Batch one;
      auto kv2 = draft_.NewKvCache({1, 256});
      const int s2 = kv2->Acquire();
      for (size_t i = 0; i < ctx.size(); ++i) one.Add(ctx[i], i, s2, false);
      one.Add(children[c], ctx.size(), s2, true);
      draft_.Forward(ctx_, one, *kv2, AttentionMode::kSplit, &logits);
      const std::vector<float> q = ProcessedProbs(logits, *in.sampling);
      p.tokens.push_back(Pick(logits, q, sampled, in, 1 + c)[0]);
      p.parents.push_back(c);
      probs.push_back(q);
    }
    if (sampled) {
      probs.resize(p.tokens.size() + 1);  // the leaves have no children
      p.probs = probs;
    }
    return p;
  }
  // Two tokens for a row: the top two (greedy, coupled) or two independent draws from q.
  std::vector<int32_t> Pick(const std::vector<float>& logits, const std::vector<float>& q,
                            bool sampled, const DraftInput& in, int salt) {
    if (sampled) {
      const RngKey key{in.sampling->seed, in.rng_sequence,
                       static_cast<uint64_t>(in.first_position) * 8 + salt, RngPurpose::kDraft};
      return {DrawFrom(q, UniformDouble(key, 0)), DrawFrom(q, UniformDouble(key, 1))};
    }
    std::vector<int32_t> order(logits.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int32_t>(i);
    std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                      [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    return {order[0], order[1]};
  }
  Model& draft_;
  const KernelContext& ctx_;
  std::map<int, std::vector<int32_t>> context_;
  std::map<int, Proposal> last_;
};

TEST(Engine, TokenTreesKeepGreedyAndCoupledOutputAndSampleByRejection) {
  ModelPair p(DType::kF32, 7);  // the target as its own draft: paths get accepted
  for (SpecSampling mode : {SpecSampling::kCoupled, SpecSampling::kRejection}) {
    auto kv = p.target->NewKvCache({3, 256});
    TestTreeProposer proposer(*p.draft, p.ctx);
    FixedDraftLength policy(4);
    StepOptions options;
    options.spec_sampling = mode;
    Engine engine(*p.target, *kv, p.ctx, options, &proposer, &policy);
    std::vector<SequenceRequest> requests = {Request(Prompt(5, 1), 24, 0.0f, 0),
                                             Request(Prompt(7, 2), 24, 0.8f, 9),
                                             Request(Prompt(4, 3), 24, 1.0f, 4)};
    // A repetition penalty on one: each tree row is penalized with its own path as history.
    requests[1].sampling.repeat_penalty = 1.5f;
    std::vector<int> ids;
    for (const auto& r : requests) ids.push_back(engine.Add(r));
    while (engine.HasWork()) engine.Step();
    EXPECT_GT(proposer.trees, 0);
    EXPECT_GT(engine.stats().n_accepted, 0);
    EXPECT_LT(engine.stats().n_accepted, engine.stats().n_drafted);  // siblings are rejected
    // Greedy always, and every sampled sequence under coupled sampling: plain decoding's output.
    EXPECT_EQ(engine.sequence(ids[0]).tokens, Alone(p, requests[0]));
    for (int i = 1; i < 3; ++i) {
      if (mode == SpecSampling::kCoupled) {
        EXPECT_EQ(engine.sequence(ids[i]).tokens, Alone(p, requests[i])) << i;
      } else {
        EXPECT_EQ(engine.sequence(ids[i]).tokens.size(), 24u) << i;
      }
    }
    for (int slot = 0; slot < 3; ++slot) EXPECT_FALSE(kv->InUse(slot));  // all released
  }
}

}  // namespace
}  // namespace specd

namespace specd {
namespace {

// llama.cpp's cache_prompt: a request that starts with an earlier one's prompt and output reads
// only the rest, and gives exactly what it gives read from nothing (greedy and sampled, plain and
// speculative); the least recently used cached prefix gives its slot up when slots run out.
TEST(Engine, CachedPromptPrefixesAreReusedAndChangeNothing) {
  ModelPair p(DType::kQ8_0, /*draft_seed=*/7);
  for (const float temperature : {0.0f, 0.8f}) {
    for (const bool speculative : {false, true}) {
      SpecEngine e(p, std::make_unique<FixedDraftLength>(3), /*slots=*/2);
      auto plain_kv = p.target->NewKvCache({2, 256});
      Engine plain(*p.target, *plain_kv, p.ctx, SpecEngine::Options());
      Engine& engine = speculative ? e.engine : plain;
      SequenceRequest first = Request(Prompt(20, 1), 12, temperature, 5);
      first.cache_prompt = true;
      const int a = engine.Add(first);
      while (engine.HasWork()) engine.Step();
      EXPECT_EQ(engine.n_cached_prefixes(), 1);
      // The editor's next request: the same text, what the model wrote, and more typed.
      SequenceRequest next = first;
      next.prompt.insert(next.prompt.end(), engine.sequence(a).tokens.begin(),
                         engine.sequence(a).tokens.end());
      for (int32_t t : Prompt(4, 9)) next.prompt.push_back(t);
      const int b = engine.Add(next);
      const int reused = engine.sequence(b).n_cached;
      // The cache holds the prompt and every generated token but the last (never read back).
      EXPECT_EQ(reused, 20 + 12 - 1);
      while (engine.HasWork()) engine.Step();
      SequenceRequest fresh = next;
      fresh.cache_prompt = false;
      EXPECT_EQ(engine.sequence(b).tokens, Alone(p, fresh))
          << "temperature " << temperature << (speculative ? ", speculative" : ", plain");
      EXPECT_EQ(engine.n_cached_prefixes(), 1);  // b's (it took a's)
      // Two slots: another prompt takes the free one; a third, when both hold cached prefixes,
      // the least recently used one's (b's).
      for (int salt : {3, 4}) {
        SequenceRequest other = Request(Prompt(6, salt), 4, temperature, 1);
        other.cache_prompt = true;
        const int c = engine.Add(other);
        EXPECT_EQ(engine.sequence(c).n_cached, 0);
        EXPECT_EQ(engine.n_cached_prefixes(), 1);
        while (engine.HasWork()) engine.Step();
        EXPECT_EQ(engine.n_cached_prefixes(), 2);
        other.cache_prompt = false;
        EXPECT_EQ(engine.sequence(c).tokens, Alone(p, other));
      }
      // b's prefix is gone: its continuation reads everything again.
      SequenceRequest again = next;
      const int d = engine.Add(again);
      EXPECT_EQ(engine.sequence(d).n_cached, 0);
      while (engine.HasWork()) engine.Step();
    }
  }
}

// llama.vim's warm-up: n_predict 0 with cache_prompt reads the prompt into a kept slot and
// generates nothing; the next request starting the same way reads only the rest.
TEST(Engine, AWarmUpRequestReadsThePromptForTheNextOne) {
  ModelPair p(DType::kQ8_0, /*draft_seed=*/7);
  SpecEngine e(p, std::make_unique<FixedDraftLength>(3), /*slots=*/1);
  SequenceRequest warm = Request(Prompt(24, 2), 0, 0.0f, 1);
  warm.cache_prompt = true;
  const int a = e.engine.Add(warm);
  EXPECT_TRUE(e.engine.HasWork());
  while (e.engine.HasWork()) e.engine.Step();
  EXPECT_TRUE(e.engine.sequence(a).tokens.empty());
  EXPECT_EQ(e.engine.sequence(a).finish_reason, "length");
  EXPECT_EQ(e.engine.n_cached_prefixes(), 1);
  SequenceRequest next = Request(Prompt(24, 2), 8, 0.0f, 1);
  for (int32_t t : Prompt(5, 6)) next.prompt.push_back(t);
  next.cache_prompt = true;
  const int b = e.engine.Add(next);
  EXPECT_EQ(e.engine.sequence(b).n_cached, 24);
  while (e.engine.HasWork()) e.engine.Step();
  next.cache_prompt = false;
  EXPECT_EQ(e.engine.sequence(b).tokens, Alone(p, next));
  // Without cache_prompt a warm-up has nothing to do: it ends at once.
  warm.cache_prompt = false;
  const int c = e.engine.Add(warm);
  EXPECT_FALSE(e.engine.HasWork());
  EXPECT_EQ(e.engine.sequence(c).finish_reason, "length");
}

// --cache-reuse: the editor's window moved down (the prompt's first 10 tokens are gone), so no
// cached prefix shares its start, but the 30 tokens after them are moved up and reused; the
// speculative engine, from the same cache, writes what the plain one writes.
TEST(Engine, CacheReuseMovesChunksThatReappearEarlier) {
  ModelPair p(DType::kQ8_0, /*draft_seed=*/7);
  for (const int min_chunk : {8, 31}) {
    std::vector<std::vector<int32_t>> outputs;
    for (const bool speculative : {false, true}) {
      SpecEngine e(p, std::make_unique<FixedDraftLength>(3), /*slots=*/1);
      auto plain_kv = p.target->NewKvCache({1, 256});
      Engine plain(*p.target, *plain_kv, p.ctx, SpecEngine::Options());
      Engine& engine = speculative ? e.engine : plain;
      SequenceRequest first = Request(Prompt(40, 1), 6, 0.0f, 5);
      first.cache_prompt = true;
      first.cache_reuse_chunk = min_chunk;
      engine.Add(first);
      while (engine.HasWork()) engine.Step();
      SequenceRequest next = first;
      next.prompt.erase(next.prompt.begin(), next.prompt.begin() + 10);
      for (int32_t t : Prompt(5, 9)) next.prompt.push_back(t);
      const int b = engine.Add(next);
      EXPECT_EQ(engine.sequence(b).n_cached, min_chunk <= 30 ? 30 : 0);
      while (engine.HasWork()) engine.Step();
      outputs.push_back(engine.sequence(b).tokens);
      EXPECT_EQ(outputs.back().size(), 6u);
    }
    EXPECT_EQ(outputs[0], outputs[1]) << "min chunk " << min_chunk;
  }
}

TEST(Ngram, LookupProposesWhatFollowedTheLatestRepeat) {
  // ... 7 8 9 | 1 2 3 4 | 7 8 9 -> the latest earlier "7 8 9" was followed by 1 2 3 4.
  const std::vector<int32_t> h = {5, 7, 8, 9, 1, 2, 3, 4, 7, 8, 9};
  EXPECT_EQ(NgramProposer::Lookup(h, 1, 3, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(NgramProposer::Lookup(h, 1, 3, 10), (std::vector<int32_t>{1, 2, 3, 4, 7, 8, 9}));
  // The longest n first: "2 9" never occurred, "9" did (latest: before 1).
  EXPECT_EQ(NgramProposer::Lookup({9, 1, 2, 9}, 1, 2, 2), (std::vector<int32_t>{1, 2}));
  EXPECT_TRUE(NgramProposer::Lookup({1, 2, 3}, 1, 3, 4).empty());  // nothing repeats
  EXPECT_TRUE(NgramProposer::Lookup({1, 2, 1}, 2, 3, 4).empty());  // only a 1-gram repeats
  EXPECT_THROW(NgramProposer(0, 3, 10), Error);
}

TEST(Ngram, OutputEqualsPlainDecodingGreedyAndCoupled) {
  ModelPair p(DType::kQ8_0, 7);
  // A repetitive prompt, so that lookups find continuations.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 6; ++i) {
    for (int32_t t : {11, 12, 13, 14, 15}) prompt.push_back(t + (i % 2));
  }
  for (float temperature : {0.0f, 0.9f}) {
    auto kv = p.target->NewKvCache({2, 256});
    NgramProposer proposer(1, 3, p.target->config().n_vocab);
    FixedDraftLength policy(4);
    StepOptions options;
    options.spec_sampling = SpecSampling::kCoupled;
    Engine engine(*p.target, *kv, p.ctx, options, &proposer, &policy);
    const SequenceRequest a = Request(prompt, 40, temperature, 5);
    const SequenceRequest b = Request(Prompt(9, 4), 40, temperature, 6);
    const int ia = engine.Add(a), ib = engine.Add(b);
    while (engine.HasWork()) engine.Step();
    EXPECT_EQ(engine.sequence(ia).tokens, Alone(p, a)) << temperature;
    EXPECT_EQ(engine.sequence(ib).tokens, Alone(p, b)) << temperature;
    EXPECT_GT(engine.stats().n_drafted, 0);
  }
}

// A prompt that repeats itself (31 32 33, four times): prompt lookup has something to propose.
std::vector<int32_t> RepeatingPrompt() {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 4; ++i) {
    for (int32_t t : {31, 32, 33}) prompt.push_back(t);
  }
  return prompt;
}

// Lookup first, the draft model where lookup finds nothing: still plain decoding's output.
TEST(Ngram, CombinedWithADraftModelEqualsPlainDecoding) {
  ModelPair p(DType::kQ8_0, 99);
  const std::vector<int32_t> prompt = RepeatingPrompt();
  for (float temperature : {0.0f, 0.8f}) {
    auto kv = p.target->NewKvCache({2, 256});
    auto draft_kv = p.draft->NewKvCache({2, 256});
    NgramProposer lookup(1, 3, p.target->config().n_vocab);
    DraftModelProposer model(*p.draft, *draft_kv, p.ctx, AttentionMode::kSplit);
    CombinedProposer both(lookup, model);
    FixedDraftLength policy(3);
    StepOptions options;
    options.spec_sampling = SpecSampling::kCoupled;
    Engine engine(*p.target, *kv, p.ctx, options, &both, &policy);
    const SequenceRequest a = Request(prompt, 40, temperature, 2);
    const SequenceRequest b = Request(Prompt(6, 8), 40, temperature, 3);
    const int ia = engine.Add(a), ib = engine.Add(b);
    while (engine.HasWork()) engine.Step();
    EXPECT_EQ(engine.sequence(ia).tokens, Alone(p, a)) << temperature;
    EXPECT_EQ(engine.sequence(ib).tokens, Alone(p, b)) << temperature;
    EXPECT_GT(both.n_first, 0);
    EXPECT_GT(both.n_second, 0);
  }
}

// Each committed token says how it came: lookup and draft-model tokens are accepted drafts (at
// most the sequence's accepted count: a draft accepted past its length is not committed), the
// target writes one token per verification; plain decoding writes every token itself.
TEST(Ngram, EveryCommittedTokenSaysHowItCame) {
  ModelPair p(DType::kQ8_0, 99);
  const std::vector<int32_t> prompt = RepeatingPrompt();
  auto kv = p.target->NewKvCache({1, 256});
  auto draft_kv = p.draft->NewKvCache({1, 256});
  NgramProposer lookup(1, 3, p.target->config().n_vocab);
  DraftModelProposer model(*p.draft, *draft_kv, p.ctx, AttentionMode::kSplit);
  CombinedProposer both(lookup, model);
  FixedDraftLength policy(3);
  Engine engine(*p.target, *kv, p.ctx, StepOptions{}, &both, &policy);
  const int id = engine.Add(Request(prompt, 60, 0.0f, 1));
  std::map<TokenSource, int> count;
  int64_t n_tokens = 0;
  while (engine.HasWork()) {
    const StepReport report = engine.Step();
    ASSERT_EQ(report.sources.size(), report.tokens.size());
    for (TokenSource source : report.sources) ++count[source];
    n_tokens += static_cast<int64_t>(report.tokens.size());
  }
  const Sequence& s = engine.sequence(id);
  EXPECT_EQ(n_tokens, static_cast<int64_t>(s.tokens.size()));
  EXPECT_GT(count[TokenSource::kLookup], 0);
  EXPECT_GT(count[TokenSource::kDraft], 0);
  EXPECT_GT(count[TokenSource::kTarget], 0);
  const int accepted = count[TokenSource::kLookup] + count[TokenSource::kDraft];
  EXPECT_LE(accepted, s.n_accepted);
  EXPECT_GE(accepted, s.n_accepted - 3);

  auto plain_kv = p.target->NewKvCache({1, 256});
  Engine plain(*p.target, *plain_kv, p.ctx, StepOptions{});
  plain.Add(Request(prompt, 20, 0.0f, 1));
  while (plain.HasWork()) {
    for (TokenSource source : plain.Step().sources) EXPECT_EQ(source, TokenSource::kTarget);
  }
}

TEST(Ngram, RejectionSamplingWithPointMassDraftsRuns) {
  ModelPair p(DType::kF32, 7);
  auto kv = p.target->NewKvCache({1, 256});
  NgramProposer proposer(1, 2, p.target->config().n_vocab);
  FixedDraftLength policy(3);
  Engine engine(*p.target, *kv, p.ctx, StepOptions{}, &proposer, &policy);
  std::vector<int32_t> prompt;
  for (int i = 0; i < 8; ++i) prompt.push_back(20 + i % 3);
  const int id = engine.Add(Request(prompt, 30, 1.0f, 8));
  while (engine.HasWork()) engine.Step();
  EXPECT_EQ(engine.sequence(id).tokens.size(), 30u);
  EXPECT_GT(engine.stats().n_drafted, 0);
}

}  // namespace
}  // namespace specd
