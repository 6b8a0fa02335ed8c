#include "engine/model_catalog.h"

#include <filesystem>

namespace specd {
namespace {

enum class Home { kPretrained, kModels };

struct KnownPair {
  const char* target;
  Home target_home;
  const char* draft;  // always in models/
};

// In order of preference for the default.
constexpr KnownPair kKnownPairs[] = {
    {"qwen2.5-coder-0.5b-instruct-q4_k_m.gguf", Home::kPretrained, "specd-qwen-coder-draft.gguf"},
    {"SmolLM2-135M-Instruct.Q4_1.gguf", Home::kPretrained, "specd-smollm2-draft.gguf"},
    {"specd-target-q8_0.gguf", Home::kModels, "specd-draft-q8_0.gguf"},
};

// `file` in `dir` if it is a regular file there, otherwise "".
std::string FileIn(const std::string& dir, const char* file) {
  const std::string path = dir + "/" + file;
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? path : "";
}

}  // namespace

ModelPair DefaultModelPair(const ModelDirs& dirs) {
  for (const KnownPair& p : kKnownPairs) {
    const std::string target =
        FileIn(p.target_home == Home::kPretrained ? dirs.pretrained : dirs.models, p.target);
    const std::string draft = FileIn(dirs.models, p.draft);
    if (!target.empty() && !draft.empty()) return {target, draft};
  }
  return {};
}

std::string ShippedDraftFor(const std::string& target_path, const ModelDirs& dirs) {
  const std::string name = std::filesystem::path(target_path).filename().string();
  for (const KnownPair& p : kKnownPairs) {
    if (name == p.target) return FileIn(dirs.models, p.draft);
  }
  return "";
}

}  // namespace specd
