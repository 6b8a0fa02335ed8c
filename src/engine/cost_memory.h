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

#include "draft/cost_aware.h"

namespace specd {

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
