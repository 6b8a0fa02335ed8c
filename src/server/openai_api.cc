#include "server/openai_api.h"

#include <algorithm>
#include <limits>
#include <random>

#include "base/error.h"
#include "server/request_fields.h"
#include "tokenizer/utf8.h"

namespace specd::server {
namespace {

using nlohmann::json;

std::vector<int32_t> CompletionPrompt(const json& j, const Tokenizer& tokenizer) {
  const auto it = j.find("prompt");
  if (it == j.end() || it->is_null()) throw BadRequest("'prompt' is required", "prompt");
  // One prompt per request: a list of one string or one token list is that prompt.
  const bool wrapped =
      it->is_array() && it->size() == 1 && ((*it)[0].is_string() || (*it)[0].is_array());
  const json& prompt = wrapped ? (*it)[0] : *it;
  std::vector<int32_t> tokens;
  if (prompt.is_string()) {
    const std::string text = prompt.get<std::string>();
    if (text.empty()) throw BadRequest("'prompt' is empty", "prompt");
    tokens = tokenizer.Encode(text, /*add_special=*/true, /*parse_special=*/false);
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    tokens = TokenIds(prompt, tokenizer);
  } else {
    throw BadRequest(
        "'prompt' must be a string or a list of token ids (one prompt per request; use n for "
        "several completions)",
        "prompt");
  }
  if (tokens.empty()) throw BadRequest("'prompt' is empty", "prompt");
  return tokens;
}

std::string MessageContent(const json& content) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) {
    throw BadRequest("a message's 'content' must be a string or a list of text parts", "messages");
  }
  std::string text;
  for (const auto& part : content) {
    // json's value() throws on a "type" that is not a string: compared as json instead.
    if (!part.is_object() || !part.contains("type") || part["type"] != "text" ||
        !part.contains("text") || !part["text"].is_string()) {
      throw BadRequest(
          "only text content parts ({\"type\": \"text\", \"text\": ...}) are supported",
          "messages");
    }
    text += part["text"].get<std::string>();
  }
  return text;
}

// An assistant message's tool_calls as its template writes them back: arguments (OpenAI's JSON
// text) as the JSON they hold.
std::vector<ChatToolCall> MessageToolCalls(const json& m) {
  std::vector<ChatToolCall> calls;
  if (!m.contains("tool_calls") || m["tool_calls"].is_null()) return calls;
  const json& list = m["tool_calls"];
  const char* shape =
      "'tool_calls' must be a list of {\"type\": \"function\", \"function\": {\"name\", "
      "\"arguments\"}}";
  if (!list.is_array()) throw BadRequest(shape, "messages");
  for (const json& call : list) {
    if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) {
      throw BadRequest(shape, "messages");
    }
    const json& f = call["function"];
    if (!f.contains("name") || !f["name"].is_string()) throw BadRequest(shape, "messages");
    nlohmann::ordered_json args = nlohmann::ordered_json::object();
    if (f.contains("arguments") && f["arguments"].is_string()) {
      const std::string text = f["arguments"];
      args = nlohmann::ordered_json::parse(text, nullptr, /*allow_exceptions=*/false);
      if (args.is_discarded()) args = text;  // not JSON: written as the string it is
    } else if (f.contains("arguments") && !f["arguments"].is_null()) {
      args = nlohmann::ordered_json::parse(f["arguments"].dump());
    }
    calls.push_back({f["name"], TemplateJson(args)});
  }
  return calls;
}

ChatMessage ParseMessage(const json& m) {
  if (!m.is_object() || !m.contains("role") || !m["role"].is_string()) {
    throw BadRequest("each message needs a 'role' string", "messages");
  }
  std::string role = m["role"].get<std::string>();
  if (role == "developer") role = "system";
  if (role != "system" && role != "user" && role != "assistant" && role != "tool") {
    throw BadRequest("unknown role '" + role + "' (system, user, assistant, tool)", "messages");
  }
  ChatMessage message{role, "", MessageToolCalls(m)};
  if (!message.tool_calls.empty() && role != "assistant") {
    throw BadRequest("only assistant messages carry 'tool_calls'", "messages");
  }
  // An assistant that only called tools has content null (or none).
  const bool content_optional = role == "assistant" && !message.tool_calls.empty();
  if (!m.contains("content") || m["content"].is_null()) {
    if (!content_optional) {
      throw BadRequest("each " + role + " message needs 'content'", "messages");
    }
    return message;
  }
  message.content = MessageContent(m["content"]);
  return message;
}

