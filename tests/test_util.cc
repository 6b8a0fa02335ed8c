#include "tests/test_util.h"

#include <unistd.h>

#include <filesystem>

#include "base/error.h"
#include "threading/thread_pool.h"

namespace specd::testing {

std::string TempDir() {
  static const std::string dir = [] {
    const auto path =
        std::filesystem::temp_directory_path() / ("specd-test-" + std::to_string(::getpid()));
    std::filesystem::create_directories(path);
    return path.string();
  }();
  return dir;
}

std::string TinyModel(const std::string& shape, DType type, uint64_t seed) {
  const std::string path = StrCat(TempDir(), "/", shape, "-", DTypeName(type), "-", seed, ".gguf");
  if (!std::filesystem::exists(path)) {
    ThreadPool pool(1);
    WriteSyntheticModel(ShapeByName(shape), type, seed, path, &pool);
  }
  return path;
}

}  // namespace specd::testing
