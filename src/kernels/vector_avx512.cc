// AVX-512 elementwise kernels: exp, SwiGLU, and attention of one (row, head). Compiled with the
// AVX-512 flags and only called after the run-time CPU check.
//
// The attention keeps PAD == SPLIT bit for bit: key t always lands in lane t % 16, masked keys
// give exactly 0 after exp, and adding +0 to a lane or to the output changes nothing.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "kernels/kernels.h"

namespace specd::avx512 {
namespace {

// exp(x) for 16 floats: x = n ln2 + r with |r| <= ln2/2, a degree-6 polynomial for exp(r), then
// scale by 2^n. Relative error ~2e-7. Inputs below -104 (including -inf) give exactly 0.
inline __m512 Exp16(__m512 x) {
  const __m512 kLog2e = _mm512_set1_ps(1.44269504088896341f);
  const __m512 kLn2Hi = _mm512_set1_ps(0.693359375f);
  const __m512 kLn2Lo = _mm512_set1_ps(-2.12194440e-4f);
  const __mmask16 underflow = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-104.0f), _CMP_LT_OQ);
  x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-104.0f)), _mm512_set1_ps(88.7f));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, kLog2e), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, kLn2Hi, x);
  r = _mm512_fnmadd_ps(n, kLn2Lo, r);
  __m512 p = _mm512_set1_ps(1.3981999507e-3f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), p, n);
}

// r[j] = sum of the 16 lanes of v[j], for 16 vectors at once (a transpose-and-add tree; every
// v[j] is summed in the same order whatever j is).
inline __m512 SumEach16(const __m512 v[16]) {
  __m512 s[8];
  for (int i = 0; i < 8; ++i) {
    s[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]),
                         _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
  }
  __m512 u[4];
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(s[2 * i]), b = _mm512_castps_pd(s[2 * i + 1]);
    u[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(a, b)),
                         _mm512_castpd_ps(_mm512_unpackhi_pd(a, b)));
  }
  const __m512 w01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[0], u[1], 0x88), _mm512_shuffle_f32x4(u[0], u[1], 0xDD));
  const __m512 w23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(u[2], u[3], 0x88), _mm512_shuffle_f32x4(u[2], u[3], 0xDD));
  return _mm512_add_ps(_mm512_shuffle_f32x4(w01, w23, 0x88), _mm512_shuffle_f32x4(w01, w23, 0xDD));
}

inline __mmask16 TailMask(int64_t remaining) {
  return remaining >= 16 ? static_cast<__mmask16>(0xFFFF)
                         : static_cast<__mmask16>((1u << remaining) - 1);
}

}  // namespace

void Exp(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    _mm512_mask_storeu_ps(y + i, m, Exp16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

void SwiGlu(const float* gate, const float* up, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 sig =
        _mm512_div_ps(one, _mm512_add_ps(one, Exp16(_mm512_sub_ps(_mm512_setzero_ps(), g))));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_mul_ps(g, sig), u));
  }
}

void GeGlu(const float* gate, const float* up, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 c1 = _mm512_set1_ps(-2.0f * 0.7978845608028654f);  // -2 sqrt(2/pi)
  const __m512 c3 = _mm512_set1_ps(0.044715f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 u = _mm512_maskz_loadu_ps(m, up + i);
    const __m512 inner = _mm512_add_ps(g, _mm512_mul_ps(c3, _mm512_mul_ps(g, _mm512_mul_ps(g, g))));
    const __m512 e = Exp16(_mm512_mul_ps(c1, inner));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), u));
  }
}

