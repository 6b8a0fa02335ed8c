// FR-Spec (Zhao et al. 2025): a draft whose output layer covers only the most frequent tokens,
// from a ranking counted on a corpus (scripts/make-token-ranking.py). The draft then reads a
// fraction of its largest matrix per token; the target still scores the whole vocabulary, so
// the output is unchanged and only tokens outside the subset are never drafted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/speculation_config.h"

namespace specd {

// A ranking file: "specd-token-ranking 1 n_vocab=N", comment lines starting with '#', then one
// token id per line, most frequent first.
struct TokenRanking {
  int64_t n_vocab = 0;          // of the tokenizer it was counted with
  std::vector<int32_t> tokens;  // most frequent first
};

// Throws an Error naming the file and line for anything malformed (ids out of range, repeats).
TokenRanking ReadTokenRanking(const std::string& path);

// The number of ranked tokens a draft keeps (SpeculationDefaults::kDraftVocab for vocab -1 when
// a ranking is named; 0: the whole vocabulary).
int DraftVocabSize(const DraftModelConfig& config);

struct DraftVocab {
  std::vector<int32_t> head_tokens;
  int64_t n_vocab = 0;  // the ranking's, to check against the draft's
};
// The first DraftVocabSize tokens of the ranking; empty: the whole vocabulary.
DraftVocab DraftVocabFor(const DraftModelConfig& config);

}  // namespace specd
