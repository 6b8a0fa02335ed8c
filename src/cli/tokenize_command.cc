#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>

#include "base/error.h"
#include "base/file_util.h"
#include "cli/commands.h"
#include "flags/common_flags.h"
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

Command AddTokenizeCommand(CLI::App& app) {
  auto options = std::make_shared<TokenizeOptions>();
  TokenizeOptions* o = options.get();
  CLI::App* t = app.add_subcommand("tokenize", "print the tokens of a text");
  t->add_option("-m,--model", o->model,
                "model or vocabulary (GGUF; default: generate's default model)");
  t->add_option("-p,--prompt", o->prompt, "text");
  t->add_option("-f,--file", o->prompt_file, "file holding the text");
  t->add_flag("--ids-only", o->ids_only, "print only the ids, as a list");
  t->add_flag("--special", o->special, "parse special tokens written in the text");
  t->add_flag("--no-bos", o->no_bos, "do not add BOS / EOS as the model asks");
  return {t, [t, options] {
            if (options->model.empty()) options->model = flags::DefaultTargetModel();
            SPECD_CHECK(!options->model.empty(),
                        "no model given (-m MODEL.gguf) and no default model");
            SPECD_CHECK(t->count("--prompt") == 0 || !options->prompt.empty(),
                        "the text (-p) is empty");
            return RunTokenize(*options);
          }};
}

}  // namespace specd::cli
