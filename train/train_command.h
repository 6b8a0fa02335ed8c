// `specd train ...`: registers the trainer's subcommands on the CLI (built with LibTorch only).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>

namespace specd::train {

// Adds `train tokenizer|model|draft` under `app`; returns the function that runs the chosen one
// after parsing (it returns the process exit code).
std::function<int()> AddTrainCommands(CLI::App& app);

}  // namespace specd::train
