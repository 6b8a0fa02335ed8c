// Structured output: a grammar masks the target at every position and every proposer drafts under
// the same mask, so constrained speculative decoding writes what constrained plain decoding
// writes (greedy token for token, coupled sampling for a seed), and the output follows the
// grammar. The sampled distribution under a grammar is tested with the other merge gates
// (speculative_test.cc, "under a grammar" cases). xgrammar is checked on the shipped pair's real
// vocabulary: JSON schemas, GBNF, regexes, and errors for what it cannot compile.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "draft/draft_model_proposer.h"
#include "draft/ngram_proposer.h"
#include "draft/sdsat_proposer.h"
#include "engine/engine_builder.h"
#include "engine/generate.h"
#include "grammar/grammar.h"
#include "tests/test_util.h"

namespace specd {
namespace {

using testing::FixedDrafts;
using testing::ModelPair;
using testing::Prompt;

GenerateRequest ConstrainedRequest(const std::vector<int32_t>& prompt, int n, float temperature,
                                   uint64_t seed, int n_sequences = 1) {
  GenerateRequest r;
  r.prompt = prompt;
  r.n_predict = n;
  r.n_sequences = n_sequences;
  r.stop_at_eos = false;
  r.sampling = {temperature, 0, 1.0f, seed};
  r.constraint = std::make_shared<testing::ModuloGrammar>(prompt.back());
  return r;
}

// Which proposer drafts in a case.
enum class Drafter { kDraftModel, kDraftTree, kNgram, kSdsat };

GenerateResult RunWith(Drafter drafter, ModelPair& p, const GenerateRequest& r, SpecSampling mode,
                       SpeculativeStats* stats) {
  auto target_kv = p.target->NewKvCache({r.n_sequences, 256});
  auto draft_kv = p.draft->NewKvCache({r.n_sequences, 256});
  const SpeculationConfig config = FixedDrafts(4, mode);
  switch (drafter) {
    case Drafter::kDraftModel:
      return GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, config,
                                 stats);
    case Drafter::kDraftTree: {
      DraftModelOptions tree;
      tree.tree_width = 2;
      return GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, config,
                                 stats, VerifySampled, tree);
    }
    case Drafter::kNgram: {
      NgramProposer lookup(1, 3, p.target->config().n_vocab);
      return GenerateWithProposer(*p.target, p.ctx, *target_kv, lookup, r, config, stats);
    }
    case Drafter::kSdsat: {
      SdsatProposer self({.adaptive_token = 3, .n_adaptive = 4});
      return GenerateWithProposer(*p.target, p.ctx, *target_kv, self, r, config, stats);
    }
  }
  return {};
}

// A prompt that repeats, so that prompt lookup has something to propose.
std::vector<int32_t> RepetitivePrompt() {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 6; ++i) {
    for (int32_t t : {11, 12, 13, 14, 16}) prompt.push_back(t);
  }
  return prompt;
}

// The draft is the target itself (seed 7 both): a draft drafting under the same mask as the
// target's is then never wrong, which a draft ignoring the grammar would be.
TEST(Constrained, GreedySpeculativeEqualsGreedyPlainForEveryProposer) {
  ModelPair p(DType::kQ8_0, 7);
  for (Drafter drafter :
       {Drafter::kDraftModel, Drafter::kDraftTree, Drafter::kNgram, Drafter::kSdsat}) {
    for (int n_sequences : {1, 3}) {
      const std::vector<int32_t> prompt =
          drafter == Drafter::kNgram ? RepetitivePrompt() : Prompt(6, 3);
      const GenerateRequest r = ConstrainedRequest(prompt, 40, 0.0f, 1, n_sequences);
      auto kv = p.target->NewKvCache({n_sequences, 256});
      const GenerateResult plain = GenerateAutoregressive(*p.target, p.ctx, *kv, r);
      SpeculativeStats stats;
      const GenerateResult spec = RunWith(drafter, p, r, SpecSampling::kRejection, &stats);
      const std::string name = "drafter " + std::to_string(static_cast<int>(drafter)) + ", batch " +
                               std::to_string(n_sequences);
      for (int i = 0; i < n_sequences; ++i) {
        EXPECT_EQ(spec.sequences[i].tokens, plain.sequences[i].tokens) << name;
        EXPECT_TRUE(testing::FollowsModuloRule(prompt.back(), plain.sequences[i].tokens)) << name;
        EXPECT_EQ(plain.sequences[i].tokens.size(), 40u) << name;
      }
      EXPECT_GT(stats.n_drafted, 0) << name;
      // SDSAT's adaptive token drafts well only in a fine-tuned model; this one is random.
      if (drafter != Drafter::kSdsat) EXPECT_GT(stats.n_accepted, 0) << name;
      if (drafter == Drafter::kDraftModel) EXPECT_EQ(stats.n_accepted, stats.n_drafted) << name;
    }
  }
}

