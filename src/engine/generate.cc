#include "engine/generate.h"

#include <algorithm>
#include <map>

#include "base/error.h"
#include "draft/draft_model_proposer.h"
#include "draft/eagle_proposer.h"
#include "draft/step_trace.h"
#include "engine/engine_builder.h"

namespace specd {

int NextDraftLength(int current, const std::vector<int>& accepted, const BassParameters& bass,
                    int* decreasing) {
  int max_accepted = 0;
  for (int x : accepted) max_accepted = std::max(max_accepted, x);
  return BassDraftLength::NextLength(current, max_accepted, bass.l_incre, bass.l_mod, bass.l_limit,
                                     decreasing);
}

void CheckDraftCompatible(const Model& target, const Model& draft) {
  SPECD_CHECK(target.config().n_vocab == draft.config().n_vocab, "the draft model's vocabulary (",
              draft.config().n_vocab, " tokens) differs from the target's (",
              target.config().n_vocab, "): a draft must share the target's tokenizer");
  const GgufValue* tt = target.gguf().Find("tokenizer.ggml.tokens");
  const GgufValue* dt = draft.gguf().Find("tokenizer.ggml.tokens");
  if (tt != nullptr && dt != nullptr) {
    const auto& a = tt->AsArray("tokens").items;
    const auto& b = dt->AsArray("tokens").items;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
      SPECD_CHECK(a[i].AsString("token") == b[i].AsString("token"), "the draft model's token ", i,
                  " ('", b[i].AsString("token"), "') differs from the target's ('",
                  a[i].AsString("token"), "'): a draft must share the target's tokenizer");
    }
  }
}

GenerateResult RunRequest(Engine& engine, const GenerateRequest& r) {
  Timer request_timer;
  const auto prompts = SequencePrompts(r);
  const int n = static_cast<int>(prompts.size());
  SequenceRequest base;
  base.n_predict = r.n_predict;
  base.sampling = r.sampling;
  base.stop_at_eos = r.stop_at_eos;
  base.stop_tokens = r.stop_tokens;
  base.sum_logprob = r.sum_logprob;
  base.logprobs = r.logprobs;
  base.cache_prompt = r.cache_prompt;
  base.constraint = r.constraint;
  std::vector<int> ids;
  if (r.prompts.empty()) {
    base.prompt = r.prompt;
    ids = engine.AddCompletions(base, r.n_sequences);
  } else {
    SPECD_CHECK(r.n_predicts.empty() || r.n_predicts.size() == r.prompts.size(), "a request of ",
                r.prompts.size(), " prompts has ", r.n_predicts.size(), " lengths");
    for (int i = 0; i < n; ++i) {
      base.prompt = prompts[i];
      base.rng_sequence = static_cast<uint64_t>(i);
      if (!r.n_predicts.empty()) base.n_predict = r.n_predicts[i];
      ids.push_back(engine.Add(base));
    }
  }
  std::map<int, int> index_of;
  for (int i = 0; i < n; ++i) index_of[ids[i]] = i;
  GenerateResult result;
  bool prefilled = false;
  Timer decode_timer;
  while (engine.HasWork()) {
    if (r.time_budget_ms > 0 && request_timer.ElapsedMs() > r.time_budget_ms) {
      for (int id : ids) engine.Cancel(id, "budget");
      break;
    }
    if (r.interrupt != nullptr && r.interrupt->load()) {
      for (int id : ids) engine.Cancel(id, "interrupted");
      break;
    }
    const StepReport step = engine.Step();
    ++result.n_forward;
    if (r.on_token) {
      for (const auto& [id, token] : step.tokens) {
        if (!r.on_token(index_of.at(id), token)) engine.Cancel(id, "stop");
      }
    }
    if (!prefilled) {
      prefilled = std::none_of(ids.begin(), ids.end(), [&](int id) {
        const Sequence& s = engine.sequence(id);
        return !s.finished() && (s.prefilling() || s.shared_with >= 0);
      });
      if (prefilled) {
        result.t_prefill_ms = request_timer.ElapsedMs();
        decode_timer.Reset();
      }
    }
  }
  result.t_decode_ms = prefilled ? decode_timer.ElapsedMs() : 0.0;
  for (int i = 0; i < n; ++i) {
    const Sequence& s = engine.sequence(ids[i]);
    SequenceResult out;
    out.index = i;
    out.tokens = s.tokens;
    out.finish_reason = s.finish_reason;
    out.sum_logprob = s.sum_logprob;
    out.n_logprob = s.n_logprob;
    out.elapsed_ms = s.elapsed_ms;
    out.n_drafted = s.n_drafted;
    out.n_accepted = s.n_accepted;
    out.token_logprobs = s.token_logprobs;
    result.n_tokens += static_cast<int64_t>(s.tokens.size());
    result.sequences.push_back(std::move(out));
  }
  return result;
}

