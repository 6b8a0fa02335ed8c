// Tokenizers read from a GGUF file's `tokenizer.ggml.*` metadata, producing the token ids of the
// model's original tokenizer:
//   SPM (`tokenizer.ggml.model = llama`): SentencePiece BPE by piece score, byte fallback, the
//     leading-space rule (a space before the first text fragment and after each special token);
//   BPE (`gpt2`): byte-level BPE with merges by rank, after the regex pre-tokenizer named by
//     `tokenizer.ggml.pre`.
// User-defined tokens are always matched in the text; control tokens (`<s>`, `<|im_start|>`)
// only when parse_special is set, otherwise they are ordinary text. Invalid UTF-8 in the input is
// replaced by U+FFFD before tokenization.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gguf/gguf.h"

namespace specd {

enum class TokenType : int32_t {
  kUndefined = 0,
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

enum class TokenizerKind { kSpm, kBpe };

class PreTokenizer;

class Tokenizer {
 public:
  // Reads the tokenizer of a GGUF file (a model or a vocabulary-only file); throws Error.
  static std::unique_ptr<Tokenizer> FromGguf(const GgufFile& file);
  ~Tokenizer();

  // add_special: BOS / EOS as the model's metadata asks (add_bos_token / add_eos_token).
  std::vector<int32_t> Encode(std::string_view text, bool add_special, bool parse_special) const;

  // The bytes a token stands for (may be part of a UTF-8 character). Control and unknown tokens
  // give "" unless `special`. Throws Error for an id outside the vocabulary.
  std::string Piece(int32_t token, bool special = false) const;

  // Text of a token sequence; invalid or incomplete UTF-8 becomes U+FFFD. With
  // strip_space_prefix (SPM), the space the tokenizer put before the text is removed again.
  std::string Decode(std::span<const int32_t> tokens, bool strip_space_prefix = false,
                     bool special = false) const;

  TokenizerKind kind() const { return kind_; }
  const std::string& pre_tokenizer() const { return pre_name_; }
  int32_t n_vocab() const { return static_cast<int32_t>(tokens_.size()); }
  int32_t bos() const { return bos_; }
  int32_t eos() const { return eos_; }
  bool add_bos() const { return add_bos_; }
  bool add_eos() const { return add_eos_; }
  bool add_space_prefix() const { return add_space_prefix_; }
  const std::string& TokenText(int32_t id) const { return tokens_.at(id); }
  TokenType Type(int32_t id) const { return types_.at(id); }
  // Id of a token's exact text, or -1.
  int32_t Find(std::string_view text) const;
  // Whether a byte has a token of its own (byte-level BPE: its mapped character; SPM: <0xXX>).
  // Some vocabularies lack bytes their training text never held (starcoder's and SmolLM2's
  // 0xF1, falcon's 0x03); encoding drops such bytes, as llama.cpp does.
  bool HasByteToken(uint8_t byte) const;

 private:
  Tokenizer() = default;
  // FromGguf's parts: tokens, scores and types; BOS / EOS / UNK and the add flags; the special
  // tokens (longest first) and byte tokens; SPM's space and separator rules; BPE's merges.
  void ReadVocabulary(const GgufFile& f);
  void ReadSpecialIds(const GgufFile& f);
  void IndexSpecialAndByteTokens();
  void PrepareSpm();
  void PrepareBpe(const GgufFile& f);
  void EncodeSpm(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeSpmSegment(std::string_view text, std::vector<int32_t>* out) const;
  void EncodeBpe(std::string_view text, std::vector<int32_t>* out) const;
  int32_t ByteToken(uint8_t byte) const;

  struct Hash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Merge {
    int32_t rank;
    int32_t merged;  // symbol id of the merged text
  };

  TokenizerKind kind_ = TokenizerKind::kSpm;
  std::string pre_name_;
  std::vector<std::string> tokens_;
  std::vector<float> scores_;
  std::vector<TokenType> types_;
  std::unordered_map<std::string, int32_t, Hash, std::equal_to<>> token_to_id_;
  std::vector<int32_t> special_tokens_;  // matched in the text, longest first
  int32_t bos_ = -1, eos_ = -1, unk_ = -1;
  bool add_bos_ = false, add_eos_ = false, add_space_prefix_ = true;
  int32_t byte_tokens_[256];  // SPM <0xXX> tokens, -1 when missing
  // SPM: characters that occur in no token of two or more characters. No merge can involve them,
  // so the text is split there and the pieces are encoded (and cached) independently: the same
  // result, much faster on text with many newlines.
  std::unordered_set<std::string, Hash, std::equal_to<>> spm_separators_;
  // SPM: no token has "▁" right after another character, so a "▁" that follows a non-space
  // starts a new piece that no merge can cross (true of SentencePiece's whitespace splitting).
  bool spm_split_before_space_ = false;

  // BPE: symbols are token ids, extended by "virtual" ids for texts that occur in merges or as
  // single characters but are not tokens themselves.
  std::vector<std::string> virtual_text_;       // symbol id n_vocab + i
  std::unordered_map<uint64_t, Merge> merges_;  // key: (left symbol << 32) | right symbol
  int32_t byte_symbol_[256];     // symbol of the GPT-2 byte-to-unicode character of each byte
  int16_t codepoint_byte_[324];  // inverse of that map (-1: not a mapped character)
  std::unique_ptr<PreTokenizer> pre_;
  bool ignore_merges_ = false;

  friend class StreamingDecoder;
};

// Turns tokens into text as they arrive, never emitting a broken UTF-8 character: bytes of an
// incomplete character wait for the next token. The concatenated output of Push calls plus
// Finish equals Tokenizer::Decode of the whole sequence.
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer, bool strip_space_prefix = false,
                            bool special = false)
      : tokenizer_(tokenizer), strip_(strip_space_prefix), special_(special) {}
  std::string Push(int32_t token);
  std::string Finish();

 private:
  std::string TakeComplete(bool final);

  const Tokenizer& tokenizer_;
  bool strip_;
  bool special_;
  bool first_ = true;
  std::string pending_;
};

}  // namespace specd
