// llama-server's own API beside the OpenAI one, with its field names, defaults and response
// shapes: /completion and /infill (the requests editor plugins such as llama.vim and
// llama.vscode send), /tokenize, /detokenize and /props.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/fim_prompt.h"
#include "server/openai_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specd::server {

// A /completion or /infill request: the engine's request plus what only the response uses.
struct LlamaRequest {
  CompletionRequest completion;  // n == 1; max_tokens 0 means "evaluate the prompt only"
  std::vector<std::string> response_fields;  // empty: every field
  std::string prompt_text;                   // echoed as "prompt"
  int n_probs = 0;
  int64_t seed = -1;
};
// Parses and checks a body (a 400 ApiError naming the field otherwise).
LlamaRequest ParseLlamaCompletion(const std::string& body, bool infill, const Tokenizer& tokenizer,
                                  const FimTokens& fim, const ApiLimits& limits);
// What the response reports of a finished choice.
struct LlamaOutcome {
  ChoiceOutput choice;    // text, tokens, logprobs, engine finish reason
  std::string stop_type;  // "eos", "word", "limit" or "none" (cancelled)
  std::string stopping_word;
  bool has_new_line = false;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;  // of the prompt, reused from an earlier request's KV
  double prompt_ms = 0, predicted_ms = 0;
};
// The whole /completion or /infill response (also the last chunk of a stream, content "").
nlohmann::json LlamaCompletionResponse(const LlamaRequest& r, const LlamaOutcome& outcome,
                                       const std::string& model_id, const Tokenizer& tokenizer);
// One streamed chunk: {"index", "content", "tokens", "stop": false, ...}.
nlohmann::json LlamaStreamChunk(const std::string& content, const std::vector<int32_t>& tokens,
                                const std::vector<TokenLogprobs>& logprobs, int n_probs,
                                int64_t tokens_predicted, int64_t prompt_tokens,
                                const Tokenizer& tokenizer);

// /tokenize {"content", "add_special", "parse_special", "with_pieces"} -> {"tokens": [...]}.
nlohmann::json TokenizeResponse(const std::string& body, const Tokenizer& tokenizer,
                                const ApiLimits& limits);
// /detokenize {"tokens": [...]} -> {"content": "..."}.
nlohmann::json DetokenizeResponse(const std::string& body, const Tokenizer& tokenizer,
                                  const ApiLimits& limits);
// /props: the server's defaults, slots, model and chat template.
struct PropsInfo {
  std::string model_path;
  int total_slots = 1;
  std::string chat_template;
  bool speculative = false;
};
nlohmann::json PropsResponse(const PropsInfo& info, const ApiLimits& limits);

}  // namespace specd::server
