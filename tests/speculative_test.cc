// Merge gates for greedy speculative decoding: output identical to plain greedy decoding, token
// for token, for any draft; a draft identical to the target is accepted 100%.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <ostream>
#include <string>

#include "base/error.h"
#include "draft/draft_model_proposer.h"
#include "draft/eagle_proposer.h"
#include "draft/ngram_proposer.h"
#include "draft/sdsat_proposer.h"
#include "engine/generate.h"
#include "sampling/sampler.h"
#include "tests/test_util.h"

namespace specd {
namespace {

using Pair = testing::ModelPair;
using testing::FixedDrafts;
using testing::Prompt;

using testing::Greedy;

// Every draft-length policy at batch 1: fixed lengths, BASS Algorithm 1, cost-aware, and a
// schedule with plain steps between drafts.
std::vector<std::pair<std::string, SpeculationConfig>> EveryPolicy() {
  std::vector<std::pair<std::string, SpeculationConfig>> policies;
  for (int k : {1, 3, 5, 8}) {
    policies.emplace_back("fixed " + std::to_string(k), FixedDrafts(k));
  }
  SpeculationConfig adaptive = FixedDrafts(0);  // BASS's cap: 32
  adaptive.policy = DraftLengthPolicyKind::kBass;
  adaptive.bass.l0 = 4;
  policies.emplace_back("BASS Algorithm 1", adaptive);
  SpeculationConfig cost_aware = FixedDrafts(8);
  cost_aware.policy = DraftLengthPolicyKind::kCostAware;
  policies.emplace_back("cost-aware", cost_aware);
  SpeculationConfig schedule = FixedDrafts();
  schedule.schedule = {0, 3, 0, 0, 6, 1};
  policies.emplace_back("schedule 0,3,0,0,6,1", schedule);
  return policies;
}

TEST(SpeculativeGreedy, EqualsPlainGreedyTokenForToken) {
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    Pair p(type, /*draft_seed=*/99);  // an unrelated draft: acceptance is partial
    auto target_kv = p.target->NewKvCache({1, 256});
    auto draft_kv = p.draft->NewKvCache({1, 256});
    for (AttentionMode attention : {AttentionMode::kPad, AttentionMode::kSplit}) {
      for (int salt = 0; salt < 3; ++salt) {
        auto request = Greedy(Prompt(5 + salt * 4, salt), 40);
        request.attention = attention;
        const auto plain = GenerateAutoregressive(*p.target, p.ctx, *target_kv, request);
        for (const auto& [name, options] : EveryPolicy()) {
          SpeculativeStats stats;
          const auto spec = GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv,
                                                request, options, &stats);
          EXPECT_EQ(spec.sequences[0].tokens, plain.sequences[0].tokens)
              << DTypeName(type) << " " << name << " prompt " << salt << " attention "
              << (attention == AttentionMode::kPad ? "PAD" : "SPLIT");
          EXPECT_GT(stats.n_steps, 0);
          EXPECT_LE(stats.n_accepted, stats.n_drafted);
        }
      }
    }
  }
}

// The merge gate on the newer architectures: qwen3 and phi3 pairs (fused matrices, partial
// rotary, LongRoPE) decode greedily exactly as plain decoding does, under every policy.
TEST(SpeculativeGreedy, Qwen3AndPhi3PairsEqualPlainGreedy) {
  for (const std::string shape : {"tiny-qwen3", "tiny-phi3"}) {
    ThreadPool pool(2);
    const KernelContext ctx{&pool, CpuFeatures::Detect()};
    auto target = Model::Load(testing::TinyModel(shape, DType::kQ8_0, 7), &ctx);
    auto draft = Model::Load(testing::TinyModel(shape, DType::kQ8_0, 99), &ctx);
    auto target_kv = target->NewKvCache({1, 256});  // beyond tiny-phi3's 64: the long factors
    auto draft_kv = draft->NewKvCache({1, 256});
    for (int salt = 0; salt < 2; ++salt) {
      const auto request = Greedy(Prompt(5 + salt * 4, salt), 40);
      const auto plain = GenerateAutoregressive(*target, ctx, *target_kv, request);
      for (const auto& [name, options] : EveryPolicy()) {
        const auto spec = GenerateSpeculative(*target, *draft, ctx, *target_kv, *draft_kv, request,
                                              options, nullptr);
        EXPECT_EQ(spec.sequences[0].tokens, plain.sequences[0].tokens)
            << shape << " " << name << " prompt " << salt;
      }
    }
  }
}

TEST(SpeculativeGreedy, IdenticalDraftIsAcceptedCompletely) {
  Pair p(DType::kQ4_0, /*draft_seed=*/7);  // the same weights as the target
  auto target_kv = p.target->NewKvCache({1, 256});
  auto draft_kv = p.draft->NewKvCache({1, 256});
  const auto request = Greedy(Prompt(6, 1), 41);
  SpeculativeStats stats;
  const auto spec = GenerateSpeculativeGreedy(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv,
                                              request, 4, &stats);
  const auto plain = GenerateAutoregressive(*p.target, p.ctx, *target_kv, request);
  EXPECT_EQ(spec.sequences[0].tokens, plain.sequences[0].tokens);
  EXPECT_EQ(stats.n_accepted, stats.n_drafted);
  EXPECT_DOUBLE_EQ(stats.acceptance_rate(), 1.0);
  EXPECT_EQ(stats.n_steps, 8);  // the first of 41 tokens from the prompt, then 5 per step
}

