#include "tests/test_util.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "base/error.h"
#include "threading/thread_pool.h"

namespace specd::testing {

ModelPair::ModelPair(DType type, uint64_t draft_seed, const std::string& draft_shape)
    : pool(2), ctx{&pool, CpuFeatures::Detect()} {
  target = Model::Load(TinyModel("tiny", type, 7), &ctx);
  draft = Model::Load(TinyModel(draft_shape, type, draft_seed), &ctx);
}

std::vector<int32_t> Prompt(int n, int salt) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((i * 53 + salt * 7 + 5) % 384);
  return p;
}

CliRun RunSpecd(const std::string& args, const std::string& stdin_text) {
  const std::string input = TempDir() + "/stdin-" + std::to_string(::getpid()) + ".txt";
  std::ofstream(input) << stdin_text;
  const std::string cmd = std::string(SPECD_BINARY) + " " + args + " < " + input + " 2>&1";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) out.append(buf.data(), n);
  const int status = pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

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
