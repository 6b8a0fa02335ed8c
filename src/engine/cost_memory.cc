#include "engine/cost_memory.h"

#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace specd {
namespace {

// FNV-1a: a stable name for a key (std::hash promises nothing across builds).
uint64_t Fnv1a(const std::string& text) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : text) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

std::string CostMemoryDir() {
  if (const char* dir = std::getenv("SPECD_CACHE_DIR"); dir != nullptr) return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/specd";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/specd";
  }
  return "";
}

std::string CostMemoryPath(const std::string& dir, const std::string& key) {
  char name[64];
  std::snprintf(name, sizeof(name), "draft-costs-%016llx.json",
                static_cast<unsigned long long>(Fnv1a(key)));
  return dir + "/" + name;
}

std::string FileIdentity(const std::string& path) {
  std::error_code error;
  const auto canonical = std::filesystem::canonical(path, error);
  if (error) return "";
  const auto size = std::filesystem::file_size(canonical, error);
  if (error) return "";
  const auto mtime = std::filesystem::last_write_time(canonical, error);
  if (error) return "";
  std::ostringstream out;
  out << canonical.string() << ":" << size << ":" << mtime.time_since_epoch().count();
  return out.str();
}

std::optional<CostMemory> ReadCostMemory(const std::string& path, const std::string& key,
                                         std::string* why) {
  why->clear();
  std::ifstream in(path);
  if (!in) return std::nullopt;
  try {
    const nlohmann::json j = nlohmann::json::parse(in);
    if (j.at("key").get<std::string>() != key) {
      *why = "it was written for another configuration";
      return std::nullopt;
    }
    CostMemory memory;
    memory.acceptance = j.at("acceptance").get<double>();
    for (const auto& t : j.at("times")) {
      memory.times.push_back({t.at(0).get<int>(), t.at(1).get<int>(), t.at(2).get<double>(),
                              t.at(3).get<double>(), t.at(4).get<int>()});
    }
    return memory;
  } catch (const std::exception& e) {
    *why = std::string("it is not a draft-cost memory (") + e.what() + ")";
    return std::nullopt;
  }
}

bool WriteCostMemory(const std::string& path, const std::string& key, const CostMemory& memory,
                     std::string* why) {
  nlohmann::json times = nlohmann::json::array();
  for (const CostMemory::StepTime& t : memory.times) {
    times.push_back({t.batch, t.k, t.ms, t.drafted, t.age});
  }
  const nlohmann::json j = {{"key", key}, {"acceptance", memory.acceptance}, {"times", times}};
  std::error_code error;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), error);
  // A name of this process's own, so that concurrent writers never share a temporary file.
  const std::string temporary = path + ".tmp" + std::to_string(::getpid());
  {
    std::ofstream out(temporary);
    out << j.dump() << "\n";
    if (!out.flush()) {
      *why = "cannot write " + temporary;
      std::filesystem::remove(temporary, error);
      return false;
    }
  }
  std::filesystem::rename(temporary, path, error);
  if (error) {
    *why = "cannot rename " + temporary + ": " + error.message();
    std::filesystem::remove(temporary, error);
    return false;
  }
  return true;
}

}  // namespace specd