TEST(SpeculativeGreedy, MismatchedVocabularyIsRefused) {
  ThreadPool pool(1);
  KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto target = Model::Load(testing::TinyModel("tiny", DType::kF32, 7), &ctx);
  // A draft with a different token list.
  auto src = GgufFile::Open(testing::TinyModel("tiny", DType::kF32, 8));
  GgufWriter w;
  for (const auto& [k, v] : src->metadata()) w.Set(k, v);
  std::vector<GgufValue> tokens = src->Get("tokenizer.ggml.tokens").AsArray("t").items;
  tokens[300] = GgufValue::Str("something-else");
  w.Set("tokenizer.ggml.tokens", GgufValue::Array(GgufType::kString, tokens));
  for (const auto& t : src->tensors()) {
    w.AddTensor(t.name, t.type, t.shape, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
  }
  const std::string path = testing::TempDir() + "/other-vocab.gguf";
  w.Write(path);
  auto draft = Model::Load(path, &ctx);
  try {
    CheckDraftCompatible(*target, *draft);
    FAIL() << "a draft with another vocabulary was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("share the target's tokenizer"), std::string::npos);
  }
}

}  // namespace
}  // namespace specd

namespace specd {
namespace {

using testing::ChiSquarePValue;

// The exact joint distribution of the second and third generated tokens under the target's
// processed distribution, the first marginalized out: [n_vocab * n_vocab], index x2 * n_vocab +
// x3. (The first token comes from the prompt's own forward, as in plain decoding; the next two
// are the ones speculation produces.)
// Constrained: every row masked by testing::ModuloConstraint's rule after the row's last token.
std::vector<double> ExactTwoTokenDistribution(Model& target, const KernelContext& ctx,
                                              const std::vector<int32_t>& prompt,
                                              const SamplingParams& params, bool constrained) {
  const int64_t v = target.config().n_vocab;
  auto kv = target.NewKvCache({1, 64});
  std::vector<double> joint(v * v, 0.0);
  std::vector<float> logits;
  auto run = [&](const std::vector<int32_t>& tokens) {
    const int seq = kv->Acquire();
    Batch b;
    for (size_t i = 0; i < tokens.size(); ++i) b.Add(tokens[i], i, seq, i + 1 == tokens.size());
    target.Forward(ctx, b, *kv, AttentionMode::kSplit, &logits);
    kv->Release(seq);
    if (constrained) testing::ModuloConstraint(tokens.back()).Mask(logits);
    return ProcessedProbs(logits, params);
  };
  const auto first = run(prompt);
  for (int64_t x1 = 0; x1 < v; ++x1) {
    if (first[x1] == 0) continue;
    auto with_x1 = prompt;
    with_x1.push_back(static_cast<int32_t>(x1));
    const auto second = run(with_x1);
    for (int64_t x2 = 0; x2 < v; ++x2) {
      if (second[x2] == 0) continue;
      auto with_x2 = with_x1;
      with_x2.push_back(static_cast<int32_t>(x2));
      const auto third = run(with_x2);
      for (int64_t x3 = 0; x3 < v; ++x3) {
        joint[x2 * v + x3] += double(first[x1]) * second[x2] * third[x3];
      }
    }
  }
  return joint;
}

// Deliberately wrong verifiers: the distribution test must reject each of them.
VerifyOutcome WrongResidual(std::span<const std::vector<float>> p,
                            std::span<const std::vector<float>> q, std::span<const int32_t> d,
                            const RngKey& key) {
  VerifyOutcome out = VerifySampled(p, q, d, key);
  if (!out.bonus) {  // resample the rejection from p itself instead of norm(max(0, p - q))
    RngKey k2 = key;
    k2.purpose = RngPurpose::kResidual;
    out.next = DrawFrom(p[out.n_accepted], UniformDouble(k2, 77));
  }
  return out;
}

VerifyOutcome BonusFromWrongRow(std::span<const std::vector<float>> p,
                                std::span<const std::vector<float>> q, std::span<const int32_t> d,
                                const RngKey& key) {
  VerifyOutcome out = VerifySampled(p, q, d, key);
  if (out.bonus && !d.empty()) {  // an off-by-one: the bonus drawn from the last draft's row
    RngKey k2 = key;
    k2.purpose = RngPurpose::kBonus;
    out.next = DrawFrom(p[d.size() - 1], UniformDouble(k2, 78));
  }
  return out;
}

struct DistributionCase {
  SamplingParams params;
  VerifyFunction verify;
  const char* name;
  bool should_pass;
  SpecSampling mode = SpecSampling::kRejection;
  bool ngram = false;            // prompt lookup instead of the draft model (point-mass drafts)
  bool restricted_head = false;  // a draft whose head covers half the vocabulary (FR-Spec)
  // Draft lengths: fixed 1 or 2 alternating by run (the default), a schedule (0 = a plain
  // sampled step), BASS Algorithm 1 or the cost-aware policy.
  std::vector<int> schedule = {};
  bool adaptive = false;
  bool cost_aware = false;
  int n_sequences = 1;  // completions of the prompt per run, each counted
  int catch_up_limit = DraftModelProposer::kDefaultCatchUpLimit;  // 1: restarts after plain steps
  DraftModelOptions draft = {};  // fuzzy drafting, calibration, token trees
  int draft_base = 1;            // runs alternate draft lengths draft_base and draft_base + 1
  bool sdsat = false;            // the target drafts for itself with adaptive tokens (token 3)
  bool sdsat_merged = false;     // ... on every verification, not only steps without drafts
  int sdsat_tree_nodes = 0;      // ... drafting trees (depth 2, width 3) of draft_max nodes
  int n_predict = 4;             // tokens per sequence (tokens 2 and 3 are counted)
  bool eagle = false;            // an EAGLE head (micro-shaped, random) drafts from features
  bool constrained = false;      // under testing::ModuloConstraint (structured output)
};

// EasySpec's drafting on the 2-layer test draft: both layers in one fuzzy group.
DraftModelOptions Fuzzy(bool calibrate, int tree_width = 0, int tree_depth = 0) {
  DraftModelOptions o;
  o.fuzzy = LayerGroups::Parse("0-1", 2, 2);
  o.calibrate = calibrate;
  o.tree_width = tree_width;
  o.tree_depth = tree_depth;
  return o;
}

DraftModelOptions Tree(int width, int depth = 0) {
  DraftModelOptions o;
  o.tree_width = width;
  o.tree_depth = depth;
  return o;
}

double SpeculativeTwoTokenPValue(const DistributionCase& c, int n_samples) {
  ThreadPool pool(1);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto target = Model::Load(testing::TinyModel("micro", DType::kF32, 7), &ctx);
  std::string draft_path = testing::TinyModel("micro", DType::kF32, 8);
  if (c.restricted_head) {
    // Every other token: the draft can never propose the rest.
    std::vector<int32_t> head;
    for (int32_t t = 0; t < 24; t += 2) head.push_back(t);
    draft_path = testing::WithRestrictedHead(draft_path, head);
  }
  if (c.eagle) draft_path = testing::EagleHeadOf(draft_path, 5);
  auto draft = Model::Load(draft_path, &ctx);
  // A repetitive prompt gives the n-gram lookup something to propose.
  const std::vector<int32_t> prompt = c.ngram ? std::vector<int32_t>{1, 5, 9, 14, 1, 5, 9, 14, 1, 5}
                                              : std::vector<int32_t>{1, 5, 9, 14};
  const auto exact = ExactTwoTokenDistribution(*target, ctx, prompt, c.params, c.constrained);
  auto target_kv = target->NewKvCache({c.n_sequences, 64});
  auto draft_kv = draft->NewKvCache({c.n_sequences, 64});
  const int64_t v = target->config().n_vocab;
  std::vector<int64_t> counts(v * v, 0);
  SpeculativeStats stats;
  const int n_runs = n_samples / c.n_sequences;
  for (int s = 0; s < n_runs; ++s) {
    GenerateRequest r;
    r.prompt = prompt;
    r.n_predict = c.n_predict;
    r.n_sequences = c.n_sequences;
    r.stop_at_eos = false;
    if (c.constrained) r.constraint = std::make_shared<testing::ModuloGrammar>(prompt.back());
    r.sampling = c.params;
    r.sampling.seed = 1000003ull * s + 17;
    // Tokens 2 and 3: with draft length 2 both go through one verification (rejection at either
    // position, or both accepted); with length 1 token 3 comes from the bonus path or from a
    // second verification, so every path is exercised.
    SpeculationConfig o = FixedDrafts(c.draft_base + s % 2, c.mode);
    o.schedule = c.schedule;
    if (c.adaptive) o.policy = DraftLengthPolicyKind::kBass;
    if (c.cost_aware) o.policy = DraftLengthPolicyKind::kCostAware;
    NgramProposer lookup(1, 3, target->config().n_vocab);
    DraftModelOptions draft_options = c.draft;
    draft_options.catch_up_limit = c.catch_up_limit;
    DraftModelProposer draft_proposer(*draft, *draft_kv, ctx, AttentionMode::kSplit, draft_options);
    const bool tree = c.sdsat_tree_nodes > 0;
    SdsatProposer self_drafting({.adaptive_token = 3,
                                 .n_adaptive = tree ? 2 : o.draft_max,
                                 .merge = c.sdsat_merged,
                                 .tree_nodes = tree ? o.draft_max : 0,
                                 .tree_width = 3});
    std::unique_ptr<EagleProposer> eagle;
    if (c.eagle)
      eagle = std::make_unique<EagleProposer>(*target, *draft, *draft_kv, ctx,
                                              AttentionMode::kSplit, c.catch_up_limit);
    Proposer& proposer = c.ngram   ? static_cast<Proposer&>(lookup)
                         : c.sdsat ? static_cast<Proposer&>(self_drafting)
                         : c.eagle ? static_cast<Proposer&>(*eagle)
                                   : draft_proposer;
    const auto out =
        GenerateWithProposer(*target, ctx, *target_kv, proposer, r, o, &stats, c.verify);
    for (const auto& seq : out.sequences) {
      const auto& t = seq.tokens;
      EXPECT_EQ(t.size(), static_cast<size_t>(c.n_predict));
      if (c.constrained) EXPECT_TRUE(testing::FollowsModuloRule(prompt.back(), t)) << c.name;
      if (t.size() >= 3) ++counts[t[1] * v + t[2]];
    }
  }
  n_samples = n_runs * c.n_sequences;
  // The draft must be neither always accepted nor always rejected, or the test proves little
  // (point-mass n-gram drafts on this near-uniform micro model are accepted less often).
  EXPECT_GT(stats.acceptance_rate(), c.ngram ? 0.02 : 0.05) << c.name;
  EXPECT_LT(stats.acceptance_rate(), 0.95) << c.name;
  return ChiSquarePValue(exact, counts, n_samples);
}

// Every verifier and proposer combination the distribution test covers, and bugs it must catch.
std::vector<DistributionCase> DistributionCases() {
  return {
      {{1.0f, 0, 1.0f, 0}, VerifySampled, "temperature 1", true},
      {{0.7f, 0, 0.9f, 0}, VerifySampled, "temperature 0.7, top-p 0.9", true},
      {{1.0f, 0, 1.0f, 0}, WrongResidual, "residual drawn from p (a bug)", false},
      {{1.0f, 0, 1.0f, 0}, BonusFromWrongRow, "bonus from the wrong row (a bug)", false},
      {{1.0f, 0, 1.0f, 0}, VerifySampled, "coupled, temperature 1", true, SpecSampling::kCoupled},
      {{0.7f, 0, 0.9f, 0},
       VerifySampled,
       "coupled, temperature 0.7, top-p 0.9",
       true,
       SpecSampling::kCoupled},
      {{1.0f, 0, 1.0f, 0},
       VerifySampled,
       "n-gram lookup, rejection",
       true,
       SpecSampling::kRejection,
       true},
      {{1.0f, 0, 1.0f, 0},
       WrongResidual,
       "n-gram lookup, residual drawn from p (a bug)",
       false,
       SpecSampling::kRejection,
       true},
      {{0.7f, 0, 0.9f, 0},
       VerifySampled,
       "n-gram lookup, coupled",
       true,
       SpecSampling::kCoupled,
       true},
      {{1.0f, 0, 1.0f, 0},
       VerifySampled,
       "restricted draft head, rejection",
       true,
       SpecSampling::kRejection,
       false,
       true},
      {{0.8f, 0, 1.0f, 0},
       VerifySampled,
       "restricted draft head, coupled",
       true,
       SpecSampling::kCoupled,
       false,
       true},
      {.params = {1.0f, 8, 1.0f, 0},
       .verify = VerifySampled,
       .name = "3 completions of a prompt, top-k 8",
       .should_pass = true,
       .n_sequences = 3},
      {.params = {0.9f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "schedule 0,2: a plain sampled step, then drafts after catching up",
       .should_pass = true,
       .schedule = {0, 2}},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "schedule 0,0,2 with the draft restarting (catch-up limit 1)",
       .should_pass = true,
       .schedule = {0, 0, 2},
       .catch_up_limit = 1},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "BASS Algorithm 1, 2 completions",
       .should_pass = true,
       .adaptive = true,
       .n_sequences = 2},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "cost-aware lengths, 2 completions, coupled",
       .should_pass = true,
       .mode = SpecSampling::kCoupled,
       .cost_aware = true,
       .n_sequences = 2},
      {.params = {1.0f, 8, 1.0f, 0},
       .verify = WrongResidual,
       .name = "3 completions, top-k 8, residual drawn from p (a bug)",
       .should_pass = false,
       .n_sequences = 3},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "fuzzy drafting with bonus calibration, rejection",
       .should_pass = true,
       .draft = Fuzzy(true)},
      {.params = {0.7f, 0, 0.9f, 0},
       .verify = VerifySampled,
       .name = "fuzzy drafting without calibration, rejection",
       .should_pass = true,
       .draft = Fuzzy(false)},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = WrongResidual,
       .name = "fuzzy drafting, residual drawn from p (a bug)",
       .should_pass = false,
       .draft = Fuzzy(true)},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "fuzzy drafting, coupled",
       .should_pass = true,
       .mode = SpecSampling::kCoupled,
       .draft = Fuzzy(true)},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "token trees of width 2 (2-3 nodes), rejection",
       .should_pass = true,
       .draft = Tree(2),
       .draft_base = 2},
      {.params = {0.8f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "token trees of width 3, depth 2, coupled",
       .should_pass = true,
       .mode = SpecSampling::kCoupled,
       .draft = Tree(3, 2),
       .draft_base = 3},
      {.params = {1.0f, 8, 1.0f, 0},
       .verify = VerifySampled,
       .name = "fuzzy token trees of width 2, 2 completions, rejection",
       .should_pass = true,
       .n_sequences = 2,
       .draft = Fuzzy(true, 2),
       .draft_base = 2},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "SDSAT adaptive tokens, merged loop, rejection",
       .should_pass = true,
       .sdsat = true,
       .sdsat_merged = true},
      {.params = {0.8f, 8, 1.0f, 0},
       .verify = VerifySampled,
       .name = "SDSAT adaptive tokens, two-step loop, 2 completions, top-k 8, coupled",
       .should_pass = true,
       .mode = SpecSampling::kCoupled,
       .n_sequences = 2,
       .sdsat = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "SDSAT token trees of 3-4 nodes, width 3, rejection",
       .should_pass = true,
       .draft_base = 3,
       .sdsat = true,
       .sdsat_tree_nodes = 3,
       .n_predict = 6},
      {.params = {0.8f, 8, 0.95f, 0},
       .verify = VerifySampled,
       .name = "SDSAT token trees, top-k 8, top-p 0.95, coupled",
       .should_pass = true,
       .mode = SpecSampling::kCoupled,
       .draft_base = 3,
       .sdsat = true,
       .sdsat_tree_nodes = 3,
       .n_predict = 6},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = WrongResidual,
       .name = "SDSAT adaptive tokens, residual drawn from p (a bug)",
       .should_pass = false,
       .sdsat = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "EAGLE head, rejection",
       .should_pass = true,
       .eagle = true},
      {.params = {0.7f, 8, 0.9f, 0},
       .verify = VerifySampled,
       .name = "EAGLE head, 3 completions, schedule 0,2, top-k 8, top-p 0.9, coupled",
       .should_pass = true,
       .mode = SpecSampling::kCoupled,
       .schedule = {0, 2},
       .n_sequences = 3,
       .eagle = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "EAGLE head restarting after plain steps (catch-up limit 1), rejection",
       .should_pass = true,
       .schedule = {0, 0, 2},
       .catch_up_limit = 1,
       .eagle = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = WrongResidual,
       .name = "EAGLE head, residual drawn from p (a bug)",
       .should_pass = false,
       .eagle = true},
      // Structured output: the target's distribution is the masked one, and every proposer drafts
      // under the same mask (or has its drafts cut where the grammar stops them).
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "under a grammar, rejection",
       .should_pass = true,
       .constrained = true},
      {.params = {0.7f, 0, 0.9f, 0},
       .verify = VerifySampled,
       .name = "under a grammar, top-p 0.9, coupled",
       .should_pass = true,
       .mode = SpecSampling::kCoupled,
       .constrained = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = WrongResidual,
       .name = "under a grammar, residual drawn from p (a bug)",
       .should_pass = false,
       .constrained = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "under a grammar, restricted draft head, 2 completions, rejection",
       .should_pass = true,
       .restricted_head = true,
       .n_sequences = 2,
       .constrained = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "under a grammar, n-gram lookup, rejection",
       .should_pass = true,
       .ngram = true,
       .constrained = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "under a grammar, SDSAT two-step loop, rejection",
       .should_pass = true,
       .sdsat = true,
       .constrained = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "under a grammar, token trees of width 2, rejection",
       .should_pass = true,
       .draft = Tree(2),
       .draft_base = 2,
       .constrained = true},
      {.params = {1.0f, 0, 1.0f, 0},
       .verify = VerifySampled,
       .name = "under a grammar, EAGLE head, rejection",
       .should_pass = true,
       .eagle = true,
       .constrained = true},
  };
}

