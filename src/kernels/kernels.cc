#include "kernels/kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/timer.h"
#include "base/vector_clones.h"
#include "kernels/onednn_int8.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

// Portable fallback for CPUs without AVX-512: dequantize each weight row once, then dot it with
// every activation row. Per-row results are independent of m, like the fast path.
//
// Dot products summed in one fixed order (16 partial sums, then a fixed tree), which the
// compiler vectorizes in every clone: a result does not depend on the row count or the thread
// split (the clone, fixed per machine, may contract into FMA).
constexpr int kDotLanes = 16;

// The fixed tree that ends every generic dot product.
inline float SumPartials(float* partial) {
  for (int width = kDotLanes / 2; width > 0; width /= 2) {
    for (int j = 0; j < width; ++j) partial[j] += partial[j + width];
  }
  return partial[0];
}

SPECD_VECTOR_CLONES float DotGeneric(const float* a, const float* b, int64_t n) {
  float partial[kDotLanes] = {};
  int64_t k = 0;
  for (; k + kDotLanes <= n; k += kDotLanes) {
    for (int j = 0; j < kDotLanes; ++j) partial[j] += a[k + j] * b[k + j];
  }
  for (; k < n; ++k) partial[k % kDotLanes] += a[k] * b[k];
  return SumPartials(partial);
}

// Four rows of a (a_stride apart) dotted with b, each summed exactly as DotGeneric sums it, so
// that a row's result does not depend on the group it was computed in; b is read once for four.
SPECD_VECTOR_CLONES void Dot4Generic(const float* a, int64_t a_stride, const float* b, int64_t n,
                                     float* out, int64_t out_stride) {
  float partial[4][kDotLanes] = {};
  int64_t k = 0;
  for (; k + kDotLanes <= n; k += kDotLanes) {
    for (int r = 0; r < 4; ++r) {
      for (int j = 0; j < kDotLanes; ++j) partial[r][j] += a[r * a_stride + k + j] * b[k + j];
    }
  }
  for (; k < n; ++k) {
    for (int r = 0; r < 4; ++r) partial[r][k % kDotLanes] += a[r * a_stride + k] * b[k];
  }
  for (int r = 0; r < 4; ++r) out[r * out_stride] = SumPartials(partial[r]);
}

void MatmulGeneric(ThreadPool* pool, const float* x, int64_t m, const WeightView& w, float* y) {
  pool->ParallelFor(
      w.rows, 16,
      [&](int64_t begin, int64_t end) {
        std::vector<float> row(w.cols);
        for (int64_t n = begin; n < end; ++n) {
          DequantizeRow(w.type, w.Row(n), row.data(), w.cols);
          int64_t i = 0;
          for (; i + 4 <= m; i += 4) {
            Dot4Generic(x + i * w.cols, w.cols, row.data(), w.cols, y + i * w.rows + n, w.rows);
          }
          for (; i < m; ++i) y[i * w.rows + n] = DotGeneric(x + i * w.cols, row.data(), w.cols);
        }
      },
      MinItemsPerThread(m * w.cols));
}

// i8 weights without AVX-512: the scalar definition, split over weight rows (a row's result is
// the same whatever the split).
void MatmulI8Generic(ThreadPool* pool, const float* x, int64_t m, const WeightView& w, float* y) {
  pool->ParallelFor(
      w.rows, 16,
      [&](int64_t begin, int64_t end) {
        WeightView slice = w;
        slice.data = w.Row(begin);
        slice.rows = end - begin;
        slice.row_scales = w.row_scales + begin;
        std::vector<float> out(m * slice.rows);  // [m, end - begin]
        reference::MatmulI8(x, m, slice, out.data());
        for (int64_t i = 0; i < m; ++i) {
          std::copy(out.begin() + i * slice.rows, out.begin() + (i + 1) * slice.rows,
                    y + i * w.rows + begin);
        }
      },
      MinItemsPerThread(m * w.cols));
}

}  // namespace