std::vector<int32_t> ChatPrompt(const json& j, const Tokenizer& tokenizer,
                                const ChatTemplate* chat_template,
                                const std::vector<std::string>& tools) {
  if (chat_template == nullptr) {
    throw BadRequest(
        "this model has no chat template: use /v1/completions, or serve it with --chat-template "
        "chatml (or gemma)");
  }
  const auto it = j.find("messages");
  if (it == j.end() || !it->is_array()) {
    throw BadRequest("'messages' must be a list of messages", "messages");
  }
  if (it->empty()) throw BadRequest("'messages' is empty", "messages");
  std::vector<ChatMessage> messages;
  for (const auto& m : *it) messages.push_back(ParseMessage(m));
  try {
    return EncodeChat(tokenizer, *chat_template, messages, /*parse_special_content=*/false,
                      /*add_assistant=*/true, tools);
  } catch (const Error& e) {  // a conversation with tools on a template without a tool format
    throw BadRequest(e.what(), tools.empty() ? "messages" : "tools");
  }
}

// OpenAI's `suffix` (the text after the insertion point): a string prompt and a non-empty
// suffix become the model's fill-in-the-middle prompt, as llama-server builds it for /infill.
std::vector<int32_t> WithSuffix(const json& j, const Tokenizer& tokenizer, const FimTokens& fim,
                                const ApiLimits& limits, std::vector<int32_t> prompt) {
  const auto it = j.find("suffix");
  if (it == j.end() || it->is_null()) return prompt;
  if (!it->is_string()) throw BadRequest("'suffix' must be a string", "suffix");
  const std::string suffix = it->get<std::string>();
  if (suffix.empty()) return prompt;
  const json& p = j["prompt"];
  const json& text = p.is_array() && p.size() == 1 ? p[0] : p;
  if (!text.is_string()) throw BadRequest("'suffix' needs a string 'prompt'", "suffix");
  if (!fim.usable()) {
    throw BadRequest("'suffix' needs a model with fill-in-the-middle tokens", "suffix");
  }
  return FimPrompt(tokenizer, fim, text.get<std::string>(), suffix, {}, {},
                   {std::min(2048, limits.n_ctx), limits.n_ctx, 0});
}