void PrintTo(const DistributionCase& c, std::ostream* out) { *out << c.name; }

// A case's name as a test name: its words capitalized, joined, other characters dropped.
std::string TestName(const ::testing::TestParamInfo<DistributionCase>& info) {
  std::string name;
  bool word_start = true;
  for (const char ch : std::string(info.param.name)) {
    if (std::isalnum(static_cast<unsigned char>(ch))) {
      name += word_start ? static_cast<char>(std::toupper(static_cast<unsigned char>(ch))) : ch;
      word_start = false;
    } else {
      word_start = true;
    }
  }
  return name;
}

// One test per case, so that ctest runs them in parallel (all of them take ~6 minutes on one
// core).
class SpeculativeDistribution : public ::testing::TestWithParam<DistributionCase> {};

TEST_P(SpeculativeDistribution, MatchesTheTargetDistribution) {
  const DistributionCase& c = GetParam();
  const double p = SpeculativeTwoTokenPValue(c, 30000);
  std::printf("%s: chi-square p = %.3g\n", c.name, p);
  if (c.should_pass) {
    EXPECT_GT(p, 0.001) << c.name << ": speculative samples differ from the target's";
  } else {
    EXPECT_LT(p, 0.001) << c.name << ": the test failed to detect a wrong verifier";
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, SpeculativeDistribution, ::testing::ValuesIn(DistributionCases()),
                         TestName);

}  // namespace
}  // namespace specd

