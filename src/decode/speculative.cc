#include "decode/speculative.h"

#include <span>

#include "base/error.h"
#include "base/timer.h"
#include "sampling/sampler.h"
#include "verify/verify.h"

namespace specd {

void SpeculativeStats::Add(const SpeculativeStats& o) {
  n_drafted += o.n_drafted;
  n_accepted += o.n_accepted;
  n_steps += o.n_steps;
  if (accepted_at_position.size() < o.accepted_at_position.size()) {
    accepted_at_position.resize(o.accepted_at_position.size());
    drafted_at_position.resize(o.drafted_at_position.size());
  }
  for (size_t i = 0; i < o.accepted_at_position.size(); ++i) {
    accepted_at_position[i] += o.accepted_at_position[i];
    drafted_at_position[i] += o.drafted_at_position[i];
  }
  t_draft_ms += o.t_draft_ms;
  t_verify_ms += o.t_verify_ms;
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

GenerateResult GenerateSpeculativeGreedy(Model& target, Model& draft, const KernelContext& ctx,
                                         KvCache& target_kv, KvCache& draft_kv,
                                         const GenerateRequest& request, int k,
                                         SpeculativeStats* stats) {
  GenerateRequest greedy = request;
  greedy.sampling.temperature = 0.0f;
  return GenerateSpeculative(target, draft, ctx, target_kv, draft_kv, greedy, k, stats);
}

GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request, int k,
                                   SpeculativeStats* stats, VerifyFunction verify) {
  CheckDraftCompatible(target, draft);
  ValidateSamplingParams(request.sampling);
  const bool greedy = request.sampling.greedy();
  SPECD_CHECK(k >= 1 && k <= 64, "draft length must be in 1..64, got ", k);
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  SPECD_CHECK(n_prompt >= 1, "the prompt is empty");
  SPECD_CHECK(n_prompt + request.n_predict + k + 1 <= std::min(target_kv.n_ctx(), draft_kv.n_ctx()),
              "the prompt (", n_prompt, " tokens) plus ", request.n_predict,
              " new tokens and a draft of ", k, " exceed the context");
  const int64_t n_vocab = target.config().n_vocab;
  const int32_t eos = target.config().eos_token;
  Timer request_timer;
  GenerateResult result;
  result.sequences.resize(1);
  SequenceResult& seq = result.sequences[0];
  SpeculativeStats local;
  local.accepted_at_position.assign(k, 0);
  local.drafted_at_position.assign(k, 0);

  const int ts = target_kv.Acquire();
  const int ds = draft_kv.Acquire();
  struct Release {
    KvCache& a;
    KvCache& b;
    int sa, sb;
    ~Release() {
      a.Release(sa);
      b.Release(sb);
    }
  } release{target_kv, draft_kv, ts, ds};

  // Both caches hold every committed token but the last, which is the next input.
  std::vector<float> logits;
  Batch batch;
  for (int64_t i = 0; i + 1 < n_prompt; ++i) batch.Add(request.prompt[i], i, ts, false);
  if (batch.size() > 0) {
    target.Forward(ctx, batch, target_kv, request.attention, &logits);
    for (auto& s : batch.seq_ids) s = ds;
    draft.Forward(ctx, batch, draft_kv, request.attention, &logits);
  }
  result.t_prefill_ms = request_timer.ElapsedMs();
  Timer decode_timer;

  std::vector<int32_t> draft_pending = {request.prompt.back()};  // draft inputs not yet in its KV
  int32_t last = request.prompt.back();
  std::vector<int32_t> drafted;
  std::vector<std::vector<float>> draft_probs(k), target_probs(k + 1);  // sampled mode only
  bool done = request.n_predict == 0;
  seq.finish_reason = "length";
  auto commit = [&](int32_t token, std::span<const float> row) {
    seq.sum_logprob += LogProb(row, token);
    ++seq.n_logprob;
    seq.elapsed_ms = request_timer.ElapsedMs();
    if (request.stop_at_eos && token == eos) {
      seq.finish_reason = "stop";
      return true;
    }
    seq.tokens.push_back(token);
    ++result.n_tokens;
    if (request.on_token) request.on_token(0, token);
    return static_cast<int>(seq.tokens.size()) >= request.n_predict;
  };

  while (!done) {
    // Draft K tokens greedily; the first draft forward also catches up on pending tokens.
    Timer draft_timer;
    drafted.clear();
    const int remaining = request.n_predict - static_cast<int>(seq.tokens.size());
    const int k_step = std::min(k, std::max(remaining - 1, 0));
    for (int i = 0; i < k_step; ++i) {
      batch.Clear();
      const int base = draft_kv.Length(ds);
      const auto& inputs = i == 0 ? draft_pending : std::vector<int32_t>{drafted.back()};
      for (size_t j = 0; j < inputs.size(); ++j) {
        batch.Add(inputs[j], base + static_cast<int>(j), ds, j + 1 == inputs.size());
      }
      draft.Forward(ctx, batch, draft_kv, request.attention, &logits);
      const std::span<const float> row(logits.data(), n_vocab);
      if (greedy) {
        drafted.push_back(Argmax(row));
      } else {
        draft_probs[i] = ProcessedProbs(row, request.sampling);
        const uint64_t position = target_kv.Length(ts) + 1 + i;
        const RngKey key{request.sampling.seed, 0, position, RngPurpose::kDraft};
        drafted.push_back(DrawFrom(draft_probs[i], UniformDouble(key)));
      }
    }
    local.t_draft_ms += draft_timer.ElapsedMs();

    // Verify [last, d1..dK] in one target forward.
    Timer verify_timer;
    batch.Clear();
    const int target_base = target_kv.Length(ts);
    batch.Add(last, target_base, ts, true);
    for (int i = 0; i < k_step; ++i) batch.Add(drafted[i], target_base + 1 + i, ts, true);
    target.Forward(ctx, batch, target_kv, request.attention, &logits);
    local.t_verify_ms += verify_timer.ElapsedMs();
    ++local.n_steps;

    int accepted = 0;
    int32_t next = -1;
    if (greedy) {
      for (int i = 0; i <= k_step; ++i) {
        const std::span<const float> row(logits.data() + i * n_vocab, n_vocab);
        const int32_t want = Argmax(row);
        const bool match = i < k_step && drafted[i] == want;
        if (i < k_step) {
          ++local.drafted_at_position[i];
          if (match) ++local.accepted_at_position[i];
        }
        if (commit(want, row)) {
          done = true;
          break;
        }
        if (!match) {
          next = want;
          break;
        }
        ++accepted;
      }
    } else {
      for (int i = 0; i <= k_step; ++i) {
        target_probs[i] =
            ProcessedProbs(std::span<const float>(logits.data() + i * n_vocab, n_vocab),
                           request.sampling);
      }
      const RngKey key{request.sampling.seed, 0, static_cast<uint64_t>(target_base + 1),
                       RngPurpose::kAccept};
      const VerifyOutcome outcome =
          verify(std::span(target_probs.data(), k_step + 1),
                        std::span(draft_probs.data(), k_step), std::span(drafted.data(), k_step), key);
      for (int i = 0; i < k_step; ++i) {
        ++local.drafted_at_position[i];
        if (i < outcome.n_accepted) ++local.accepted_at_position[i];
      }
      for (int i = 0; i <= outcome.n_accepted && !done; ++i) {
        const int32_t token = i < outcome.n_accepted ? drafted[i] : outcome.next;
        done = commit(token, std::span<const float>(logits.data() + i * n_vocab, n_vocab));
      }
      accepted = outcome.n_accepted;
      next = outcome.next;
    }
    local.n_drafted += k_step;
    local.n_accepted += accepted;
    if (done) break;
    // Keep last + the accepted drafts in both caches; `next` (correction or bonus) is the next
    // input. The draft has seen last..d_{K-1}: after full acceptance d_K is still pending.
    target_kv.Truncate(ts, target_base + 1 + accepted);
    const int draft_keep = target_base + 1 + std::min(accepted, std::max(k_step - 1, 0));
    if (k_step == 0) {
      // Nothing was drafted: the draft never ran, its pending inputs stay queued.
      draft_pending.push_back(next);
    } else {
      draft_kv.Truncate(ds, std::min(draft_kv.Length(ds), draft_keep));
      draft_pending.clear();
      if (accepted == k_step) draft_pending.push_back(drafted[k_step - 1]);
      draft_pending.push_back(next);
    }
    last = next;
  }
  result.t_decode_ms = decode_timer.ElapsedMs();
  result.n_forward = local.n_steps;
  if (stats != nullptr) stats->Add(local);
  return result;
}

}  // namespace specd
