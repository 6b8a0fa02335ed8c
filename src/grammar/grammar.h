// Structured output through xgrammar (the grammar engine of vLLM, SGLang and TensorRT-LLM): a
// compiler bound to one model's vocabulary turns a JSON schema, a GBNF grammar or a regex into a
// TokenConstraintFactory, whose constraints fill xgrammar's token bitmask, advance along tokens
// and roll back (made for speculation: drafts advance it, rejections take it back).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "sampling/token_constraint.h"
#include "tokenizer/tokenizer.h"

namespace specd {

enum class GrammarKind {
  kJson,        // any JSON value whose top level is an object or array (OpenAI's json_object)
  kJsonSchema,  // text: a JSON schema
  kGbnf,        // text: a grammar in llama.cpp's GBNF (root rule `root`)
  kRegex,       // text: a regular expression the whole output matches
  kToolCalls,   // tool_schemas: one or more calls wrapped as the model's template writes them
};

// How a model writes a tool call: each call is `open`, a JSON object {"name": ..., "arguments":
// {...}}, then `close` (Qwen2.5: "<tool_call>\n" and "\n</tool_call>").
struct ToolCallFormat {
  std::string open = "<tool_call>\n";
  std::string close = "\n</tool_call>";
};

struct GrammarSpec {
  GrammarKind kind = GrammarKind::kJson;
  std::string text;
  // kJsonSchema: OpenAI's strict (no properties beyond the schema's; without it, objects may
  // carry more properties only where the schema says additionalProperties).
  bool strict = true;
  // kToolCalls: each tool's call as a JSON schema ({"name": const, "arguments": parameters});
  // the output is one call, or up to max_calls with parallel calls.
  std::vector<std::string> tool_schemas = {};
  ToolCallFormat tool_format = {};
  int max_calls = 1;
};

class GrammarCompiler {
 public:
  // The vocabulary is the tokenizer's raw bytes per token (control tokens are never allowed),
  // padded to the model's n_vocab; `stop_tokens` end the output once the grammar is complete.
  GrammarCompiler(const Tokenizer& tokenizer, int32_t n_vocab, std::vector<int32_t> stop_tokens,
                  int n_threads);
  ~GrammarCompiler();
  GrammarCompiler(const GrammarCompiler&) = delete;
  GrammarCompiler& operator=(const GrammarCompiler&) = delete;

  // Compiled grammars are cached by their text. Throws Error saying what the library could not
  // compile. Safe to call from several threads.
  std::shared_ptr<const TokenConstraintFactory> Compile(const GrammarSpec& spec);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specd