namespace specd {
namespace {

TEST(Bass, DraftLengthFollowsAlgorithm1) {
  BassParameters o;  // l0 = 7 is the caller's start; incre 2, mod 10, limit 32
  int s = 0;
  EXPECT_EQ(NextDraftLength(7, {7, 2, 0}, o, &s), 9);  // someone accepted everything: grow
  EXPECT_EQ(s, 0);
  EXPECT_EQ(NextDraftLength(9, {3, 1}, o, &s), 8);  // 9 - ceil(0.9) - 0
  EXPECT_EQ(s, 1);
  EXPECT_EQ(NextDraftLength(8, {2}, o, &s), 6);  // 8 - 1 - 1 (consecutive decrease)
  EXPECT_EQ(NextDraftLength(6, {5}, o, &s), 5);  // never below the max accepted
  EXPECT_EQ(NextDraftLength(2, {0}, o, &s), 1);  // never below 1
  s = 0;
  EXPECT_EQ(NextDraftLength(31, {31}, o, &s), 32);  // capped at l_limit
}

// Plain greedy decoding of each prompt alone: what every speculative output must equal.
std::vector<std::vector<int32_t>> PlainGreedy(Pair& p, KvCache& kv,
                                              const std::vector<std::vector<int32_t>>& prompts,
                                              int n_predict) {
  std::vector<std::vector<int32_t>> out;
  for (const auto& prompt : prompts) {
    out.push_back(GenerateAutoregressive(*p.target, p.ctx, kv, Greedy(prompt, n_predict))
                      .sequences[0]
                      .tokens);
  }
  return out;
}

// Every sequence of a batch must equal plain greedy decoding of its own prompt: acceptance is
// ragged, and nothing may be mixed up between sequences.
TEST(Bass, GreedyBatchEqualsPlainGreedyForEverySequence) {
  Pair p(DType::kQ8_0, /*draft_seed=*/99);
  const int n = 8;
  auto target_kv = p.target->NewKvCache({n, 256});
  auto draft_kv = p.draft->NewKvCache({n, 256});
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < n; ++b) prompts.push_back(Prompt(3 + 5 * b, b));  // ragged lengths
  const auto expected = PlainGreedy(p, *target_kv, prompts, 30);
  for (AttentionMode mode : {AttentionMode::kPad, AttentionMode::kSplit}) {
    // Fixed K, BASS Algorithm 1, cost-aware, and a schedule that switches drafting off and on
    // (plain steps leave tokens for the draft to catch up on).
    for (const char* policy : {"fixed", "adaptive", "cost", "schedule"}) {
      GenerateRequest r = Greedy({}, 30);
      r.prompts = prompts;
      r.attention = mode;
      SpeculationConfig o = FixedDrafts(std::string(policy) == "adaptive" ? 7 : 3);
      if (std::string(policy) == "adaptive") o.policy = DraftLengthPolicyKind::kBass;
      if (std::string(policy) == "cost") o.policy = DraftLengthPolicyKind::kCostAware;
      if (std::string(policy) == "schedule") o.schedule = {0, 3, 0, 0, 5, 1, 0, 2};
      SpeculativeStats stats;
      const auto out =
          GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, o, &stats);
      ASSERT_EQ(out.sequences.size(), static_cast<size_t>(n));
      for (int b = 0; b < n; ++b) {
        EXPECT_EQ(out.sequences[b].tokens, expected[b])
            << "sequence " << b << " policy " << policy << " mode " << static_cast<int>(mode);
      }
      if (std::string(policy) == "schedule") {
        EXPECT_GT(stats.n_plain_steps, 0);
      }
    }
  }
  // n completions of one prompt (encoded once, forked) at batch 8.
  GenerateRequest shared = Greedy(prompts[2], 30);
  shared.n_sequences = n;
  const auto out =
      GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, shared, 4, nullptr);
  for (int b = 0; b < n; ++b) EXPECT_EQ(out.sequences[b].tokens, expected[2]) << b;
}

