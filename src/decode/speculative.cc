#include "decode/speculative.h"

#include <algorithm>
#include <optional>
#include <span>

#include "base/error.h"
#include "base/timer.h"
#include "decode/draft_policy.h"
#include "sampling/sampler.h"
#include "verify/verify.h"

namespace specd {
namespace {
// Most tokens a draft reads to catch up after plain steps (see the draft phase).
constexpr int kDraftCatchUpLimit = 32;
}  // namespace

void SpeculativeStats::Add(const SpeculativeStats& o) {
  n_drafted += o.n_drafted;
  n_accepted += o.n_accepted;
  n_steps += o.n_steps;
  n_plain_steps += o.n_plain_steps;
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

int NextDraftLength(int current, const std::vector<int>& accepted, const SpeculativeOptions& o,
                    int* decreasing) {
  int max_accepted = 0;
  for (int x : accepted) max_accepted = std::max(max_accepted, x);
  if (max_accepted >= current) {
    *decreasing = 0;
    return std::min(current + o.l_incre, o.l_limit);
  }
  int next = current - (current + o.l_mod - 1) / o.l_mod - *decreasing;
  next = std::max({1, max_accepted, next});
  *decreasing = 1;
  return next;
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
                                   const GenerateRequest& request, int k, SpeculativeStats* stats,
                                   VerifyFunction verify) {
  SpeculativeOptions options;
  options.draft_max = k;
  return GenerateSpeculative(target, draft, ctx, target_kv, draft_kv, request, options, stats,
                             verify);
}

GenerateResult GenerateSpeculative(Model& target, Model& draft, const KernelContext& ctx,
                                   KvCache& target_kv, KvCache& draft_kv,
                                   const GenerateRequest& request, const SpeculativeOptions& o,
                                   SpeculativeStats* stats, VerifyFunction verify) {
  CheckDraftCompatible(target, draft);
  ValidateSamplingParams(request.sampling);
  int k_limit = o.adaptive ? o.l_limit : o.draft_max;
  for (int k : o.schedule) {
    SPECD_CHECK(k >= 0 && k <= 64, "scheduled draft lengths must be in 0..64, got ", k);
    k_limit = std::max(k_limit, k);
  }
  SPECD_CHECK(o.draft_max >= 1 && k_limit >= 1 && k_limit <= 64, "draft length must be in 1..64");
  SPECD_CHECK(!(o.adaptive && o.cost_aware), "choose one draft-length policy");
  const bool greedy = request.sampling.greedy();
  const auto prompts = SequencePrompts(request);
  const int n_seq = static_cast<int>(prompts.size());
  SPECD_CHECK(n_seq >= 1 && n_seq <= std::min(target_kv.n_slots(), draft_kv.n_slots()), "batch of ",
              n_seq, " sequences does not fit the KV caches");
  SPECD_CHECK(request.n_predict >= 0, "-n must be >= 0");
  for (const auto& p : prompts) {
    SPECD_CHECK(!p.empty(), "a prompt is empty");
    SPECD_CHECK(static_cast<int64_t>(p.size()) + request.n_predict + k_limit + 1 <=
                    std::min(target_kv.n_ctx(), draft_kv.n_ctx()),
                "the prompt (", p.size(), " tokens) plus ", request.n_predict,
                " new tokens and a draft of up to ", k_limit, " exceed the context");
  }
  const int64_t n_vocab = target.config().n_vocab;
  const int32_t eos = target.config().eos_token;
  Timer request_timer;
  GenerateResult result;
  result.sequences.resize(n_seq);
  SpeculativeStats local;
  local.accepted_at_position.assign(k_limit, 0);
  local.drafted_at_position.assign(k_limit, 0);

  std::vector<int> ts, ds;
  struct Release {
    KvCache& a;
    KvCache& b;
    std::vector<int>& sa;
    std::vector<int>& sb;
    ~Release() {
      for (int s : sa) a.Release(s);
      for (int s : sb) b.Release(s);
    }
  } release{target_kv, draft_kv, ts, ds};
  for (int b = 0; b < n_seq; ++b) {
    ts.push_back(target_kv.Acquire());
    ds.push_back(draft_kv.Acquire());
  }

  // The target reads each whole prompt and gives the first token, as plain decoding does; the
  // draft reads all but each prompt's last token, which waits in its pending inputs. From then
  // on both caches hold every committed token but the last, which is the next input.
  // Completions of one prompt encode it once and fork it.
  const bool shared_prompt = request.prompts.empty();
  std::vector<float> logits, first_logits;
  Batch batch;
  const int n_prefill = shared_prompt ? 1 : n_seq;
  for (int b = 0; b < n_prefill; ++b) {
    for (size_t i = 0; i < prompts[b].size(); ++i) {
      batch.Add(prompts[b][i], static_cast<int32_t>(i), ts[b], i + 1 == prompts[b].size());
    }
  }
  // The prompt's forwards are the cost-aware policy's first measurements (many rows, the far
  // end of the cost curves): its first decision rests on them.
  // Only the cost-aware policy measures; the others leave the hot loop alone.
  std::optional<CostAwareDraftLength> cost_policy;
  if (o.cost_aware) cost_policy.emplace(o.draft_max);
  Timer prefill_timer;
  target.Forward(ctx, batch, target_kv, request.attention, &first_logits);
  const int target_prefill_rows = static_cast<int>(batch.size());
  const double target_prefill_ms = prefill_timer.ElapsedMs();
  double draft_prefill_ms = 0.0;
  batch.Clear();
  for (int b = 0; b < n_prefill; ++b) {
    for (size_t i = 0; i + 1 < prompts[b].size(); ++i) {
      batch.Add(prompts[b][i], static_cast<int32_t>(i), ds[b], false);
    }
  }
  if (batch.size() > 0) {
    prefill_timer.Reset();
    draft.Forward(ctx, batch, draft_kv, request.attention, &logits);
    draft_prefill_ms = prefill_timer.ElapsedMs();
  }
  if (cost_policy) {
    cost_policy->ObservePrefill(target_prefill_rows, target_prefill_ms,
                                static_cast<int>(batch.size()), draft_prefill_ms);
  }
  if (shared_prompt) {
    const int length = static_cast<int>(prompts[0].size());
    for (int b = 1; b < n_seq; ++b) {
      target_kv.Fork(ts[0], ts[b], length);
      draft_kv.Fork(ds[0], ds[b], length - 1);
    }
  }
  result.t_prefill_ms = request_timer.ElapsedMs();
  Timer decode_timer;

  struct State {
    int32_t last;
    std::vector<int32_t> pending;  // draft inputs not yet in its KV
    std::vector<int32_t> drafted;
    std::vector<std::vector<float>> draft_probs;  // sampled mode
    int k_step = 0;
    int target_base = 0;
    int draft_shift = 0;  // target position - draft position of the same token
    bool done = false;
  };
  std::vector<State> st(n_seq);
  for (int b = 0; b < n_seq; ++b) {
    st[b].last = prompts[b].back();
    st[b].pending = {prompts[b].back()};
    st[b].draft_probs.resize(k_limit);
    st[b].done = request.n_predict == 0;
    result.sequences[b].index = b;
    result.sequences[b].finish_reason = "length";
  }
  std::vector<std::vector<float>> target_probs(k_limit + 1);
  auto commit = [&](int b, int32_t token, std::span<const float> row) {
    return CommitToken(request, eos, b, token, row, request_timer.ElapsedMs(), &result);
  };
  // First tokens from the prompt's logits (the same draw as plain decoding's).
  for (int b = 0; b < n_seq; ++b) {
    if (st[b].done) continue;
    const std::span<const float> row(first_logits.data() + (shared_prompt ? 0 : b) * n_vocab,
                                     n_vocab);
    const RngKey key{request.sampling.seed, static_cast<uint64_t>(b),
                     static_cast<uint64_t>(prompts[b].size()), RngPurpose::kSample};
    const int32_t token = SampleToken(row, request.sampling, key);
    st[b].done = commit(b, token, row);
    st[b].last = token;
    st[b].pending.push_back(token);
  }

  int draft_length = o.draft_max;
  int decreasing = 0;
  std::vector<int> active, rows_of, accepted_now;
  while (true) {
    active.clear();
    for (int b = 0; b < n_seq; ++b) {
      if (!st[b].done) active.push_back(b);
    }
    if (active.empty()) break;
    if (request.time_budget_ms > 0 && request_timer.ElapsedMs() > request.time_budget_ms) {
      for (int b : active) result.sequences[b].finish_reason = "budget";
      break;
    }

    if (!o.schedule.empty()) {
      draft_length = o.schedule[local.n_steps % o.schedule.size()];
    } else if (o.cost_aware) {
      int remaining = 0;
      for (int b : active) {
        remaining = std::max(
            remaining, request.n_predict - static_cast<int>(result.sequences[b].tokens.size()));
      }
      draft_length = cost_policy->Next(static_cast<int>(active.size()), remaining);
    }
    if (draft_length == 0) ++local.n_plain_steps;

    // Draft: one draft forward per position over every sequence still drafting.
    Timer step_timer;
    double step_forward_ms = 0.0;
    const int64_t tokens_before = result.n_tokens;
    bool catch_up = false;
    if (cost_policy) {
      for (int b : active) catch_up = catch_up || (draft_length > 0 && st[b].pending.size() > 2);
    }
    Timer draft_timer;
    int k_max = 0;
    for (int b : active) {
      State& s = st[b];
      s.drafted.clear();
      const int remaining = request.n_predict - static_cast<int>(result.sequences[b].tokens.size());
      s.k_step = std::min(draft_length, std::max(remaining - 1, 0));
      k_max = std::max(k_max, s.k_step);
      // After a long run of plain steps the draft would have to read every skipped token, which
      // costs about as much as having drafted all along. It restarts instead from the last
      // kDraftCatchUpLimit tokens: a proposer needs no more context to be useful, and RoPE
      // makes its fresh positions equivalent. Output is unaffected (the target decides).
      if (s.k_step > 0 && static_cast<int>(s.pending.size()) > kDraftCatchUpLimit) {
        const int skipped = static_cast<int>(s.pending.size()) - kDraftCatchUpLimit;
        s.draft_shift += draft_kv.Length(ds[b]) + skipped;
        draft_kv.Truncate(ds[b], 0);
        s.pending.erase(s.pending.begin(), s.pending.begin() + skipped);
      }
    }
    for (int i = 0; i < k_max; ++i) {
      batch.Clear();
      rows_of.clear();
      for (int b : active) {
        State& s = st[b];
        if (i >= s.k_step) continue;
        const int base = draft_kv.Length(ds[b]);
        const std::vector<int32_t> inputs =
            i == 0 ? s.pending : std::vector<int32_t>{s.drafted.back()};
        for (size_t j = 0; j < inputs.size(); ++j) {
          batch.Add(inputs[j], base + static_cast<int>(j), ds[b], j + 1 == inputs.size());
        }
        rows_of.push_back(b);
      }
      Timer forward_timer;
      draft.Forward(ctx, batch, draft_kv, request.attention, &logits);
      const double forward_ms = forward_timer.ElapsedMs();
      if (cost_policy) cost_policy->ObserveDraftForward(static_cast<int>(batch.size()), forward_ms);
      step_forward_ms += forward_ms;
      for (size_t r = 0; r < rows_of.size(); ++r) {
        const int b = rows_of[r];
        State& s = st[b];
        const std::span<const float> row(logits.data() + r * n_vocab, n_vocab);
        if (greedy) {
          s.drafted.push_back(Argmax(row));
        } else {
          s.draft_probs[i] = ProcessedProbs(row, request.sampling);
          const uint64_t position = target_kv.Length(ts[b]) + 1 + i;
          const RngKey key{request.sampling.seed, static_cast<uint64_t>(b), position,
                           RngPurpose::kDraft};
          s.drafted.push_back(DrawFrom(s.draft_probs[i], UniformDouble(key)));
        }
      }
    }
    local.t_draft_ms += draft_timer.ElapsedMs();

    // Verify: one target forward over [last, d1..dK] of every sequence.
    Timer verify_timer;
    batch.Clear();
    for (int b : active) {
      State& s = st[b];
      s.target_base = target_kv.Length(ts[b]);
      batch.Add(s.last, s.target_base, ts[b], true);
      for (int i = 0; i < s.k_step; ++i)
        batch.Add(s.drafted[i], s.target_base + 1 + i, ts[b], true);
    }
    target.Forward(ctx, batch, target_kv, request.attention, &logits);
    local.t_verify_ms += verify_timer.ElapsedMs();
    if (cost_policy) {
      cost_policy->ObserveTargetForward(static_cast<int>(batch.size()), verify_timer.ElapsedMs());
    }
    step_forward_ms += verify_timer.ElapsedMs();
    ++local.n_steps;

    accepted_now.clear();
    int64_t row0 = 0;
    for (int b : active) {
      State& s = st[b];
      const float* rows = logits.data() + row0 * n_vocab;
      row0 += s.k_step + 1;
      int accepted = 0;
      int32_t next = -1;
      bool done = false;
      if (greedy) {
        for (int i = 0; i <= s.k_step; ++i) {
          const std::span<const float> row(rows + i * n_vocab, n_vocab);
          const int32_t want = Argmax(row);
          const bool match = i < s.k_step && s.drafted[i] == want;
          if (i < s.k_step) {
            ++local.drafted_at_position[i];
            if (match) ++local.accepted_at_position[i];
          }
          if (commit(b, want, row)) {
            done = true;
            break;
          }
          if (!match) {
            next = want;
            break;
          }
          ++accepted;
        }
      } else if (s.k_step == 0) {
        // A plain step: sample from the target row directly (no dense distributions needed).
        const std::span<const float> row(rows, n_vocab);
        const RngKey key{request.sampling.seed, static_cast<uint64_t>(b),
                         static_cast<uint64_t>(s.target_base + 1), RngPurpose::kAccept};
        next = SampleToken(row, request.sampling, key);
        done = commit(b, next, row);
      } else {
        for (int i = 0; i <= s.k_step; ++i) {
          target_probs[i] =
              ProcessedProbs(std::span<const float>(rows + i * n_vocab, n_vocab), request.sampling);
        }
        const RngKey key{request.sampling.seed, static_cast<uint64_t>(b),
                         static_cast<uint64_t>(s.target_base + 1), RngPurpose::kAccept};
        const VerifyOutcome outcome = verify(std::span(target_probs.data(), s.k_step + 1),
                                             std::span(s.draft_probs.data(), s.k_step),
                                             std::span(s.drafted.data(), s.k_step), key);
        for (int i = 0; i < s.k_step; ++i) {
          ++local.drafted_at_position[i];
          if (i < outcome.n_accepted) ++local.accepted_at_position[i];
        }
        for (int i = 0; i <= outcome.n_accepted && !done; ++i) {
          const int32_t token = i < outcome.n_accepted ? s.drafted[i] : outcome.next;
          done = commit(b, token, std::span<const float>(rows + i * n_vocab, n_vocab));
        }
        accepted = outcome.n_accepted;
        next = outcome.next;
      }
      local.n_drafted += s.k_step;
      local.n_accepted += accepted;
      if (cost_policy) cost_policy->ObserveAcceptance(s.k_step, accepted);
      accepted_now.push_back(accepted);
      if (done) {
        s.done = true;
        continue;
      }
      // Keep last + the accepted drafts in both caches; `next` (correction or bonus) is the next
      // input. The draft has seen last..d_{K-1}: after full acceptance d_K is still pending.
      target_kv.Truncate(ts[b], s.target_base + 1 + accepted);
      if (s.k_step == 0) {
        s.pending.push_back(next);  // the draft did not run this step
      } else {
        const int draft_keep = s.target_base + 1 + std::min(accepted, s.k_step - 1) - s.draft_shift;
        draft_kv.Truncate(ds[b], std::min(draft_kv.Length(ds[b]), draft_keep));
        s.pending.clear();
        if (accepted == s.k_step) s.pending.push_back(s.drafted[s.k_step - 1]);
        s.pending.push_back(next);
      }
      s.last = next;
    }
    if (cost_policy) {
      cost_policy->ObserveStep(static_cast<int>(active.size()), draft_length,
                               step_timer.ElapsedMs(), step_forward_ms,
                               static_cast<int>(result.n_tokens - tokens_before), catch_up);
    }
    if (o.adaptive) draft_length = NextDraftLength(draft_length, accepted_now, o, &decreasing);
  }
  result.t_decode_ms = decode_timer.ElapsedMs();
  result.n_forward = local.n_steps;
  if (stats != nullptr) stats->Add(local);
  return result;
}

}  // namespace specd
