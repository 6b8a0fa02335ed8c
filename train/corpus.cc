#include "train/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "base/error.h"

namespace specd::train {
namespace fs = std::filesystem;

Corpus ListCorpus(const std::string& dir, const std::vector<std::string>& extensions,
                  int validation_every) {
  SPECD_CHECK(fs::is_directory(dir), "corpus '", dir, "' is not a directory");
  std::vector<std::string> files;
  for (auto it =
           fs::recursive_directory_iterator(dir, fs::directory_options::skip_permission_denied);
       it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      if (name == "test" || name == "tests" || name == "idle_test" || name == "__pycache__") {
        it.disable_recursion_pending();
      }
      continue;
    }
    if (!it->is_regular_file()) continue;
    const std::string ext = it->path().extension().string();
    if (std::find(extensions.begin(), extensions.end(), ext) != extensions.end()) {
      files.push_back(it->path().string());
    }
  }
  std::sort(files.begin(), files.end());
  SPECD_CHECK(!files.empty(), "corpus '", dir, "' has no source files");
  Corpus c;
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](const std::string& s) {
    for (unsigned char ch : s) h = (h ^ ch) * 0x100000001b3ull;
    h = (h ^ 0xff) * 0x100000001b3ull;
  };
  for (size_t i = 0; i < files.size(); ++i) {
    const std::string content = ReadFileBytes(files[i]);
    mix(fs::relative(files[i], dir).string());
    mix(content);
    c.total_bytes += content.size();
    const bool held_out = validation_every > 0 && i % validation_every == validation_every - 1;
    (held_out ? c.validation_files : c.train_files).push_back(files[i]);
  }
  c.fingerprint = h;
  return c;
}

void WriteManifest(const Corpus& corpus, const std::string& root, const std::string& path) {
  std::ofstream out(path);
  char fp[32];
  std::snprintf(fp, sizeof(fp), "%016llx", static_cast<unsigned long long>(corpus.fingerprint));
  out << "# corpus " << root << ": " << corpus.train_files.size() << " training files, "
      << corpus.validation_files.size() << " held out, " << corpus.total_bytes
      << " bytes, fingerprint " << fp << "\n";
  for (const auto& f : corpus.train_files)
    out << "train " << fs::relative(f, root).string() << "\n";
  for (const auto& f : corpus.validation_files) {
    out << "validation " << fs::relative(f, root).string() << "\n";
  }
}

}  // namespace specd::train