// With f16 KV caches (both models) the speculative output still equals plain greedy decoding
// over an f16 cache, at batch 1 and with ragged acceptance at batch 4.
TEST(Bass, GreedyWithF16KvCachesEqualsPlainGreedy) {
  Pair p(DType::kQ8_0, /*draft_seed=*/99);
  const int n = 4;
  auto target_kv = p.target->NewKvCache({n, 256, DType::kF16});
  auto draft_kv = p.draft->NewKvCache({n, 256, DType::kF16});
  std::vector<std::vector<int32_t>> prompts;
  for (int b = 0; b < n; ++b) prompts.push_back(Prompt(4 + 3 * b, 10 + b));
  const auto expected = PlainGreedy(p, *target_kv, prompts, 30);
  auto f32_kv = p.target->NewKvCache({1, 256});
  // The cache type is really used: over 4 x 30 tokens the f32 cache's logits differ somewhere.
  bool any_logit_differs = false;
  for (const auto& prompt : prompts) {
    Batch batch;
    for (size_t i = 0; i < prompt.size(); ++i) {
      batch.Add(prompt[i], static_cast<int32_t>(i), 0, i + 1 == prompt.size());
    }
    std::vector<float> a, b;
    const int s16 = target_kv->Acquire();
    const int s32 = f32_kv->Acquire();
    for (auto& seq : batch.slots) seq = s16;
    p.target->Forward(p.ctx, batch, *target_kv, AttentionMode::kSplit, &a);
    for (auto& seq : batch.slots) seq = s32;
    p.target->Forward(p.ctx, batch, *f32_kv, AttentionMode::kSplit, &b);
    any_logit_differs |= a != b;
    target_kv->Release(s16);
    f32_kv->Release(s32);
  }
  EXPECT_TRUE(any_logit_differs);
  for (int batch_size : {1, n}) {
    GenerateRequest r = Greedy({}, 30);
    r.prompts.assign(prompts.begin(), prompts.begin() + batch_size);
    const auto out =
        GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, 3, nullptr);
    for (int b = 0; b < batch_size; ++b) {
      EXPECT_EQ(out.sequences[b].tokens, expected[b]) << "batch " << batch_size << " seq " << b;
    }
  }
}

