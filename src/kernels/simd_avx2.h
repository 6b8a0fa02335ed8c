// Small AVX2 + FMA pieces shared by the AVX2 kernels. Include only from files compiled
// with those ISA flags (and call only after a run-time check).
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace specd::avx2 {

// exp(x) for 8 floats: avx512::Exp16's reduction and polynomial (x = n ln2 + r, |r| <= ln2/2,
// degree 6), with 2^n applied as two normal factors 2^floor(n/2) 2^(n - floor(n/2)) so that
// results down to the subnormals round once. Inputs below -104 (including -inf) give exactly 0.
inline __m256 Exp8(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-104.0f), _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-104.0f)), _mm256_set1_ps(88.7f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.3981999507e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i ni = _mm256_cvtps_epi32(n);  // [-150, 128]
  const __m256i half = _mm256_srai_epi32(ni, 1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 scale0 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(half, bias), 23));
  const __m256 scale1 = _mm256_castsi256_ps(
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_sub_epi32(ni, half), bias), 23));
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, scale0), scale1);
  return _mm256_andnot_ps(underflow, e);
}

// All bits of lanes [0, n) set (n < 0: none; n > 8: all), for masked loads, stores and blends.
inline __m256i LaneMask(int32_t n) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

}  // namespace specd::avx2
