// Regex pre-tokenizers of byte-level BPE models, by `tokenizer.ggml.pre` name. Each expression
// splits every current fragment into its matches and the text between them, in turn (as
// llama.cpp and Hugging Face tokenizers do); PCRE2 supplies the Unicode classes.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace specd {

class PreTokenizer {
 public:
  // Throws Error for an unknown name, listing the known ones.
  static std::unique_ptr<PreTokenizer> ByName(const std::string& name);
  ~PreTokenizer();
  // Splits valid UTF-8 text into words (views into `text`).
  std::vector<std::string_view> Split(std::string_view text) const;
  // Whether merges are skipped for words that are whole tokens (Llama 3).
  bool ignore_merges() const { return ignore_merges_; }

 private:
  struct Compiled;
  PreTokenizer() = default;
  std::vector<std::unique_ptr<Compiled>> expressions_;
  bool ignore_merges_ = false;
};

}  // namespace specd
