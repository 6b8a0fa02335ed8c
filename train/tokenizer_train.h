// `specd train tokenizer`: a SentencePiece BPE vocabulary trained on a corpus, stored as GGUF
// tokenizer metadata of the `llama` (SPM) kind, which llama.cpp and specd read.
#pragma once

#include <string>
#include <vector>

namespace specd::train {

struct TokenizerTrainOptions {
  int vocab_size = 4096;
  int n_unused = 20;  // reserved control tokens <unused0>.. (SDSAT's adaptive tokens take some)
  int threads = 2;
};

// Trains on the files and writes `out_gguf` (and `out_gguf` + ".model", SentencePiece's own
// model, kept for reference tests).
void TrainTokenizer(const std::vector<std::string>& files, const TokenizerTrainOptions& options,
                    const std::string& out_gguf);

}  // namespace specd::train
