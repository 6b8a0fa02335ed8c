// Fill-in-the-middle prompts as llama-server builds them: the model's FIM tokens found by their
// text, the editor's prefix, suffix and other files' chunks cut to fit.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace specd::server {

// The model's fill-in-the-middle tokens, found by their text as llama.cpp's vocabulary loader
// finds them (Qwen2.5-Coder: <|fim_prefix|> ...; repo-level: <|repo_name|>, <|file_sep|>).
struct FimTokens {
  int32_t prefix = -1, suffix = -1, middle = -1;
  int32_t repo = -1, file_sep = -1;  // -1 where the model has none
  bool usable() const { return prefix >= 0 && suffix >= 0 && middle >= 0; }
};
FimTokens FindFimTokens(const Tokenizer& tokenizer);

// A file of the editor's other context ("input_extra").
struct ExtraChunk {
  std::string filename;
  std::string text;
};

// Where a FIM prompt must fit: llama-server's batch (prefix : suffix = 3 : 1 of it) and the
// slot's context (extra chunks fill what the batch and twice n_predict leave).
struct FimBudget {
  int n_batch = 2048;
  int n_ctx = 4096;
  int n_predict = 128;
};

// llama-server's FIM prompt (format_prompt_infill): [repo "myproject\n"] [file_sep filename "\n"
// text] ... [file_sep "filename\n"] prefix-token prefix prompt suffix-token suffix middle-token,
// the prefix kept from its end and the suffix from its start to fit the batch, the extra
// chunks' last tokens to fit the context.
std::vector<int32_t> FimPrompt(const Tokenizer& tokenizer, const FimTokens& fim,
                               const std::string& prefix, const std::string& suffix,
                               const std::vector<ExtraChunk>& extra,
                               const std::vector<int32_t>& prompt_tokens, const FimBudget& budget);

}  // namespace specd::server
