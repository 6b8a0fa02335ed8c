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

}  // namespace

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
  const int32_t eot = tokenizer.Find(end_of_turn);
  SPECD_CHECK(eot >= 0, file.path(), ": the chat template uses ", end_of_turn,
              " but the vocabulary has no such token");
  t.stop_tokens_.push_back(eot);
  if (const GgufValue* v = file.Find("tokenizer.ggml.eot_token_id")) {
    t.stop_tokens_.push_back(static_cast<int32_t>(v->AsInt("tokenizer.ggml.eot_token_id")));
  }
  if (tokenizer.eos() >= 0) t.stop_tokens_.push_back(tokenizer.eos());
  std::sort(t.stop_tokens_.begin(), t.stop_tokens_.end());
  t.stop_tokens_.erase(std::unique(t.stop_tokens_.begin(), t.stop_tokens_.end()),
                       t.stop_tokens_.end());
  return t;
}

std::string ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                 bool add_assistant) const {
  std::string out;
  for (const Piece& p : RenderPieces(messages, add_assistant)) out += p.text;
  return out;
}

std::vector<ChatTemplate::Piece> ChatTemplate::RenderPieces(
    const std::vector<ChatMessage>& messages, bool add_assistant) const {
  for (const ChatMessage& m : messages) {
    SPECD_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant",
                "chat: unknown role '", m.role, "' (system, user, assistant)");
  }
  std::vector<Piece> out;
  auto text = [&](std::string s) { out.push_back({std::move(s), false}); };
  auto content = [&](std::string s) { out.push_back({std::move(s), true}); };
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
                                bool parse_special_content, bool add_assistant) {
  std::vector<int32_t> tokens;
  if (tokenizer.add_bos() && tokenizer.bos() >= 0) tokens.push_back(tokenizer.bos());
  for (const ChatTemplate::Piece& p : chat.RenderPieces(messages, add_assistant)) {
    if (p.text.empty()) continue;
    const auto ids =
        tokenizer.Encode(p.text, /*add_special=*/false, !p.is_content || parse_special_content);
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  return tokens;
}

}  // namespace specd
