#include "server/fim_prompt.h"

#include <algorithm>

namespace specd::server {
namespace {

// The first of `names` the vocabulary has, or -1 (llama.cpp's lists, most common first).
int32_t FirstToken(const Tokenizer& tokenizer, std::initializer_list<const char*> names) {
  for (const char* name : names) {
    if (const int32_t id = tokenizer.Find(name); id >= 0) return id;
  }
  return -1;
}

std::vector<int32_t> Tokens(const Tokenizer& tokenizer, const std::string& text) {
  return tokenizer.Encode(text, /*add_special=*/false, /*parse_special=*/false);
}

}  // namespace

FimTokens FindFimTokens(const Tokenizer& tokenizer) {
  FimTokens f;
  f.prefix = FirstToken(tokenizer, {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<PRE>"});
  f.suffix = FirstToken(tokenizer, {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<SUF>"});
  f.middle = FirstToken(tokenizer, {"<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<MID>"});
  f.repo = FirstToken(tokenizer,
                      {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"});
  f.file_sep = FirstToken(tokenizer, {"<|file_sep|>"});
  return f;
}

std::vector<int32_t> FimPrompt(const Tokenizer& tokenizer, const FimTokens& fim,
                               const std::string& prefix, const std::string& suffix,
                               const std::vector<ExtraChunk>& extra,
                               const std::vector<int32_t>& prompt_tokens,
                               const FimBudget& budget) {
  std::vector<int32_t> extra_tokens;
  if (fim.repo >= 0) {
    extra_tokens.push_back(fim.repo);
    const auto repo = Tokens(tokenizer, "myproject\n");
    extra_tokens.insert(extra_tokens.end(), repo.begin(), repo.end());
  }
  for (const ExtraChunk& chunk : extra) {
    // Without a file separator, a chunk opens with "\n\n--- snippet ---\n\n" as in llama-server.
    const auto head = fim.file_sep >= 0 ? Tokens(tokenizer, chunk.filename + "\n")
                                        : Tokens(tokenizer, "\n\n--- snippet ---\n\n");
    if (fim.file_sep >= 0) extra_tokens.push_back(fim.file_sep);
    extra_tokens.insert(extra_tokens.end(), head.begin(), head.end());
    const auto text = Tokens(tokenizer, chunk.text);
    extra_tokens.insert(extra_tokens.end(), text.begin(), text.end());
  }
  if (fim.file_sep >= 0) {
    extra_tokens.push_back(fim.file_sep);
    const auto name = Tokens(tokenizer, "filename\n");
    extra_tokens.insert(extra_tokens.end(), name.begin(), name.end());
  }
  std::vector<int32_t> before = Tokens(tokenizer, prefix), after = Tokens(tokenizer, suffix);
  const int64_t n_prefix_take =
      std::min<int64_t>(static_cast<int64_t>(before.size()), 3 * (budget.n_batch / 4));
  const int64_t n_suffix_take = std::min<int64_t>(
      static_cast<int64_t>(after.size()),
      std::max<int64_t>(0, budget.n_batch / 4 - (2 + static_cast<int64_t>(prompt_tokens.size()))));
  const int64_t n_extra_take =
      std::min<int64_t>(std::max<int64_t>(0, budget.n_ctx - budget.n_batch - 2 * budget.n_predict),
                        static_cast<int64_t>(extra_tokens.size()));
  before.erase(before.begin(), before.end() - n_prefix_take);
  after.resize(n_suffix_take);
  std::vector<int32_t> out(extra_tokens.end() - n_extra_take, extra_tokens.end());
  if (tokenizer.add_bos() && tokenizer.bos() >= 0) out.push_back(tokenizer.bos());
  out.push_back(fim.prefix);
  out.insert(out.end(), before.begin(), before.end());
  out.insert(out.end(), prompt_tokens.begin(), prompt_tokens.end());
  out.push_back(fim.suffix);
  out.insert(out.end(), after.begin(), after.end());
  out.push_back(fim.middle);
  return out;
}

}  // namespace specd::server
