#include "engine/speculation_config.h"

#include <algorithm>

#include "base/error.h"
#include "draft/step_trace.h"

namespace specd {

const char* ProposerKindName(ProposerKind kind) {
  switch (kind) {
    case ProposerKind::kNone:
      return "none";
    case ProposerKind::kDraftModel:
      return "draft";
    case ProposerKind::kNgram:
      return "ngram";
    case ProposerKind::kNgramOrDraft:
      return "draft+ngram";
    case ProposerKind::kSdsat:
      return "sdsat";
  }
  return "?";
}

bool UsesDraftModel(ProposerKind kind) {
  return kind == ProposerKind::kDraftModel || kind == ProposerKind::kNgramOrDraft;
}

const char* DraftLengthPolicyName(DraftLengthPolicyKind kind) {
  switch (kind) {
    case DraftLengthPolicyKind::kDefault:
      return "default";
    case DraftLengthPolicyKind::kCostAware:
      return "cost";
    case DraftLengthPolicyKind::kBass:
      return "bass";
    case DraftLengthPolicyKind::kFixed:
      return "fixed";
  }
  return "?";
}

DraftModelOptions DraftModelOptionsFor(const DraftModelConfig& config, const Model& draft) {
  DraftModelOptions o;
  const int n_layer = draft.config().n_layer;
  o.fuzzy = LayerGroups::Parse(config.fuzzy_groups, n_layer, config.fuzzy_group_size);
  SPECD_CHECK(config.fuzzy_group_size == 1 || o.fuzzy.FuzzyLayers() > 0, "{draft_lp} ",
              config.fuzzy_group_size, ": the draft has ", n_layer, " layers and ",
              config.fuzzy_groups,
              " grouping leaves none to run in parallel (the first and last are never grouped); "
              "name the groups, e.g. {draft_lp_groups} 0-",
              std::min(config.fuzzy_group_size, n_layer) - 1);
  o.calibrate = config.calibrate;
  o.tree_width = config.tree_width;
  o.tree_depth = config.tree_depth;
  o.prompt_limit = config.prompt_tokens;
  return o;
}

namespace {

using Defaults = SpeculationDefaults;

// Without a proposer, every speculation setting is an error rather than silently unused.
void CheckNothingAskedOfSpeculation(const SpeculationConfig& c) {
  SPECD_CHECK(c.draft_max == 0 && c.draft_min == 0 && c.policy == DraftLengthPolicyKind::kDefault,
              "{draft_max}, {draft_min} and the draft-length policy: only speculative decoding "
              "reads these, and this run decodes without a draft (give {draft_model}, "
              "{spec_type} ngram or {spec_type} sdsat)");
  SPECD_CHECK(!c.draft.Customized(),
              "{draft_lp}, {draft_lp_groups}, {no_calibration}, {draft_tree}, {draft_vocab}, "
              "{draft_vocab_file} and {draft_prompt_tokens}: only speculative decoding reads "
              "these, and this run decodes without a draft (give {draft_model})");
  SPECD_CHECK(c.trace_steps_path.empty(),
              "{trace_steps} traces speculative steps: this run decodes without a draft (give "
              "{draft_model}, {spec_type} ngram or {spec_type} sdsat)");
}

void CheckProposerOptions(const SpeculationConfig& c) {
  const bool sdsat = c.proposer == ProposerKind::kSdsat;
  SPECD_CHECK(UsesDraftModel(c.proposer) || c.draft.path.empty(), "{spec_type} ",
              ProposerKindName(c.proposer), " drafts without a draft model: drop {draft_model}");
  SPECD_CHECK(!UsesDraftModel(c.proposer) || !c.draft.path.empty(), "{spec_type} ",
              ProposerKindName(c.proposer), " needs a draft model ({draft_model} DRAFT.gguf)");
  SPECD_CHECK(UsesDraftModel(c.proposer) || !c.draft.Customized(),
              "{draft_lp}, {draft_lp_groups}, {no_calibration}, {draft_tree}, {draft_vocab}, "
              "{draft_vocab_file} and {draft_prompt_tokens} need a draft model ({spec_type} "
              "draft)");
  SPECD_CHECK(c.draft.tree_width == 0 || c.proposer == ProposerKind::kDraftModel,
              "{draft_tree} works with {spec_type} draft only");
  SPECD_CHECK(c.draft.fuzzy_group_size >= 1 && c.draft.fuzzy_group_size <= 64,
              "{draft_lp} must be in 1..64, got ", c.draft.fuzzy_group_size);
  SPECD_CHECK(c.ngram_min >= 1 && c.ngram_min <= c.ngram_max && c.ngram_max <= 64,
              "n-gram sizes must satisfy 1 <= {ngram_min} <= {ngram_max} <= 64, got ", c.ngram_min,
              " and ", c.ngram_max);
  SPECD_CHECK(!sdsat || c.policy == DraftLengthPolicyKind::kDefault,
              "{spec_type} sdsat drafts {adaptive_k} tokens per step: drop the draft-length "
              "policy");
  SPECD_CHECK(!sdsat || c.draft_max == 0,
              "{spec_type} sdsat drafts {adaptive_k} tokens per step: drop {draft_max}");
  SPECD_CHECK(c.sdsat.n_adaptive >= 1, "{adaptive_k} must be at least 1");
}

// The policy and cap the proposer gets when none was asked for.
void FillDraftLengthDefaults(SpeculationConfig* c) {
  const bool lookup_only = c->proposer == ProposerKind::kNgram;
  if (c->proposer == ProposerKind::kSdsat) {
    c->policy = DraftLengthPolicyKind::kFixed;
    c->draft_max = c->sdsat.tree_nodes > 0 ? c->sdsat.tree_nodes : c->sdsat.n_adaptive;
    return;
  }
  if (c->policy == DraftLengthPolicyKind::kDefault) {
    // An n-gram lookup costs nothing to draft: a fixed length unless a policy is asked for.
    c->policy = lookup_only ? DraftLengthPolicyKind::kFixed : DraftLengthPolicyKind::kCostAware;
  }
  if (c->draft_max == 0) {
    c->draft_max = c->policy == DraftLengthPolicyKind::kBass        ? c->bass.l_limit
                   : c->policy == DraftLengthPolicyKind::kCostAware ? Defaults::kCostAwareMax
                                                                    : Defaults::kFixedLength;
  }
}

}  // namespace

SpeculationConfig ResolveSpeculation(SpeculationConfig c) {
  if (!c.speculative()) CheckNothingAskedOfSpeculation(c);
  CheckProposerOptions(c);
  if (!c.speculative()) return c;
  if (!c.schedule.empty()) {
    for (int k : c.schedule) {
      SPECD_CHECK(k >= 0 && k <= Defaults::kLimit, "a draft-length schedule holds 0..",
                  Defaults::kLimit, ", got ", k);
    }
    return c;
  }
  FillDraftLengthDefaults(&c);
  SPECD_CHECK(c.draft_max >= 1 && c.draft_max <= Defaults::kLimit, "{draft_max} must be in 1..",
              Defaults::kLimit, ", got ", c.draft_max);
  SPECD_CHECK(c.draft_min >= 0 && c.draft_min <= c.draft_max, "{draft_min} ", c.draft_min,
              " must be at most {draft_max} ", c.draft_max);
  SPECD_CHECK(c.draft_min == 0 || c.policy == DraftLengthPolicyKind::kCostAware,
              "{draft_min} is the cost-aware policy's floor: the ", DraftLengthPolicyName(c.policy),
              " policy has none");
  if (c.policy == DraftLengthPolicyKind::kBass) {
    // draft_max caps BASS as llama.cpp's --draft-max caps its drafts; the start stays in it.
    c.bass.l_limit = c.draft_max;
    c.bass.l0 = std::min(c.bass.l0, c.draft_max);
    SPECD_CHECK(c.bass.l0 >= 1 && c.bass.l_incre >= 1 && c.bass.l_mod >= 1,
                "BASS Algorithm 1 needs l0, l_incre and l_mod of at least 1");
  }
  return c;
}

namespace {

std::unique_ptr<DraftLengthPolicy> MakeUntracedPolicy(const SpeculationConfig& c) {
  if (!c.schedule.empty()) return std::make_unique<ScheduledDraftLength>(c.schedule);
  switch (c.policy) {
    case DraftLengthPolicyKind::kBass:
      return std::make_unique<BassDraftLength>(c.bass);
    case DraftLengthPolicyKind::kCostAware:
      return std::make_unique<CostAwarePolicy>(c.draft_max, c.draft_min);
    case DraftLengthPolicyKind::kFixed:
      return std::make_unique<FixedDraftLength>(c.draft_max);
    case DraftLengthPolicyKind::kDefault:
      break;
  }
  Fail("the draft-length policy was not resolved (ResolveSpeculation)");
}

}  // namespace

int LongestDraft(const SpeculationConfig& c) {
  if (c.schedule.empty()) return c.draft_max;
  return std::max(1, *std::max_element(c.schedule.begin(), c.schedule.end()));
}

std::unique_ptr<DraftLengthPolicy> MakeDraftLengthPolicy(const SpeculationConfig& c) {
  auto policy = MakeUntracedPolicy(c);
  if (c.trace_steps_path.empty()) return policy;
  return std::make_unique<TracedDraftLength>(std::move(policy), c.trace_steps_path, c.trace_label);
}

std::string DescribeProposer(const SpeculationConfig& c) {
  switch (c.proposer) {
    case ProposerKind::kNone:
      return "none";
    case ProposerKind::kDraftModel:
      return c.draft.path;
    case ProposerKind::kNgram:
      return "n-gram lookup";
    case ProposerKind::kNgramOrDraft:
      return "n-gram lookup, then " + c.draft.path;
    case ProposerKind::kSdsat: {
      const SdsatOptions& o = c.sdsat;
      std::string label =
          StrCat("the target's adaptive tokens (", o.merge ? "merged" : "two-step", " loop");
      if (o.tree_nodes > 0) {
        label += StrCat(", trees of ", o.tree_nodes, " nodes, width ", o.tree_width);
      }
      return label + ")";
    }
  }
  return "?";
}

std::string DescribeDraftLength(const SpeculationConfig& c) {
  if (!c.schedule.empty()) return "a schedule";
  switch (c.policy) {
    case DraftLengthPolicyKind::kCostAware:
      return StrCat("cost-aware ", c.draft_min, "..", c.draft_max);
    case DraftLengthPolicyKind::kBass:
      return StrCat("BASS Algorithm 1 from ", c.bass.l0, ", at most ", c.draft_max);
    case DraftLengthPolicyKind::kFixed:
      return StrCat("fixed ", c.draft_max);
    case DraftLengthPolicyKind::kDefault:
      break;
  }
  return "the proposer's default";
}

}  // namespace specd