// Three prompts of growing length on the pair whose draft has the target's own weights
// (acceptance stays high), and their plain greedy continuations.
struct ThreePrompts {
  static constexpr int kN = 3;
  ThreePrompts(int first_length, int length_step, int n_predict) {
    for (int b = 0; b < kN; ++b) prompts.push_back(Prompt(first_length + length_step * b, b));
    expected = PlainGreedy(p, *target_kv, prompts, n_predict);
    request = Greedy({}, n_predict);
    request.prompts = prompts;
  }
  Pair p{DType::kQ8_0, /*draft_seed=*/7};
  std::unique_ptr<KvCache> target_kv = p.target->NewKvCache({kN, 256});
  std::unique_ptr<KvCache> draft_kv = p.draft->NewKvCache({kN, 256});
  std::vector<std::vector<int32_t>> prompts;
  std::vector<std::vector<int32_t>> expected;
  GenerateRequest request;
};

// Long runs of plain steps make the draft restart from a window of recent tokens instead of
// reading everything it skipped; the output must not notice.
TEST(Bass, DraftRestartAfterLongPlainRunsKeepsGreedyOutput) {
  ThreePrompts t(/*first_length=*/4, /*length_step=*/3, /*n_predict=*/180);
  Pair& p = t.p;
  SpeculationConfig o = FixedDrafts();
  o.schedule.assign(80, 0);  // 80 plain steps, then drafting, then 70 plain steps and drafting
  for (int k : {3, 2, 4}) o.schedule.push_back(k);
  o.schedule.insert(o.schedule.end(), 70, 0);
  for (int i = 0; i < 10; ++i) o.schedule.push_back(3);
  SpeculativeStats stats;
  const auto out = GenerateSpeculative(*p.target, *p.draft, p.ctx, *t.target_kv, *t.draft_kv,
                                       t.request, o, &stats);
  for (int b = 0; b < t.kN; ++b) EXPECT_EQ(out.sequences[b].tokens, t.expected[b]) << b;
  EXPECT_GT(stats.n_accepted, 0);
  EXPECT_GT(stats.n_plain_steps, 100);
}

