// `specd bench tokenize`: encoding throughput of tokenizers on one text file.
#pragma once

#include <string>
#include <vector>

namespace specd::bench {

struct TokenizeBenchOptions {
  std::vector<std::string> models;  // GGUF files with tokenizer metadata
  std::string file;
  int repeats = 3;  // runs per tokenizer, the best kept
};
void RunTokenizeBench(const TokenizeBenchOptions& options);

}  // namespace specd::bench
