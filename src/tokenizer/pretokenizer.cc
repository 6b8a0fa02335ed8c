#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <map>

#include "base/error.h"
#include "tokenizer/utf8.h"

namespace specd {
namespace {

// The expressions, as the models' tokenizer.json files define them (case-insensitive
// contractions spelled out as character classes).
constexpr const char* kGpt2 =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S))";
constexpr const char* kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct Definition {
  std::vector<std::string> expressions;
  bool ignore_merges = false;
};

std::map<std::string, Definition> Definitions() {
  std::map<std::string, Definition> d;
  d["default"] = {{R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"}};
  for (const char* name : {"gpt-2", "gpt2", "mpt", "olmo", "jais", "trillion"}) d[name] = {{kGpt2}};
  for (const char* name : {"llama3", "llama-bpe", "llama-v3"}) d[name] = {{kLlama3}, true};
  for (const char* name : {"dbrx", "smaug-bpe", "chatglm-bpe"}) d[name] = {{kLlama3}};
  for (const char* name : {"qwen2", "qwen2.5", "qwen-2.5", "stablelm2", "deepseek-r1-qwen"}) {
    d[name] = {{kQwen2}};
  }
  d["deepseek-coder"] = {{R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)",
                          "[\u4E00-\u9FA5\u0800-\u4E00\uAC00-\uD7FF]+", R"(\p{N})"}};
  d["falcon"] = {{R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"}};
  for (const char* name :
       {"starcoder", "refact", "command-r", "smollm", "codeshell", "exaone", "minerva-7b"}) {
    d[name] = {{R"(\p{N})", kGpt2}};
  }
  for (const char* name : {"poro-chat", "bloom", "gpt3-finnish"}) {
    d[name] = {{" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+"}};
  }
  d["viking"] = {{" ?[^(\\s|.,!?\u2026\u3002\uFF0C\u3001\u0964\u06D4\u060C)]+", R"(\p{N})"}};
  return d;
}

}  // namespace

struct PreTokenizer::Compiled {
  pcre2_code* code = nullptr;
  ~Compiled() { pcre2_code_free(code); }
};

PreTokenizer::~PreTokenizer() = default;

std::unique_ptr<PreTokenizer> PreTokenizer::ByName(const std::string& name) {
  const auto defs = Definitions();
  const auto it = defs.find(name.empty() ? "default" : name);
  if (it == defs.end()) {
    std::string known;
    for (const auto& [n, _] : defs) known += (known.empty() ? "" : ", ") + n;
    Fail("unknown BPE pre-tokenizer '", name, "' (tokenizer.ggml.pre); known: ", known);
  }
  std::unique_ptr<PreTokenizer> pre(new PreTokenizer());
  pre->ignore_merges_ = it->second.ignore_merges;
  for (const std::string& pattern : it->second.expressions) {
    int error = 0;
    PCRE2_SIZE offset = 0;
    auto compiled = std::make_unique<Compiled>();
    compiled->code =
        pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.c_str()), pattern.size(),
                      PCRE2_UTF | PCRE2_UCP | PCRE2_DOLLAR_ENDONLY, &error, &offset, nullptr);
    if (compiled->code == nullptr) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      Fail("pre-tokenizer '", name, "': bad expression at ", offset, ": ",
           reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(compiled->code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter
    pre->expressions_.push_back(std::move(compiled));
  }
  return pre;
}

std::vector<std::string_view> PreTokenizer::Split(std::string_view text) const {
  std::vector<std::string_view> fragments;
  if (!text.empty()) fragments.push_back(text);
  for (const auto& expression : expressions_) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(expression->code, nullptr);
    std::vector<std::string_view> next;
    next.reserve(fragments.size() * 2);
    for (std::string_view f : fragments) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(f.data());
      size_t last = 0, start = 0;
      while (start <= f.size()) {
        const int rc = pcre2_match(expression->code, subject, f.size(), start, PCRE2_NO_UTF_CHECK,
                                   md, nullptr);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          pcre2_match_data_free(md);
          Fail("pre-tokenizer: regex match failed with code ", rc);
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
        const size_t match_begin = ov[0], match_end = ov[1];
        if (match_end == match_begin) {  // empty match: step over one character
          if (match_end >= f.size()) break;
          start = match_end + utf8::SequenceLength(static_cast<uint8_t>(f[match_end]));
          continue;
        }
        if (match_begin > last) next.push_back(f.substr(last, match_begin - last));
        next.push_back(f.substr(match_begin, match_end - match_begin));
        last = start = match_end;
      }
      if (last < f.size()) next.push_back(f.substr(last));
    }
    pcre2_match_data_free(md);
    fragments.swap(next);
  }
  return fragments;
}

}  // namespace specd