// --draft-prompt-tokens: the draft reads only the last N prompt tokens (from its position 0)
// before it first drafts; it proposes from less context, and the output must not notice.
TEST(Bass, DraftReadingOnlyThePromptsLastTokensKeepsGreedyOutput) {
  ThreePrompts t(/*first_length=*/9, /*length_step=*/5, /*n_predict=*/40);
  Pair& p = t.p;
  DraftModelConfig config;  // as --draft-prompt-tokens 4 sets it
  config.prompt_tokens = 4;
  const DraftModelOptions window = DraftModelOptionsFor(config, *p.draft);
  {  // what a first drafting step reads: 3 prompt rows and the last prompt token, per prompt
    DraftModelProposer proposer(*p.draft, *t.draft_kv, p.ctx, AttentionMode::kSplit, window);
    for (int b = 0; b < t.kN; ++b) proposer.AddSequence(b, t.prompts[b]);
    const std::vector<int> seqs = {0, 1, 2};
    EXPECT_EQ(proposer.RowsBeforeFirstDraft(seqs), t.kN * window.prompt_limit);
  }
  SpeculativeStats stats;
  const auto out = GenerateSpeculative(*p.target, *p.draft, p.ctx, *t.target_kv, *t.draft_kv,
                                       t.request, FixedDrafts(3), &stats, VerifySampled, window);
  for (int b = 0; b < t.kN; ++b) EXPECT_EQ(out.sequences[b].tokens, t.expected[b]) << b;
  EXPECT_GT(stats.n_accepted, 0);
}

TEST(Bass, SampledBatchReproducesAndSequencesDiffer) {
  Pair p(DType::kQ8_0, /*draft_seed=*/99);
  auto target_kv = p.target->NewKvCache({4, 256});
  auto draft_kv = p.draft->NewKvCache({4, 256});
  GenerateRequest r = Greedy(Prompt(6, 3), 24);
  r.n_sequences = 4;
  r.sampling = {0.9f, 0, 0.95f, 42};
  SpeculationConfig o = FixedDrafts(7);
  o.policy = DraftLengthPolicyKind::kBass;
  o.bass.l0 = 7;
  const auto a =
      GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, o, nullptr);
  const auto b =
      GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, o, nullptr);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(a.sequences[i].tokens, b.sequences[i].tokens);
  EXPECT_NE(a.sequences[0].tokens, a.sequences[1].tokens);
}

TEST(Bass, TinyTimeBudgetStopsEverySequence) {
  Pair p(DType::kF32, /*draft_seed=*/99);
  auto target_kv = p.target->NewKvCache({2, 256});
  auto draft_kv = p.draft->NewKvCache({2, 256});
  GenerateRequest r = Greedy(Prompt(4, 1), 200);
  r.n_sequences = 2;
  r.time_budget_ms = 1e-6;  // already over when the first step would start
  const auto out =
      GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, 4, nullptr);
  for (const auto& s : out.sequences) {
    EXPECT_EQ(s.finish_reason, "budget");
    EXPECT_LT(s.tokens.size(), 200u);
  }
}

// What a budget returns: only finished sequences, best mean log-probability first, on real
// generations of different lengths (sampled, so their log-probabilities differ) with some
// marked as stopped by the budget.
TEST(Bass, TimeBudgetKeepsFinishedSequencesRankedByMeanLogProbability) {
  Pair p(DType::kF32, /*draft_seed=*/99);
  auto target_kv = p.target->NewKvCache({6, 256});
  auto draft_kv = p.draft->NewKvCache({6, 256});
  GenerateRequest r = Greedy(Prompt(4, 1), 24);
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.n_sequences = 6;
  auto out = GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, 4, nullptr);
  ASSERT_EQ(out.sequences.size(), 6u);
  out.sequences[1].finish_reason = "budget";
  out.sequences[4].finish_reason = "budget";
  std::vector<double> kept_logprobs;
  for (int i : {0, 2, 3, 5}) kept_logprobs.push_back(out.sequences[i].mean_logprob());
  std::sort(kept_logprobs.rbegin(), kept_logprobs.rend());
  ASSERT_NE(kept_logprobs.front(), kept_logprobs.back()) << "sampled sequences should differ";
  EXPECT_EQ(KeepFinishedRankedByLogProb(&out), 2);
  ASSERT_EQ(out.sequences.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NE(out.sequences[i].index, 1);
    EXPECT_NE(out.sequences[i].index, 4);
    EXPECT_EQ(out.sequences[i].mean_logprob(), kept_logprobs[i]) << "rank " << i;
  }
}

}  // namespace
}  // namespace specd

