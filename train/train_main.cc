// `specd-train`: the trainer's executable, started by `specd train ...` (argv[1] is "train").
#include <CLI/CLI.hpp>
#include <cstdio>
#include <new>

#include "base/error.h"
#include "train/train_command.h"

int main(int argc, char** argv) {
  CLI::App app{"specd train: tokenizers and llama models for specd (LibTorch)"};
  app.name("specd");
  app.require_subcommand(1);
  const std::function<int()> run = specd::train::AddTrainCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    return run();
  } catch (const specd::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
  }
  return 1;
}
