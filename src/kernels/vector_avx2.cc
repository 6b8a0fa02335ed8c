// Element-wise AVX2 + FMA kernels (exp, gated activations), for CPUs without AVX-512: the
// formulas of vector_avx512.cc in 8 lanes, so both give the same bits. Compiled with those ISA
// flags and called only after a run-time check.
#include <immintrin.h>

#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

namespace specd::avx2 {

void Exp(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = LaneMask(n - i < 8 ? static_cast<int32_t>(n - i) : 8);
    _mm256_maskstore_ps(y + i, m, Exp8(_mm256_maskload_ps(x + i, m)));
  }
}

void SwiGlu(const float* gate, const float* up, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = LaneMask(n - i < 8 ? static_cast<int32_t>(n - i) : 8);
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 u = _mm256_maskload_ps(up + i, m);
    const __m256 sig =
        _mm256_div_ps(one, _mm256_add_ps(one, Exp8(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(_mm256_mul_ps(g, sig), u));
  }
}

void GeGlu(const float* gate, const float* up, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 c1 = _mm256_set1_ps(-2.0f * 0.7978845608028654f);  // -2 sqrt(2/pi)
  const __m256 c3 = _mm256_set1_ps(0.044715f);
  for (int64_t i = 0; i < n; i += 8) {
    const __m256i m = LaneMask(n - i < 8 ? static_cast<int32_t>(n - i) : 8);
    const __m256 g = _mm256_maskload_ps(gate + i, m);
    const __m256 u = _mm256_maskload_ps(up + i, m);
    const __m256 inner = _mm256_add_ps(g, _mm256_mul_ps(c3, _mm256_mul_ps(g, _mm256_mul_ps(g, g))));
    const __m256 e = Exp8(_mm256_mul_ps(c1, inner));
    _mm256_maskstore_ps(y + i, m, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), u));
  }
}

}  // namespace specd::avx2
