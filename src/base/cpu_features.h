#pragma once

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
               __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    f.amx = false;
    return f;
  }
  const char* Name() const { return avx512 ? "avx512" : "scalar"; }
};

}  // namespace specd
