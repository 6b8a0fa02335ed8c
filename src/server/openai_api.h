// OpenAI's completions and chat completions API as specd serves it: request bodies parsed and
// checked (every problem an ApiError with the HTTP status and error object OpenAI would give),
// and the response and stream-chunk JSON built from generated choices.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "base/timer.h"
#include "engine/step.h"
#include "server/fim_prompt.h"
#include "server/structured_output.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specd::server {

struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = "",
           std::string code = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type;  // invalid_request_error, authentication_error, ...
  std::string param;
  std::string code;
};

// {"error": {"message", "type", "param", "code"}}
nlohmann::json ErrorBody(const ApiError& e);
// Serializes a response: invalid UTF-8 (a token's partial character) becomes U+FFFD.
std::string Dump(const nlohmann::json& j);

// What the server needs to know to check a request.
struct ApiLimits {
  std::string model_id;                    // the one model served
  int n_ctx = 0;                           // positions per sequence
  int max_n = 1;                           // completions per request (the server's slots)
  int default_max_tokens_completion = 16;  // OpenAI's default for /v1/completions
  int max_json_depth = 64;                 // arrays and objects nested deeper are refused
};

// Editor limits of llama-server's /infill and /completion (0: off).
struct TextLimits {
  int n_indent = 0;             // a new line indented less than this ends the text
  double t_max_predict_ms = 0;  // after this long generating, the next new line ends it
};

struct CompletionRequest {
  bool chat = false;
  std::vector<int32_t> prompt;  // tokens, BOS / chat template applied
  int max_tokens = 16;
  SamplingParams sampling;
  int n = 1;
  bool stream = false;
  bool include_usage = false;        // stream_options.include_usage
  std::vector<std::string> stop;     // at most 4
  int logprobs = -1;                 // -1: none, else top alternatives per token (0..20)
  double time_budget_ms = 0.0;       // specd's extension: unfinished choices end at this time
  std::vector<int32_t> stop_tokens;  // chat: the template's end-of-turn tokens
  bool ignore_eos = false;           // llama-server's field: EOS does not end a choice
  bool cache_prompt = true;          // llama-server's field: reuse the KV of a shared prefix
  TextLimits text_limits;            // llama-server's n_indent and t_max_predict_ms
  // specd's extension: stream chunks say how each piece of text came (draft, lookup, target).
  bool token_sources = false;
  // response_format, tools, grammar, json_schema; compiled by the server into `constraint`.
  StructuredRequest structured;
  std::shared_ptr<const TokenConstraintFactory> constraint;
};

// Parses and checks a body; throws ApiError. `chat` selects /v1/chat/completions.
// A non-empty `suffix` makes the prompt the model's FIM prompt (`fim`; a 400 without).
CompletionRequest ParseCompletionRequest(const std::string& body, bool chat,
                                         const Tokenizer& tokenizer,
                                         const ChatTemplate* chat_template, const FimTokens& fim,
                                         const ApiLimits& limits);

// A piece of a choice's text whose tokens all came the same way.
struct SourceRun {
  std::string text;
  TokenSource source = TokenSource::kTarget;
  int n_tokens = 0;  // tokens whose text starts in it
};
// "target", "draft" or "lookup".
const char* SourceName(TokenSource source);

// One choice's text as tokens arrive: UTF-8 whole characters only, cut before the first stop
// string (or by a TextLimits rule), and (for streaming) text that might still become a stop
// string held back.
class ChoiceText {
 public:
  ChoiceText(const Tokenizer& tokenizer, std::vector<std::string> stop, TextLimits limits = {});
  // Adds a token; returns true when the text has ended (a stop string appeared, the text now
  // ends before it; or a TextLimits rule ended it).
  bool Push(int32_t token, TokenSource source = TokenSource::kTarget);
  // Text not yet taken that is safe to send; all of it when `final`. `runs` (optional) gets the
  // same text cut where the tokens' sources change.
  std::string TakeDelta(bool final, std::vector<SourceRun>* runs = nullptr);
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }
  // Why it stopped: "word" (a stop string, stopping_word()) or "limit" (TextLimits); "" if not.
  const std::string& stop_type() const { return stop_type_; }
  const std::string& stopping_word() const { return stopping_word_; }
  bool has_new_line() const { return has_new_line_; }

 private:
  void ApplyLineLimits(size_t before);

  StreamingDecoder decoder_;
  std::vector<std::string> stop_;
  TextLimits limits_;
  std::string text_;
  // [text_.size()]: each byte's TokenSource, with kTokenStart on the first byte of a token's text.
  std::string byte_sources_;
  static constexpr char kTokenStart = 0x40;
  size_t sent_ = 0;
  bool stopped_ = false;
  std::string stop_type_, stopping_word_;
  bool generating_ = false;
  Timer since_first_token_;
  bool has_new_line_ = false;
  size_t last_line_start_ = 0;  // after the last new line the indentation rule has seen
};

// A finished (or, streaming, progressing) choice.
struct ChoiceOutput {
  int index = 0;
  std::string text = {};
  std::string finish_reason = {};  // "" while streaming
  std::vector<int32_t> tokens = {};
  std::vector<TokenLogprobs> logprobs = {};
  // Chat with tools: the calls parsed from the text (a stream delta's: those completed in it,
  // the first of them the choice's call number first_call_index).
  std::vector<ToolCall> tool_calls = {};
  int first_call_index = 0;
  std::vector<SourceRun> sources = {};  // a stream delta's text by source (token_sources)
};

struct ResponseInfo {
  std::string id;
  int64_t created = 0;
  std::string model;
  bool chat = false;
  int logprobs = -1;
  bool parse_tool_calls = false;  // chat with tools: calls in the text become tool_calls
  bool parallel_tool_calls = true;
  bool token_sources = false;  // chunks carry `token_sources`
};

// Token counts of a request: its prompt, of which reused from the prompt cache.
struct PromptCount {
  int64_t tokens = 0;
  int64_t cached = 0;
};
// The whole response of a non-streaming request, with usage (OpenAI's
// prompt_tokens_details.cached_tokens included) and specd's acceptance figures.
nlohmann::json CompletionResponse(const ResponseInfo& info,
                                  const std::vector<ChoiceOutput>& choices, PromptCount prompt,
                                  const Tokenizer& tokenizer, int64_t n_drafted,
                                  int64_t n_accepted);
// One `data:` chunk of a stream for one choice (`first`: chat's role delta).
nlohmann::json StreamChunk(const ResponseInfo& info, const ChoiceOutput& delta, bool first,
                           const Tokenizer& tokenizer);
// Speculation figures of a request: drafted and accepted tokens, and the ms from its arrival to
// its first and its last token.
struct SpeculationFigures {
  int64_t n_drafted = 0;
  int64_t n_accepted = 0;
  double t_first_token_ms = 0;
  double t_last_token_ms = 0;
};
// The `specd` object of a response or usage chunk.
nlohmann::json SpeculationJson(const SpeculationFigures& figures);
// The usage chunk sent last when stream_options.include_usage, with specd's figures.
nlohmann::json UsageChunk(const ResponseInfo& info, PromptCount prompt, int64_t completion_tokens,
                          const SpeculationFigures& figures);
// OpenAI's finish reasons: a time budget counts as "length"; "cancelled" stays.
// "tool_calls" for a choice that called tools and stopped on its own.
std::string OpenAiFinishReason(const std::string& engine_reason, bool called_tools = false);

}  // namespace specd::server