std::string Int8KernelName(const KernelContext& ctx) {
  const std::string own = ctx.cpu.avx512 ? "specd VNNI" : ctx.cpu.avx2 ? "specd AVX2" : "portable";
  switch (ctx.int8_backend) {
    case Int8Backend::kSpecd:
      return own;
    case Int8Backend::kAmx:
      return "specd AMX";
    case Int8Backend::kOneDnn:
      return ctx.cpu.amx_int8 ? "oneDNN (AMX)" : "oneDNN (VNNI)";
    case Int8Backend::kAuto:
      return ctx.cpu.amx_int8
                 ? "specd AMX from " + std::to_string(ctx.amx_min_rows) + " rows (i8) / " +
                       std::to_string(ctx.amx_packed_min_rows) + " rows (GGUF types" +
                       (ctx.packed_chooser != nullptr ? ", where measured faster than " + own + ")"
                                                      : ")") +
                       ", " + own + " below"
                 : own + " (no AMX here)";
  }
  return own;
}

bool RunsOnAmx(const KernelContext& ctx, int64_t m) {
  if (!ctx.cpu.amx_int8 || !ctx.cpu.avx512) return false;
  return ctx.int8_backend == Int8Backend::kAmx ||
         (ctx.int8_backend == Int8Backend::kAuto && m >= ctx.amx_min_rows);
}

bool PackedRunsOnAmx(const KernelContext& ctx, int64_t m) {
  if (!ctx.cpu.amx_int8 || !ctx.cpu.avx512) return false;
  return ctx.int8_backend == Int8Backend::kAmx ||
         (ctx.int8_backend == Int8Backend::kAuto && m >= ctx.amx_packed_min_rows);
}

namespace {

SPECD_VECTOR_CLONES void HalfsToFloats(const uint16_t* h, float* f, int n) {
  for (int i = 0; i < n; ++i) f[i] = Fp16ToFp32(h[i]);
}

// The same with F16C's vcvtph2ps (exact, like Fp16ToFp32; only NaNs come out quieted).
__attribute__((target("avx,f16c"))) void HalfsToFloatsF16c(const uint16_t* h, float* f, int n) {
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(f + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
  }
  for (; i < n; ++i) f[i] = Fp16ToFp32(h[i]);
}

// f32 -> f16 with F16C's vcvtps2ph, rounding to nearest even as Fp32ToFp16 does (the tail too).
__attribute__((target("avx,f16c"))) void FloatsToHalfsF16c(const float* f, uint16_t* h, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(f + i), _MM_FROUND_TO_NEAREST_INT));
  }
  if (i < n) reference::StoreKvRow(f + i, n - i, DType::kF16, h + i);
}

// y += a x.
SPECD_VECTOR_CLONES void AddScaled(float a, const float* x, float* y, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

// Row t of a KV cache as floats: f32 rows in place, f16 rows converted into `buffer`.
template <bool kF16c>
const float* KvRow(const float* rows, int64_t offset, int, float*) {
  return rows + offset;
}
template <bool kF16c>
const float* KvRow(const uint16_t* rows, int64_t offset, int n, float* buffer) {
  if constexpr (kF16c) {
    HalfsToFloatsF16c(rows + offset, buffer, n);
  } else {
    HalfsToFloats(rows + offset, buffer, n);
  }
  return buffer;
}

// Portable attention of one (row, head); same contract as avx512::AttendRow. kF16c: the CPU
// converts halves (f16 caches).
template <typename KvT, bool kF16c>
void AttendRowGeneric(const float* q, const KvT* k, const KvT* v, int64_t kv_stride, int head_dim,
                      float scale, int32_t n_visible, int32_t n_compute, const uint8_t* mask,
                      float* scores, float* out) {
  constexpr int kMaxHeadDim = 512;
  SPECD_CHECK(head_dim <= kMaxHeadDim, "head_dim ", head_dim, " is over ", kMaxHeadDim);
  float buffer[kMaxHeadDim];
  float max = -std::numeric_limits<float>::infinity();
  for (int32_t t = 0; t < n_compute; ++t) {
    const float dot = DotGeneric(q, KvRow<kF16c>(k, t * kv_stride, head_dim, buffer), head_dim);
    const bool visible = t < n_visible && (mask == nullptr || mask[t] != 0);
    scores[t] = visible ? dot * scale : -std::numeric_limits<float>::infinity();
    max = std::max(max, scores[t]);
  }
  float sum = 0.0f;
  for (int32_t t = 0; t < n_compute; ++t) sum += (scores[t] = std::exp(scores[t] - max));
  std::fill(out, out + head_dim, 0.0f);
  for (int32_t t = 0; t < n_visible; ++t) {
    if (scores[t] == 0.0f) continue;  // masked (or underflowed): adds exactly nothing
    AddScaled(scores[t], KvRow<kF16c>(v, t * kv_stride, head_dim, buffer), out, head_dim);
  }
  const float inv = 1.0f / sum;
  for (int d = 0; d < head_dim; ++d) out[d] *= inv;
}

}  // namespace

