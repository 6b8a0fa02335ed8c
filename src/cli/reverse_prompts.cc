#include "cli/reverse_prompts.h"

#include <algorithm>

namespace specd::cli {

ReversePrompts::ReversePrompts(const Tokenizer& tokenizer, std::vector<std::string> prompts,
                               int n_sequences)
    : prompts_(std::move(prompts)), sequences_(n_sequences) {
  for (Text& t : sequences_) t.decoder = std::make_unique<StreamingDecoder>(tokenizer);
}

bool ReversePrompts::Push(int index, int32_t token) {
  Text& t = sequences_.at(index);
  if (t.kept >= 0) return false;
  ++t.n_tokens;
  const size_t old_size = t.text.size();
  t.text += t.decoder->Push(token);
  for (const std::string& prompt : prompts_) {
    // Only where the new text could complete it: a token may hold a prompt's end and more.
    const size_t from = old_size >= prompt.size() ? old_size - prompt.size() + 1 : 0;
    if (t.text.find(prompt, from) != std::string::npos) {
      t.kept = t.n_tokens;
      return false;
    }
  }
  return true;
}

}  // namespace specd::cli
