#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <iterator>

#include "base/error.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/utf8.h"

namespace specd {
namespace {

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the rest map to U+0100..
uint32_t ByteToCodepoint(uint8_t b) {
  if ((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174) return b;
  uint32_t n = 0;
  for (int x = 0; x < b; ++x) {
    if (!((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || x >= 174)) ++n;
  }
  return 256 + n;
}

}  // namespace

Tokenizer::~Tokenizer() = default;

std::unique_ptr<Tokenizer> Tokenizer::FromGguf(const GgufFile& f) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  const std::string model = f.Get("tokenizer.ggml.model").AsString("tokenizer.ggml.model");
  if (model == "llama") {
    t->kind_ = TokenizerKind::kSpm;
  } else if (model == "gpt2") {
    t->kind_ = TokenizerKind::kBpe;
  } else {
    Fail(f.path(), ": tokenizer model '", model, "' is not supported (llama = SPM, gpt2 = BPE)");
  }
  t->ReadVocabulary(f);
  t->ReadSpecialIds(f);
  t->IndexSpecialAndByteTokens();
  if (t->kind_ == TokenizerKind::kSpm) {
    t->PrepareSpm();
  } else {
    t->PrepareBpe(f);
  }
  return t;
}

void Tokenizer::ReadVocabulary(const GgufFile& f) {
  const GgufArray& tokens = f.Get("tokenizer.ggml.tokens").AsArray("tokenizer.ggml.tokens");
  SPECD_CHECK(!tokens.items.empty() && tokens.items.size() < (1u << 31), f.path(),
              ": tokenizer.ggml.tokens has ", tokens.items.size(), " entries");
  const size_t n = tokens.items.size();
  tokens_.reserve(n);
  for (const auto& item : tokens.items) tokens_.push_back(item.AsString("a token"));
  scores_.assign(n, 0.0f);
  if (const GgufValue* v = f.Find("tokenizer.ggml.scores")) {
    const GgufArray& scores = v->AsArray("tokenizer.ggml.scores");
    SPECD_CHECK(scores.items.size() == n, f.path(), ": ", scores.items.size(), " scores for ", n,
                " tokens");
    for (size_t i = 0; i < n; ++i)
      scores_[i] = static_cast<float>(scores.items[i].AsFloat("a score"));
  }
  types_.assign(n, TokenType::kNormal);
  if (const GgufValue* v = f.Find("tokenizer.ggml.token_type")) {
    const GgufArray& types = v->AsArray("tokenizer.ggml.token_type");
    SPECD_CHECK(types.items.size() == n, f.path(), ": ", types.items.size(), " token types for ", n,
                " tokens");
    for (size_t i = 0; i < n; ++i) {
      const int64_t type = types.items[i].AsInt("a token type");
      types_[i] = (type >= 0 && type <= 6) ? static_cast<TokenType>(type) : TokenType::kUndefined;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    // Later duplicates win, as in llama.cpp.
    token_to_id_[tokens_[i]] = static_cast<int32_t>(i);
  }
}

void Tokenizer::ReadSpecialIds(const GgufFile& f) {
  const bool spm = kind_ == TokenizerKind::kSpm;
  const size_t n = tokens_.size();
  auto token_id = [&](const char* key, int64_t fallback) {
    const int64_t id = f.GetInt(key, fallback);
    SPECD_CHECK(id >= -1 && id < static_cast<int64_t>(n), f.path(), ": ", key, " = ", id,
                " is outside the vocabulary of ", n);
    return static_cast<int32_t>(id);
  };
  bos_ = token_id("tokenizer.ggml.bos_token_id", spm ? 1 : -1);
  eos_ = token_id("tokenizer.ggml.eos_token_id", spm ? 2 : -1);
  unk_ = token_id("tokenizer.ggml.unknown_token_id", spm ? 0 : -1);
  add_bos_ = f.GetBool("tokenizer.ggml.add_bos_token", spm);
  add_eos_ = f.GetBool("tokenizer.ggml.add_eos_token", false);
  add_space_prefix_ = f.GetBool("tokenizer.ggml.add_space_prefix", spm);
  if (const GgufValue* v = f.Find("tokenizer.ggml.pre"))
    pre_name_ = v->AsString("tokenizer.ggml.pre");
}

void Tokenizer::IndexSpecialAndByteTokens() {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    const TokenType type = types_[i];
    if ((type == TokenType::kControl || type == TokenType::kUserDefined ||
         type == TokenType::kUnknown) &&
        !tokens_[i].empty()) {
      special_tokens_.push_back(static_cast<int32_t>(i));
    }
  }
  // Longest first: a special token's text wins over those it contains.
  std::stable_sort(special_tokens_.begin(), special_tokens_.end(),
                   [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
  std::fill(std::begin(codepoint_byte_), std::end(codepoint_byte_), int16_t{-1});
  for (int b = 0; b < 256; ++b) codepoint_byte_[ByteToCodepoint(static_cast<uint8_t>(b))] = b;
  for (int b = 0; b < 256; ++b) {
    char hex[8];
    std::snprintf(hex, sizeof(hex), "<0x%02X>", b);
    byte_tokens_[b] = Find(hex);
  }
}

void Tokenizer::PrepareSpm() {
  // Characters that occur inside multi-character pieces.
  std::unordered_set<std::string_view> in_pieces;
  for (const std::string& token : tokens_) {
    const bool multi =
        static_cast<size_t>(utf8::SequenceLength(static_cast<uint8_t>(token[0]))) < token.size();
    for (size_t i = 0; i < token.size();) {
      const size_t len =
          std::min<size_t>(utf8::SequenceLength(static_cast<uint8_t>(token[i])), token.size() - i);
      const std::string_view ch(token.data() + i, len);
      if (multi) in_pieces.insert(ch);
      i += len;
    }
  }
  const std::string_view space = "\xE2\x96\x81";
  spm_split_before_space_ = true;
  for (const std::string& token : tokens_) {
    for (size_t at = token.find(space, 1); at != std::string::npos;
         at = token.find(space, at + 1)) {
      if (at < 3 || std::string_view(token).substr(at - 3, 3) != space) {
        spm_split_before_space_ = false;
        break;
      }
    }
    if (!spm_split_before_space_) break;
  }
  for (const char* candidate : {"\n", "\t", "\r"}) {
    if (in_pieces.count(candidate) == 0) spm_separators_.insert(candidate);
  }
}

void Tokenizer::PrepareBpe(const GgufFile& f) {
  pre_ = PreTokenizer::ByName(pre_name_);
  ignore_merges_ = pre_->ignore_merges();
  const size_t n = tokens_.size();
  // Symbols: token ids, or virtual ids for texts that are not tokens.
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> virtual_ids;
  auto symbol = [&](const std::string& text) -> int32_t {
    const int32_t id = Find(text);
    if (id >= 0) return id;
    const auto it = virtual_ids.find(text);
    if (it != virtual_ids.end()) return it->second;
    const int32_t v = static_cast<int32_t>(n + virtual_text_.size());
    virtual_text_.push_back(text);
    virtual_ids[text] = v;
    return v;
  };
  for (int b = 0; b < 256; ++b) {
    std::string ch;
    utf8::Append(ByteToCodepoint(static_cast<uint8_t>(b)), &ch);
    byte_symbol_[b] = symbol(ch);
  }
  const GgufValue* merges_value = f.Find("tokenizer.ggml.merges");
  SPECD_CHECK(merges_value != nullptr, f.path(), ": a BPE tokenizer needs tokenizer.ggml.merges");
  const GgufArray& merges = merges_value->AsArray("tokenizer.ggml.merges");
  merges_.reserve(merges.items.size());
  for (size_t rank = 0; rank < merges.items.size(); ++rank) {
    const std::string& line = merges.items[rank].AsString("a merge");
    // "left right"; the separator is the first space after the first character.
    const size_t space = line.find(' ', 1);
    SPECD_CHECK(space != std::string::npos, f.path(), ": merge ", rank, " ('", line,
                "') is not 'left right'");
    const std::string left = line.substr(0, space), right = line.substr(space + 1);
    const uint64_t key =
        (static_cast<uint64_t>(symbol(left)) << 32) | static_cast<uint32_t>(symbol(right));
    merges_.emplace(key, Merge{static_cast<int32_t>(rank), symbol(left + right)});
  }
}

int32_t Tokenizer::Find(std::string_view text) const {
  const auto it = token_to_id_.find(text);
  return it == token_to_id_.end() ? -1 : it->second;
}

bool Tokenizer::HasByteToken(uint8_t byte) const {
  return kind_ == TokenizerKind::kBpe ? byte_symbol_[byte] < n_vocab() : byte_tokens_[byte] >= 0;
}

int32_t Tokenizer::ByteToken(uint8_t byte) const {
  if (byte_tokens_[byte] >= 0) return byte_tokens_[byte];
  const int32_t plain = Find(std::string_view(reinterpret_cast<const char*>(&byte), 1));
  return plain >= 0 ? plain : unk_;
}

std::vector<int32_t> Tokenizer::Encode(std::string_view raw, bool add_special,
                                       bool parse_special) const {
  const std::string text = utf8::Sanitize(raw);
  // Fragments: [begin, end) of text, or a special token (begin = -1 - id).
  struct Fragment {
    int64_t begin, end;
  };
  std::vector<Fragment> fragments;
  if (!text.empty()) fragments.push_back({0, static_cast<int64_t>(text.size())});
  for (int32_t id : special_tokens_) {
    const TokenType type = types_[id];
    if (!parse_special && type != TokenType::kUserDefined) continue;
    const std::string& special = tokens_[id];
    std::vector<Fragment> next;
    for (const Fragment& f : fragments) {
      if (f.begin < 0) {
        next.push_back(f);
        continue;
      }
      int64_t at = f.begin;
      while (true) {
        const size_t hit = text.find(special, at);
        if (hit == std::string::npos || static_cast<int64_t>(hit + special.size()) > f.end) break;
        if (static_cast<int64_t>(hit) > at) next.push_back({at, static_cast<int64_t>(hit)});
        next.push_back({-1 - id, 0});
        at = static_cast<int64_t>(hit + special.size());
      }
      if (at < f.end) next.push_back({at, f.end});
    }
    fragments.swap(next);
  }

  std::vector<int32_t> out;
  if (add_special && add_bos_ && bos_ >= 0) out.push_back(bos_);
  bool prev_special = true;  // SPM: a space before the first text and after each special token
  for (const Fragment& f : fragments) {
    if (f.begin < 0) {
      out.push_back(static_cast<int32_t>(-1 - f.begin));
      prev_special = true;
      continue;
    }
    const std::string_view piece(text.data() + f.begin, f.end - f.begin);
    if (kind_ == TokenizerKind::kSpm) {
      std::string escaped;
      escaped.reserve(piece.size() + 8);
      if (add_space_prefix_ && prev_special) escaped += "\xE2\x96\x81";
      for (char c : piece) {
        if (c == ' ') {
          escaped += "\xE2\x96\x81";
        } else {
          escaped += c;
        }
      }
      EncodeSpm(escaped, &out);
    } else {
      EncodeBpe(piece, &out);
    }
    prev_special = false;
  }
  if (add_special && add_eos_ && eos_ >= 0) out.push_back(eos_);
  return out;
}

std::string Tokenizer::Piece(int32_t token, bool special) const {
  SPECD_CHECK(token >= 0 && token < n_vocab(), "token id ", token, " is outside the vocabulary of ",
              n_vocab());
  const TokenType type = types_[token];
  const std::string& text = tokens_[token];
  switch (type) {
    case TokenType::kControl:
    case TokenType::kUnknown:
      return special ? text : "";
    case TokenType::kUserDefined:
      return text;
    case TokenType::kByte:
      if (text.size() == 6 && text.rfind("<0x", 0) == 0 && text[5] == '>') {
        return std::string(1, static_cast<char>(std::stoi(text.substr(3, 2), nullptr, 16)));
      }
      return text;
    default:
      break;
  }
  std::string out;
  if (kind_ == TokenizerKind::kSpm) {
    for (size_t i = 0; i < text.size(); ++i) {
      if (text.compare(i, 3, "\xE2\x96\x81") == 0) {
        out += ' ';
        i += 2;
      } else {
        out += text[i];
      }
    }
    return out;
  }
  // Byte-level BPE: each character stands for one byte.
  const auto* s = reinterpret_cast<const uint8_t*>(text.data());
  for (size_t i = 0; i < text.size();) {
    const int len = utf8::ValidSequenceAt(s + i, text.size() - i);
    if (len <= 0) {
      out += text[i++];
      continue;
    }
    const uint32_t cp = len == 1   ? s[i]
                        : len == 2 ? ((s[i] & 0x1F) << 6) | (s[i + 1] & 0x3F)
                                   : 0x110000;
    if (cp < 324 && codepoint_byte_[cp] >= 0) {
      out += static_cast<char>(codepoint_byte_[cp]);
    } else {
      out.append(text, i, len);
    }
    i += len;
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const int32_t> tokens, bool strip_space_prefix,
                              bool special) const {
  StreamingDecoder decoder(*this, strip_space_prefix, special);
  std::string out;
  for (int32_t t : tokens) out += decoder.Push(t);
  out += decoder.Finish();
  return out;
}

}  // namespace specd
