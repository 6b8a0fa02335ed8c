#pragma once

// SPECD_VECTOR_CLONES before a function that the compiler vectorizes: one clone per ISA, chosen
// at load by an ifunc resolver, so that portable loops use AVX-512 or AVX2 + FMA where the CPU
// has them (our machines include an AMD EPYC with AVX2 but no AVX-512). ThreadSanitizer's runtime
// is not up when resolvers run (they crash), so its build uses the default clone only.
#ifdef SPECD_NO_TARGET_CLONES
#define SPECD_VECTOR_CLONES
#else
#define SPECD_VECTOR_CLONES __attribute__((target_clones("avx512f", "arch=x86-64-v3", "default")))
#endif
