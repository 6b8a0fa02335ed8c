#include "flags/speculation_flags.h"

#include <map>

#include "base/error.h"

namespace specd::flags {
namespace {

const std::map<std::string, ProposerKind> kProposers = {
    {"none", ProposerKind::kNone},
    {"draft", ProposerKind::kDraftModel},
    {"ngram", ProposerKind::kNgram},
    {"draft+ngram", ProposerKind::kNgramOrDraft},
    {"sdsat", ProposerKind::kSdsat}};

const std::map<std::string, Strategy> kStrategies = {{"ar", Strategy::kPlain},
                                                     {"spec", Strategy::kSpec},
                                                     {"bass", Strategy::kBass},
                                                     {"sdsat", Strategy::kSdsat}};

const std::map<std::string, DraftLengthPolicyKind> kPolicies = {
    {"cost", DraftLengthPolicyKind::kCostAware},
    {"bass", DraftLengthPolicyKind::kBass},
    {"fixed", DraftLengthPolicyKind::kFixed}};

const std::map<std::string, SpecSampling> kSamplings = {{"coupled", SpecSampling::kCoupled},
                                                        {"rejection", SpecSampling::kRejection}};

// What drafts, and the draft model's file.
void AddProposerFlags(CLI::App* app, SpeculationFlags* f) {
  AddDraftModelFlag(app, &f->config.draft.path);
  app->add_option("--strategy", f->strategy,
                  "ar (plain), spec / bass (speculative; the default when a draft is "
                  "available), sdsat (the target drafts for itself with adaptive tokens)")
      ->transform(CLI::CheckedTransformer(kStrategies));
  app->add_option_function<ProposerKind>(
         "--spec-type", [f](const ProposerKind& kind) { f->spec_type = kind; },
         "proposer: draft (a draft model, -md; the default when one is available), ngram "
         "(prompt lookup: the continuation of the text's latest repeat of its last n tokens), "
         "draft+ngram (lookup first, the draft model where it finds nothing), sdsat (a model "
         "fine-tuned for SDSAT drafts for itself), none (no speculation)")
      ->transform(CLI::CheckedTransformer(kProposers));
  app->add_option("--ngram-min", f->config.ngram_min, "shortest n-gram looked up (ngram)")
      ->check(CLI::Range(1, 64));
  app->add_option("--ngram-max", f->config.ngram_max, "longest n-gram looked up (ngram)")
      ->check(CLI::Range(1, 64));
  app->add_option("--trace-steps", f->config.trace_steps_path,
                  "append every speculative step to FILE as a JSON line: the draft length "
                  "chosen, drafts accepted, forward times, the cost-aware policy's estimates");
}

// How long drafts are: a cap and a floor under the policy, as llama.cpp's flags mean them.
void AddDraftLengthFlags(CLI::App* app, SpeculationFlags* f, SpeculationFlagSet set) {
  SpeculationConfig* c = &f->config;
  app->add_option("--draft-max,--draft,--draft-n,--spec-draft-n-max", c->draft_max,
                  "the longest draft a step may verify: the cap under which the policy adapts "
                  "(default: 8 for the cost-aware policy, 32 for BASS's, 4 for prompt lookup)")
      ->check(CLI::Range(1, SpeculationDefaults::kLimit));
  if (set == SpeculationFlagSet::kSweep) return;
  app->add_option("--draft-min,--draft-n-min,--spec-draft-n-min", c->draft_min,
                  "the cost-aware policy's shortest draft: it drafts none or at least this many")
      ->check(CLI::Range(0, SpeculationDefaults::kLimit));
  auto* policy = app->add_option("--draft-policy", c->policy,
                                 "how the draft length is chosen: cost (from measured costs and "
                                 "acceptance, 0 when speculation does not pay; the default), "
                                 "bass (BASS Algorithm 1) or fixed (--draft-max every step)")
                     ->transform(CLI::CheckedTransformer(kPolicies));
  auto* fixed = app->add_option_function<int>(
                       "--draft-fixed",
                       [c](const int& k) {
                         c->policy = DraftLengthPolicyKind::kFixed;
                         c->draft_max = k;
                       },
                       "draft exactly N tokens every step (--draft-policy fixed --draft-max N)")
                    ->check(CLI::Range(1, SpeculationDefaults::kLimit));
  auto* automatic = app->add_flag_callback(
      "--draft-auto", [c] { c->policy = DraftLengthPolicyKind::kCostAware; },
      "the cost-aware draft length (--draft-policy cost; the default)");
  auto* adaptive = app->add_flag_callback(
      "--draft-adaptive", [c] { c->policy = DraftLengthPolicyKind::kBass; },
      "BASS Algorithm 1 (--draft-policy bass: l0 7, +2, capped by --draft-max)");
  policy->excludes(fixed)->excludes(automatic)->excludes(adaptive);
  fixed->excludes(automatic)->excludes(adaptive);
  automatic->excludes(adaptive);
  app->add_option("--spec-sampling", c->sampling,
                  "sampled speculation: coupled (draft and target share Gumbel noise per "
                  "position; the output is plain sampling's with the same seed, whatever the "
                  "draft lengths) or rejection (modified rejection sampling)")
      ->transform(CLI::CheckedTransformer(kSamplings))
      ->default_str("coupled");
}

// How a draft model drafts: EasySpec's fuzzy drafting and trees, FR-Spec's vocabulary.
void AddDraftModelFlags(CLI::App* app, SpeculationFlags* f) {
  DraftModelConfig* d = &f->config.draft;
  app->add_option("--draft-lp", d->fuzzy_group_size,
                  "layer-parallel (fuzzy) drafting: the draft's middle layers in groups of N "
                  "whose attention blocks run at once (EasySpec; 1: exact)")
      ->check(CLI::Range(1, 64));
  app->add_option("--draft-lp-groups", d->fuzzy_groups,
                  "how --draft-lp groups layers: packed (runs of N from layer 1), aligned (the "
                  "paper's), or explicit 0-based ranges such as 1-2,3-4");
  app->add_flag_callback(
      "--no-calibration", [d] { d->calibrate = false; },
      "fuzzy drafting without bonus calibration (fuzzy keys / values stay)");
  app->add_option("--draft-prompt-tokens", d->prompt_tokens,
                  "most prompt tokens the draft reads before it first drafts (the last ones; "
                  "fewer start drafting sooner and may be accepted less; the output is the same)")
      ->check(CLI::Range(1, 1 << 20));
  app->add_option("--draft-tree", f->draft_tree,
                  "draft a token tree WIDTH[,DEPTH]: each level keeps the WIDTH likeliest nodes; "
                  "at most --draft-max nodes");
  app->add_option("--draft-vocab", d->vocab,
                  "FR-Spec: the draft's output layer over only the N most frequent tokens of "
                  "--draft-vocab-file (the target still scores every token, so the output is "
                  "unchanged); 0: the whole vocabulary (default: " +
                      std::to_string(SpeculationDefaults::kDraftVocab) +
                      " when a ranking is known for the draft)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--draft-vocab-file", d->vocab_ranking,
                  "FR-Spec token ranking, most frequent first (scripts/make-token-ranking.py; "
                  "default: the one in models/ for a known draft)")
      ->check(CLI::ExistingFile);
}

void AddSdsatFlags(CLI::App* app, SpeculationFlags* f, SpeculationFlagSet set) {
  const auto given = [f](const std::string&) { f->sdsat_given = true; };
  SdsatOptions* s = &f->config.sdsat;
  app->add_option("--adaptive-token", s->adaptive_token,
                  "sdsat: the adaptive token id (default: the one the fine-tuned model records)")
      ->check(CLI::NonNegativeNumber)
      ->each(given);
  if (set == SpeculationFlagSet::kSweep) return;  // bench spec sweeps --adaptive-ks, --sdsat-trees
  app->add_option("--adaptive-k", f->adaptive_k,
                  "sdsat: adaptive tokens appended per step = tokens drafted (default 5)")
      ->check(CLI::Range(1, 64))
      ->each(given);
  app->add_option_function<std::string>(
         "--sdsat-loop", [s](const std::string& loop) { s->merge = loop == "merged"; },
         "sdsat: two-step (the paper's loop: adaptive tokens ride on steps without drafts; the "
         "default, faster on CPUs) or merged (they ride on every verification: one forward "
         "per loop while every draft is kept)")
      ->check(CLI::IsMember({"two-step", "merged"}))
      ->each(given);
  app->add_option("--sdsat-tree", f->sdsat_tree,
                  "sdsat: draft a token tree of at most NODES nodes, as deep as --adaptive-k, "
                  "each node with at most WIDTH children (default 10), verified in one forward: "
                  "NODES[,WIDTH]")
      ->each(given);
}

}  // namespace

void AddSpeculationFlags(CLI::App* app, SpeculationFlags* flags, SpeculationFlagSet set) {
  AddProposerFlags(app, flags);
  AddDraftLengthFlags(app, flags, set);
  AddDraftModelFlags(app, flags);
  AddSdsatFlags(app, flags, set);
}

void AddDraftModelFlag(CLI::App* app, std::string* path) {
  app->add_option("--model-draft", *path,
                  "draft model for speculative decoding (default: the one known for the target; "
                  "also -md)");
}

bool WantsDraftModel(const SpeculationFlags& f) {
  if (f.strategy == Strategy::kPlain || f.strategy == Strategy::kSdsat) return false;
  return !f.spec_type.has_value() || UsesDraftModel(*f.spec_type);
}

namespace {

// The proposer the words ask for, given whether a draft model is there.
ProposerKind ProposerFromWords(const SpeculationFlags& f, bool has_draft, bool draft_given) {
  if (f.strategy == Strategy::kSdsat) {
    SPECD_CHECK(!draft_given && (!f.spec_type || *f.spec_type == ProposerKind::kSdsat),
                "--strategy sdsat drafts with the target itself: drop -md / --spec-type");
    return ProposerKind::kSdsat;
  }
  if (f.strategy == Strategy::kPlain) {
    SPECD_CHECK(!f.spec_type || *f.spec_type == ProposerKind::kNone,
                "--spec-type: only speculative decoding reads this, and --strategy ar decodes "
                "without speculation");
    return ProposerKind::kNone;
  }
  const ProposerKind kind =
      f.spec_type.value_or(has_draft ? ProposerKind::kDraftModel : ProposerKind::kNone);
  SPECD_CHECK(!(f.strategy == Strategy::kSpec || f.strategy == Strategy::kBass) ||
                  kind != ProposerKind::kNone,
              "--strategy ", f.strategy == Strategy::kSpec ? "spec" : "bass",
              " needs a draft model (-md DRAFT.gguf) or --spec-type ngram");
  return kind;
}

}  // namespace

SpeculationConfig SpeculationFromFlags(const SpeculationFlags& f, bool draft_given) {
  SpeculationConfig c = f.config;
  c.proposer = ProposerFromWords(f, !c.draft.path.empty(), draft_given);
  SPECD_CHECK(c.proposer == ProposerKind::kSdsat || !f.sdsat_given,
              "--adaptive-k, --adaptive-token, --sdsat-loop and --sdsat-tree go with --spec-type "
              "sdsat (or --strategy sdsat)");
  SPECD_CHECK(!draft_given || UsesDraftModel(c.proposer) || c.proposer == ProposerKind::kNone,
              "--spec-type ", ProposerKindName(c.proposer),
              " drafts without a draft model: drop -md");
  // Only a proposer with a draft model reads one (a -md given to another was refused above; a
  // plain run or a default pair's draft is left unread).
  if (!UsesDraftModel(c.proposer)) c.draft.path.clear();
  c.sdsat = SdsatOptionsWithTree(c.sdsat, f.sdsat_tree);
  if (f.adaptive_k > 0) c.sdsat.n_adaptive = f.adaptive_k;
  if (!f.draft_tree.empty()) {
    const auto parsed = ParseNumberPair(f.draft_tree, 64, 64);
    SPECD_CHECK(parsed.has_value(), "--draft-tree '", f.draft_tree,
                "': expected WIDTH[,DEPTH] with numbers in 1..64");
    std::tie(c.draft.tree_width, c.draft.tree_depth) = *parsed;
    SPECD_CHECK(c.draft.tree_width >= 2, "--draft-tree: a width of 1 is a chain; use --draft-max");
  }
  return c;
}

const char* StrategyName(const SpeculationFlags& f, ProposerKind proposer, int n_sequences) {
  // As asked: `--strategy bass` at batch 1 is reported as bass (it runs the same step).
  if (proposer == ProposerKind::kNone) return "ar";
  if (proposer == ProposerKind::kSdsat) return "sdsat";
  return f.strategy == Strategy::kBass || n_sequences > 1 ? "bass" : "spec";
}

}  // namespace specd::flags
