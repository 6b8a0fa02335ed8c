// llama.cpp's reverse prompts (-r TEXT): a sequence stops once its text shows one of them. Each
// sequence's text is decoded as its tokens arrive; the token that completes a reverse prompt is
// kept (the text shows it, as llama.cpp's does), later ones are not.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace specd::cli {

class ReversePrompts {
 public:
  ReversePrompts(const Tokenizer& tokenizer, std::vector<std::string> prompts, int n_sequences);
  // Sequence `index` generated `token`: false once its text has shown a reverse prompt (also for
  // the token that completed it).
  bool Push(int index, int32_t token);
  // Whether `index` stopped at a reverse prompt, and how many of its tokens to keep then.
  bool stopped(int index) const { return sequences_[index].kept >= 0; }
  int kept(int index) const { return sequences_[index].kept; }

 private:
  struct Text {
    std::unique_ptr<StreamingDecoder> decoder;
    std::string text;
    int n_tokens = 0;
    int kept = -1;  // tokens kept once stopped; -1 while running
  };
  std::vector<std::string> prompts_;
  std::vector<Text> sequences_;
};

}  // namespace specd::cli
