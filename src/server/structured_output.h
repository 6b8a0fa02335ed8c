// Structured output as the APIs ask for it: OpenAI's response_format (json_object, json_schema),
// tools with tool_choice and parallel_tool_calls, and llama-server's grammar and json_schema; the
// tool calls a model writes (Qwen2.5's <tool_call> blocks) parsed back into OpenAI's
// message.tool_calls, whole or as a stream.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "grammar/grammar.h"

namespace specd::server {

// What a request asks of its output's shape.
struct StructuredRequest {
  std::optional<GrammarSpec> grammar;  // the output follows it (null: free text)
  std::string grammar_field;           // the request field it came from, for errors
  std::vector<std::string> tools;      // each tool as the chat template writes it (tojson)
  bool parse_tool_calls = false;       // the model may call tools: its calls are parsed back
  bool parallel_tool_calls = true;
};

// Reads the fields from the body (parsed again in key order: a schema's properties are written
// in its order, a tool as its client wrote it). `chat` allows tools. Throws ApiError naming the
// field.
StructuredRequest ParseStructuredRequest(const std::string& body, bool chat);

// A tool call as OpenAI returns it.
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

// A chat answer split into its text and its calls: each well-formed
// <tool_call>{"name": ..., "arguments": ...}</tool_call> block is a call (only the first without
// parallel calls), the rest is content ("" when only calls).
struct ToolCallOutput {
  std::string content;
  std::vector<ToolCall> calls;
};
ToolCallOutput SplitToolCalls(const std::string& text, bool parallel);

// The same as text streams in: Push returns the text safe to send as content (held back while
// it may be the start of a call) and adds the calls completed so far to `calls`.
class ToolCallStream {
 public:
  explicit ToolCallStream(bool parallel) : parallel_(parallel) {}
  std::string Push(const std::string& delta, bool final, std::vector<ToolCall>* calls);
  int n_calls() const { return n_calls_; }

 private:
  bool parallel_;
  std::string pending_;  // text not yet sent or parsed
  int n_calls_ = 0;
};

// OpenAI's tool_calls list: a message's, or (with first_index >= 0) a stream delta's, whose
// entries carry their index in the choice's calls.
nlohmann::json ToolCallsJson(const std::vector<ToolCall>& calls, int first_index = -1);

}  // namespace specd::server
