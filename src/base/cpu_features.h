#pragma once

#include <cpuid.h>

namespace specd {

// What the fast kernels may use on this CPU, detected once at start-up and passed explicitly.
struct CpuFeatures {
  bool avx512 = false;  // F, BW, VL, DQ, BF16, VNNI, plus FMA and F16C
  bool amx = false;     // AMX-BF16 / AMX-INT8 tiles (reported only; no AMX path yet)

  static CpuFeatures Detect() {
    CpuFeatures f;
    __builtin_cpu_init();
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("fma") && HasF16c();
    f.amx = false;
    return f;
  }
  // CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
  static bool HasF16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  }
  const char* Name() const { return avx512 ? "avx512" : "scalar"; }
};

}  // namespace specd
