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

}  // namespace specd::testing