namespace {

// Packed GGUF-type weights on the kernel ctx.packed_chooser picks for their shape and m, AMX or
// VNNI (each call timed for it while it measures).
bool ChosenPackedMatmul(const KernelContext& ctx, const float* x, int64_t m, const WeightView& w,
                        float* y, MatmulScratch* scratch) {
  const PackedKernelChooser::Key key{static_cast<int>(w.type), w.rows, w.cols,
                                     PackedKernelChooser::RowBucket(m)};
  const bool amx = ctx.packed_chooser->UseAmx(key);
  Timer timer;
  if (amx) {
    amx::MatmulPacked(ctx.pool, x, m, *w.packed, y, scratch);
  } else {
    avx512::MatmulPacked(ctx.pool, x, m, *w.packed, y, scratch);
  }
  ctx.packed_chooser->Record(key, amx, timer.ElapsedMs());
  return true;
}

// The AMX tile kernels, where they run for these weights and rows; false: another path does.
bool MatmulOnAmx(const KernelContext& ctx, const float* x, int64_t m, const WeightView& w, float* y,
                 MatmulScratch* scratch) {
  if (w.packed == nullptr) return false;
  if (w.packed->row_scales) {  // i8: applies SmoothQuant's scales itself
    if (w.type != DType::kI8 || !RunsOnAmx(ctx, m)) return false;
    amx::MatmulPackedI8(ctx.pool, x, m, *w.packed, w.col_scales, y, scratch);
  } else {
    if (!PackedRunsOnAmx(ctx, m)) return false;
    if (ctx.packed_chooser != nullptr && ctx.int8_backend == Int8Backend::kAuto) {
      return ChosenPackedMatmul(ctx, x, m, w, y, scratch);
    }
    amx::MatmulPacked(ctx.pool, x, m, *w.packed, y, scratch);
  }
  return true;
}

}  // namespace

void Matmul(const KernelContext& ctx, const float* x, int64_t m, const WeightView& w, float* y,
            MatmulScratch* scratch) {
  if (m <= 0 || w.rows <= 0) return;
  if (MatmulOnAmx(ctx, x, m, w, y, scratch)) return;
  const bool packed_i8 = w.type == DType::kI8 && w.packed != nullptr && w.packed->row_scales;
  if (w.type == DType::kI8 && w.col_scales != nullptr) {
    // SmoothQuant: scale the activations here, once, for every path below.
    scratch->smoothed.ResizeForOverwrite(m * w.cols);  // [m, cols]
    float* smoothed = scratch->smoothed.data();
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < w.cols; ++j) {
        smoothed[i * w.cols + j] = x[i * w.cols + j] * w.col_scales[j];
      }
    }
    WeightView plain = w;
    plain.col_scales = nullptr;
    return Matmul(ctx, smoothed, m, plain, y, scratch);
  }
  if (packed_i8 && w.packed->onednn != nullptr && ctx.int8_backend == Int8Backend::kOneDnn) {
    OneDnnMatmulI8(ctx, x, m, *w.packed, y, scratch);
  } else if (ctx.cpu.avx512 && w.packed != nullptr) {
    avx512::MatmulPacked(ctx.pool, x, m, *w.packed, y, scratch);
  } else if (ctx.cpu.avx2 && w.packed != nullptr) {
    avx2::MatmulPacked(ctx.pool, x, m, *w.packed, y, scratch);
  } else if (w.type == DType::kI8) {
    MatmulI8Generic(ctx.pool, x, m, w, y);
  } else if (ctx.cpu.avx512 && w.cols % 32 == 0 &&
             (w.type != DType::kBF16 || ctx.cpu.avx512_bf16) &&
             (w.type == DType::kF32 || w.type == DType::kF16 || w.type == DType::kBF16 ||
              w.type == DType::kQ8_0 || w.type == DType::kQ4_0)) {
    avx512::Matmul(ctx.pool, x, m, w, y, scratch);
  } else {
    MatmulGeneric(ctx.pool, x, m, w, y);
  }
}

