// The cost-aware draft-length policy's memory on disk: what one `specd generate` learned about
// step costs and acceptance, for the next process with the same models, machine and settings
// (run once per prompt, each would otherwise explore draft lengths on its coldest steps).
//
// One JSON file per configuration in $SPECD_CACHE_DIR, else $XDG_CACHE_HOME/specd, else
// $HOME/.cache/specd: {"key": ..., "acceptance": a, "times": [[batch, K, ms, drafted, age], ...]}.
// The key names everything the costs depend on; a file whose key differs (a hash collision, a
// hand edit) is ignored, as is a malformed one: the memory is a hint, never an error.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "draft/cost_aware.h"
#include "model/lora.h"

namespace specd {

// What a configuration's memory depends on, as the command line spells it.
struct CostMemoryConfig {
  std::string target, draft;  // model paths (draft "" for none)
  std::vector<LoraSpec> lora;
  int threads = 0;
  std::string proposer;  // the proposer and its flags, spelled out
  std::string weights;   // --weights, --int8-kernel, --smooth-alpha
  std::string kv_type, attention;
  std::string sampling;  // greedy, coupled or rejection
  int draft_max = 0;
};

// The key of a configuration on this CPU: the model files by identity (path, size, time).
std::string CostMemoryKey(const CostMemoryConfig& config, const CpuFeatures& cpu);

// One configuration's memory file for a command's run: read at construction (with a line on
// stderr unless quiet, and a warning for an unusable file), written by Save. Off (memory()
// nullptr) when CostMemoryDir() is "".
class CostMemoryFile {
 public:
  CostMemoryFile(const CostMemoryConfig& config, const CpuFeatures& cpu, bool quiet);
  CostMemory* memory() { return path_.empty() ? nullptr : &memory_; }
  // Writes what memory() holds now; a failure is a warning.
  void Save() const;

 private:
  std::string key_, path_;
  CostMemory memory_;
};

// The memory directory from the environment; "" when none can be named.
std::string CostMemoryDir();

// The file of one configuration in `dir`.
std::string CostMemoryPath(const std::string& dir, const std::string& key);

// A file's identity for a key: its canonical path, size and modification time ("" if missing).
std::string FileIdentity(const std::string& path);

// The memory in `path` if it exists, parses and holds `key`; otherwise nullopt and `why` says
// why (empty when the file does not exist).
std::optional<CostMemory> ReadCostMemory(const std::string& path, const std::string& key,
                                         std::string* why);

// Writes the memory atomically (a temporary file renamed over the old one), creating the
// directory. False, with `why`, when it cannot.
bool WriteCostMemory(const std::string& path, const std::string& key, const CostMemory& memory,
                     std::string* why);

}  // namespace specd
