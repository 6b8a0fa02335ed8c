#include "tokenizer/chat_template.h"

#include <algorithm>

#include "base/error.h"

namespace specd {
namespace {

std::string Trim(const std::string& s) {
  const size_t begin = s.find_first_not_of(" \t\n\r");
  if (begin == std::string::npos) return "";
  const size_t end = s.find_last_not_of(" \t\n\r");
  return s.substr(begin, end - begin + 1);
}

// The literal system turn a ChatML template writes when messages[0] is not a system message
// (SmolLM2: "You are a helpful AI assistant named SmolLM, trained by Hugging Face"; Qwen2.5:
// "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."). Templates test the
// first role either way ("!= 'system'" then the default, or "== 'system'" with the default in
// the else branch); the default is the one "<|im_start|>system" followed by plain text, not by
// template code, up to "<|im_end|>". The newline after "system" is written out or escaped.
std::string ChatMlDefaultSystem(const std::string& tmpl) {
  if (tmpl.find("messages[0]['role'] != 'system'") == std::string::npos &&
      tmpl.find("messages[0]['role'] == 'system'") == std::string::npos) {
    return "";
  }
  const std::string open = "<|im_start|>system";
  for (size_t at = tmpl.find(open); at != std::string::npos; at = tmpl.find(open, at + 1)) {
    size_t begin = at + open.size();
    if (tmpl.compare(begin, 1, "\n") == 0) {
      begin += 1;
    } else if (tmpl.compare(begin, 2, "\\n") == 0) {
      begin += 2;
    } else {
      continue;
    }
    const size_t end = tmpl.find("<|im_end|>", begin);
    if (end == std::string::npos) return "";
    std::string text = tmpl.substr(begin, end - begin);
    if (text.find_first_of("'\"{}") == std::string::npos) return text;
  }
  return "";
}

// The value of the double-quoted Jinja string literal in `tmpl` that contains `needle` (escapes
// \n, \t, \", \\ resolved), or "".
std::string JinjaStringContaining(const std::string& tmpl, const std::string& needle) {
  const size_t at = tmpl.find(needle);
  if (at == std::string::npos) return "";
  size_t open = tmpl.rfind('"', at);
  while (open != std::string::npos && open > 0 && tmpl[open - 1] == '\\') {
    open = tmpl.rfind('"', open - 1);
  }
  if (open == std::string::npos) return "";
  std::string value;
  for (size_t i = open + 1; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if (c == '"') return value;
    if (c != '\\' || i + 1 == tmpl.size()) {
      value += c;
      continue;
    }
    const char e = tmpl[++i];
    value += e == 'n' ? '\n' : e == 't' ? '\t' : e;
  }
  return "";
}

void AppendJsonString(const std::string& s, std::string* out) {
  static const char* kHex = "0123456789abcdef";
  *out += '"';
  for (const char ch : s) {
    const unsigned char c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      default:
        if (c < 0x20) {
          *out += "\\u00";
          *out += kHex[c >> 4];
          *out += kHex[c & 15];
        } else {
          *out += ch;
        }
    }
  }
  *out += '"';
}

void AppendTemplateJson(const nlohmann::ordered_json& v, std::string* out) {
  if (v.is_object()) {
    *out += '{';
    bool first = true;
    for (const auto& [key, item] : v.items()) {
      if (!first) *out += ", ";
      first = false;
      AppendJsonString(key, out);
      *out += ": ";
      AppendTemplateJson(item, out);
    }
    *out += '}';
  } else if (v.is_array()) {
    *out += '[';
    for (size_t i = 0; i < v.size(); ++i) {
      if (i > 0) *out += ", ";
      AppendTemplateJson(v[i], out);
    }
    *out += ']';
  } else if (v.is_string()) {
    AppendJsonString(v.get<std::string>(), out);
  } else {
    *out += v.dump();  // numbers, booleans, null
  }
}

}  // namespace

std::string TemplateJson(const nlohmann::ordered_json& value) {
  std::string out;
  AppendTemplateJson(value, &out);
  return out;
}

std::string ChatTemplate::GuessNote(const std::string& path) const {
  return path + " has no chat template (tokenizer.chat_template): its vocabulary has " +
         (format_ == ChatFormat::kChatMl ? "ChatML's" : "Gemma's") +
         " turn tokens, so chat uses that format (a base model may not follow it)";
}