// Unconstrained, the same request writes tokens the rule forbids: the mask is what holds.
TEST(Constrained, TheGrammarChangesTheOutput) {
  ModelPair p(DType::kQ8_0, 99);
  GenerateRequest r = ConstrainedRequest(Prompt(6, 3), 40, 0.0f, 1);
  r.constraint = nullptr;
  auto kv = p.target->NewKvCache({1, 256});
  const GenerateResult free_run = GenerateAutoregressive(*p.target, p.ctx, *kv, r);
  EXPECT_FALSE(testing::FollowsModuloRule(r.prompt.back(), free_run.sequences[0].tokens));
}

TEST(Constrained, CoupledSpeculativeSamplingEqualsPlainSamplingForASeed) {
  ModelPair p(DType::kQ8_0, 99);
  for (Drafter drafter : {Drafter::kDraftModel, Drafter::kNgram, Drafter::kSdsat}) {
    for (uint64_t seed : {5u, 6u, 7u}) {
      const std::vector<int32_t> prompt =
          drafter == Drafter::kNgram ? RepetitivePrompt() : Prompt(5, static_cast<int>(seed));
      const GenerateRequest r = ConstrainedRequest(prompt, 32, 0.8f, seed, 2);
      auto kv = p.target->NewKvCache({2, 256});
      const GenerateResult plain =
          GenerateAutoregressive(*p.target, p.ctx, *kv, r, SpecSampling::kCoupled);
      SpeculativeStats stats;
      const GenerateResult spec = RunWith(drafter, p, r, SpecSampling::kCoupled, &stats);
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(spec.sequences[i].tokens, plain.sequences[i].tokens)
            << "drafter " << static_cast<int>(drafter) << " seed " << seed;
        EXPECT_TRUE(testing::FollowsModuloRule(prompt.back(), spec.sequences[i].tokens));
      }
    }
  }
}

// The shipped pair with its tokenizer, and xgrammar's compiler over its vocabulary.
struct ShippedPair {
  ShippedPair() {
    EngineConfig config;
    config.model_path = SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf";
    config.speculation.draft.path = SPECD_SOURCE_DIR "/models/specd-draft-q8_0.gguf";
    config.speculation.proposer = ProposerKind::kDraftModel;
    config.threads = 2;
    models = LoadModels(config);
  }
  // Greedy plain and speculative output under `spec`; checks they agree and returns the text.
  std::string GreedyBoth(const GrammarSpec& spec, const std::string& prompt, int n) {
    GenerateRequest r = testing::Greedy(models->tokenizer->Encode(prompt, true, false), n);
    r.stop_at_eos = true;
    r.constraint = models->grammar().Compile(spec);
    auto target_kv = models->target->NewKvCache({1, 512});
    auto draft_kv = models->draft->NewKvCache({1, 512});
    const GenerateResult plain =
        GenerateAutoregressive(*models->target, models->ctx, *target_kv, r);
    SpeculativeStats stats;
    const GenerateResult spec_run =
        GenerateSpeculative(*models->target, *models->draft, models->ctx, *target_kv, *draft_kv, r,
                            FixedDrafts(4), &stats);
    EXPECT_EQ(spec_run.sequences[0].tokens, plain.sequences[0].tokens) << spec.text;
    EXPECT_EQ(plain.sequences[0].finish_reason, "stop") << spec.text;
    return models->tokenizer->Decode(plain.sequences[0].tokens);
  }
  std::unique_ptr<LoadedModels> models;
};