int KeepFinishedRankedByLogProb(GenerateResult* result) {
  const auto n_dropped = std::erase_if(
      result->sequences, [](const SequenceResult& s) { return s.finish_reason == "budget"; });
  std::stable_sort(result->sequences.begin(), result->sequences.end(),
                   [](const SequenceResult& a, const SequenceResult& b) {
                     return a.mean_logprob() > b.mean_logprob();
                   });
  return static_cast<int>(n_dropped);
}

GenerateResult GenerateAutoregressive(Model& model, const KernelContext& ctx, KvCache& kv,
                                      const GenerateRequest& request, SpecSampling sampling) {
  const int n = static_cast<int>(SequencePrompts(request).size());
  SPECD_CHECK(n >= 1 && n <= kv.n_slots(), "batch of ", n,
              " sequences does not fit the KV cache's ", kv.n_slots(), " slots");
  SpeculationConfig plain;
  plain.sampling = sampling;
  StepOptions options;
  options.attention = request.attention;
  const EngineCore core = StartEngine(model, kv, ctx, plain, options, nullptr);
  return RunRequest(*core.engine, request);
}

GenerateResult GenerateWithProposer(Model& target, const KernelContext& ctx, KvCache& target_kv,
                                    Proposer& proposer, const GenerateRequest& request,
                                    const SpeculationConfig& config, SpeculativeStats* stats,
                                    VerifyFunction verify) {
  // The proposer is the object given, not the config's kind (resolved as prompt lookup's, which
  // needs no file); a config that names no policy gets a fixed length.
  SpeculationConfig resolved = config;
  resolved.proposer = ProposerKind::kNgram;
  resolved.draft = {};
  if (resolved.policy == DraftLengthPolicyKind::kDefault) {
    resolved.policy = DraftLengthPolicyKind::kFixed;
  }
  resolved = ResolveSpeculation(resolved);
  StepOptions options;
  options.attention = request.attention;
  options.verify = verify;
  const EngineCore core = StartEngine(target, target_kv, ctx, resolved, options, &proposer);
  GenerateResult result = RunRequest(*core.engine, request);
  result.n_forward = core.engine->stats().n_steps;
  if (stats != nullptr) stats->Add(core.engine->stats());
  return result;
}

GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request, const SpeculationConfig& config,
                                   SpeculativeStats* stats, VerifyFunction verify,
                                   const DraftModelOptions& drafting) {
  CheckDraftCompatible(target, draft);
  const int n = static_cast<int>(SequencePrompts(request).size());
  SPECD_CHECK(n >= 1 && n <= std::min(target_kv.n_slots(), draft_kv.n_slots()), "batch of ", n,
              " sequences does not fit the KV caches");
  const auto proposer =
      MakeModelProposer(target, draft, draft_kv, ctx, request.attention, drafting);
  return GenerateWithProposer(target, ctx, target_kv, *proposer, request, config, stats, verify);
}

GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request, int k, SpeculativeStats* stats,
                                   VerifyFunction verify) {
  SpeculationConfig options;
  options.policy = DraftLengthPolicyKind::kFixed;
  options.draft_max = k;
  options.sampling = SpecSampling::kRejection;
  return GenerateSpeculative(target, draft, ctx, target_kv, draft_kv, request, options, stats,
                             verify);
}

GenerateResult GenerateSpeculativeGreedy(Model& target, Model& draft, const KernelContext& ctx,
                                         KvCache& target_kv, KvCache& draft_kv,
                                         const GenerateRequest& request, int k,
                                         SpeculativeStats* stats) {
  GenerateRequest greedy = request;
  greedy.sampling.temperature = 0.0f;
  return GenerateSpeculative(target, draft, ctx, target_kv, draft_kv, greedy, k, stats);
}

}  // namespace specd
