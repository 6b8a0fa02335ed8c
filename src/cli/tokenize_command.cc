#include <cstdio>
#include <iostream>

#include "base/error.h"
#include "base/file_util.h"
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

}  // namespace specd::cli
