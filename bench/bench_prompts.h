// The prompts benchmarks decode from: Python openings ("code") or chat questions in the
// target's own chat template ("chat"). Written for these benchmarks, not taken from any corpus.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace specd::bench {

// The prompt set's prompts as token ids; throws an Error for an unknown set.
std::vector<std::vector<int32_t>> BenchPrompts(const Model& target, const Tokenizer& tokenizer,
                                               const std::string& set);

}  // namespace specd::bench
