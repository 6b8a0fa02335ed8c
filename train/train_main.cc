// `specd-train`: the trainer's executable, started by `specd train ...` (argv[1] is "train").
#include <malloc.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>

#include "flags/common_flags.h"
#include "train/train_command.h"

namespace {

// A training step frees and reallocates the same large tensors (Qwen's logits for 8 x 256 tokens
// are 1.2 GB); glibc serves each from fresh mmap'd pages and returns them on free, so the kernel
// zeroes them again every step: 45% of a Qwen2.5-Coder SDSAT step's cycles on an AVX2 EPYC were
// clear_page, and it used 94% of one core's time of its two. A trainer owns its machine: keep
// freed memory in the heap for reuse instead (then 70% in sgemm, 37 s a step where it had taken
// over 53 s; its resident size settles at its peak, 21.6 GB where it swung up to ~15.5 GB).
void KeepFreedMemoryForReuse() {
  mallopt(M_MMAP_MAX, 0);
  mallopt(M_TRIM_THRESHOLD, INT_MAX);  // the most it takes (an int)
}

}  // namespace

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
  KeepFreedMemoryForReuse();
  return specd::flags::RunReportingErrors(run);
}