void AddLowRankProduct(const KernelContext& ctx, const float* t, int64_t m, int64_t rank,
                       DType b_type, const void* b, int64_t n, float* y, int64_t y_stride) {
  SPECD_CHECK(b_type == DType::kF32 || b_type == DType::kF16,
              "low-rank product: B must be f32 or f16, not ", DTypeName(b_type));
  constexpr int64_t kBlock = kLowRankBlock;
  float converted[kBlock];  // one row of an f16 block as floats
  for (int64_t o0 = 0; o0 < n; o0 += kBlock) {
    const int len = static_cast<int>(std::min(kBlock, n - o0));
    for (int64_t k = 0; k < rank; ++k) {
      const int64_t at = o0 * rank + k * kBlock;  // row k of this block
      const float* row = converted;
      if (b_type == DType::kF32) {
        row = static_cast<const float*>(b) + at;
      } else if (ctx.cpu.f16c) {
        HalfsToFloatsF16c(static_cast<const uint16_t*>(b) + at, converted, len);
      } else {
        HalfsToFloats(static_cast<const uint16_t*>(b) + at, converted, len);
      }
      for (int64_t i = 0; i < m; ++i) AddScaled(t[i * rank + k], row, y + i * y_stride + o0, len);
    }
  }
}

void RmsNorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    // Eight partial sums vectorize without -ffast-math and keep the order fixed.
    float partial[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) partial[j] += xr[i + j] * xr[i + j];
    }
    for (; i < n; ++i) partial[0] += xr[i] * xr[i];
    float sum_sq = 0.0f;
    for (float p : partial) sum_sq += p;
    const float inv = 1.0f / std::sqrt(sum_sq / static_cast<float>(n) + eps);
    for (int64_t k = 0; k < n; ++k) yr[k] = xr[k] * inv * weight[k];
  }
}

void RopeAngles(const RopeConfig& c, int64_t pos, float* cos_out, float* sin_out) {
  const int half = c.rotary_dim / 2;
  for (int i = 0; i < half; ++i) {
    double theta = pos * std::pow(static_cast<double>(c.freq_base), -2.0 * i / c.rotary_dim);
    if (!c.freq_factors.empty()) theta /= c.freq_factors[i];
    cos_out[i] = static_cast<float>(std::cos(theta)) * c.attn_factor;
    sin_out[i] = static_cast<float>(std::sin(theta)) * c.attn_factor;
  }
}

void Rope(const RopeConfig& c, const float* cs, const float* sn, float* x, int n_heads) {
  const int half = c.rotary_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + static_cast<int64_t>(h) * c.head_dim;
    for (int i = 0; i < half; ++i) {
      const int a = c.neox ? i : 2 * i;
      const int b = c.neox ? i + half : 2 * i + 1;
      const float x0 = head[a], x1 = head[b];
      head[a] = x0 * cs[i] - x1 * sn[i];
      head[b] = x0 * sn[i] + x1 * cs[i];
    }
  }
}

