// What specd's edges share (the `specd` binary, the `specd-bench` benchmarks and `specd-train`):
// flags declared once for every command that takes them, llama.cpp's multi-letter spellings,
// errors rendered with flag names, the default models, and running a sibling executable. The
// speculation flags are in speculation_flags.h.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/engine_builder.h"
#include "engine/model_catalog.h"
#include "engine/model_options.h"

namespace specd::flags {

// --weights, --int8-kernel, --smooth-alpha, --calibration and the LoRA flags.
void AddWeightFlags(CLI::App* app, WeightOptions* options);
// --int8-kernel alone (bench forward converts to i8 itself).
void AddInt8KernelFlag(CLI::App* app, WeightOptions* options);
// --int8-kernel's values by their spelling (auto, specd, amx, onednn).
const std::map<std::string, Int8Backend>& Int8KernelsByName();
// --lora FILE (repeatable), --lora-scaled FILE SCALE, --lora-merge (llama.cpp's spellings).
void AddLoraFlags(CLI::App* app, WeightOptions* options);
// -t / --threads N (1..256).
void AddThreadsFlag(CLI::App* app, int* threads);
// --cache-type f16|f32 (also llama.cpp's -ctk / -ctv).
void AddCacheTypeFlag(CLI::App* app, DType* type);

// llama.cpp's flags for what a CPU engine has no use for (-ngl, -fa, --mlock, --no-mmap, -b,
// -ub, --jinja, --metrics, -cb, --log-disable, -td): accepted by generate and serve alike; what
// was given is collected in *notes ("-ngl: no GPU offload: specd runs on the CPU").
void AddLlamaCppNoOpFlags(CLI::App* app, std::vector<std::string>* notes);
// Prints "note: NOTE; ignored" for each.
void PrintIgnoredFlagNotes(const std::vector<std::string>& notes);

// The flag that sets an option field named in a lower layer's message ({top_k} -> --top-k; the
// field itself when no flag sets it).
std::string FlagForField(std::string_view field);

// Runs `command`, turning what it throws into an "error: ..." line and exit code 1 (specd's
// errors are messages, never a crash or a stack trace), field names rendered as flags.
int RunReportingErrors(const std::function<int()>& command);

// Parses argv[1..] into `app`, llama.cpp's multi-letter short options (-md, -cnv, -ngl ...)
// spelled out for CLI11 (which would read -ngl 0 as -n gl 0). Returns -1 when parsed; otherwise
// the exit code to return: 0 after --help / --version (CLI11 prints them), 1 after an
// "error: ... (see HELP)" line that names options as they were typed: an unknown -xyz, the first
// unexpected argument in the order given, -md rather than --model-draft.
int ParseCommandLine(CLI::App& app, int argc, char** argv, const char* help);

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
// wants_draft, saying so on stderr; with `draft`, names the draft's FR-Spec ranking
// (--draft-vocab) where one is known and none was given. An empty *model with no default there,
// or a path that is not a file, is an Error.
void ChooseModels(std::string* model, std::string* draft_model, bool wants_draft,
                  DraftModelConfig* draft = nullptr);
// "loading FILE (1.12 GB), draft FILE (0.49 GB)": said before a load that takes seconds.
std::string DescribeLoading(const EngineConfig& config);

}  // namespace specd::flags