inline __m512 Load16(const float* p) { return _mm512_loadu_ps(p); }
inline __m512 Load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Softmax weights of n scores in place, unnormalized: exp(score - max), lane-wise max and sum
// over key t -> lane t % 16. Returns 1 / sum.
inline float SoftmaxWeights(float* scores, int32_t n) {
  __m512 vmax = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int32_t t = 0; t < n; t += 16) {
    const __mmask16 m = TailMask(n - t);
    vmax = _mm512_max_ps(vmax, _mm512_mask_loadu_ps(vmax, m, scores + t));
  }
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(vmax));
  __m512 vsum = _mm512_setzero_ps();
  for (int32_t t = 0; t < n; t += 16) {
    const __mmask16 m = TailMask(n - t);
    const __m512 e =
        _mm512_maskz_mov_ps(m, Exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, scores + t), max)));
    _mm512_mask_storeu_ps(scores + t, m, e);
    vsum = _mm512_add_ps(vsum, e);
  }
  return 1.0f / _mm512_reduce_add_ps(vsum);
}

// The computation over keys key_of(0), key_of(1), ...: key t sits in lane t % 16 of the softmax
// sums, so a token-tree row (its visible keys gathered in order) gets exactly the result of a
// chain row with the same visible keys.
template <typename KvT, typename KeyOf>
void AttendKeys(const float* q, const KvT* k, const KvT* v, int64_t kv_stride, int head_dim,
                float scale, int32_t n_visible, int32_t n_compute, KeyOf key_of, float* scores,
                float* out) {
  // Scores, 16 keys at a time: 16 dot-product accumulators, then one transpose-and-add tree
  // instead of 16 horizontal sums. Keys past n_compute in the last block are zeros (never
  // loaded); keys past n_visible are masked with -inf.
  const __m512 scale_v = _mm512_set1_ps(scale);
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int32_t t0 = 0; t0 < n_compute; t0 += 16) {
    const int32_t n_block = n_compute - t0 < 16 ? n_compute - t0 : 16;
    __m512 acc[16];
    for (int j = 0; j < 16; ++j) {
      if (j >= n_block) {
        acc[j] = _mm512_setzero_ps();
        continue;
      }
      const KvT* kt = k + static_cast<int64_t>(key_of(t0 + j)) * kv_stride;
      acc[j] = _mm512_mul_ps(_mm512_loadu_ps(q), Load16(kt));
      for (int d = 16; d < head_dim; d += 16) {
        acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), Load16(kt + d), acc[j]);
      }
    }
    const int32_t visible = n_visible - t0;
    const __mmask16 keep = TailMask(visible < 0 ? 0 : visible);
    const __m512 block =
        _mm512_mask_blend_ps(keep, minus_inf, _mm512_mul_ps(SumEach16(acc), scale_v));
    _mm512_mask_storeu_ps(scores + t0, TailMask(n_block), block);
  }
  const float inv = SoftmaxWeights(scores, n_compute);
  // Output: sum_t w_t v_t in key order, up to 4 vectors of head_dim held in registers. Masked
  // keys have weight exactly 0 and are skipped (adding +0 would change nothing).
  for (int d0 = 0; d0 < head_dim; d0 += 64) {
    const int width = head_dim - d0 < 64 ? head_dim - d0 : 64;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    const int nv = width / 16;
    for (int32_t t = 0; t < n_visible; ++t) {
      const __m512 w = _mm512_set1_ps(scores[t]);
      const KvT* vt = v + static_cast<int64_t>(key_of(t)) * kv_stride + d0;
      for (int j = 0; j < nv; ++j) acc[j] = _mm512_fmadd_ps(w, Load16(vt + 16 * j), acc[j]);
    }
    for (int j = 0; j < nv; ++j) {
      _mm512_storeu_ps(out + d0 + 16 * j, _mm512_mul_ps(acc[j], _mm512_set1_ps(inv)));
    }
  }
}

