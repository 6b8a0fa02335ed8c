#include "bench/tokenize_bench.h"

#include <algorithm>
#include <cstdio>

#include "base/file_util.h"
#include "base/timer.h"
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace specd::bench {

void RunTokenizeBench(const TokenizeBenchOptions& o) {
  const std::string text = ReadFileBytes(o.file);
  std::printf("Encoding %s (%.2f MB), one thread, best of %d\n\n", o.file.c_str(),
              text.size() / 1e6, o.repeats);
  std::printf("| tokenizer | kind | tokens | bytes/token | MB/s |\n|---|---|---|---|---|\n");
  for (const std::string& path : o.models) {
    auto file = GgufFile::Open(path);
    const auto tokenizer = Tokenizer::FromGguf(*file);
    double best_ms = 1e30;
    size_t n_tokens = 0;
    for (int r = 0; r < o.repeats; ++r) {
      Timer t;
      n_tokens = tokenizer->Encode(text, false, false).size();
      best_ms = std::min(best_ms, t.ElapsedMs());
    }
    const std::string name = path.substr(path.find_last_of('/') + 1);
    std::printf("| %s | %s | %zu | %.2f | %.1f |\n", name.c_str(),
                tokenizer->kind() == TokenizerKind::kSpm
                    ? "SPM"
                    : ("BPE " + tokenizer->pre_tokenizer()).c_str(),
                n_tokens, double(text.size()) / n_tokens, text.size() / 1e6 / (best_ms / 1000));
    std::fflush(stdout);
  }
}

}  // namespace specd::bench
