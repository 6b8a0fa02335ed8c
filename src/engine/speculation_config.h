// The typed configuration of speculation, one struct for every edge (as vLLM's SpeculativeConfig):
// what drafts (the proposer and its options), how many tokens per step (the draft-length policy)
// and how drafts are verified. The edges fill it once (src/flags/speculation_flags.cc parses the
// flags into these enums); ResolveSpeculation, called when an engine is built, puts in every
// default and validates it once. Below the engine builder every layer reads these fields.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "draft/draft_model_proposer.h"
#include "draft/proposer.h"
#include "draft/sdsat_proposer.h"
#include "policy/draft_length.h"

namespace specd {

// What drafts the tokens the target verifies.
enum class ProposerKind {
  kNone,          // plain decoding
  kDraftModel,    // a draft model or an EAGLE head (recognised from its file)
  kNgram,         // prompt lookup: the continuation of the text's latest repeat
  kNgramOrDraft,  // prompt lookup first, the draft model where it finds nothing
  kSdsat,         // the target's own adaptive tokens (SDSAT)
};
// "none", "draft", "ngram", "draft+ngram", "sdsat" (llama.cpp's --spec-type spelling).
const char* ProposerKindName(ProposerKind kind);
bool UsesDraftModel(ProposerKind kind);

// How many tokens a step drafts.
enum class DraftLengthPolicyKind {
  kDefault,    // the proposer's: cost-aware for a draft model, fixed for prompt lookup and SDSAT
               // (the Generate* helpers of engine/generate.h: fixed)
  kCostAware,  // K in draft_min..draft_max from measured costs and acceptance (0: a plain step)
  kBass,       // BASS Algorithm 1, capped at draft_max
  kFixed,      // draft_max every step
};
const char* DraftLengthPolicyName(DraftLengthPolicyKind kind);  // "cost", "bass", "fixed"

// How a draft model drafts (EasySpec, FR-Spec); the engine builder turns it into the proposer's
// DraftModelOptions once the draft's layer count is known.
struct DraftModelConfig {
  std::string path;
  // EasySpec's fuzzy (layer-parallel) drafting, --draft-lp / --draft-lp-groups: layers in groups
  // of this size run their attention at once (1: exact drafting), grouped as fuzzy_groups says.
  int fuzzy_group_size = 1;
  std::string fuzzy_groups = "packed";  // packed | aligned | explicit ranges "1-2,3-4"
  bool calibrate = true;                // EasySpec's bonus calibration of fuzzy drafting
  int tree_width = 0;                   // > 1: token trees of this width
  int tree_depth = 0;                   // 0: as deep as the step's nodes allow
  // Most prompt tokens the draft reads, the last ones (--draft-prompt-tokens).
  int prompt_tokens = DraftModelOptions::kDefaultPromptLimit;
  // FR-Spec: the draft's output layer over the `vocab` most frequent tokens of `vocab_ranking`
  // (-1: kDefaultDraftVocab when a ranking is named, 0: the whole vocabulary).
  int vocab = -1;
  std::string vocab_ranking;

  // Anything beyond plain exact drafting over the whole vocabulary was asked for.
  bool Customized() const {
    return fuzzy_group_size > 1 || fuzzy_groups != "packed" || !calibrate || tree_width > 0 ||
           vocab > 0 || !vocab_ranking.empty() ||
           prompt_tokens != DraftModelOptions::kDefaultPromptLimit;
  }
};

// The proposer's options for `draft` (the draft's layer count places the fuzzy groups); an Error
// names a grouping that leaves no layer to run in parallel.
DraftModelOptions DraftModelOptionsFor(const DraftModelConfig& config, const Model& draft);

// Every default of speculation, in one place.
struct SpeculationDefaults {
  static constexpr int kCostAwareMax = 8;  // the cost-aware policy's cap (measured: docs/)
  static constexpr int kFixedLength = 4;   // the fixed policy's (prompt lookup's default)
  static constexpr int kNgramMin = 1;
  static constexpr int kNgramMax = 3;
  static constexpr int kLimit = 64;  // the longest draft any policy may ask for
  // FR-Spec: the draft vocabulary when a ranking is known for the draft and none is asked for,
  // chosen by measurement (docs/performance.md, bench/results/fr-spec/); and how many tokens of
  // its context (prompts, accepted tokens) a restricted head takes on beyond the ranked ones.
  static constexpr int kDraftVocab = 16384;
  static constexpr int kDraftContextTokens = 4096;
};

struct SpeculationConfig {
  ProposerKind proposer = ProposerKind::kNone;
  DraftLengthPolicyKind policy = DraftLengthPolicyKind::kDefault;
  int draft_max = 0;    // the policy's cap (fixed: the length); 0: the policy's default
  int draft_min = 0;    // cost-aware: the fewest drafts worth a verification (llama.cpp's)
  BassParameters bass;  // BASS Algorithm 1's start and steps (l_limit is draft_max)
  // Draft lengths step by step (cycled; 0 = a plain step), overriding the policy: tests and
  // experiments.
  std::vector<int> schedule;
  SpecSampling sampling = SpecSampling::kCoupled;  // how sampled drafts are verified
  DraftModelConfig draft;                          // kDraftModel, kNgramOrDraft
  int ngram_min = SpeculationDefaults::kNgramMin;  // kNgram, kNgramOrDraft: n-gram sizes the
  int ngram_max = SpeculationDefaults::kNgramMax;  // lookup tries, longest first
  SdsatOptions sdsat;                              // kSdsat
  std::string trace_steps_path;  // non-empty: every step appended there as a JSON line
  std::string trace_label;       // written on each of those lines

  bool speculative() const { return proposer != ProposerKind::kNone; }
};

// `config` with its defaults filled in (the policy, draft_max, BASS's limit), validated: an Error
// names the field ({draft_max}, {spec_type} ...) of a bad value or combination.
SpeculationConfig ResolveSpeculation(SpeculationConfig config);

// The longest draft a resolved config's policy may ask for (KV room).
int LongestDraft(const SpeculationConfig& config);

// The draft-length policy a resolved config asks for (traced when it names a trace file).
std::unique_ptr<DraftLengthPolicy> MakeDraftLengthPolicy(const SpeculationConfig& config);

// One line for logs: "n-gram lookup, then DRAFT" / "DRAFT" / "the target's adaptive tokens ...".
std::string DescribeProposer(const SpeculationConfig& config);
// "cost-aware 0..8" / "BASS Algorithm 1 from 7, at most 32" / "fixed 4".
std::string DescribeDraftLength(const SpeculationConfig& config);

}  // namespace specd
