// A whole request (one prompt with n completions, or several prompts) and its result, as
// engine/generate.h runs them.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "engine/step.h"
#include "kernels/kernels.h"
#include "sampling/sampler.h"

namespace specd {

struct GenerateRequest {
  std::vector<int32_t> prompt;  // token ids, at least one
  int n_predict = 128;          // new tokens per sequence
  int n_sequences = 1;          // completions of the prompt, decoded together
  // One sequence per prompt instead (BASS with different prompts); overrides prompt/n_sequences.
  std::vector<std::vector<int32_t>> prompts;
  // With `prompts`: new tokens for each prompt's sequence instead of n_predict (empty: n_predict
  // for all). A sequence that is done leaves the batch; the others go on.
  std::vector<int> n_predicts;
  // Stop when this much time has passed (0: no budget); unfinished sequences end with
  // finish_reason "budget" (BASS section 4.5).
  double time_budget_ms = 0.0;
  SamplingParams sampling;
  AttentionMode attention = AttentionMode::kSplit;
  bool stop_at_eos = true;
  // Further tokens that end a sequence like EOS (a chat model's end-of-turn), when stop_at_eos.
  std::vector<int32_t> stop_tokens;
  // Called with (sequence index, token) for each generated token as it is accepted; false ends
  // that sequence there (finish_reason "stop": a reverse prompt appeared).
  std::function<bool(int, int32_t)> on_token;
  // When set (by a signal thread: Ctrl-C), every sequence ends at the next step with
  // finish_reason "interrupted", and the request returns what was generated.
  const std::atomic<bool>* interrupt = nullptr;
  // Sum each generated token's log-probability (SequenceResult::mean_logprob, which the time
  // budget's ranking reads): a pass over the vocabulary per token, ~2% of plain decoding of
  // SmolLM2, so callers that never read it turn it off.
  bool sum_logprob = true;
  // Start from the KV of a finished sequence that shares the prompt's beginning, and keep this
  // one's for the next request (a chat's turns; SequenceRequest::cache_prompt).
  bool cache_prompt = false;
  // -1: none; n >= 0: each generated token's log-probability and its n most likely alternatives
  // (SequenceResult::token_logprobs).
  int logprobs = -1;
  // Structured output: the grammar every sequence's tokens follow (SequenceRequest::constraint).
  std::shared_ptr<const TokenConstraintFactory> constraint;
};

struct SequenceResult {
  int index = 0;
  std::vector<int32_t> tokens;  // generated tokens (the EOS that ended a sequence excluded)
  std::string finish_reason;    // "stop" (EOS, a stop token or text), "length", "interrupted"
  double sum_logprob = 0.0;     // of the generated tokens (EOS included) under the raw model
  int n_logprob = 0;
  double elapsed_ms = 0.0;  // from the start of the request to this sequence's last token
  int64_t n_drafted = 0;    // speculation: tokens drafted for this sequence
  int64_t n_accepted = 0;   // of which the target kept
  std::vector<TokenLogprobs> token_logprobs;  // one per generated token, when asked for

  double mean_logprob() const { return n_logprob ? sum_logprob / n_logprob : 0.0; }
};

// The prompt of each sequence of a request.
inline std::vector<std::vector<int32_t>> SequencePrompts(const GenerateRequest& r) {
  if (!r.prompts.empty()) return r.prompts;
  return std::vector<std::vector<int32_t>>(r.n_sequences, r.prompt);
}

struct GenerateResult {
  std::vector<SequenceResult> sequences;
  double t_prefill_ms = 0.0;
  double t_decode_ms = 0.0;
  int64_t n_tokens = 0;  // generated over all sequences
  int64_t n_forward = 0;
};

}  // namespace specd
