#pragma once

#include <string>

#include "model/synth.h"
#include "tensor/dtype.h"

namespace specd::testing {

// A fresh directory under the system temp dir, unique per process.
std::string TempDir();
// Path of a tiny synthetic model (written once per process and cached).
std::string TinyModel(const std::string& shape = "tiny", DType type = DType::kF32,
                      uint64_t seed = 7);

// The specd binary run with `args` (and `stdin_text` on its standard input): exit code and
// stdout + stderr together.
struct CliRun {
  int exit_code;
  std::string out;
};
CliRun RunSpecd(const std::string& args, const std::string& stdin_text = "");

}  // namespace specd::testing
