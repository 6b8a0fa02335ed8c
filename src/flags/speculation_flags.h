// The speculation flags, declared once for `specd generate`, `specd serve` and `specd bench spec`
// (as llama.cpp's common/arg declares each flag once). They write straight into the typed
// SpeculationConfig (src/engine/speculation_config.h); the words that pick a proposer
// (--strategy, --spec-type) are combined into its ProposerKind once the models are chosen.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <optional>
#include <string>

#include "engine/speculation_config.h"

namespace specd::flags {

// --strategy: how a run decodes, in BASS's words.
enum class Strategy {
  kUnset,  // speculative when a draft is available, else plain
  kPlain,  // ar
  kSpec,   // spec: speculative, one sequence (BASS's name at a batch; the same steps)
  kBass,   // bass
  kSdsat,  // sdsat: the target drafts for itself
};

struct SpeculationFlags {
  SpeculationConfig config;  // proposer decided by SpeculationFromFlags
  Strategy strategy = Strategy::kUnset;
  std::optional<ProposerKind> spec_type;  // --spec-type, when given
  std::string draft_tree;                 // --draft-tree WIDTH[,DEPTH]
  int adaptive_k = 0;                     // --adaptive-k (0: not given)
  std::string sdsat_tree;                 // --sdsat-tree NODES[,WIDTH]
  bool sdsat_given = false;               // any SDSAT flag
};

// Which of them a command takes: a run takes them all; a sweep (bench spec) chooses draft lengths
// and verification itself (--draft-lengths, --spec-samplings), so not the policy flags nor
// --spec-sampling.
enum class SpeculationFlagSet { kRun, kSweep };

// -md / --model-draft, --strategy, --spec-type, the draft length (--draft-max / --draft /
// --spec-draft-n-max, --draft-min / --spec-draft-n-min, --draft-policy, --draft-fixed,
// --draft-auto, --draft-adaptive), --spec-sampling, the n-gram sizes, EasySpec's and FR-Spec's
// drafting flags, SDSAT's, and --trace-steps.
void AddSpeculationFlags(CLI::App* app, SpeculationFlags* flags,
                         SpeculationFlagSet set = SpeculationFlagSet::kRun);

// -md / --model-draft alone (bench easyspec, which sweeps the drafting itself).
void AddDraftModelFlag(CLI::App* app, std::string* path);

// Whether the flags leave room for a draft model (the default pair's draft is chosen then).
bool WantsDraftModel(const SpeculationFlags& flags);

// The config the flags ask for, the draft model (if any) already chosen into config.draft.path;
// `draft_given`: -md was on the command line (not the default pair's). An Error names flags that
// contradict each other.
SpeculationConfig SpeculationFromFlags(const SpeculationFlags& flags, bool draft_given);

// "ar", "spec", "bass" or "sdsat" for reports: what ran, at this batch size.
const char* StrategyName(const SpeculationFlags& flags, ProposerKind proposer, int n_sequences);

}  // namespace specd::flags
