#include "decode/autoregressive.h"

#include <span>

#include "base/error.h"
#include "base/timer.h"

namespace specd {

GenerateResult GenerateAutoregressive(Model& model, const KernelContext& ctx, KvCache& kv,
                                      const GenerateRequest& request) {
  const ModelConfig& config = model.config();
  const int64_t n_prompt = static_cast<int64_t>(request.prompt.size());
  SPECD_CHECK(n_prompt >= 1, "the prompt is empty");
  SPECD_CHECK(request.n_sequences >= 1 && request.n_sequences <= kv.n_slots(), "batch of ",
              request.n_sequences, " sequences does not fit the KV cache's ", kv.n_slots(),
              " slots");
  SPECD_CHECK(request.n_predict >= 0, "-n must be >= 0");
  SPECD_CHECK(n_prompt + request.n_predict <= kv.n_ctx(), "the prompt (", n_prompt,
              " tokens) plus ", request.n_predict, " new tokens exceed the context of ", kv.n_ctx(),
              " tokens (raise --ctx or lower -n)");
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
  for (int i = 0; i < request.n_sequences; ++i) slots.push_back(kv.Acquire());

  const int64_t n_vocab = config.n_vocab;
  std::vector<float> logits;
  Batch batch;
  for (int64_t i = 0; i < n_prompt; ++i) {
    batch.Add(request.prompt[i], static_cast<int32_t>(i), slots[0], i == n_prompt - 1);
  }
  model.Forward(ctx, batch, kv, request.attention, &logits);
  ++result.n_forward;
  for (int i = 1; i < request.n_sequences; ++i) kv.Fork(slots[0], slots[i], n_prompt);
  result.t_prefill_ms = request_timer.ElapsedMs();

  result.sequences.resize(request.n_sequences);
  std::vector<bool> done(request.n_sequences, request.n_predict == 0);
  std::vector<int32_t> last(request.n_sequences);
  // Samples sequence i's next token from its logits row; returns whether it finished.
  auto take = [&](int i, std::span<const float> row) {
    SequenceResult& seq = result.sequences[i];
    const int64_t position = n_prompt + static_cast<int64_t>(seq.tokens.size());
    const RngKey key{request.sampling.seed, static_cast<uint64_t>(i),
                     static_cast<uint64_t>(position), RngPurpose::kSample};
    const int32_t token = SampleToken(row, request.sampling, key);
    seq.sum_logprob += LogProb(row, token);
    ++seq.n_logprob;
    seq.elapsed_ms = request_timer.ElapsedMs();
    if (request.stop_at_eos && token == config.eos_token) {
      seq.finish_reason = "stop";
      return true;
    }
    seq.tokens.push_back(token);
    if (request.on_token) request.on_token(i, token);
    last[i] = token;
    ++result.n_tokens;
    if (static_cast<int>(seq.tokens.size()) >= request.n_predict) {
      seq.finish_reason = "length";
      return true;
    }
    return false;
  };

  for (int i = 0; i < request.n_sequences; ++i) {
    result.sequences[i].index = i;
    if (!done[i]) done[i] = take(i, std::span<const float>(logits.data(), n_vocab));
    if (request.n_predict == 0) result.sequences[i].finish_reason = "length";
  }

  Timer decode_timer;
  std::vector<int> active;
  while (true) {
    batch.Clear();
    active.clear();
    for (int i = 0; i < request.n_sequences; ++i) {
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
