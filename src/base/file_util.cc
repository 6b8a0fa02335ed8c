#include "base/file_util.h"

#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "base/error.h"

namespace specd {

std::string ReadFileBytes(const std::string& path) {
  std::error_code error;
  SPECD_CHECK(!std::filesystem::is_directory(path, error), "'", path,
              "' is a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  SPECD_CHECK(in.good(), "cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  SPECD_CHECK(!in.bad(), "error reading '", path, "'");
  return ss.str();
}

std::string ReadTextSource(const std::string& path) {
  if (path != "-") return ReadFileBytes(path);
  std::stringstream ss;
  ss << std::cin.rdbuf();
  SPECD_CHECK(!std::cin.bad(), "error reading standard input");
  return ss.str();
}

}  // namespace specd
