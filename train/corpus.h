// The training corpus: source files under a directory, split into training and held-out files
// by a fixed rule, with a fingerprint of the exact file list and contents so a run reproduces.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/file_util.h"

namespace specd::train {

struct Corpus {
  std::vector<std::string> train_files;
  std::vector<std::string> validation_files;
  uint64_t fingerprint = 0;  // FNV-1a over relative paths and contents, in order
  uint64_t total_bytes = 0;
};

// Files with one of `extensions` under `dir`, skipping folders named test, tests or idle_test
// and anything under __pycache__. Every `validation_every`-th file (sorted by path) is held out.
Corpus ListCorpus(const std::string& dir, const std::vector<std::string>& extensions,
                  int validation_every);

// Writes the file list and fingerprint (a manifest that lets a run be reproduced and checked).
void WriteManifest(const Corpus& corpus, const std::string& root, const std::string& path);

}  // namespace specd::train
