#include <cstdio>
#include <iostream>

#include "base/error.h"
#include "base/file_util.h"
#include "base/timer.h"
#include "cli/commands.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {

int RunTokenize(const TokenizeOptions& o) {
  SPECD_CHECK(!o.model.empty(), "tokenize needs -m MODEL.gguf");
  SPECD_CHECK(o.prompt.empty() != o.prompt_file.empty(), "give exactly one of -p TEXT or -f FILE");
  const std::string text = o.prompt_file.empty() ? o.prompt : ReadTextSource(o.prompt_file);
  auto file = GgufFile::Open(o.model);
  const auto tokenizer = Tokenizer::FromGguf(*file);
  const auto ids = tokenizer->Encode(text, !o.no_bos, o.special);
  if (o.ids_only) {
    std::cout << "[";
    for (size_t i = 0; i < ids.size(); ++i) std::cout << (i ? ", " : "") << ids[i];
    std::cout << "]\n";
    std::cout.flush();
    SPECD_CHECK(std::cout.good(), "cannot write the output (disk full, or the reader went away?)");
    return 0;
  }
  for (int32_t id : ids) {
    std::string piece = tokenizer->Piece(id, /*special=*/true);
    std::cout << id << " -> '" << piece << "'\n";
  }
  std::cerr << ids.size() << " tokens\n";
  std::cout.flush();
  SPECD_CHECK(std::cout.good(), "cannot write the output (disk full, or the reader went away?)");
  return 0;
}

int RunTokenizeBench(const TokenizeBenchOptions& o) {
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
  return 0;
}

}  // namespace specd::cli