// The output of queries [i0, i0 + kQueries) over dimensions [d0, d0 + 16 kVectors): sum_t w_t v_t
// in key order, each query up to its own n_visible, then times 1 / sum. The counts are template
// parameters so that the accumulators stay in registers (with run-time counts the compiler kept
// them on the stack, a store per multiply-add).
template <typename KvT, int kQueries, int kVectors>
void AccumulateValues(const AttentionBlock& b, const KvT* v, int i0, int d0, const float* inv) {
  int32_t t_end = 0;
  for (int i = 0; i < kQueries; ++i) t_end = std::max(t_end, b.n_visible[i0 + i]);
  __m512 acc[kQueries][kVectors];
  for (int i = 0; i < kQueries; ++i) {
    for (int j = 0; j < kVectors; ++j) acc[i][j] = _mm512_setzero_ps();
  }
  for (int32_t t = 0; t < t_end; ++t) {
    const KvT* vt = v + static_cast<int64_t>(t) * b.kv_stride + d0;
    __m512 vv[kVectors];
    for (int j = 0; j < kVectors; ++j) vv[j] = Load16(vt + 16 * j);
    for (int i = 0; i < kQueries; ++i) {
      if (t >= b.n_visible[i0 + i]) continue;
      const __m512 w = _mm512_set1_ps(b.scores[(i0 + i) * b.n_compute + t]);
      for (int j = 0; j < kVectors; ++j) acc[i][j] = _mm512_fmadd_ps(w, vv[j], acc[i][j]);
    }
  }
  for (int i = 0; i < kQueries; ++i) {
    for (int j = 0; j < kVectors; ++j) {
      _mm512_storeu_ps(b.out[i0 + i] + d0 + 16 * j,
                       _mm512_mul_ps(acc[i][j], _mm512_set1_ps(inv[i0 + i])));
    }
  }
}

template <typename KvT>
using AccumulateFn = void (*)(const AttentionBlock&, const KvT*, int, int, const float*);
template <typename KvT, int kQueries>
constexpr std::array<AccumulateFn<KvT>, 4> kAccumulateRow = {
    AccumulateValues<KvT, kQueries, 1>, AccumulateValues<KvT, kQueries, 2>,
    AccumulateValues<KvT, kQueries, 3>, AccumulateValues<KvT, kQueries, 4>};
// [queries - 1][vectors - 1]
template <typename KvT>
constexpr std::array<std::array<AccumulateFn<KvT>, 4>, 6> kAccumulateValues = {
    kAccumulateRow<KvT, 1>, kAccumulateRow<KvT, 2>, kAccumulateRow<KvT, 3>,
    kAccumulateRow<KvT, 4>, kAccumulateRow<KvT, 5>, kAccumulateRow<KvT, 6>};

// acc[j] = the dot product of query q with key j of kbuf ([16, head_dim] f32), j < n_block (0
// past it), in AttendKeys' order. kQueryVectors > 0: head_dim = 16 kQueryVectors, the query held
// in registers (reloading it for every key made the loop load-bound).
template <int kQueryVectors>
inline void ScoreBlock(const float* q, const float* kbuf, int hd, int32_t n_block, __m512 acc[16]) {
  __m512 qv[kQueryVectors > 0 ? kQueryVectors : 1];
  for (int d = 0; d < kQueryVectors; ++d) qv[d] = _mm512_loadu_ps(q + 16 * d);
  for (int j = 0; j < 16; ++j) {
    if (j >= n_block) {
      acc[j] = _mm512_setzero_ps();
      continue;
    }
    const float* kt = kbuf + j * hd;
    if constexpr (kQueryVectors > 0) {
      acc[j] = _mm512_mul_ps(qv[0], _mm512_loadu_ps(kt));
      for (int d = 1; d < kQueryVectors; ++d) {
        acc[j] = _mm512_fmadd_ps(qv[d], _mm512_loadu_ps(kt + 16 * d), acc[j]);
      }
    } else {
      acc[j] = _mm512_mul_ps(_mm512_loadu_ps(q), _mm512_loadu_ps(kt));
      for (int d = 16; d < hd; d += 16) {
        acc[j] = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(kt + d), acc[j]);
      }
    }
  }
}

