// The `specd` command line.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "flags/common_flags.h"

namespace {

// `specd train ...` runs the `specd-train` executable next to this one (LibTorch takes ~0.4 s to
// load, which every other command would pay if it were linked in here), and `specd bench ...`
// runs `specd-bench`: the shipped binary links no benchmark code.
int RunSubcommandExecutable(int argc, char** argv) {
  const std::string command = argv[1];
  if (command == "train") {
    return specd::flags::ExecSibling(
        "specd-train", std::vector<char*>(argv, argv + argc),
        "which is built only when LibTorch is installed (Debian: libtorch-dev; "
        "then rebuild)");
  }
  std::vector<char*> args(argv + 1, argv + argc);  // "bench" stands for the program's name
  return specd::flags::ExecSibling("specd-bench", args,
                                   "which is built with specd (cmake --build)");
}

// False (having said so, with the nearest real command) for a mistyped command; flags pass.
bool IsKnownCommand(CLI::App& app, const std::string& command) {
  if (command.empty() || command[0] == '-') return true;
  std::string nearest;
  size_t nearest_distance = 3;  // suggest only within two edits
  for (const CLI::App* sub : app.get_subcommands({})) {
    if (sub->get_name() == command) return true;
    const size_t d = specd::flags::EditDistance(command, sub->get_name());
    if (d < nearest_distance) nearest_distance = d, nearest = sub->get_name();
  }
  std::fprintf(stderr, "error: unknown command '%s'%s (see specd --help)\n", command.c_str(),
               nearest.empty() ? "" : (" (did you mean '" + nearest + "'?)").c_str());
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace specd;
  using namespace specd::cli;
  using namespace specd::flags;
  if (argc >= 2 && (std::string(argv[1]) == "train" || std::string(argv[1]) == "bench")) {
    return RunSubcommandExecutable(argc, argv);
  }
  CLI::App app{"specd: speculative decoding inference engine for GGUF Llama-family models"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.require_subcommand(1);
  app.set_version_flag("--version", "specd 0.1.0");
  // Each command registers its own flags (in its own file) and says how it runs.
  const std::vector<Command> commands = {
      AddGenerateCommand(app),   AddTokenizeCommand(app), AddSynthCommand(app), AddInfoCommand(app),
      AddPerplexityCommand(app), AddQuantizeCommand(app), AddServeCommand(app)};
  // Listed for --help; handled before parsing by RunSubcommandExecutable.
  app.add_subcommand("train", "train tokenizers and models (runs specd-train, built with LibTorch)")
      ->allow_extras();
  app.add_subcommand("bench",
                     "benchmarks: forward, matmul, attention, spec, easyspec, tokenize "
                     "(runs specd-bench)")
      ->allow_extras();

  if (argc == 1) {  // as llama.cpp's tools: the usage, not an error about a missing command
    std::fputs(app.help().c_str(), stdout);
    return 1;
  }
  if (argc >= 2 && !IsKnownCommand(app, argv[1])) return 1;
  if (const int code = ParseCommandLine(app, argc, argv, "--help"); code >= 0) return code;
  return RunReportingErrors([&]() -> int {
    for (const Command& command : commands) {
      if (*command.app) return command.run();
    }
    return 0;
  });
}
