// The models specd knows by name: the pretrained targets scripts/get-models.sh fetches, the
// drafts specd trained for them (shipped in models/), and which pair is the default. The CLI and
// the server ask here instead of naming files themselves, so one list decides for both.
#pragma once

#include <string>

namespace specd {

// Where the catalog looks: pretrained/ (fetched targets) and models/ (shipped files). The edge
// fills it from SPECD_PRETRAINED_DIR / SPECD_MODELS_DIR or the build's defaults.
struct ModelDirs {
  std::string pretrained;
  std::string models;
};

struct ModelPair {
  std::string target;  // "" when no default target is there
  std::string draft;   // "" when the target has no shipped draft there
};

// The first known pair whose target is there, in order of preference: Qwen2.5-Coder-1.5B-Instruct
// drafted by Qwen2.5-Coder-0.5B-Instruct, the 0.5B with specd's draft, SmolLM2-135M-Instruct with
// its draft, the shipped 16.5M pair (the offline fallback). A fetched target whose draft is
// missing is skipped for the next pair.
ModelPair DefaultModelPair(const ModelDirs& dirs);

// The draft known for `target_path` (recognised by its file name), or "" when there is none or
// it is not there.
std::string ShippedDraftFor(const std::string& target_path, const ModelDirs& dirs);

// The FR-Spec token ranking in dirs.models for a known draft (`--draft-vocab`), or "".
std::string TokenRankingFor(const std::string& draft_path, const ModelDirs& dirs);

}  // namespace specd
