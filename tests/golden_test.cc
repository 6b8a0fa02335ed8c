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

std::string IsaTier(const CpuFeatures& features) {
  return features.avx512 ? "avx512" : features.avx2 ? "avx2" : "scalar";
}

std::unique_ptr<LoadedModels> ShippedPair() {
  EngineConfig config;
  config.model_path = SPECD_SOURCE_DIR "/models/specd-target-q8_0.gguf";
  config.speculation.draft.path = SPECD_SOURCE_DIR "/models/specd-draft-q8_0.gguf";
  config.speculation.proposer = ProposerKind::kDraftModel;
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
    const SpeculationConfig options = testing::FixedDrafts(4);
    const std::vector<int32_t> speculative =
        GenerateSpeculative(*models->target, *models->draft, models->ctx, *target_kv, *draft_kv,
                            request, options, nullptr)
            .sequences[0]
            .tokens;
    EXPECT_EQ(speculative, plain) << prompt;
    written.push_back({{"prompt", prompt}, {"tokens", plain}});
  }
  // Kernels for different ISAs may round differently (only the packed matmuls are tested to
  // agree bit for bit across ISAs), and on AVX2 one prompt's greedy path leaves the AVX-512 one:
  // one record per ISA tier, chosen by what this CPU runs.
  const std::string isa = IsaTier(models->ctx.cpu);
  nlohmann::json golden = nlohmann::json::parse(ReadFileBytes(kGoldenPath));
  if (std::getenv("SPECD_REGENERATE_GOLDEN") != nullptr) {
    golden[isa] = written;
    std::ofstream out(kGoldenPath);  // one prompt per line: diffs show which moved
    size_t tier = 0;
    for (const auto& [name, records] : golden.items()) {
      out << (tier++ == 0 ? "{" : ",\n ") << nlohmann::json(name).dump() << ":\n";
      for (size_t i = 0; i < records.size(); ++i) {
        out << (i == 0 ? " [" : "  ") << records[i].dump()
            << (i + 1 < records.size() ? ",\n" : "]");
      }
    }
    out << "}\n";
    GTEST_SKIP() << "wrote " << kGoldenPath << " for " << isa << ": review the diff";
  }
  if (!golden.contains(isa)) {
    GTEST_SKIP() << "no golden tokens recorded for " << isa
                 << " kernels: SPECD_REGENERATE_GOLDEN=1 records them";
  }
  ASSERT_EQ(golden[isa].size(), written.size());
  for (size_t i = 0; i < written.size(); ++i) {
    EXPECT_EQ(golden[isa][i]["prompt"], written[i]["prompt"]);
    EXPECT_EQ(golden[isa][i]["tokens"], written[i]["tokens"])
        << isa << " kernels, prompt " << i << ": the shipped pair's greedy tokens changed (a "
        << "kernel's rounding? SPECD_REGENERATE_GOLDEN=1 rewrites the file when the change is "
        << "meant)";
  }
}

}  // namespace
}  // namespace specd
