// Merge gates for greedy speculative decoding: output identical to plain greedy decoding, token
// for token, for any draft; a draft identical to the target is accepted 100%.
#include "decode/speculative.h"

#include <gtest/gtest.h>

#include "base/error.h"
#include "decode/autoregressive.h"
#include "tests/test_util.h"

namespace specd {
namespace {

struct Pair {
  explicit Pair(DType type, uint64_t draft_seed, const std::string& draft_shape = "tiny")
      : pool(2), ctx{&pool, CpuFeatures::Detect()} {
    target = Model::Load(testing::TinyModel("tiny", type, 7), &ctx);
    draft = Model::Load(testing::TinyModel(draft_shape, type, draft_seed), &ctx);
  }
  ThreadPool pool;
  KernelContext ctx;
  std::unique_ptr<Model> target, draft;
};

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 53 + salt * 7 + 5) % 384);
  return p;
}

GenerateRequest Greedy(const std::vector<int32_t>& prompt, int n) {
  GenerateRequest r;
  r.prompt = prompt;
  r.n_predict = n;
  r.sampling.temperature = 0.0f;
  r.stop_at_eos = false;
  return r;
}

TEST(SpeculativeGreedy, EqualsPlainGreedyTokenForToken) {
  for (DType type : {DType::kF32, DType::kQ8_0}) {
    Pair p(type, /*draft_seed=*/99);  // an unrelated draft: acceptance is partial
    auto target_kv = p.target->NewKvCache({1, 256});
    auto draft_kv = p.draft->NewKvCache({1, 256});
    for (int salt = 0; salt < 3; ++salt) {
      const auto request = Greedy(Prompt(5 + salt * 4, salt), 40);
      const auto plain = GenerateAutoregressive(*p.target, p.ctx, *target_kv, request);
      for (int k : {1, 3, 5, 8}) {
        SpeculativeStats stats;
        const auto spec = GenerateSpeculativeGreedy(*p.target, *p.draft, p.ctx, *target_kv,
                                                    *draft_kv, request, k, &stats);
        EXPECT_EQ(spec.sequences[0].tokens, plain.sequences[0].tokens)
            << DTypeName(type) << " k=" << k << " prompt " << salt;
        EXPECT_GT(stats.n_steps, 0);
        EXPECT_LE(stats.n_accepted, stats.n_drafted);
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
  EXPECT_EQ(stats.n_steps, 9);  // 41 tokens at 5 per step (4 drafts + bonus)
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
