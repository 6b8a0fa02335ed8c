// Plain scalar kernels: the definition of what each fast kernel computes.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "base/error.h"
#include "kernels/kernels.h"
#include "tensor/quantize.h"

namespace specd::reference {

void Matmul(const float* x, int64_t m, const WeightView& w, float* y) {
  if (w.type == DType::kI8) return MatmulI8(x, m, w, y);
  const std::vector<double> exact(x, x + m * w.cols);  // float -> double is exact
  Matmul(exact.data(), m, w, y);
}

void AddLowRankProduct(const float* t, int64_t m, int64_t rank, DType b_type, const void* b,
                       int64_t n, float* y, int64_t y_stride) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t o = 0; o < n; ++o) {
      double sum = 0.0;
      for (int64_t k = 0; k < rank; ++k) {
        const int64_t at =
            o / kLowRankBlock * rank * kLowRankBlock + k * kLowRankBlock + o % kLowRankBlock;
        const double bk = b_type == DType::kF32 ? static_cast<const float*>(b)[at]
                                                : Fp16ToFp32(static_cast<const uint16_t*>(b)[at]);
        sum += static_cast<double>(t[i * rank + k]) * bk;
      }
      y[i * y_stride + o] = static_cast<float>(y[i * y_stride + o] + sum);
    }
  }
}

std::vector<double> Int8Activations(const float* x, int64_t m, int64_t k, float divisor,
                                    int64_t span) {
  SPECD_CHECK(span > 0 && k % span == 0, "Int8Activations: ", k, " values in spans of ", span);
  std::vector<double> out(m * k);
  for (int64_t s = 0; s < m * k / span; ++s) {
    const float* xs = x + s * span;
    float amax = 0.0f;
    for (int64_t e = 0; e < span; ++e) amax = std::max(amax, std::fabs(xs[e]));
    const float d = amax / divisor;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int64_t e = 0; e < span; ++e) {
      const float q = std::clamp(std::nearbyint(xs[e] * id), -128.0f, 127.0f);
      out[s * span + e] = static_cast<double>(d) * q;
    }
  }
  return out;
}

void Matmul(const double* x, int64_t m, const WeightView& w, float* y) {
  std::vector<float> row(w.cols);
  for (int64_t n = 0; n < w.rows; ++n) {
    DequantizeRow(w.type, w.Row(n), row.data(), w.cols);
    for (int64_t i = 0; i < m; ++i) {
      double sum = 0.0;
      const double* xi = x + i * w.cols;
      for (int64_t k = 0; k < w.cols; ++k) sum += xi[k] * row[k];
      y[i * w.rows + n] = static_cast<float>(sum);
    }
  }
}

void QuantizeActivationsPerRow(const float* x, int64_t m, int64_t k, int8_t* q, float* d) {
  for (int64_t i = 0; i < m; ++i) {
    const float* xi = x + i * k;
    float amax = 0.0f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(xi[j]));
    d[i] = amax / 127.0f;
    const float id = d[i] != 0.0f ? 1.0f / d[i] : 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      const float v = std::nearbyint(xi[j] * id);
      // NaN saturates to -128, as the vector conversion's "integer indefinite" does.
      q[i * k + j] = static_cast<int8_t>(std::isnan(v) ? -128.0f : std::clamp(v, -128.0f, 127.0f));
    }
  }
}

void MatmulI8(const float* x, int64_t m, const WeightView& w, float* y) {
  SPECD_CHECK(w.type == DType::kI8 && w.row_scales != nullptr, "MatmulI8 needs i8 weights with ",
              "row scales");
  const int64_t k = w.cols;
  std::vector<float> smoothed;  // [m, k]
  if (w.col_scales != nullptr) {
    smoothed.resize(m * k);
    for (int64_t i = 0; i < m * k; ++i) smoothed[i] = x[i] * w.col_scales[i % k];
    x = smoothed.data();
  }
  std::vector<int8_t> q(m * k);  // [m, k]
  std::vector<float> d(m);       // [m]
  QuantizeActivationsPerRow(x, m, k, q.data(), d.data());
  for (int64_t n = 0; n < w.rows; ++n) {
    const auto* wn = reinterpret_cast<const int8_t*>(w.Row(n));
    for (int64_t i = 0; i < m; ++i) {
      int64_t sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += int64_t{wn[j]} * q[i * k + j];
      const float t = static_cast<float>(static_cast<int32_t>(sum)) * w.row_scales[n];
      y[i * w.rows + n] = t * d[i];
    }
  }
}

