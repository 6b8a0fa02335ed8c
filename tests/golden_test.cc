// Greedy golden outputs: the exact tokens the shipped 16.5M pair writes for a few prompts, plain
// and speculative, stored in tests/data/golden_greedy.json. A change to any kernel, the model,
// the tokenizer or the step that moves a token shows here. The file is regenerated only on
// purpose: SPECD_REGENERATE_GOLDEN=1 ctest -R Golden (then review the diff and say why).
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "engine/engine_builder.h"
#include "engine/generate.h"
#include "tests/test_util.h"

namespace specd {
namespace {

const std::string kGoldenPath = SPECD_SOURCE_DIR "/tests/data/golden_greedy.json";
const std::vector<std::string> kPrompts = {"def fibonacci(n):", "import os\n\n\ndef main(",
                                           "class Stack:\n    \"\"\"A LIFO stack.\"\"\""};
constexpr int kNewTokens = 48;

std::unique_ptr<LoadedModels> ShippedPair() {
  EngineConfig config;
  config.model_path = SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf";
  config.draft_path = SPECD_SOURCE_DIR "/models/specd-draft-q8_0.gguf";
  config.proposer = ProposerKind::kDraftModel;
  config.threads = 2;
  return LoadModels(config);
}

TEST(Golden, ShippedPairWritesTheRecordedTokensPlainAndSpeculative) {
  const auto models = ShippedPair();
  auto target_kv = models->target->NewKvCache({1, 256});
  auto draft_kv = models->draft->NewKvCache({1, 256});
  nlohmann::json written = nlohmann::json::array();
  for (const std::string& prompt : kPrompts) {
    const GenerateRequest request =
        testing::Greedy(models->tokenizer->Encode(prompt, true, false), kNewTokens);
    const std::vector<int32_t> plain =
        GenerateAutoregressive(*models->target, models->ctx, *target_kv, request)
            .sequences[0]
            .tokens;
    SpeculativeOptions options;
    options.draft_max = 4;
    const std::vector<int32_t> speculative =
        GenerateSpeculative(*models->target, *models->draft, models->ctx, *target_kv, *draft_kv,
                            request, options, nullptr)
            .sequences[0]
            .tokens;
    EXPECT_EQ(speculative, plain) << prompt;
    written.push_back({{"prompt", prompt}, {"tokens", plain}});
  }
  if (std::getenv("SPECD_REGENERATE_GOLDEN") != nullptr) {
    std::ofstream out(kGoldenPath);  // one prompt per line: diffs show which moved
    for (size_t i = 0; i < written.size(); ++i) {
      out << (i == 0 ? "[" : " ") << written[i].dump() << (i + 1 < written.size() ? ",\n" : "]\n");
    }
    GTEST_SKIP() << "wrote " << kGoldenPath << ": review the diff";
  }
  const nlohmann::json golden = nlohmann::json::parse(ReadFileBytes(kGoldenPath));
  ASSERT_EQ(golden.size(), written.size());
  for (size_t i = 0; i < golden.size(); ++i) {
    EXPECT_EQ(golden[i]["prompt"], written[i]["prompt"]);
    EXPECT_EQ(golden[i]["tokens"], written[i]["tokens"])
        << "prompt " << i << ": the shipped pair's greedy tokens changed (a kernel's rounding? "
        << "SPECD_REGENERATE_GOLDEN=1 rewrites the file when the change is meant)";
  }
}

}  // namespace
}  // namespace specd