ChatTemplate ChatTemplate::FromGguf(const GgufFile& file, const Tokenizer& tokenizer) {
  ChatTemplate t;
  std::string tmpl;
  if (const GgufValue* v = file.Find("tokenizer.chat_template")) {
    tmpl = v->AsString("tokenizer.chat_template");
  }
  const bool has_chatml = tokenizer.Find("<|im_start|>") >= 0 && tokenizer.Find("<|im_end|>") >= 0;
  const bool has_gemma =
      tokenizer.Find("<start_of_turn>") >= 0 && tokenizer.Find("<end_of_turn>") >= 0;
  std::string end_of_turn;
  if (tmpl.find("<|im_start|>") != std::string::npos || (tmpl.empty() && has_chatml)) {
    t.format_ = ChatFormat::kChatMl;
    t.default_system_ = ChatMlDefaultSystem(tmpl);
    end_of_turn = "<|im_end|>";
  } else if (tmpl.find("<start_of_turn>") != std::string::npos || (tmpl.empty() && has_gemma)) {
    t.format_ = ChatFormat::kGemma;
    end_of_turn = "<end_of_turn>";
  } else if (tmpl.empty()) {
    Fail(file.path(),
         " has no chat template (tokenizer.chat_template) and no ChatML or Gemma turn "
         "tokens in its vocabulary: chat needs one");
  } else {
    Fail(file.path(),
         ": unknown chat template (specd knows ChatML and Gemma's turns): ", tmpl.substr(0, 120),
         tmpl.size() > 120 ? "..." : "");
  }
  t.from_vocabulary_ = tmpl.empty();
  if (t.format_ == ChatFormat::kChatMl && tmpl.find("<tool_call>") != std::string::npos &&
      tmpl.find("<tools>") != std::string::npos) {
    t.tool_format_ = ToolFormat::kHermes;
    // The instructions around the tools, as this template spells them (Qwen2.5-Coder-1.5B's
    // writes a literal "{{" in its example call, the 0.5B's "{").
    t.tools_prologue_ = JinjaStringContaining(tmpl, "# Tools");
    t.tools_epilogue_ = JinjaStringContaining(tmpl, "\\n</tools>");
    SPECD_CHECK(!t.tools_prologue_.empty() && !t.tools_epilogue_.empty(), file.path(),
                ": the chat template has <tool_call> but not the tool instructions specd "
                "knows (Qwen2.5's)");
  }
  t.SetStops(&file, tokenizer, end_of_turn, /*marker_may_be_text=*/false);
  return t;
}

void ChatTemplate::SetStops(const GgufFile* file, const Tokenizer& tokenizer,
                            const std::string& end_of_turn, bool marker_may_be_text) {
  const int32_t eot = tokenizer.Find(end_of_turn);
  if (eot >= 0) {
    stop_tokens_.push_back(eot);
  } else {
    SPECD_CHECK(marker_may_be_text, file->path(), ": the chat template uses ", end_of_turn,
                " but the vocabulary has no such token");
    stop_strings_.push_back(end_of_turn);
  }
  if (file != nullptr) {
    if (const GgufValue* v = file->Find("tokenizer.ggml.eot_token_id")) {
      stop_tokens_.push_back(static_cast<int32_t>(v->AsInt("tokenizer.ggml.eot_token_id")));
    }
  }
  if (tokenizer.eos() >= 0) stop_tokens_.push_back(tokenizer.eos());
  std::sort(stop_tokens_.begin(), stop_tokens_.end());
  stop_tokens_.erase(std::unique(stop_tokens_.begin(), stop_tokens_.end()), stop_tokens_.end());
}

ChatTemplate ChatTemplate::ForModel(const GgufFile& file, const Tokenizer& tokenizer,
                                    std::string_view name) {
  return name.empty() ? FromGguf(file, tokenizer) : Named(name, tokenizer);
}

ChatTemplate ChatTemplate::Named(std::string_view name, const Tokenizer& tokenizer) {
  ChatTemplate t;
  if (name == "chatml") {
    t.format_ = ChatFormat::kChatMl;
  } else if (name == "gemma") {
    t.format_ = ChatFormat::kGemma;
  } else {
    Fail("unknown chat template '", name, "' (specd knows chatml and gemma)");
  }
  t.SetStops(nullptr, tokenizer, t.format_ == ChatFormat::kChatMl ? "<|im_end|>" : "<end_of_turn>",
             /*marker_may_be_text=*/true);
  return t;
}

std::string ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                 bool add_assistant) const {
  std::string out;
  for (const Piece& p : RenderPieces(messages, add_assistant)) out += p.text;
  return out;
}

// Qwen2.5's template, step for step: the system turn with the tools, then each message; tool
// calls written back after the assistant's text, consecutive tool answers in one user turn.
void ChatTemplate::RenderHermes(const std::vector<ChatMessage>& messages,
                                const std::vector<std::string>& tools,
                                std::vector<Piece>* out) const {
  auto text = [&](std::string s) { out->push_back({std::move(s), false}); };
  auto content = [&](std::string s) { out->push_back({std::move(s), true}); };
  const bool has_system = !messages.empty() && messages[0].role == "system";
  if (!tools.empty()) {
    text("<|im_start|>system\n");
    content(has_system ? messages[0].content : default_system_);
    text(tools_prologue_);
    for (const std::string& tool : tools) {
      text("\n");
      content(tool);
    }
    text(tools_epilogue_);
  } else if (has_system) {
    text("<|im_start|>system\n");
    content(messages[0].content);
    text("<|im_end|>\n");
  } else if (!default_system_.empty()) {
    text("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
  }
  for (size_t i = has_system ? 1 : 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role == "tool") {
      if (i == 0 || messages[i - 1].role != "tool") text("<|im_start|>user");
      text("\n<tool_response>\n");
      content(m.content);
      text("\n</tool_response>");
      if (i + 1 == messages.size() || messages[i + 1].role != "tool") text("<|im_end|>\n");
      continue;
    }
    if (m.role != "assistant" || m.tool_calls.empty()) {
      text("<|im_start|>" + m.role + "\n");
      content(m.content);
      text("<|im_end|>\n");
      continue;
    }
    text("<|im_start|>assistant");
    if (!m.content.empty()) {
      text("\n");
      content(m.content);
    }
    for (const ChatToolCall& call : m.tool_calls) {
      text("\n<tool_call>\n{\"name\": \"");
      content(call.name);
      text("\", \"arguments\": ");
      content(call.arguments_json);
      text("}\n</tool_call>");
    }
    text("<|im_end|>\n");
  }
}