namespace specd {
namespace {

// EasySpec's drafting variants on the 2-layer test draft (both layers in one fuzzy group).
std::vector<std::pair<std::string, DraftModelOptions>> EasySpecVariants() {
  std::vector<std::pair<std::string, DraftModelOptions>> v;
  DraftModelOptions fuzzy;
  fuzzy.fuzzy = LayerGroups::Parse("0-1", 2, 2);
  v.emplace_back("fuzzy, calibrated", fuzzy);
  fuzzy.calibrate = false;
  v.emplace_back("fuzzy, no calibration", fuzzy);
  DraftModelOptions tree;
  tree.tree_width = 2;
  v.emplace_back("tree 2", tree);
  tree.tree_width = 3;
  tree.tree_depth = 2;
  v.emplace_back("tree 3,2", tree);
  tree.fuzzy = LayerGroups::Parse("0-1", 2, 2);
  v.emplace_back("fuzzy tree 3,2", tree);
  return v;
}

TEST(EasySpec, GreedyOutputEqualsPlainForEveryVariant) {
  Pair p(DType::kQ8_0, /*draft_seed=*/99);
  const int n = 3;
  auto target_kv = p.target->NewKvCache({n, 256});
  auto draft_kv = p.draft->NewKvCache({n, 256});
  for (const auto& [variant, draft] : EasySpecVariants()) {
    for (int n_seq : {1, n}) {
      GenerateRequest request = Greedy(Prompt(9, n_seq), 40);
      for (int i = 0; i < n_seq && n_seq > 1; ++i) request.prompts.push_back(Prompt(4 + 3 * i, i));
      const auto plain = GenerateAutoregressive(*p.target, p.ctx, *target_kv, request);
      for (int k : {1, 4, 7}) {
        const SpeculationConfig o = FixedDrafts(k);
        SpeculativeStats stats;
        const auto spec = GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv,
                                              request, o, &stats, VerifySampled, draft);
        ASSERT_EQ(spec.sequences.size(), plain.sequences.size());
        for (size_t i = 0; i < plain.sequences.size(); ++i) {
          EXPECT_EQ(spec.sequences[i].tokens, plain.sequences[i].tokens)
              << variant << ", K=" << k << ", batch " << n_seq << ", sequence " << i;
        }
        EXPECT_GT(stats.n_drafted, 0) << variant;
      }
    }
  }
}

// All K / V bytes of a slot's first n positions, every layer.
std::vector<uint8_t> KvBytes(const Model& model, KvCache& kv, int slot, int n) {
  std::vector<uint8_t> out;
  const int64_t bytes = RowBytes(kv.type(), kv.kv_dim()) * n;
  for (int il = 0; il < model.config().n_layer; ++il) {
    for (const void* p : {kv.K(il, slot), kv.V(il, slot)}) {
      const auto* b = static_cast<const uint8_t*>(p);
      out.insert(out.end(), b, b + bytes);
    }
  }
  return out;
}

// Bonus calibration: once a step's first forward has re-read the accepted tokens, the draft's
// cache over every committed token is the exact draft's, bit for bit; without calibration fuzzy
// entries stay. The committed text is a fixed stream; each proposer keeps the prefix of its
// drafts that matches it.
TEST(EasySpec, CalibratedCacheEqualsANeverFuzzyRun) {
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto draft = Model::Load(testing::TinyModel("tiny", DType::kQ8_0, 7), &ctx);
  auto target = Model::Load(testing::TinyModel("tiny", DType::kQ8_0, 7), &ctx);
  // The stream: the same model's own greedy text (so drafts are often accepted), then noise.
  GenerateRequest request = Greedy(Prompt(6, 3), 30);
  auto plain_kv = target->NewKvCache({1, 128});
  std::vector<int32_t> stream = request.prompt;
  const auto plain = GenerateAutoregressive(*target, ctx, *plain_kv, request);
  stream.insert(stream.end(), plain.sequences[0].tokens.begin(), plain.sequences[0].tokens.end());
  for (int i = 0; i < 12; ++i) stream.push_back((i * 53 + 7) % 384);

  DraftModelOptions calibrated, uncalibrated;
  calibrated.fuzzy = uncalibrated.fuzzy = LayerGroups::Parse("0-1", 2, 2);
  uncalibrated.calibrate = false;
  struct Run {
    std::unique_ptr<KvCache> kv;
    std::unique_ptr<DraftModelProposer> proposer;
    int committed = 6;
  };
  std::vector<Run> runs(3);
  const DraftModelOptions options[3] = {{}, calibrated, uncalibrated};
  for (int i = 0; i < 3; ++i) {
    runs[i].kv = draft->NewKvCache({1, 128});
    runs[i].proposer = std::make_unique<DraftModelProposer>(*draft, *runs[i].kv, ctx,
                                                            AttentionMode::kSplit, options[i]);
    runs[i].proposer->AddSequence(0, std::span(stream).first(6));
  }
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  int fuzzy_differs = 0, accepted = 0;
  for (int step = 0; step < 12; ++step) {
    for (Run& r : runs) {
      if (r.committed + 4 >= static_cast<int>(stream.size())) continue;
      const DraftInput in{0, 3, r.committed, &greedy, 0, SpecSampling::kRejection};
      std::vector<Proposal> out;
      r.proposer->Propose(std::span(&in, 1), &out, nullptr);
      int n = 0;
      while (n < 3 && out[0].tokens[n] == stream[r.committed + n]) ++n;
      accepted += n;
      r.proposer->Accept(0, n, stream[r.committed + n]);
      r.committed += n + 1;
    }
    // After each Propose the caches hold every committed token but the newest few (read by the
    // next step's first forward): compare the prefix all three have read.
    const int n = std::min({runs[0].committed, runs[1].committed, runs[2].committed}) - 5;
    const auto exact = KvBytes(*draft, *runs[0].kv, 0, n);
    EXPECT_EQ(KvBytes(*draft, *runs[1].kv, 0, n), exact) << "step " << step;
    fuzzy_differs += KvBytes(*draft, *runs[2].kv, 0, n) != exact;
  }
  EXPECT_GT(accepted, 5);       // drafts were kept, so calibration had entries to replace
  EXPECT_GT(fuzzy_differs, 0);  // and without it the cache differs
}

}  // namespace
}  // namespace specd