void RmsNorm(const float* x, const float* weight, float* y, int64_t n_rows, int64_t n, float eps) {
  for (int64_t r = 0; r < n_rows; ++r) {
    const float* xr = x + r * n;
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(sum_sq / n + eps);
    for (int64_t i = 0; i < n; ++i) y[r * n + i] = static_cast<float>(xr[i] * inv) * weight[i];
  }
}

void Rope(const RopeConfig& c, float* x, int n_heads, int64_t pos) {
  const int half = c.rotary_dim / 2;
  for (int h = 0; h < n_heads; ++h) {
    float* head = x + static_cast<int64_t>(h) * c.head_dim;
    for (int i = 0; i < half; ++i) {
      double theta = pos * std::pow(static_cast<double>(c.freq_base), -2.0 * i / c.rotary_dim);
      if (!c.freq_factors.empty()) theta /= c.freq_factors[i];
      const double cs = std::cos(theta) * c.attn_factor, sn = std::sin(theta) * c.attn_factor;
      const int a = c.neox ? i : 2 * i;
      const int b = c.neox ? i + half : 2 * i + 1;
      const double x0 = head[a], x1 = head[b];
      head[a] = static_cast<float>(x0 * cs - x1 * sn);
      head[b] = static_cast<float>(x0 * sn + x1 * cs);
    }
  }
}

void Softmax(float* x, int64_t n) {
  float max = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - max);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(std::exp(double{x[i]} - max) / sum);
}

void SwiGlu(const float* gate, const float* up, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    y[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * up[i]);
  }
}

void GeGlu(const float* gate, const float* up, float* y, int64_t n) {
  const double sqrt_2_over_pi = 0.79788456080286535588;
  for (int64_t i = 0; i < n; ++i) {
    const double g = gate[i];
    y[i] = static_cast<float>(
        0.5 * g * (1.0 + std::tanh(sqrt_2_over_pi * (g + 0.044715 * g * g * g))) * up[i]);
  }
}

namespace {
// Element t of a KV cache row of the given type, as a double.
double KvAt(const void* base, DType type, int64_t t) {
  return type == DType::kF16 ? Fp16ToFp32(static_cast<const uint16_t*>(base)[t])
                             : static_cast<const float*>(base)[t];
}
}  // namespace

void StoreKvRow(const float* x, int64_t n, DType type, void* dst) {
  SPECD_CHECK(type == DType::kF32 || type == DType::kF16, "KV cache type ", DTypeName(type),
              " is not supported");
  QuantizeRow(type, x, dst, n);  // f32: copied; f16: round to nearest even
}

void Attention(const AttentionRows& rows) {
  const int group = rows.n_head / rows.n_head_kv;
  const int64_t q_stride = static_cast<int64_t>(rows.n_head) * rows.head_dim;
  const int64_t kv_stride = static_cast<int64_t>(rows.n_head_kv) * rows.head_dim;
  for (int64_t r = 0; r < rows.n_rows; ++r) {
    const int first = rows.first_visible.empty() ? 0 : rows.first_visible[r];
    const int n_keys = rows.n_visible[r];
    auto hidden = [&](int t) {  // a key outside the row's token-tree ancestry
      return !rows.key_mask.empty() && rows.key_mask[rows.key_mask_offset[r] + t] == 0;
    };
    std::vector<double> scores(n_keys);
    for (int h = 0; h < rows.n_head; ++h) {
      const float* q = rows.q + r * q_stride + static_cast<int64_t>(h) * rows.head_dim;
      const int64_t kv_off = static_cast<int64_t>(h / group) * rows.head_dim;
      double max = -std::numeric_limits<double>::infinity();
      for (int t = first; t < n_keys; ++t) {
        if (hidden(t)) continue;
        double dot = 0.0;
        for (int d = 0; d < rows.head_dim; ++d) {
          dot +=
              static_cast<double>(q[d]) * KvAt(rows.k[r], rows.kv_type, t * kv_stride + kv_off + d);
        }
        scores[t] = dot * rows.scale;
        max = std::max(max, scores[t]);
      }
      double sum = 0.0;
      for (int t = first; t < n_keys; ++t) {
        if (!hidden(t)) sum += (scores[t] = std::exp(scores[t] - max));
      }
      float* out = rows.out + r * q_stride + static_cast<int64_t>(h) * rows.head_dim;
      for (int d = 0; d < rows.head_dim; ++d) {
        double acc = 0.0;
        for (int t = first; t < n_keys; ++t) {
          if (hidden(t)) continue;
          acc += scores[t] * KvAt(rows.v[r], rows.kv_type, t * kv_stride + kv_off + d);
        }
        out[d] = static_cast<float>(acc / sum);
      }
    }
  }
}

}  // namespace specd::reference
