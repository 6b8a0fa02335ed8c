// Facts about the machine and the day that every benchmark table names.
#pragma once

#include <string>

namespace specd::bench {

// Today's date (UTC), YYYY-MM-DD.
std::string Today();
// The CPU's model name from /proc/cpuinfo ("unknown" where there is none).
std::string CpuName();

}  // namespace specd::bench