void Softmax(float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  float sum = 0.0f;
  for (int64_t i = 0; i < n; ++i) sum += (x[i] = std::exp(x[i] - max));
  const float inv = 1.0f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void SwiGlu(const KernelContext& ctx, const float* gate, const float* up, float* y, int64_t n) {
  if (ctx.cpu.avx512) return avx512::SwiGlu(gate, up, y, n);
  if (ctx.cpu.avx2) return avx2::SwiGlu(gate, up, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void GeGlu(const KernelContext& ctx, const float* gate, const float* up, float* y, int64_t n) {
  if (ctx.cpu.avx512) return avx512::GeGlu(gate, up, y, n);
  if (ctx.cpu.avx2) return avx2::GeGlu(gate, up, y, n);
  reference::GeGlu(gate, up, y, n);
}

namespace {

// BASS-PAD (pad_to > 0: every sequence scores pad_to keys) or BASS-SPLIT (pad_to == 0: its
// own), on the AVX-512 block kernel. Work items are (sequence, KV head) — all of the sequence's
// rows and the heads sharing that KV head read each key once — or, when that leaves a thread
// idle, (sequence, head). Either way each (row, head) gets AttendRow's bits.
template <typename KvT>
void AttendSequenceBlocks(const KernelContext& ctx, const AttentionRows& rows, int32_t pad_to) {
  const int group = rows.n_head / rows.n_head_kv;
  const int64_t q_stride = static_cast<int64_t>(rows.n_head) * rows.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(rows.n_head_kv) * rows.head_dim;
  const int64_t n_seqs = static_cast<int64_t>(rows.seq_row_begin.size()) - 1;
  const int heads_per_item = n_seqs * rows.n_head_kv >= 2 * ctx.pool->size() ? group : 1;
  const int64_t items_per_seq = rows.n_head / heads_per_item;
  int64_t n_scored = 0;
  for (int64_t r = 0; r < rows.n_rows; ++r) n_scored += pad_to > 0 ? pad_to : rows.n_visible[r];
  const int64_t macs_per_item =
      2 * n_scored * rows.head_dim * heads_per_item / std::max<int64_t>(n_seqs, 1);
  ctx.pool->ParallelFor(
      n_seqs * items_per_seq, 1,
      [&](int64_t begin, int64_t end) {
        std::vector<const float*> q;
        std::vector<float*> out;
        std::vector<int32_t> visible;
        std::vector<float> scores;
        for (int64_t item = begin; item < end; ++item) {
          const int64_t s = item / items_per_seq;
          const int h0 = static_cast<int>(item % items_per_seq) * heads_per_item;
          const int64_t r0 = rows.seq_row_begin[s], r1 = rows.seq_row_begin[s + 1];
          q.clear();
          out.clear();
          visible.clear();
          int32_t n_compute = pad_to;
          for (int64_t r = r0; r < r1; ++r) {
            for (int h = h0; h < h0 + heads_per_item; ++h) {
              q.push_back(rows.q + r * q_stride + static_cast<int64_t>(h) * rows.head_dim);
              out.push_back(rows.out + r * q_stride + static_cast<int64_t>(h) * rows.head_dim);
              visible.push_back(rows.n_visible[r]);
            }
            if (pad_to == 0) n_compute = std::max(n_compute, rows.n_visible[r]);
          }
          if (q.empty()) continue;
          scores.resize(q.size() * static_cast<size_t>(n_compute));
          avx512::AttentionBlock block;
          block.n_queries = static_cast<int>(q.size());
          block.q = q.data();
          block.out = out.data();
          block.n_visible = visible.data();
          block.n_compute = n_compute;
          block.kv_stride = kv_stride;
          block.head_dim = rows.head_dim;
          block.scale = rows.scale;
          block.scores = scores.data();
          block.skip_masked = pad_to == 0;
          const int64_t kv_off = static_cast<int64_t>(h0 / group) * rows.head_dim;
          avx512::AttendBlock(block, static_cast<const KvT*>(rows.k[r0]) + kv_off,
                              static_cast<const KvT*>(rows.v[r0]) + kv_off);
        }
      },
      MinItemsPerThread(macs_per_item));
}

template <typename KvT>
void AttentionT(const KernelContext& ctx, const AttentionRows& rows, AttentionMode mode) {
  const int group = rows.n_head / rows.n_head_kv;
  const int64_t q_stride = static_cast<int64_t>(rows.n_head) * rows.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(rows.n_head_kv) * rows.head_dim;
  const bool fast = ctx.cpu.avx512 && rows.head_dim % 16 == 0;
  using AttendFn = void (*)(const float*, const KvT*, const KvT*, int64_t, int, float, int32_t,
                            int32_t, const uint8_t*, float*, float*);
  const bool avx2 = ctx.cpu.avx2 && rows.head_dim % 8 == 0;
  const AttendFn attend_row = fast           ? static_cast<AttendFn>(avx512::AttendRow)
                              : avx2         ? static_cast<AttendFn>(avx2::AttendRow)
                              : ctx.cpu.f16c ? static_cast<AttendFn>(AttendRowGeneric<KvT, true>)
                                             : static_cast<AttendFn>(AttendRowGeneric<KvT, false>);
  int32_t n_padded = 0;
  for (int64_t r = 0; r < rows.n_rows; ++r) n_padded = std::max(n_padded, rows.n_visible[r]);

  // One (row, head): scores over n_compute keys, of which the first n_visible count. Keys past
  // n_visible are scored (PAD's wasted work) and then masked with -inf, so they add exactly 0
  // to the softmax and to the output: PAD and SPLIT give bit-identical results.
  // A sliding window starts the row's keys at first_visible: the same computation over a shorter
  // range, so its results keep every invariance of the full one.
  auto attend = [&](int64_t r, int h, int32_t n_compute, float* scores) {
    const int32_t first = rows.first_visible.empty() ? 0 : rows.first_visible[r];
    const int64_t kv_off = static_cast<int64_t>(h / group) * rows.head_dim + first * kv_stride;
    const uint8_t* mask =
        rows.key_mask.empty() ? nullptr : rows.key_mask.data() + rows.key_mask_offset[r] + first;
    attend_row(rows.q + r * q_stride + static_cast<int64_t>(h) * rows.head_dim,
               static_cast<const KvT*>(rows.k[r]) + kv_off,
               static_cast<const KvT*>(rows.v[r]) + kv_off, kv_stride, rows.head_dim, rows.scale,
               rows.n_visible[r] - first, n_compute - first, mask, scores,
               rows.out + r * q_stride + static_cast<int64_t>(h) * rows.head_dim);
  };

  // BASS's variants as the paper defines them, where the fast kernel applies (chains, no
  // window): one computation per (sequence, KV head) over all its rows and heads, each key read
  // once (SPLIT: the sequence's own keys; PAD: every sequence padded to the longest).
  if (fast && mode != AttentionMode::kRow && rows.key_mask.empty() && rows.first_visible.empty() &&
      rows.seq_row_begin.size() >= 2) {
    return AttendSequenceBlocks<KvT>(ctx, rows, mode == AttentionMode::kPad ? n_padded : 0);
  }
  if (mode == AttentionMode::kPad) {
    ctx.pool->ParallelFor(
        rows.n_rows * rows.n_head, 1,
        [&](int64_t begin, int64_t end) {
          std::vector<float> scores(n_padded);
          for (int64_t item = begin; item < end; ++item) {
            attend(item / rows.n_head, static_cast<int>(item % rows.n_head), n_padded,
                   scores.data());
          }
        },
        MinItemsPerThread(2 * int64_t{n_padded} * rows.head_dim));
  } else {
    // Per (sequence, head), each row over its own keys (SPLIT outside the block path, and kRow).
    const int64_t n_seqs = static_cast<int64_t>(rows.seq_row_begin.size()) - 1;
    SPECD_CHECK(n_seqs >= 0, "attention: sequence grouping is missing");
    int64_t n_scored = 0;  // (row, key) pairs over all sequences, for one head
    for (int64_t r = 0; r < rows.n_rows; ++r) n_scored += rows.n_visible[r];
    const int64_t macs_per_item = 2 * n_scored * rows.head_dim / std::max<int64_t>(n_seqs, 1);
    ctx.pool->ParallelFor(
        n_seqs * rows.n_head, 1,
        [&](int64_t begin, int64_t end) {
          std::vector<float> scores(n_padded);
          for (int64_t item = begin; item < end; ++item) {
            const int64_t s = item / rows.n_head;
            const int h = static_cast<int>(item % rows.n_head);
            for (int64_t r = rows.seq_row_begin[s]; r < rows.seq_row_begin[s + 1]; ++r) {
              attend(r, h, rows.n_visible[r], scores.data());
            }
          }
        },
        MinItemsPerThread(macs_per_item));
  }
}

}  // namespace

void Attention(const KernelContext& ctx, const AttentionRows& rows, AttentionMode mode) {
  switch (rows.kv_type) {
    case DType::kF32:
      return AttentionT<float>(ctx, rows, mode);
    case DType::kF16:
      return AttentionT<uint16_t>(ctx, rows, mode);
    default:
      Fail("attention: KV cache type ", DTypeName(rows.kv_type), " is not supported");
  }
}

std::vector<int32_t> VisibleKeys(const uint8_t* mask, int32_t n_visible) {
  std::vector<int32_t> keys;
  for (int32_t t = 0; t < n_visible; ++t) {
    if (mask[t] != 0) keys.push_back(t);
  }
  return keys;
}

void StoreKvRow(const KernelContext& ctx, const float* x, int64_t n, DType type, void* dst) {
  if (type == DType::kF16 && ctx.cpu.avx512)
    return avx512::StoreF16(x, n, static_cast<uint16_t*>(dst));
  if (type == DType::kF16 && ctx.cpu.f16c)
    return FloatsToHalfsF16c(x, static_cast<uint16_t*>(dst), n);
  reference::StoreKvRow(x, n, type, dst);
}

}  // namespace specd
