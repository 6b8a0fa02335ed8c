#include "base/file_util.h"

#include <fstream>
#include <sstream>

#include "base/error.h"

namespace specd {

std::string ReadFileBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPECD_CHECK(in.good(), "cannot read '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  SPECD_CHECK(!in.bad(), "error reading '", path, "'");
  return ss.str();
}

}  // namespace specd
