// Chat prompts in a model's own turn format. Like llama.cpp, specd does not run the Jinja
// template in `tokenizer.chat_template`; it recognises the format the template (or, for files
// without one, the vocabulary) belongs to and renders that format exactly: ChatML (SmolLM, Qwen)
// and Gemma's turns. An unknown template is a clear error, not a guess.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace specd {

// A call an assistant made, as its template writes it back: the function's name and its
// arguments as JSON text (written by the caller as the template's `tojson` would).
struct ChatToolCall {
  std::string name;
  std::string arguments_json;
};

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" or "tool" (a tool's answer)
  std::string content;
  std::vector<ChatToolCall> tool_calls = {};  // an assistant's calls
};

// How a template offers tools and how its model calls them. Hermes (Qwen2.5, and the templates
// that copy it): the tools as JSON lines inside <tools></tools> in the system turn, each call
// <tool_call>\n{"name": ..., "arguments": ...}\n</tool_call>, answers in <tool_response> inside
// a user turn.
enum class ToolFormat { kNone, kHermes };

enum class ChatFormat { kChatMl, kGemma };

class ChatTemplate {
 public:
  // The model's chat format; throws an Error naming the template when it is not one specd knows.
  static ChatTemplate FromGguf(const GgufFile& file, const Tokenizer& tokenizer);
  // A format chosen by name ("chatml" or "gemma"; llama-server's --chat-template) for a model
  // whose file has none: a vocabulary without the turn tokens gets the markers as text, and
  // the end-of-turn marker becomes a stop string. Throws an Error naming the known formats.
  static ChatTemplate Named(std::string_view name, const Tokenizer& tokenizer);
  // Named(name) when a name is given (--chat-template), else FromGguf.
  static ChatTemplate ForModel(const GgufFile& file, const Tokenizer& tokenizer,
                               std::string_view name);

  ChatFormat format() const { return format_; }
  const char* name() const { return format_ == ChatFormat::kChatMl ? "chatml" : "gemma"; }
  // True when the file has no tokenizer.chat_template and the format was recognised from the
  // vocabulary's turn tokens (a base model's file, often): edges say so.
  bool from_vocabulary() const { return from_vocabulary_; }
  // The note an edge prints when from_vocabulary(), naming the file.
  std::string GuessNote(const std::string& path) const;
  // The system message the template adds when a conversation has none ("" if it adds none).
  const std::string& default_system() const { return default_system_; }
  // Tokens that end an assistant turn (the end-of-turn token and EOS).
  const std::vector<int32_t>& stop_tokens() const { return stop_tokens_; }
  // Text that ends an assistant turn: the end-of-turn marker when the vocabulary has no token
  // for it (Named), else none.
  const std::vector<std::string>& stop_strings() const { return stop_strings_; }

  // The prompt text of a conversation (special tokens written out; BOS not included), with the
  // opening of the assistant's turn when add_assistant.
  std::string Render(const std::vector<ChatMessage>& messages, bool add_assistant) const;

  // The same text in pieces: the template's own text (is_content false) and the messages'
  // contents (is_content true), so that only the template's special tokens are parsed.
  struct Piece {
    std::string text;
    bool is_content;
  };
  // `tools`: each tool's JSON as the template's `tojson` writes it (needs a tool format; a
  // conversation with tool calls or tool answers needs one too).
  std::vector<Piece> RenderPieces(const std::vector<ChatMessage>& messages, bool add_assistant,
                                  const std::vector<std::string>& tools = {}) const;

 private:
  void RenderHermes(const std::vector<ChatMessage>& messages, const std::vector<std::string>& tools,
                    std::vector<Piece>* out) const;

  ChatFormat format_ = ChatFormat::kChatMl;
  bool from_vocabulary_ = false;
  std::string default_system_;
  std::vector<int32_t> stop_tokens_;
  std::vector<std::string> stop_strings_;
  // The end-of-turn marker's token, the file's end-of-turn token and EOS as stop tokens; the
  // marker as a stop string where it is no token and `marker_may_be_text`.
  void SetStops(const GgufFile* file, const Tokenizer& tokenizer, const std::string& end_of_turn,
                bool marker_may_be_text);
  ToolFormat tool_format_ = ToolFormat::kNone;
  std::string tools_prologue_;  // Hermes: the system turn's text before the tools
  std::string tools_epilogue_;  // ... and after them, to the end of the turn
};

// JSON as Hugging Face's chat templates write it with `tojson` (Python's json.dumps: ", " and
// ": " separators, keys in their order, non-ASCII characters as they are).
std::string TemplateJson(const nlohmann::ordered_json& value);

// Tokens of a conversation: BOS as the model asks, the template's special tokens parsed, the
// contents' only with parse_special_content (a user cannot forge a turn by typing <|im_end|>).
std::vector<int32_t> EncodeChat(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                const std::vector<ChatMessage>& messages,
                                bool parse_special_content, bool add_assistant = true,
                                const std::vector<std::string>& tools = {});

}  // namespace specd