TEST(Grammar, JsonSchemaOutputParsesAndFollowsTheSchema) {
  ShippedPair pair;
  GrammarSpec spec;
  spec.kind = GrammarKind::kJsonSchema;
  spec.text = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 12},
      "age": {"type": "integer", "minimum": 0, "maximum": 120},
      "mood": {"enum": ["happy", "sad", "sleepy"]},
      "tags": {"type": "array", "items": {"type": "string", "maxLength": 8}, "maxItems": 3}},
    "required": ["name", "age", "mood", "tags"], "additionalProperties": false})";
  const std::string text = pair.GreedyBoth(spec, "Once upon a time, a cat", 160);
  const nlohmann::json value = nlohmann::json::parse(text);
  ASSERT_TRUE(value.is_object()) << text;
  EXPECT_EQ(value.size(), 4u) << text;
  EXPECT_TRUE(value.at("name").is_string()) << text;
  EXPECT_LE(value.at("name").get<std::string>().size(), 12u) << text;
  EXPECT_TRUE(value.at("age").is_number_integer()) << text;
  EXPECT_GE(value.at("age").get<int>(), 0);
  EXPECT_LE(value.at("age").get<int>(), 120);
  const std::string mood = value.at("mood").get<std::string>();
  EXPECT_TRUE(mood == "happy" || mood == "sad" || mood == "sleepy") << text;
  EXPECT_LE(value.at("tags").size(), 3u) << text;
}

TEST(Grammar, AnyJsonGbnfAndRegex) {
  ShippedPair pair;
  GrammarSpec json;
  json.kind = GrammarKind::kJson;
  const std::string any = pair.GreedyBoth(json, "The list of animals:", 200);
  EXPECT_NO_THROW(nlohmann::json::parse(any)) << any;

  GrammarSpec gbnf;
  gbnf.kind = GrammarKind::kGbnf;
  gbnf.text = R"(root ::= "The answer is " ("yes" | "no") "." )";
  const std::string answer = pair.GreedyBoth(gbnf, "Is the sky blue?", 32);
  EXPECT_TRUE(answer == "The answer is yes." || answer == "The answer is no.") << answer;

  GrammarSpec regex;
  regex.kind = GrammarKind::kRegex;
  regex.text = R"([0-9]{3}-[0-9]{4})";
  const std::string number = pair.GreedyBoth(regex, "Call me at", 32);
  ASSERT_EQ(number.size(), 8u) << number;
  EXPECT_EQ(number[3], '-') << number;
}

TEST(Grammar, ToolCallsWrapEachCallAndFollowTheToolsSchemas) {
  ShippedPair pair;
  GrammarSpec tools;
  tools.kind = GrammarKind::kToolCalls;
  tools.tool_schemas = {
      R"({"type": "object", "properties": {"name": {"const": "get_weather"}, "arguments":
          {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10}},
           "required": ["city"]}}, "required": ["name", "arguments"]})"};
  const std::string text = pair.GreedyBoth(tools, "What is the weather in Paris?", 96);
  ASSERT_EQ(text.rfind("<tool_call>\n", 0), 0u) << text;
  const size_t close = text.find("\n</tool_call>");
  ASSERT_NE(close, std::string::npos) << text;
  const nlohmann::json call = nlohmann::json::parse(text.substr(12, close - 12));
  EXPECT_EQ(call.at("name"), "get_weather") << text;
  EXPECT_TRUE(call.at("arguments").at("city").is_string()) << text;
}

TEST(Grammar, WhatTheLibraryCannotCompileIsAnErrorThatSaysWhy) {
  ShippedPair pair;
  GrammarSpec bad_schema;
  bad_schema.kind = GrammarKind::kJsonSchema;
  bad_schema.text = R"({"type": "object", "properties": )";
  EXPECT_THROW(pair.models->grammar().Compile(bad_schema), Error);
  GrammarSpec bad_gbnf;
  bad_gbnf.kind = GrammarKind::kGbnf;
  bad_gbnf.text = "root ::= missing_rule";
  try {
    pair.models->grammar().Compile(bad_gbnf);
    FAIL() << "a grammar naming an undefined rule compiled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing_rule"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace specd
