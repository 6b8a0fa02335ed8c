// i8 weights converted at load: per-row scales, with SmoothQuant's per-column migration from
// activation maxima recorded on calibration text.
#include <algorithm>
#include <cmath>
#include <memory>

#include "base/error.h"
#include "model/model.h"
#include "tensor/quantize.h"

namespace specd {

void Model::ConvertToI8(const std::vector<WeightView*>& parts, const std::vector<float>* input_max,
                        float alpha, ThreadPool* pool) {
  if (parts.front()->type == DType::kI8) return;  // an i8 file: kept as written
  const int64_t cols = parts.front()->cols;
  // SmoothQuant: per input channel s = max|x|^alpha / max|w|^(1 - alpha), the weight maximum
  // over every part (they share the input, so they share s); the weights get w * s and the
  // activations x / s, which leaves the product unchanged before quantization.
  std::vector<float> s;  // [cols]
  if (input_max != nullptr) {
    std::vector<float> w_max(cols, 0.0f);  // [cols]
    std::vector<float> row(cols);
    for (const WeightView* w : parts) {
      for (int64_t r = 0; r < w->rows; ++r) {
        DequantizeRow(w->type, w->Row(r), row.data(), cols);
        for (int64_t j = 0; j < cols; ++j) w_max[j] = std::max(w_max[j], std::fabs(row[j]));
      }
    }
    s.assign(cols, 1.0f);
    for (int64_t j = 0; j < cols; ++j) {
      const float x_max = (*input_max)[j];
      if (x_max > 0.0f && w_max[j] > 0.0f) {
        // Not rounded to a power of two (which would make w * s and x / s exact): measured on
        // SmolLM2, perplexity 18.78 rounded vs 18.69 not (q8_0: 18.49).
        s[j] = std::clamp(std::pow(x_max, alpha) / std::pow(w_max[j], 1.0f - alpha), 1e-5f, 1e5f);
      }
    }
  }
  for (WeightView* w : parts) {
    auto matrix = std::make_unique<I8Matrix>();
    matrix->values.resize(w->rows * cols);  // [rows, cols]
    matrix->scales.resize(w->rows);         // [rows]
    if (!s.empty()) {
      matrix->smooth.resize(cols);  // [cols] the activations' multipliers, 1 / s
      for (int64_t j = 0; j < cols; ++j) matrix->smooth[j] = 1.0f / s[j];
    }
    const WeightView source = *w;
    auto convert = [&](int64_t r0, int64_t r1) {
      std::vector<float> row(cols);
      for (int64_t r = r0; r < r1; ++r) {
        DequantizeRow(source.type, source.Row(r), row.data(), cols);
        if (source.row_scales != nullptr) {
          for (float& v : row) v *= source.row_scales[r];
        }
        for (int64_t j = 0; j < cols && !s.empty(); ++j) row[j] *= s[j];
        matrix->scales[r] = QuantizeRowI8(row.data(), matrix->values.data() + r * cols, cols);
      }
    };
    if (pool != nullptr) {
      pool->ParallelFor(source.rows, 16, convert);
    } else {
      convert(0, source.rows);
    }
    *w = WeightView{DType::kI8,
                    matrix->values.data(),
                    source.rows,
                    cols,
                    nullptr,
                    matrix->scales.data(),
                    s.empty() ? nullptr : matrix->smooth.data()};
    weights_.i8_matrices.push_back(std::move(matrix));
  }
}

void Model::ConvertAllToI8(const KernelContext* ctx, const ModelLoadOptions& options) {
  ActivationMaxima maxima;
  const bool smooth = !options.calibration_tokens.empty();
  if (smooth) {
    SPECD_CHECK(ctx != nullptr, "SmoothQuant calibration needs a kernel context");
    SPECD_CHECK(options.smooth_alpha >= 0.0f && options.smooth_alpha <= 1.0f,
                "SmoothQuant alpha must be in [0, 1], got ", options.smooth_alpha);
    SetActivationMaxima(&maxima);
    const int64_t n = static_cast<int64_t>(options.calibration_tokens.size());
    auto kv = NewKvCache({1, static_cast<int>(n)});
    const int seq = kv->Acquire();
    Batch batch;
    for (int64_t i = 0; i < n; ++i) {
      batch.Add(options.calibration_tokens[i], static_cast<int32_t>(i), seq, true);
    }
    std::vector<float> logits;  // [n, n_vocab]
    Forward(*ctx, batch, *kv, AttentionMode::kSplit, &logits);
    SetActivationMaxima(nullptr);
  }
  ThreadPool* pool = ctx != nullptr ? ctx->pool : nullptr;
  const float alpha = options.smooth_alpha;
  for (size_t il = 0; il < weights_.layers.size(); ++il) {
    LayerWeights& l = weights_.layers[il];
    auto input = [&](const std::vector<std::vector<float>>& per_layer) {
      return smooth ? &per_layer[il] : nullptr;
    };
    ConvertToI8({&l.wq, &l.wk, &l.wv}, input(maxima.qkv_in), alpha, pool);
    ConvertToI8({&l.wo}, input(maxima.wo_in), alpha, pool);
    ConvertToI8({&l.w_gate, &l.w_up}, input(maxima.gate_up_in), alpha, pool);
    ConvertToI8({&l.w_down}, input(maxima.down_in), alpha, pool);
    l.wqkv = WeightView{};  // the stacked forms are rebuilt from the i8 matrices
    l.w_gate_up = WeightView{};
  }
  ConvertToI8({&weights_.output}, smooth ? &maxima.output_in : nullptr, alpha, pool);
  weights_.packed.clear();
}

void Model::SetActivationMaxima(ActivationMaxima* maxima) {
  pass_.SetActivationMaxima(maxima);
  if (maxima == nullptr) return;
  const ModelConfig& c = config_;
  maxima->qkv_in.assign(c.n_layer, std::vector<float>(c.n_embd, 0.0f));
  maxima->wo_in.assign(c.n_layer, std::vector<float>(int64_t{c.n_head} * c.head_dim, 0.0f));
  maxima->gate_up_in.assign(c.n_layer, std::vector<float>(c.n_embd, 0.0f));
  maxima->down_in.assign(c.n_layer, std::vector<float>(c.n_ff, 0.0f));
  maxima->output_in.assign(c.n_embd, 0.0f);
}

void Model::ForEachI8Matrix(
    const std::function<void(const std::string&, const WeightView&)>& fn) const {
  for (size_t il = 0; il < weights_.layers.size(); ++il) {
    const LayerWeights& l = weights_.layers[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::pair<const char*, const WeightView*> named[] = {
        {"attn_q.weight", &l.wq},      {"attn_k.weight", &l.wk},       {"attn_v.weight", &l.wv},
        {"attn_output.weight", &l.wo}, {"ffn_gate.weight", &l.w_gate}, {"ffn_up.weight", &l.w_up},
        {"ffn_down.weight", &l.w_down}};
    for (const auto& [name, w] : named) {
      if (w->type == DType::kI8) fn(p + name, *w);
    }
  }
  if (weights_.output.type == DType::kI8) fn("output.weight", weights_.output);
}

}  // namespace specd
