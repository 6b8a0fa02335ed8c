#include "bench/machine.h"

#include <ctime>

#include "base/cpu_features.h"

namespace specd::bench {

std::string Today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

std::string CpuName() { return CpuModelName(); }

}  // namespace specd::bench
