#include "server/structured_output.h"

#include <random>

#include "server/openai_api.h"
#include "server/request_fields.h"
#include "tokenizer/chat_template.h"

namespace specd::server {
namespace {

using ordered_json = nlohmann::ordered_json;

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
// Calls one forced answer may hold when parallel calls are allowed.
constexpr int kMaxParallelCalls = 8;

bool IsSet(const ordered_json& j, const char* key) { return j.contains(key) && !j[key].is_null(); }

// response_format: text (nothing), json_object (any JSON object; with llama-server's "schema",
// that schema), json_schema ({"name", "schema", "strict"}).
std::optional<GrammarSpec> ResponseFormat(const ordered_json& j) {
  if (!IsSet(j, "response_format")) return std::nullopt;
  const ordered_json& f = j["response_format"];
  if (!f.is_object() || !f.contains("type") || !f["type"].is_string()) {
    throw BadRequest("'response_format' must be an object with a 'type'", "response_format");
  }
  const std::string type = f["type"];
  GrammarSpec spec;
  if (type == "text") return std::nullopt;
  if (type == "json_object") {
    if (!IsSet(f, "schema")) return spec;  // kJson
    spec.kind = GrammarKind::kJsonSchema;
    spec.text = f["schema"].dump();
    spec.strict = false;
    return spec;
  }
  if (type != "json_schema") {
    throw BadRequest(
        "'response_format.type' must be text, json_object or json_schema, got '" + type + "'",
        "response_format");
  }
  if (!IsSet(f, "json_schema") || !f["json_schema"].is_object()) {
    throw BadRequest("'response_format.json_schema' must be an object with a 'schema'",
                     "response_format");
  }
  const ordered_json& js = f["json_schema"];
  if (!IsSet(js, "schema") || !(js["schema"].is_object() || js["schema"].is_boolean())) {
    throw BadRequest("'response_format.json_schema.schema' must be a JSON schema object",
                     "response_format");
  }
  if (IsSet(js, "strict") && !js["strict"].is_boolean()) {
    throw BadRequest("'response_format.json_schema.strict' must be true or false",
                     "response_format");
  }
  spec.kind = GrammarKind::kJsonSchema;
  spec.text = js["schema"].dump();
  spec.strict = js.value("strict", false);
  return spec;
}

// llama-server's own fields: grammar (GBNF) and json_schema (a schema object).
std::optional<GrammarSpec> LlamaGrammar(const ordered_json& j, std::string* field) {
  if (IsSet(j, "grammar")) {
    if (!j["grammar"].is_string()) throw BadRequest("'grammar' must be a string", "grammar");
    const std::string text = j["grammar"];
    if (!text.empty()) {
      *field = "grammar";
      return GrammarSpec{.kind = GrammarKind::kGbnf, .text = text};
    }
  }
  if (IsSet(j, "json_schema")) {
    if (!j["json_schema"].is_object()) {
      throw BadRequest("'json_schema' must be a JSON schema object", "json_schema");
    }
    *field = "json_schema";
    GrammarSpec spec{
        .kind = GrammarKind::kJsonSchema, .text = j["json_schema"].dump(), .strict = false};
    return spec;
  }
  return std::nullopt;
}

struct Tool {
  std::string name;
  ordered_json parameters;
  bool strict = false;
  ordered_json as_given;
};

std::vector<Tool> Tools(const ordered_json& j) {
  if (IsSet(j, "functions")) {
    throw BadRequest("'functions' is deprecated by OpenAI: send 'tools'", "functions");
  }
  if (!IsSet(j, "tools")) return {};
  const ordered_json& list = j["tools"];
  if (!list.is_array()) throw BadRequest("'tools' must be a list of tools", "tools");
  std::vector<Tool> tools;
  for (const ordered_json& t : list) {
    if (!t.is_object() || !IsSet(t, "type") || t["type"] != "function" || !IsSet(t, "function") ||
        !t["function"].is_object()) {
      throw BadRequest("each tool must be {\"type\": \"function\", \"function\": {...}}", "tools");
    }
    const ordered_json& f = t["function"];
    if (!IsSet(f, "name") || !f["name"].is_string() || f["name"].get<std::string>().empty()) {
      throw BadRequest("each tool's function needs a 'name'", "tools");
    }
    Tool tool{f["name"], ordered_json{{"type", "object"}, {"properties", ordered_json::object()}},
              false, t};
    if (IsSet(f, "parameters")) {
      if (!f["parameters"].is_object()) {
        throw BadRequest("a tool's 'parameters' must be a JSON schema object", "tools");
      }
      tool.parameters = f["parameters"];
    }
    if (IsSet(f, "strict")) {
      if (!f["strict"].is_boolean())
        throw BadRequest("a tool's 'strict' must be a boolean", "tools");
      tool.strict = f["strict"];
    }
    tools.push_back(std::move(tool));
  }
  return tools;
}

// tool_choice: "none", "auto", "required", or {"type": "function", "function": {"name"}}; the
// named tool, "*" for any (required), "" for none; nullopt for auto.
std::optional<std::string> ToolChoice(const ordered_json& j, const std::vector<Tool>& tools) {
  if (!IsSet(j, "tool_choice"))
    return tools.empty() ? std::optional<std::string>("") : std::nullopt;
  const ordered_json& c = j["tool_choice"];
  if (c == "none") return "";
  if (c == "auto") return std::nullopt;
  if (c == "required") {
    if (tools.empty()) throw BadRequest("'tool_choice' required needs 'tools'", "tool_choice");
    return "*";
  }
  if (c.is_object() && IsSet(c, "type") && c["type"] == "function" && IsSet(c, "function") &&
      c["function"].is_object() && IsSet(c["function"], "name") &&
      c["function"]["name"].is_string()) {
    const std::string name = c["function"]["name"];
    for (const Tool& t : tools) {
      if (t.name == name) return name;
    }
    throw BadRequest("'tool_choice' names '" + name + "', which is not among the tools",
                     "tool_choice");
  }
  throw BadRequest(
      "'tool_choice' must be none, auto, required or {\"type\": \"function\", \"function\": "
      "{\"name\": ...}}",
      "tool_choice");
}

// The grammar of a forced call: each allowed tool's {"name": NAME, "arguments": {...}}.
GrammarSpec ForcedCalls(const std::vector<Tool>& tools, const std::string& choice, bool parallel) {
  GrammarSpec spec;
  spec.kind = GrammarKind::kToolCalls;
  spec.strict = true;
  for (const Tool& t : tools) {
    if (choice != "*" && t.name != choice) continue;
    const ordered_json schema = {
        {"type", "object"},
        {"properties", {{"name", {{"const", t.name}}}, {"arguments", t.parameters}}},
        {"required", {"name", "arguments"}},
        {"additionalProperties", false}};
    spec.tool_schemas.push_back(schema.dump());
    spec.strict = spec.strict && t.strict;
  }
  spec.max_calls = parallel ? kMaxParallelCalls : 1;
  return spec;
}

// OpenAI fields that change nothing here are refused or accepted by what they ask.
void CheckOtherFields(const ordered_json& j) {
  if (IsSet(j, "reasoning_effort")) {
    throw BadRequest("'reasoning_effort' is not supported: the served model does not reason",
                     "reasoning_effort");
  }
  if (IsSet(j, "store") && j["store"] != false) {
    throw BadRequest("'store' is not supported: specd stores no completions", "store");
  }
}

}  // namespace

StructuredRequest ParseStructuredRequest(const std::string& body, bool chat) {
  const ordered_json j = ordered_json::parse(body, nullptr, /*allow_exceptions=*/false);
  StructuredRequest r;
  if (!j.is_object()) return r;  // the caller refused it already
  CheckOtherFields(j);
  if (IsSet(j, "parallel_tool_calls") && !j["parallel_tool_calls"].is_boolean()) {
    throw BadRequest("'parallel_tool_calls' must be true or false", "parallel_tool_calls");
  }
  r.parallel_tool_calls = j.value("parallel_tool_calls", true);
  std::string llama_field;
  const std::optional<GrammarSpec> format = ResponseFormat(j);
  const std::optional<GrammarSpec> llama = LlamaGrammar(j, &llama_field);
  if (format && llama) {
    throw BadRequest("give one of 'response_format' and '" + llama_field + "'", llama_field);
  }
  r.grammar = format ? format : llama;
  r.grammar_field = format ? "response_format" : llama_field;
  const std::vector<Tool> tools = Tools(j);
  if (!tools.empty() && !chat) {
    throw BadRequest("'tools' needs /v1/chat/completions", "tools");
  }
  const std::optional<std::string> choice = ToolChoice(j, tools);
  if (choice && choice->empty()) return r;  // no tools offered: the model cannot call any
  for (const Tool& t : tools) r.tools.push_back(TemplateJson(t.as_given));
  r.parse_tool_calls = true;
  if (!choice) return r;  // auto: the model calls or answers; its calls are parsed
  if (r.grammar) {
    throw BadRequest("'" + r.grammar_field +
                         "' and a forced 'tool_choice' cannot both shape the "
                         "answer",
                     "tool_choice");
  }
  r.grammar = ForcedCalls(tools, *choice, r.parallel_tool_calls);
  r.grammar_field = "tools";
  return r;
}

namespace {

std::string NewCallId() {
  static constexpr char kChars[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  std::random_device device;
  std::mt19937 rng(device());
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kChars[rng() % (sizeof(kChars) - 1)];
  return id;
}

// A block's inside as a call: {"name": string, "arguments": object (or JSON text)}.
std::optional<ToolCall> ParseCall(std::string_view inside) {
  const ordered_json call = ordered_json::parse(inside, nullptr, /*allow_exceptions=*/false);
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) {
    return std::nullopt;
  }
  ToolCall out{NewCallId(), call["name"], "{}"};
  if (call.contains("arguments")) {
    const ordered_json& args = call["arguments"];
    out.arguments = args.is_string() ? args.get<std::string>() : args.dump();
  }
  return out;
}

bool IsBlank(std::string_view s) {
  return s.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

std::string Trimmed(std::string_view s) {
  const size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return "";
  return std::string(s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1));
}

}  // namespace

ToolCallOutput SplitToolCalls(const std::string& text, bool parallel) {
  ToolCallStream stream(parallel);
  std::vector<ToolCall> calls;
  const std::string content = stream.Push(text, /*final=*/true, &calls);
  return {calls.empty() ? content : Trimmed(content), calls};
}

std::string ToolCallStream::Push(const std::string& delta, bool final,
                                 std::vector<ToolCall>* calls) {
  pending_ += delta;
  std::string content;
  auto emit = [&](std::string_view text) {
    if (n_calls_ == 0 || !IsBlank(text)) content += text;  // no blank lines between calls
  };
  while (true) {
    const size_t open = pending_.find(kCallOpen);
    if (open == std::string::npos) {
      // Hold back a tail that may still become "<tool_call>".
      size_t hold = 0;
      for (size_t k = std::min(kCallOpen.size() - 1, pending_.size()); k > 0 && !final; --k) {
        if (pending_.compare(pending_.size() - k, k, kCallOpen, 0, k) == 0) {
          hold = k;
          break;
        }
      }
      emit(std::string_view(pending_).substr(0, pending_.size() - hold));
      pending_.erase(0, pending_.size() - hold);
      return content;
    }
    emit(std::string_view(pending_).substr(0, open));
    pending_.erase(0, open);
    const size_t close = pending_.find(kCallClose);
    if (close == std::string::npos && !final) return content;  // the call is still coming
    const size_t end = close == std::string::npos ? pending_.size() : close + kCallClose.size();
    const size_t inside_end = close == std::string::npos ? pending_.size() : close;
    const std::optional<ToolCall> call = ParseCall(
        std::string_view(pending_).substr(kCallOpen.size(), inside_end - kCallOpen.size()));
    if (!call) {
      content += pending_.substr(0, end);  // not a call after all: it is text
    } else if (parallel_ || n_calls_ == 0) {
      calls->push_back(*call);
      ++n_calls_;
    }
    pending_.erase(0, end);
  }
}

nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls, int first_index) {
  nlohmann::json list = nlohmann::json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    nlohmann::json entry = {
        {"id", calls[i].id},
        {"type", "function"},
        {"function", {{"name", calls[i].name}, {"arguments", calls[i].arguments}}}};
    if (first_index >= 0) entry["index"] = first_index + static_cast<int>(i);
    list.push_back(entry);
  }
  return list;
}

}  // namespace specd::server
