// AVX2 (with FMA and F16C) attention of one (row, head), for CPUs without AVX-512. Compiled with
// those ISA flags and called only after a run-time check.
//
// The structure is avx512::AttendRow's in 8 lanes: scores 8 keys at a time (8 dot-product
// accumulators, then one transpose-and-add tree instead of 8 horizontal sums), a vectorized exp,
// and the weighted sum of values kept in registers. Key t always lands in lane t % 8 of the
// softmax sums and masked keys give exactly 0, so PAD (extra keys at -inf) equals SPLIT bit for
// bit; a token-tree row gathers its visible keys in order, so it gets exactly the result of a
// chain row that sees the same keys.
#include <immintrin.h>

#include <array>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/kernels.h"
#include "kernels/simd_avx2.h"

namespace specd::avx2 {
namespace {

// r[j] = sum of the 8 lanes of v[j], for 8 vectors at once, each summed in the same order:
// ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)).
inline __m256 SumEach8(const __m256 v[8]) {
  const __m256 u0 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  const __m256 u1 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

inline float HorizontalMax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

// Sum of 8 lanes in a fixed order.
inline float HorizontalSum(__m256 v) {
  const __m128 four = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 two = _mm_add_ps(four, _mm_movehl_ps(four, four));
  return _mm_cvtss_f32(_mm_add_ss(two, _mm_movehdup_ps(two)));
}

inline __m256 Load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 Load8(const uint16_t* x) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}

// Softmax weights of n scores in place, unnormalized: exp(score - max), lane-wise max and sum
// over key t -> lane t % 8. Returns 1 / sum.
inline float SoftmaxWeights(float* scores, int32_t n) {
  // Whole blocks of 8 with plain loads and stores (masked ones are slow on some CPUs: microcoded
  // on AMD Zen 2); the tail masked. A mask of all lanes changes nothing, so the bits are the same.
  const int32_t n_whole = n & ~7;
  const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 vmax = minus_inf;
  for (int32_t t = 0; t < n_whole; t += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(scores + t));
  const __m256i tail = LaneMask(n - n_whole);
  if (n_whole < n) {
    vmax =
        _mm256_max_ps(vmax, _mm256_blendv_ps(minus_inf, _mm256_maskload_ps(scores + n_whole, tail),
                                             _mm256_castsi256_ps(tail)));
  }
  const __m256 max = _mm256_set1_ps(HorizontalMax(vmax));
  __m256 vsum = _mm256_setzero_ps();
  for (int32_t t = 0; t < n_whole; t += 8) {
    const __m256 e = Exp8(_mm256_sub_ps(_mm256_loadu_ps(scores + t), max));
    _mm256_storeu_ps(scores + t, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  if (n_whole < n) {
    const __m256 e =
        _mm256_and_ps(Exp8(_mm256_sub_ps(_mm256_maskload_ps(scores + n_whole, tail), max)),
                      _mm256_castsi256_ps(tail));
    _mm256_maskstore_ps(scores + n_whole, tail, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  return 1.0f / HorizontalSum(vsum);
}

// out[0, 8 kVectors) = inv * sum_t w_t v_t over keys key_of(0..n) in key order, the sums held in
// registers (a template count: with a run-time one the compiler keeps them on the stack).
template <int kVectors, typename KvT, typename KeyOf>
void AccumulateValues(const KvT* v, int64_t kv_stride, int32_t n, KeyOf key_of,
                      const float* weights, float inv, float* out) {
  __m256 acc[kVectors];
  for (int j = 0; j < kVectors; ++j) acc[j] = _mm256_setzero_ps();
  for (int32_t t = 0; t < n; ++t) {
    const __m256 w = _mm256_set1_ps(weights[t]);
    const KvT* vt = v + static_cast<int64_t>(key_of(t)) * kv_stride;
    for (int j = 0; j < kVectors; ++j) acc[j] = _mm256_fmadd_ps(w, Load8(vt + 8 * j), acc[j]);
  }
  for (int j = 0; j < kVectors; ++j) {
    _mm256_storeu_ps(out + 8 * j, _mm256_mul_ps(acc[j], _mm256_set1_ps(inv)));
  }
}

// AccumulateValues<1..8> as a table indexed by the vector count - 1.
template <typename KvT, typename KeyOf, int... kIndex>
constexpr auto AccumulateTable(std::integer_sequence<int, kIndex...>) {
  return std::array{&AccumulateValues<kIndex + 1, KvT, KeyOf>...};
}

// acc[j] = the dot product of key key_of(t0 + j) with the query in 8 lanes (the first product,
// then multiply-adds in dimension order); keys past n_block give 0. With kQueryVectors > 0 the
// query (head_dim = 8 kQueryVectors) is held in registers, qv: reloading it for every key was
// ~20% of the routine on Zen 2; with 0 it is read from q for any head_dim.
template <int kQueryVectors, typename KvT, typename KeyOf>
inline void ScoreKeys(const float* q, const __m256* qv, int head_dim, const KvT* k,
                      int64_t kv_stride, int32_t t0, int32_t n_block, KeyOf key_of, __m256 acc[8]) {
  for (int j = 0; j < 8; ++j) {
    if (j >= n_block) {
      acc[j] = _mm256_setzero_ps();
      continue;
    }
    const KvT* kt = k + static_cast<int64_t>(key_of(t0 + j)) * kv_stride;
    if constexpr (kQueryVectors > 0) {
      __m256 sum = _mm256_mul_ps(qv[0], Load8(kt));
      for (int d = 1; d < kQueryVectors; ++d) sum = _mm256_fmadd_ps(qv[d], Load8(kt + 8 * d), sum);
      acc[j] = sum;
    } else {
      acc[j] = _mm256_mul_ps(_mm256_loadu_ps(q), Load8(kt));
      for (int d = 8; d < head_dim; d += 8) {
        acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), Load8(kt + d), acc[j]);
      }
    }
  }
}

// The computation over keys key_of(0), key_of(1), ...: scores of n_compute keys, of which the
// first n_visible count (the rest, PAD's, at -inf), softmax, weighted values.
template <typename KvT, typename KeyOf>
void AttendKeys(const float* q, const KvT* k, const KvT* v, int64_t kv_stride, int head_dim,
                float scale, int32_t n_visible, int32_t n_compute, KeyOf key_of, float* scores,
                float* out) {
  const __m256 scale_v = _mm256_set1_ps(scale);
  const __m256 minus_inf = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  __m256 qv[8];  // the query, when head_dim is 64 (most small models): held in registers
  if (head_dim == 64) {
    for (int d = 0; d < 8; ++d) qv[d] = _mm256_loadu_ps(q + 8 * d);
  }
  for (int32_t t0 = 0; t0 < n_compute; t0 += 8) {
    const int32_t n_block = n_compute - t0 < 8 ? n_compute - t0 : 8;
    __m256 acc[8];
    if (head_dim == 64) {
      ScoreKeys<8>(q, qv, head_dim, k, kv_stride, t0, n_block, key_of, acc);
    } else {
      ScoreKeys<0>(q, qv, head_dim, k, kv_stride, t0, n_block, key_of, acc);
    }
    const __m256 keep = _mm256_castsi256_ps(LaneMask(n_visible - t0));
    const __m256 block = _mm256_blendv_ps(minus_inf, _mm256_mul_ps(SumEach8(acc), scale_v), keep);
    if (n_block == 8) {
      _mm256_storeu_ps(scores + t0, block);
    } else {
      _mm256_maskstore_ps(scores + t0, LaneMask(n_block), block);
    }
  }
  const float inv = SoftmaxWeights(scores, n_compute);
  // Chunks of up to 64 dimensions, one accumulator function per width (8 to 64).
  static constexpr auto kAccumulate =
      AccumulateTable<KvT, KeyOf>(std::make_integer_sequence<int, 8>());
  for (int d0 = 0; d0 < head_dim; d0 += 64) {
    const int n_vectors = (head_dim - d0 < 64 ? head_dim - d0 : 64) / 8;
    kAccumulate[n_vectors - 1](v + d0, kv_stride, n_visible, key_of, scores, inv, out + d0);
  }
}

template <typename KvT>
void AttendRowT(const float* q, const KvT* k, const KvT* v, int64_t kv_stride, int head_dim,
                float scale, int32_t n_visible, int32_t n_compute, const uint8_t* mask,
                float* scores, float* out) {
  if (mask == nullptr) {
    AttendKeys(
        q, k, v, kv_stride, head_dim, scale, n_visible, n_compute, [](int32_t t) { return t; },
        scores, out);
    return;
  }
  const std::vector<int32_t> keys = VisibleKeys(mask, n_visible);
  const int32_t n = static_cast<int32_t>(keys.size());
  AttendKeys(
      q, k, v, kv_stride, head_dim, scale, n, n, [&](int32_t t) { return keys[t]; }, scores, out);
}

}  // namespace

void AttendRow(const float* q, const float* k, const float* v, int64_t kv_stride, int head_dim,
               float scale, int32_t n_visible, int32_t n_compute, const uint8_t* mask,
               float* scores, float* out) {
  AttendRowT(q, k, v, kv_stride, head_dim, scale, n_visible, n_compute, mask, scores, out);
}

void AttendRow(const float* q, const uint16_t* k, const uint16_t* v, int64_t kv_stride,
               int head_dim, float scale, int32_t n_visible, int32_t n_compute, const uint8_t* mask,
               float* scores, float* out) {
  AttendRowT(q, k, v, kv_stride, head_dim, scale, n_visible, n_compute, mask, scores, out);
}

}  // namespace specd::avx2
