#include "decode/autoregressive.h"

#include <span>

#include "base/error.h"
#include "base/timer.h"

namespace specd {

GenerateResult GenerateAutoregressive(Model& model, const KernelContext& ctx, KvCache& kv,
                                      const GenerateRequest& request) {
  const ModelConfig& config = model.config();
  const auto prompts = SequencePrompts(request);
  const int n_seq = static_cast<int>(prompts.size());
  SPECD_CHECK(n_seq >= 1 && n_seq <= kv.n_slots(), "batch of ", n_seq,
              " sequences does not fit the KV cache's ", kv.n_slots(), " slots");
  SPECD_CHECK(request.n_predict >= 0, "-n must be >= 0");
  for (const auto& p : prompts) {
    SPECD_CHECK(!p.empty(), "the prompt is empty");
    SPECD_CHECK(static_cast<int64_t>(p.size()) + request.n_predict <= kv.n_ctx(), "the prompt (",
                p.size(), " tokens) plus ", request.n_predict, " new tokens exceed the context of ",
                kv.n_ctx(), " tokens (raise --ctx or lower -n)");
  }
  ValidateSamplingParams(request.sampling);

  Timer request_timer;
  GenerateResult result;
  std::vector<int> slots;
  struct Guard {  // releases the slots however we leave
    KvCache& kv;
    std::vector<int>& slots;
    ~Guard() {
      for (int s : slots) kv.Release(s);
    }
  } guard{kv, slots};
  for (int i = 0; i < n_seq; ++i) slots.push_back(kv.Acquire());

  // Completions of one prompt encode it once and fork; different prompts share one ragged batch.
  const int64_t n_vocab = config.n_vocab;
  const bool shared_prompt = request.prompts.empty();
  const int n_prefill = shared_prompt ? 1 : n_seq;
  std::vector<float> logits;
  Batch batch;
  for (int b = 0; b < n_prefill; ++b) {
    for (size_t i = 0; i < prompts[b].size(); ++i) {
      batch.Add(prompts[b][i], static_cast<int32_t>(i), slots[b], i + 1 == prompts[b].size());
    }
  }
  model.Forward(ctx, batch, kv, request.attention, &logits);
  ++result.n_forward;
  if (shared_prompt) {
    for (int i = 1; i < n_seq; ++i)
      kv.Fork(slots[0], slots[i], static_cast<int>(prompts[0].size()));
  }
  result.t_prefill_ms = request_timer.ElapsedMs();

  result.sequences.resize(n_seq);
  std::vector<bool> done(n_seq, request.n_predict == 0);
  std::vector<int32_t> last(n_seq);
  // Samples sequence i's next token from its logits row; returns whether it finished.
  auto take = [&](int i, std::span<const float> row) {
    SequenceResult& seq = result.sequences[i];
    const int64_t position = static_cast<int64_t>(prompts[i].size() + seq.tokens.size());
    const RngKey key{request.sampling.seed, static_cast<uint64_t>(i),
                     static_cast<uint64_t>(position), RngPurpose::kSample};
    const int32_t token = SampleToken(row, request.sampling, key);
    last[i] = token;
    return CommitToken(request, config.eos_token, i, token, row, request_timer.ElapsedMs(),
                       &result);
  };

  for (int i = 0; i < n_seq; ++i) {
    result.sequences[i].index = i;
    const int64_t row = shared_prompt ? 0 : i;
    if (!done[i]) done[i] = take(i, std::span<const float>(logits.data() + row * n_vocab, n_vocab));
    if (request.n_predict == 0) result.sequences[i].finish_reason = "length";
  }

  Timer decode_timer;
  std::vector<int> active;
  while (true) {
    batch.Clear();
    active.clear();
    if (request.time_budget_ms > 0 && request_timer.ElapsedMs() > request.time_budget_ms) {
      for (int i = 0; i < n_seq; ++i) {
        if (!done[i]) result.sequences[i].finish_reason = "budget";
      }
      break;
    }
    for (int i = 0; i < n_seq; ++i) {
      if (done[i]) continue;
      active.push_back(i);
      batch.Add(last[i], kv.Length(slots[i]), slots[i], true);
    }
    if (active.empty()) break;
    model.Forward(ctx, batch, kv, request.attention, &logits);
    ++result.n_forward;
    for (size_t j = 0; j < active.size(); ++j) {
      done[active[j]] =
          take(active[j], std::span<const float>(logits.data() + j * n_vocab, n_vocab));
    }
  }
  result.t_decode_ms = decode_timer.ElapsedMs();
  return result;
}

}  // namespace specd
