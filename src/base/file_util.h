#pragma once

#include <string>

namespace specd {

// Reads a whole file as bytes; throws Error naming the file if it cannot be read (or is a
// directory).
std::string ReadFileBytes(const std::string& path);
// The same, with "-" meaning standard input (as llama.cpp users pipe prompts).
std::string ReadTextSource(const std::string& path);

}  // namespace specd
