// What the two edges of specd share (the `specd` binary and the `specd-bench` benchmarks): flags
// declared once for every command that takes them, llama.cpp's multi-letter spellings, the
// default models, and running a sibling executable.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "draft/draft_model_proposer.h"
#include "draft/sdsat_proposer.h"
#include "engine/draft_vocab.h"
#include "engine/engine_builder.h"
#include "engine/model_catalog.h"
#include "engine/model_options.h"

namespace specd::cli {

// SDSAT's flags (generate --strategy sdsat, serve --spec-type sdsat): adaptive tokens per step
// (0: 5), the adaptive token (-1: the one the model records), the loop and the tree.
struct SdsatFlags {
  int adaptive_k = 0;
  int32_t adaptive_token = -1;
  std::string loop;  // "" (the default, two-step), "two-step" or "merged"
  std::string tree;  // --sdsat-tree NODES[,WIDTH]; empty: chains
  bool Given() const {
    return adaptive_k != 0 || adaptive_token >= 0 || !loop.empty() || !tree.empty();
  }
};

// --weights, --int8-kernel, --smooth-alpha, --calibration and the LoRA flags.
void AddWeightFlags(CLI::App* app, WeightFlags* flags);
// --lora FILE (repeatable), --lora-scaled FILE SCALE, --lora-merge (llama.cpp's spellings).
void AddLoraFlags(CLI::App* app, WeightFlags* flags);
// EasySpec's drafting flags: --draft-lp, --draft-lp-groups, --no-calibration, --draft-tree.
void AddDraftFlags(CLI::App* app, DraftFlags* flags);
// SDSAT's --adaptive-k, --adaptive-token, --sdsat-loop and --sdsat-tree.
void AddSdsatFlags(CLI::App* app, SdsatFlags* flags);
// The proposer's options from them (checks --sdsat-tree's spelling).
SdsatOptions SdsatOptionsFor(const SdsatFlags& flags);
void AddTraceStepsFlag(CLI::App* app, std::string* path);
// -t / --threads N (1..256).
void AddThreadsFlag(CLI::App* app, int* threads);

// argv[1..] in CLI11's order (reversed), llama.cpp's multi-letter short options (-md, -cnv,
// -ngl ...) spelled out; false (having said why on stderr) for an unknown one such as -xyz,
// which CLI11 would read as -x yz.
bool ArgsWithLlamaCppSpellings(int argc, char** argv, std::vector<std::string>* reversed_args);

// The flag that sets an option field named in a lower layer's message ({top_k} -> --top-k; the
// field itself when no flag sets it).
std::string FlagForField(std::string_view field);

// Runs `command`, turning what it throws into an "error: ..." line and exit code 1 (specd's
// errors are messages, never a crash or a stack trace), field names rendered as flags.
int RunReportingErrors(const std::function<int()>& command);

// Parses reversed `args` into `app`. Returns -1 when parsed; otherwise the exit code to return:
// 0 after --help / --version (CLI11 prints them), 1 after an "error: ... (see HELP)" line.
int ParseArgs(CLI::App& app, std::vector<std::string>& args, const char* help);

// Levenshtein distance, for suggesting the command a typo meant.
size_t EditDistance(const std::string& a, const std::string& b);

// Replaces this process with the executable `name` next to this one, given `args` as its argv;
// returns 1 (having said why) when it cannot. `why_missing` tells how to get it.
int ExecSibling(const char* name, std::vector<char*> args, const char* why_missing);

// The catalog's folders: SPECD_PRETRAINED_DIR / SPECD_MODELS_DIR, or the source tree's.
ModelDirs DefaultModelDirs();
// The default target of src/engine/model_catalog.h ("" where absent).
std::string DefaultTargetModel();
// Fills an empty *model with the default target (and *draft_model with its draft when
// wants_draft); for a model given without a draft, pairs the draft known for it when
// wants_draft, saying so on stderr; with draft_flags, names the draft's FR-Spec ranking
// (--draft-vocab) where one is known and none was given. An empty *model with no default there,
// or a path that is not a file, is an Error.
void ChooseModels(std::string* model, std::string* draft_model, bool wants_draft,
                  DraftFlags* draft_flags = nullptr);
// "loading FILE (1.12 GB), draft FILE (0.49 GB)": said before a load that takes seconds.
std::string DescribeLoading(const EngineConfig& config);

}  // namespace specd::cli
