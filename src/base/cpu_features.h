#pragma once

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace specd {

// What the fast kernels may use on this CPU, detected once at start-up and passed explicitly.
// Our machines differ (docs/performance.md names each): some expose AVX-512 VNNI without BF16 (a
// KVM guest of a Sapphire Rapids class host seen 2026-11-23 hides both BF16 and AMX), so each is
// its own flag.
struct CpuFeatures {
  bool avx512 = false;       // F, BW, VL, DQ, VNNI, plus FMA and F16C: every int8 / f32 kernel
  bool avx512_bf16 = false;  // AVX512_BF16 as well: the bf16-weight kernel
  bool amx_int8 = false;     // AMX-TILE + AMX-INT8, enabled by the OS: the i8 tile kernel
  bool f16c = false;         // half conversions in hardware (the portable attention's f16 cache)
  bool avx2 = false;         // AVX2 with FMA and F16C: the packed int8 kernels without AVX-512

  static CpuFeatures Detect() {
    CpuFeatures f;
    __builtin_cpu_init();
    f.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") && HasF16c();
    f.avx512_bf16 = f.avx512 && HasAvx512Bf16();
    f.amx_int8 = HasAmxInt8();
    f.f16c = HasF16c();
    f.avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f.f16c;
    f.Cap(std::getenv("SPECD_ISA"));
    return f;
  }
  // SPECD_ISA=avx2 or scalar turns the faster kernels off (to measure or test the others on a
  // CPU that has more); avx512 or unset keeps what the CPU has. The compiler's per-ISA clones of
  // portable loops still follow the CPU.
  void Cap(const char* isa) {
    if (isa == nullptr || std::string(isa) == "avx512" || std::string(isa).empty()) return;
    SPECD_CHECK(std::string(isa) == "avx2" || std::string(isa) == "scalar", "SPECD_ISA: '", isa,
                "' is not avx512, avx2 or scalar");
    avx512 = avx512_bf16 = amx_int8 = false;
    if (std::string(isa) == "scalar") avx2 = false;
  }
  // CPUID leaf 1, ECX bit 29 (clang's __builtin_cpu_supports does not know "f16c").
  static bool HasF16c() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 29)) != 0;
  }
  // CPUID leaf 7 sub-leaf 1, EAX bit 5.
  static bool HasAvx512Bf16() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) != 0 && (eax & (1u << 5)) != 0;
  }
  // CPUID leaf 7 sub-leaf 0, EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), and the OS saving the
  // tile state (XCR0 bits 17 and 18), with the permission to use it granted.
  static bool HasAmxInt8() {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) == 0) return false;
    if ((edx & (3u << 24)) != (3u << 24)) return false;
    unsigned c1_eax = 0, c1_ebx = 0, c1_ecx = 0, c1_edx = 0;
    if (__get_cpuid(1, &c1_eax, &c1_ebx, &c1_ecx, &c1_edx) == 0 || !(c1_ecx & (1u << 27))) {
      return false;  // no OSXSAVE: xgetbv is not available
    }
    unsigned xcr0_lo = 0, xcr0_hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & (3u << 17)) != (3u << 17)) return false;
    // Linux hands out the tile data state only on request (arch_prctl ARCH_REQ_XCOMP_PERM for
    // XFEATURE_XTILEDATA); the permission then holds for every thread of the process.
    constexpr int kArchReqXcompPerm = 0x1023;
    constexpr int kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }
  // Whether the packed int8 kernels (AVX-512 VNNI or AVX2) run here: quantized weights are
  // re-laid for them at load.
  bool packed_kernels() const { return avx512 || avx2; }
  // "avx512-vnni", "avx512-vnni+bf16", with "+amx-int8" when present, "avx2" or "scalar".
  std::string Name() const {
    std::string name = avx512 ? "avx512-vnni" : avx2 ? "avx2" : "scalar";
    if (avx512_bf16) name += "+bf16";
    if (amx_int8) name += "+amx-int8";
    return name;
  }
};

}  // namespace specd
