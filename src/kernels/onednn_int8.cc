#include "kernels/onednn_int8.h"

#include <omp.h>

#include <dnnl.hpp>
#include <map>
#include <mutex>
#include <vector>

#include "base/error.h"

namespace specd {

struct OneDnnInt8Weights {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  int64_t rows = 0, cols = 0;       // N, K
  dnnl::memory::desc weights_desc;  // [K, N] in the layout oneDNN chose
  dnnl::memory weights;             // the re-laid weights
  std::vector<float> row_scales;    // [N]
  std::mutex mutex;                 // guards primitives
  std::map<int64_t, std::shared_ptr<dnnl::matmul::primitive_desc>> primitives;  // by row count
};

namespace {

using dt = dnnl::memory::data_type;
using tag = dnnl::memory::format_tag;

// The matmul primitive for m rows, made once per row count.
std::shared_ptr<dnnl::matmul::primitive_desc> PrimitiveFor(OneDnnInt8Weights& o, int64_t m) {
  std::lock_guard<std::mutex> lock(o.mutex);
  auto& pd = o.primitives[m];
  if (!pd) {
    const dnnl::memory::desc src({m, o.cols}, dt::s8, tag::ab);   // [m, K]
    const dnnl::memory::desc dst({m, o.rows}, dt::s32, tag::ab);  // [m, N]
    pd = std::make_shared<dnnl::matmul::primitive_desc>(
        dnnl::matmul::desc(src, o.weights_desc, dst), o.engine);
  }
  return pd;
}

}  // namespace

std::shared_ptr<OneDnnInt8Weights> MakeOneDnnInt8Weights(
    const std::vector<const WeightView*>& parts) {
  SPECD_CHECK(!parts.empty(), "oneDNN int8 weights: no matrix");
  auto o = std::make_shared<OneDnnInt8Weights>();
  o->cols = parts[0]->cols;
  std::vector<int8_t> values;  // [rows, cols], the parts stacked
  for (const WeightView* w : parts) {
    SPECD_CHECK(w->type == DType::kI8 && w->row_scales != nullptr && w->cols == o->cols,
                "oneDNN int8 matmul needs i8 weights with row scales and equal widths");
    const auto* data = static_cast<const int8_t*>(w->data);
    values.insert(values.end(), data, data + w->rows * w->cols);
    o->row_scales.insert(o->row_scales.end(), w->row_scales, w->row_scales + w->rows);
    o->rows += w->rows;
  }
  // Let oneDNN pick the weight layout for a mid-sized product; every row count then uses it.
  const dnnl::memory::desc any({o->cols, o->rows}, dt::s8, tag::any);
  const dnnl::matmul::primitive_desc probe(
      dnnl::matmul::desc(dnnl::memory::desc({16, o->cols}, dt::s8, tag::ab), any,
                         dnnl::memory::desc({16, o->rows}, dt::s32, tag::ab)),
      o->engine);
  o->weights_desc = probe.weights_desc();
  o->weights = dnnl::memory(o->weights_desc, o->engine);
  // specd's rows are [N, K] row-major, which is oneDNN's [K, N] with tag ba.
  dnnl::memory plain({{o->cols, o->rows}, dt::s8, tag::ba}, o->engine, values.data());
  dnnl::stream stream(o->engine);
  dnnl::reorder(plain, o->weights).execute(stream, plain, o->weights);
  stream.wait();
  return o;
}

void OneDnnMatmulI8(const KernelContext& ctx, const float* x, int64_t m, const PackedInt8Weights& w,
                    float* y, MatmulScratch* scratch) {
  SPECD_CHECK(w.onednn != nullptr, "oneDNN weights were not built for this matrix");
  OneDnnInt8Weights& o = *w.onednn;
  const int64_t k = o.cols, n = o.rows;
  // [m, K] int8 activations, [m] scales, [m] sums (unused here), [m, N] s32 products.
  scratch->bytes.Resize(m * k + m * 8 + m * n * 4 + 64);
  auto* aq = reinterpret_cast<int8_t*>(scratch->bytes.data());
  auto* da = reinterpret_cast<float*>(scratch->bytes.data() + m * k);
  auto* sums = reinterpret_cast<int32_t*>(da + m);
  auto* acc =
      reinterpret_cast<int32_t*>(scratch->bytes.data() + (m * k + m * 8 + 63) / 64 * 64);  // [m, N]
  if (ctx.cpu.avx512) {
    avx512::QuantizeActivationsPerRow(x, m, k, aq, da, sums);
  } else {
    reference::QuantizeActivationsPerRow(x, m, k, aq, da);
  }
  const auto pd = PrimitiveFor(o, m);
  // oneDNN runs on its own OpenMP threads: as many as specd's pool, whose workers sleep
  // meanwhile (they are idle between parallel regions).
  omp_set_num_threads(ctx.pool != nullptr ? ctx.pool->size() : 1);
  dnnl::memory src(pd->src_desc(), o.engine, aq);
  dnnl::memory dst(pd->dst_desc(), o.engine, acc);
  dnnl::stream stream(o.engine);
  dnnl::matmul(*pd).execute(
      stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, o.weights}, {DNNL_ARG_DST, dst}});
  stream.wait();
  // The float steps of reference::MatmulI8, in its order.
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      const float t = static_cast<float>(acc[i * n + j]) * o.row_scales[j];
      y[i * n + j] = t * da[i];
    }
  }
}

}  // namespace specd
