#include "decode/generation.h"

#include <algorithm>

namespace specd {

bool CommitToken(const GenerateRequest& request, int32_t eos, int index, int32_t token,
                 std::span<const float> row, double elapsed_ms, GenerateResult* result) {
  SequenceResult& seq = result->sequences[index];
  seq.sum_logprob += LogProb(row, token);
  ++seq.n_logprob;
  seq.elapsed_ms = elapsed_ms;
  const bool stop =
      token == eos || std::find(request.stop_tokens.begin(), request.stop_tokens.end(), token) !=
                          request.stop_tokens.end();
  if (request.stop_at_eos && stop) {
    seq.finish_reason = "stop";
    return true;
  }
  seq.tokens.push_back(token);
  ++result->n_tokens;
  if (request.on_token) request.on_token(index, token);
  if (static_cast<int>(seq.tokens.size()) >= request.n_predict) {
    seq.finish_reason = "length";
    return true;
  }
  return false;
}

}  // namespace specd
