#include "engine/model_catalog.h"

#include <filesystem>

namespace specd {
namespace {

enum class Home { kPretrained, kModels };

struct KnownPair {
  const char* target;
  Home target_home;
  const char* draft;
  Home draft_home;
};

// In order of preference for the default: Qwen2.5-Coder-1.5B drafted by the 0.5B of its family
// (same tokenizer and training data: the pair local users run), the 0.5B with the draft specd
// trained for it, SmolLM2 with its draft, the shipped 16.5M pair.
constexpr KnownPair kKnownPairs[] = {
    {"qwen2.5-coder-1.5b-instruct-q4_k_m.gguf", Home::kPretrained,
     "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", Home::kPretrained},
    {"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", Home::kPretrained, "specd-qwen-coder-draft.gguf",
     Home::kModels},
    {"SmolLM2-135M-Instruct.Q4_1.gguf", Home::kPretrained, "specd-smollm2-draft.gguf",
     Home::kModels},
    {"specd-target-q8_0.gguf", Home::kModels, "specd-draft-q8_0.gguf", Home::kModels},
};

const std::string& DirOf(const ModelDirs& dirs, Home home) {
  return home == Home::kPretrained ? dirs.pretrained : dirs.models;
}

// `file` in `dir` if it is a regular file there, otherwise "".
std::string FileIn(const std::string& dir, const char* file) {
  const std::string path = dir + "/" + file;
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? path : "";
}

}  // namespace

ModelPair DefaultModelPair(const ModelDirs& dirs) {
  for (const KnownPair& p : kKnownPairs) {
    const std::string target = FileIn(DirOf(dirs, p.target_home), p.target);
    const std::string draft = FileIn(DirOf(dirs, p.draft_home), p.draft);
    if (!target.empty() && !draft.empty()) return {target, draft};
  }
  return {};
}

std::string TokenRankingFor(const std::string& draft_path, const ModelDirs& dirs) {
  // Counted with Qwen2.5's tokenizer, which every Qwen2.5-Coder size shares.
  constexpr const char* kQwenDrafts[] = {"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"};
  const std::string name = std::filesystem::path(draft_path).filename().string();
  for (const char* draft : kQwenDrafts) {
    if (name == draft) return FileIn(dirs.models, "qwen2.5-coder-token-ranking.txt");
  }
  return "";
}

std::string ShippedDraftFor(const std::string& target_path, const ModelDirs& dirs) {
  const std::string name = std::filesystem::path(target_path).filename().string();
  for (const KnownPair& p : kKnownPairs) {
    if (name == p.target) return FileIn(DirOf(dirs, p.draft_home), p.draft);
  }
  return "";
}

}  // namespace specd