// Every query's scores of keys [t0, t0 + n_block), their f32 copies in kbuf: the block's dot
// products, scaled, the keys past a query's n_visible at -inf.
inline void ScoreQueries(const AttentionBlock& b, const float* kbuf, int32_t t0, int32_t n_block) {
  const __m512 scale_v = _mm512_set1_ps(b.scale);
  const __m512 minus_inf = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
  for (int i = 0; i < b.n_queries; ++i) {
    if (b.skip_masked && t0 >= b.n_visible[i]) continue;
    __m512 acc[16];
    if (b.head_dim == 64) {
      ScoreBlock<4>(b.q[i], kbuf, b.head_dim, n_block, acc);
    } else {
      ScoreBlock<0>(b.q[i], kbuf, b.head_dim, n_block, acc);
    }
    const int32_t visible = b.n_visible[i] - t0;
    const __mmask16 keep = TailMask(visible < 0 ? 0 : visible);
    const __m512 sums =
        _mm512_mask_blend_ps(keep, minus_inf, _mm512_mul_ps(SumEach16(acc), scale_v));
    _mm512_mask_storeu_ps(b.scores + i * b.n_compute + t0, TailMask(n_block), sums);
  }
}

// Several query rows against one run of keys (BASS's batched attention: a sequence's
// verification rows, or the heads sharing a KV head, read each key and value once). Per
// (query, key) the arithmetic is AttendKeys' exactly — the same dot-product order, the same
// transpose-and-add tree, softmax and key order in the output sums — only the loops are
// interchanged (keys outer), so every query's result equals AttendRow's bit for bit.
template <typename KvT>
void AttendBlockT(const AttentionBlock& b, const KvT* k, const KvT* v) {
  const int hd = b.head_dim;
  std::vector<float> kbuf(16 * static_cast<size_t>(hd));  // [16, head_dim] keys as f32
  for (int32_t t0 = 0; t0 < b.n_compute; t0 += 16) {
    const int32_t n_block = b.n_compute - t0 < 16 ? b.n_compute - t0 : 16;
    for (int j = 0; j < n_block; ++j) {
      const KvT* kt = k + static_cast<int64_t>(t0 + j) * b.kv_stride;
      for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(&kbuf[j * hd + d], Load16(kt + d));
    }
    ScoreQueries(b, kbuf.data(), t0, n_block);
  }
  // Softmax over the scored keys: the skipped ones would add exp(-inf) = 0 and not move the max.
  std::vector<float> inv(b.n_queries);
  for (int i = 0; i < b.n_queries; ++i) {
    const int32_t n = b.skip_masked ? std::min(b.n_visible[i], b.n_compute) : b.n_compute;
    inv[i] = SoftmaxWeights(b.scores + i * b.n_compute, n);
  }
  // Output, in tiles of up to 6 queries (4 accumulators each for 64 dimensions) that share each
  // loaded value vector; a query stops adding at its own n_visible, as in AttendKeys.
  constexpr int kTile = 6;
  for (int i0 = 0; i0 < b.n_queries; i0 += kTile) {
    const int nq = b.n_queries - i0 < kTile ? b.n_queries - i0 : kTile;
    for (int d0 = 0; d0 < hd; d0 += 64) {
      const int nv = (hd - d0 < 64 ? hd - d0 : 64) / 16;
      kAccumulateValues<KvT>[nq - 1][nv - 1](b, v, i0, d0, inv.data());
    }
  }
}

void AttendBlock(const AttentionBlock& block, const float* k, const float* v) {
  AttendBlockT(block, k, v);
}

void AttendBlock(const AttentionBlock& block, const uint16_t* k, const uint16_t* v) {
  AttendBlockT(block, k, v);
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

void StoreF16(const float* x, int64_t n, uint16_t* dst) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = TailMask(n - i);
    const __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm256_mask_storeu_epi16(dst + i, m, h);
  }
}

}  // namespace specd::avx512
