// `specd-train`: the trainer's executable, started by `specd train ...` (argv[1] is "train").
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/cli_common.h"
#include "train/train_command.h"

int main(int argc, char** argv) {
  CLI::App app{"specd train: tokenizers and llama models for specd (LibTorch)"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.name("specd");
  app.require_subcommand(1);
  const std::function<int()> run = specd::train::AddTrainCommands(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return specd::cli::RunReportingErrors(run);
}