int Logprobs(const json& j, bool chat) {
  if (!chat) return static_cast<int>(Integer(j, "logprobs", 0, 5, -1));
  if (!Boolean(j, "logprobs", false)) {
    if (j.contains("top_logprobs") && !j["top_logprobs"].is_null()) {
      throw BadRequest("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    }
    return -1;
  }
  return static_cast<int>(Integer(j, "top_logprobs", 0, 20, 0));
}

// Whether `j` has `key` with a value other than null and the neutral ones listed.
bool HasNonNeutral(const json& j, const char* key, const std::vector<json>& neutral) {
  const auto it = j.find(key);
  if (it == j.end() || it->is_null()) return false;
  for (const json& n : neutral) {
    if (*it == n) return false;
  }
  return true;
}

// Parameters specd does not implement are refused by name rather than silently ignored.
void RefuseUnsupported(const json& j) {
  for (const char* key : {"presence_penalty", "frequency_penalty"}) {
    if (Number(j, key, -2.0, 2.0, 0.0) != 0.0) {
      throw BadRequest(std::string("'") + key + "' is not supported (use repeat_penalty)", key);
    }
  }
  const std::pair<const char*, std::vector<json>> refused[] = {
      {"logit_bias", {json::object()}},
      {"echo", {false}},
      {"best_of", {1}},
  };
  for (const auto& [key, neutral] : refused) {
    if (HasNonNeutral(j, key, neutral)) {
      throw BadRequest(std::string("'") + key + "' is not supported by this server", key);
    }
  }
}

}  // namespace

namespace {}  // namespace

std::string Dump(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

nlohmann::json ErrorBody(const ApiError& e) {
  return {{"error",
           {{"message", e.what()},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

namespace {
// OpenAI's sampling fields (and llama-server's top_k, min_p, repeat_penalty); a request without
// a seed gets a random one.
SamplingParams Sampling(const json& j) {
  SamplingParams p;
  p.temperature = static_cast<float>(Number(j, "temperature", 0.0, 2.0, 1.0));
  p.top_p = static_cast<float>(Number(j, "top_p", 1e-9, 1.0, 1.0));
  p.top_k = static_cast<int>(Integer(j, "top_k", 0, INT32_MAX, 0));
  p.min_p = static_cast<float>(Number(j, "min_p", 0.0, 1.0, 0.0));
  p.repeat_penalty = static_cast<float>(Number(j, "repeat_penalty", 0.01, 100.0, 1.0));
  const int64_t seed = Integer(j, "seed", INT64_MIN, INT64_MAX, -1);
  p.seed = j.contains("seed") && !j["seed"].is_null() ? static_cast<uint64_t>(seed)
                                                      : std::random_device{}();
  return p;
}
}  // namespace

CompletionRequest ParseCompletionRequest(const std::string& body, bool chat,
                                         const Tokenizer& tokenizer,
                                         const ChatTemplate* chat_template, const FimTokens& fim,
                                         const ApiLimits& limits) {
  const json j = ParseJsonObject(body, limits.max_json_depth);
  if (j.contains("model")) {
    if (!j["model"].is_string()) throw BadRequest("'model' must be a string", "model");
    const std::string model = j["model"].get<std::string>();
    if (model != limits.model_id) {
      throw ApiError(
          404, "invalid_request_error",
          "The model '" + model + "' does not exist (this server serves '" + limits.model_id + "')",
          "model", "model_not_found");
    }
  }
  RefuseUnsupported(j);
  CompletionRequest r;
  r.chat = chat;
  r.structured = ParseStructuredRequest(body, chat);
  r.prompt = chat ? ChatPrompt(j, tokenizer, chat_template, r.structured.tools)
                  : CompletionPrompt(j, tokenizer);
  if (!chat) r.prompt = WithSuffix(j, tokenizer, fim, limits, std::move(r.prompt));
  if (chat) r.stop_tokens = chat_template->stop_tokens();
  const int64_t room = limits.n_ctx - static_cast<int64_t>(r.prompt.size());
  const int64_t asked = Integer(
      j, chat && j.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens", 1,
      INT32_MAX, chat ? std::max<int64_t>(room, 1) : limits.default_max_tokens_completion);
  if (asked > room) {
    throw ApiError(400, "invalid_request_error",
                   "This model's maximum context length is " + std::to_string(limits.n_ctx) +
                       " tokens. However, you requested " +
                       std::to_string(r.prompt.size() + asked) + " tokens (" +
                       std::to_string(r.prompt.size()) + " in the prompt, " +
                       std::to_string(asked) + " for the completion).",
                   "max_tokens", "context_length_exceeded");
  }
  r.max_tokens = static_cast<int>(asked);
  r.sampling = Sampling(j);
  r.n = static_cast<int>(Integer(j, "n", 1, limits.max_n, 1));
  r.stream = Boolean(j, "stream", false);
  if (j.contains("stream_options") && !j["stream_options"].is_null()) {
    if (!j["stream_options"].is_object()) {
      throw BadRequest("'stream_options' must be an object", "stream_options");
    }
    r.include_usage = Boolean(j["stream_options"], "include_usage", false);
  }
  r.stop = StopStrings(j, 4);
  if (chat) {  // a named template's end-of-turn marker, written as text
    const auto& ends = chat_template->stop_strings();
    r.stop.insert(r.stop.end(), ends.begin(), ends.end());
  }
  r.logprobs = Logprobs(j, chat);
  r.time_budget_ms = Number(j, "time_budget_ms", 0.0, 1e9, 0.0);
  r.ignore_eos = Boolean(j, "ignore_eos", false);
  r.cache_prompt = Boolean(j, "cache_prompt", true);
  r.token_sources = Boolean(j, "return_token_sources", false);
  return r;
}

ChoiceText::ChoiceText(const Tokenizer& tokenizer, std::vector<std::string> stop, TextLimits limits)
    : decoder_(tokenizer), stop_(std::move(stop)), limits_(limits) {}

const char* SourceName(TokenSource source) {
  switch (source) {
    case TokenSource::kDraft:
      return "draft";
    case TokenSource::kLookup:
      return "lookup";
    case TokenSource::kTarget:
      break;
  }
  return "target";
}

bool ChoiceText::Push(int32_t token, TokenSource source) {
  if (stopped_) return true;
  if (!generating_) {
    generating_ = true;
    since_first_token_.Reset();
  }
  const size_t before = text_.size();
  text_ += decoder_.Push(token);
  byte_sources_.resize(text_.size(), static_cast<char>(source));
  if (text_.size() > before) byte_sources_[before] |= kTokenStart;
  for (const auto& s : stop_) {
    // A stop string can only newly appear where the new text is.
    const size_t from = before >= s.size() ? before - s.size() + 1 : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) {
      text_.resize(at);
      stopped_ = true;
      stop_type_ = "word";
      stopping_word_ = s;
    }
  }
  if (!stopped_) ApplyLineLimits(before);
  byte_sources_.resize(text_.size());  // cut with the text
  return stopped_;
}

// llama-server's two editor limits, in its order: a line that starts less indented than
// n_indent is cut (after its indentation) and ends the text; after a new line, once generating
// has taken t_max_predict_ms, the text ends at that new line.
void ChoiceText::ApplyLineLimits(size_t before) {
  if (has_new_line_ && limits_.n_indent > 0) {
    if (last_line_start_ > 0) {
      size_t pos = last_line_start_;
      int indent = 0;
      while (pos < text_.size() && (text_[pos] == ' ' || text_[pos] == '\t')) ++indent, ++pos;
      if (pos < text_.size() && indent < limits_.n_indent) {
        text_.erase(pos);
        stopped_ = true;
        stop_type_ = "limit";
        return;
      }
    }
    const size_t newline = text_.find('\n', last_line_start_);
    if (newline != std::string::npos) last_line_start_ = newline + 1;
  }
  if (text_.find('\n', before) != std::string::npos) {
    has_new_line_ = true;
    if (limits_.t_max_predict_ms > 0 && since_first_token_.ElapsedMs() > limits_.t_max_predict_ms) {
      stopped_ = true;
      stop_type_ = "limit";
    }
  }
}

std::string ChoiceText::TakeDelta(bool final, std::vector<SourceRun>* runs) {
  if (final && !stopped_) {
    text_ += decoder_.Finish();  // a last partial character: the last token's
    const char last = byte_sources_.empty() ? 0 : byte_sources_.back() & ~kTokenStart;
    byte_sources_.resize(text_.size(), last);
  }
  size_t end = text_.size();
  if (!final) {
    // Hold back the longest tail that could still grow into a stop string.
    size_t hold = 0;
    for (const auto& s : stop_) {
      for (size_t k = std::min(s.size() - 1, text_.size()); k > hold; --k) {
        if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
          hold = k;
          break;
        }
      }
    }
    end = text_.size() - hold;
  }
  if (end <= sent_) return "";
  std::string delta = text_.substr(sent_, end - sent_);
  if (runs != nullptr) {
    // Whole characters are decoded from one token, so runs change only between characters.
    for (size_t i = sent_; i < end; ++i) {
      const auto source = static_cast<TokenSource>(byte_sources_[i] & ~kTokenStart);
      if (runs->empty() || runs->back().source != source) runs->push_back({"", source, 0});
      runs->back().text += text_[i];
      if (byte_sources_[i] & kTokenStart) ++runs->back().n_tokens;
    }
  }
  sent_ = end;
  return delta;
}

std::string OpenAiFinishReason(const std::string& engine_reason, bool called_tools) {
  if (engine_reason == "budget") return "length";
  if (engine_reason == "stop" && called_tools) return "tool_calls";
  return engine_reason;
}

namespace {

json Bytes(const std::string& piece) {
  json bytes = json::array();
  for (unsigned char c : piece) bytes.push_back(static_cast<int>(c));
  return bytes;
}

json ChatLogprobs(const std::vector<int32_t>& tokens, const std::vector<TokenLogprobs>& lps,
                  const Tokenizer& tokenizer) {
  json content = json::array();
  for (size_t i = 0; i < tokens.size() && i < lps.size(); ++i) {
    const std::string piece = tokenizer.Piece(tokens[i]);
    json top = json::array();
    for (const auto& [id, lp] : lps[i].top) {
      const std::string p = tokenizer.Piece(id);
      top.push_back({{"token", utf8::Sanitize(p)}, {"logprob", lp}, {"bytes", Bytes(p)}});
    }
    content.push_back({{"token", utf8::Sanitize(piece)},
                       {"logprob", lps[i].logprob},
                       {"bytes", Bytes(piece)},
                       {"top_logprobs", top}});
  }
  return {{"content", content}};
}

json CompletionLogprobs(const std::vector<int32_t>& tokens, const std::vector<TokenLogprobs>& lps,
                        const Tokenizer& tokenizer, int64_t text_offset) {
  json pieces = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (size_t i = 0; i < tokens.size() && i < lps.size(); ++i) {
    const std::string piece = utf8::Sanitize(tokenizer.Piece(tokens[i]));
    pieces.push_back(piece);
    values.push_back(lps[i].logprob);
    json top = json::object();
    for (const auto& [id, lp] : lps[i].top) top[utf8::Sanitize(tokenizer.Piece(id))] = lp;
    tops.push_back(top);
    offsets.push_back(text_offset);
    text_offset += static_cast<int64_t>(piece.size());
  }
  return {{"tokens", pieces},
          {"token_logprobs", values},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

json ChoiceLogprobs(const ResponseInfo& info, const ChoiceOutput& c, const Tokenizer& tokenizer) {
  if (info.logprobs < 0) return nullptr;
  return info.chat ? ChatLogprobs(c.tokens, c.logprobs, tokenizer)
                   : CompletionLogprobs(c.tokens, c.logprobs, tokenizer, 0);
}

json Usage(PromptCount prompt, int64_t completion_tokens) {
  return {{"prompt_tokens", prompt.tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt.tokens + completion_tokens},
          {"prompt_tokens_details", {{"cached_tokens", prompt.cached}}}};
}

}  // namespace

nlohmann::json CompletionResponse(const ResponseInfo& info,
                                  const std::vector<ChoiceOutput>& choices, PromptCount prompt,
                                  const Tokenizer& tokenizer, int64_t n_drafted,
                                  int64_t n_accepted) {
  json out_choices = json::array();
  int64_t completion_tokens = 0;
  for (const auto& c : choices) {
    completion_tokens += static_cast<int64_t>(c.tokens.size());
    json choice = {{"index", c.index}, {"logprobs", ChoiceLogprobs(info, c, tokenizer)}};
    if (info.chat && info.parse_tool_calls) {
      const ToolCallOutput split = SplitToolCalls(c.text, info.parallel_tool_calls);
      json message = {{"role", "assistant"}, {"content", split.content}};
      if (!split.calls.empty()) {
        if (split.content.empty()) message["content"] = nullptr;
        message["tool_calls"] = ToolCallsJson(split.calls);
      }
      choice["message"] = message;
      choice["finish_reason"] = OpenAiFinishReason(c.finish_reason, !split.calls.empty());
    } else if (info.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      choice["finish_reason"] = OpenAiFinishReason(c.finish_reason);
    } else {
      choice["finish_reason"] = OpenAiFinishReason(c.finish_reason);
      choice["text"] = c.text;
    }
    out_choices.push_back(choice);
  }
  return {{"id", info.id},
          {"object", info.chat ? "chat.completion" : "text_completion"},
          {"created", info.created},
          {"model", info.model},
          {"choices", out_choices},
          {"usage", Usage(prompt, completion_tokens)},
          {"specd", SpeculationJson({n_drafted, n_accepted})}};
}

nlohmann::json SpeculationJson(const SpeculationFigures& f) {
  json out = {{"n_drafted", f.n_drafted},
              {"n_accepted", f.n_accepted},
              {"acceptance_rate", f.n_drafted > 0 ? double(f.n_accepted) / f.n_drafted : 0.0}};
  if (f.t_last_token_ms > 0) {
    out["t_first_token_ms"] = f.t_first_token_ms;
    out["t_last_token_ms"] = f.t_last_token_ms;
  }
  return out;
}

nlohmann::json StreamChunk(const ResponseInfo& info, const ChoiceOutput& delta, bool first,
                           const Tokenizer& tokenizer) {
  json choice = {
      {"index", delta.index},
      {"logprobs", ChoiceLogprobs(info, delta, tokenizer)},
      {"finish_reason",
       delta.finish_reason.empty()
           ? json(nullptr)
           : json(OpenAiFinishReason(delta.finish_reason,
                                     delta.first_call_index + delta.tool_calls.size() > 0))}};
  if (info.chat) {
    json d = json::object();
    if (first) d["role"] = "assistant";
    if (!delta.text.empty() || (first && delta.finish_reason.empty())) d["content"] = delta.text;
    if (!delta.tool_calls.empty()) {
      d["tool_calls"] = ToolCallsJson(delta.tool_calls, delta.first_call_index);
    }
    choice["delta"] = d;
  } else {
    choice["text"] = delta.text;
  }
  if (info.token_sources && !delta.sources.empty()) {
    json runs = json::array();
    for (const auto& run : delta.sources) {
      runs.push_back(
          {{"text", run.text}, {"source", SourceName(run.source)}, {"n_tokens", run.n_tokens}});
    }
    choice["token_sources"] = runs;
  }
  return {{"id", info.id},
          {"object", info.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", info.created},
          {"model", info.model},
          {"choices", json::array({choice})}};
}

nlohmann::json UsageChunk(const ResponseInfo& info, PromptCount prompt, int64_t completion_tokens,
                          const SpeculationFigures& figures) {
  return {{"id", info.id},
          {"object", info.chat ? "chat.completion.chunk" : "text_completion"},
          {"created", info.created},
          {"model", info.model},
          {"choices", json::array()},
          {"usage", Usage(prompt, completion_tokens)},
          {"specd", SpeculationJson(figures)}};
}

}  // namespace specd::server