std::vector<ChatTemplate::Piece> ChatTemplate::RenderPieces(
    const std::vector<ChatMessage>& messages, bool add_assistant,
    const std::vector<std::string>& tools) const {
  bool uses_tools = !tools.empty();
  for (const ChatMessage& m : messages) {
    SPECD_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant" || m.role == "tool",
                "chat: unknown role '", m.role, "' (system, user, assistant, tool)");
    uses_tools = uses_tools || m.role == "tool" || !m.tool_calls.empty();
  }
  SPECD_CHECK(!uses_tools || tool_format_ != ToolFormat::kNone,
              "this model's chat template has no tool-call format (specd renders Qwen2.5's "
              "<tool_call> format): tools, tool calls and tool messages cannot be written");
  std::vector<Piece> out;
  auto text = [&](std::string s) { out.push_back({std::move(s), false}); };
  auto content = [&](std::string s) { out.push_back({std::move(s), true}); };
  if (tool_format_ == ToolFormat::kHermes) {
    RenderHermes(messages, tools, &out);
    if (add_assistant) text("<|im_start|>assistant\n");
    return out;
  }
  if (format_ == ChatFormat::kChatMl) {
    if (!default_system_.empty() && (messages.empty() || messages[0].role != "system")) {
      text("<|im_start|>system\n" + default_system_ + "<|im_end|>\n");
    }
    for (const ChatMessage& m : messages) {
      text("<|im_start|>" + m.role + "\n");
      content(m.content);
      text("<|im_end|>\n");
    }
    if (add_assistant) text("<|im_start|>assistant\n");
    return out;
  }
  // Gemma has no system turn: system text opens the next user turn (as llama.cpp does).
  std::string system;
  for (const ChatMessage& m : messages) {
    if (m.role == "system") {
      system += Trim(m.content);
      continue;
    }
    const std::string role = m.role == "assistant" ? "model" : m.role;
    text("<start_of_turn>" + role + "\n");
    if (!system.empty() && role != "model") {
      content(system + "\n\n");
      system.clear();
    }
    content(Trim(m.content));
    text("<end_of_turn>\n");
  }
  if (add_assistant) text("<start_of_turn>model\n");
  return out;
}

std::vector<int32_t> EncodeChat(const Tokenizer& tokenizer, const ChatTemplate& chat,
                                const std::vector<ChatMessage>& messages,
                                bool parse_special_content, bool add_assistant,
                                const std::vector<std::string>& tools) {
  std::vector<int32_t> tokens;
  if (tokenizer.add_bos() && tokenizer.bos() >= 0) tokens.push_back(tokenizer.bos());
  // The text between turn markers is encoded whole, template text and contents together, as
  // the rendered string would be (a tool call's name after `{"name": "` merges as it does
  // there); only the markers are parsed as special tokens.
  const std::vector<std::string> markers =
      chat.format() == ChatFormat::kChatMl
          ? std::vector<std::string>{"<|im_start|>", "<|im_end|>"}
          : std::vector<std::string>{"<start_of_turn>", "<end_of_turn>"};
  std::string run;
  auto encode = [&](const std::string& text, bool parse_special) {
    if (text.empty()) return;
    const auto ids = tokenizer.Encode(text, /*add_special=*/false, parse_special);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  };
  for (const ChatTemplate::Piece& p : chat.RenderPieces(messages, add_assistant, tools)) {
    if (p.is_content) {
      run += p.text;
      continue;
    }
    size_t at = 0;
    while (at < p.text.size()) {
      size_t next = std::string::npos, length = 0;
      for (const std::string& m : markers) {
        const size_t found = p.text.find(m, at);
        if (found < next) next = found, length = m.size();
      }
      if (next == std::string::npos) {
        run += p.text.substr(at);
        break;
      }
      run += p.text.substr(at, next - at);
      encode(run, parse_special_content);
      run.clear();
      encode(p.text.substr(next, length), /*parse_special=*/true);
      at = next + length;
    }
  }
  encode(run, parse_special_content);
  return tokens;
}

}  // namespace specd
