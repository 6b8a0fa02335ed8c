// FR-Spec (Zhao et al. 2025): a draft whose output layer covers only the most frequent tokens,
// from a ranking counted on a corpus (scripts/make-token-ranking.py). The draft then reads a
// fraction of its largest matrix per token; the target still scores the whole vocabulary, so
// the output is unchanged and only tokens outside the subset are never drafted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "draft/draft_model_proposer.h"

namespace specd {

// The draft vocabulary used when a ranking is known for the draft and --draft-vocab is not
// given: chosen by measurement (docs/performance.md, bench/results/fr-spec/).
inline constexpr int kDefaultDraftVocab = 16384;

// How many tokens of its context (prompts, accepted tokens) a restricted draft's head takes on
// beyond the ranked ones (ModelLoadOptions::head_context_tokens).
inline constexpr int kDraftContextTokens = 4096;

// A ranking file: "specd-token-ranking 1 n_vocab=N", comment lines starting with '#', then one
// token id per line, most frequent first.
struct TokenRanking {
  int64_t n_vocab = 0;          // of the tokenizer it was counted with
  std::vector<int32_t> tokens;  // most frequent first
};

// Throws an Error naming the file and line for anything malformed (ids out of range, repeats).
TokenRanking ReadTokenRanking(const std::string& path);

// What a draft keeps of its vocabulary for these flags: the first `vocab` tokens of the ranking
// (kDefaultDraftVocab for vocab -1 when a ranking is given). Empty: the whole vocabulary.
// The number of ranked tokens a draft keeps for these flags (0: the whole vocabulary).
int DraftVocabSize(const DraftFlags& flags);

struct DraftVocab {
  std::vector<int32_t> head_tokens;
  int64_t n_vocab = 0;  // the ranking's, to check against the draft's
};
DraftVocab DraftVocabFor(const DraftFlags& flags);

}  // namespace specd
