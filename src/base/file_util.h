#pragma once

#include <string>

namespace specd {

// Reads a whole file as bytes; throws Error naming the file if it cannot be read.
std::string ReadFileBytes(const std::string& path);

}  // namespace specd
