#include "bench/matmul_bench.h"

#include <algorithm>
#include <cstdio>
#include <dnnl.hpp>
#include <functional>
#include <map>
#include <string>

#include "base/cpu_features.h"
#include "base/rng.h"
#include "base/timer.h"
#include "kernels/kernels.h"
#include "kernels/onednn_int8.h"
#include "tensor/quantize.h"

namespace specd::bench {
namespace {

double TimeMs(const std::function<void()>& fn, double min_ms) {
  fn();  // warm up
  Timer t;
  int reps = 0;
  while (t.ElapsedMs() < min_ms) {
    fn();
    ++reps;
  }
  return t.ElapsedMs() / reps;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Each call's ms of fns run in turn, one call each per round, for at least min_ms per fn and 5
// rounds: a slow spell of a shared machine then falls on every fn alike.
std::vector<std::vector<double>> InterleavedCallMs(const std::vector<std::function<void()>>& fns,
                                                   double min_ms) {
  for (const auto& fn : fns) fn();  // warm up
  std::vector<std::vector<double>> ms(fns.size());
  Timer total;
  while (ms[0].size() < 5 || total.ElapsedMs() < min_ms * static_cast<double>(fns.size())) {
    for (size_t i = 0; i < fns.size(); ++i) {
      Timer t;
      fns[i]();
      ms[i].push_back(t.ElapsedMs());
    }
  }
  return ms;
}

// oneDNN matmul src [m, k] x weights [k, n] (pre-reordered to its preferred layout) -> f32.
double OneDnnMs(dnnl::memory::data_type src_type, dnnl::memory::data_type weight_type, int m, int n,
                int k, double min_ms) {
  using dnnl::memory;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const memory::desc a({m, k}, src_type, memory::format_tag::ab);
  const memory::desc b_any({k, n}, weight_type, memory::format_tag::any);
  const memory::desc b_plain({k, n}, weight_type, memory::format_tag::ba);
  const memory::desc c({m, n}, memory::data_type::f32, memory::format_tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b_any, c), engine);
  memory a_mem(a, engine), b_mem(pd.weights_desc(), engine), c_mem(c, engine),
      b_src(b_plain, engine);
  dnnl::reorder(b_src, b_mem).execute(stream, b_src, b_mem);
  dnnl::matmul matmul(pd);
  return TimeMs(
      [&] {
        matmul.execute(stream,
                       {{DNNL_ARG_SRC, a_mem}, {DNNL_ARG_WEIGHTS, b_mem}, {DNNL_ARG_DST, c_mem}});
        stream.wait();
      },
      min_ms);
}

// ms per Matmul, each call on the next of `views` (distinct copies of one matrix).
double CyclingMatmulMs(const KernelContext& ctx, const float* x, int m,
                       const std::vector<WeightView>& views, float* y, double min_ms) {
  MatmulScratch scratch;
  size_t next = 0;
  return TimeMs(
      [&] {
        Matmul(ctx, x, m, views[next], y, &scratch);
        next = (next + 1) % views.size();
      },
      min_ms);
}

// Prints one table row: a kernel's GMAC/s at each M (and GB/s of weights when weight_bytes > 0).
using RowPrinter =
    std::function<void(const char*, const std::function<double(int)>&, int64_t weight_bytes)>;

// The i8 rows (BASS's INT8 on each of specd's kernels and on oneDNN through specd's wrapper) and
// oneDNN's own bf16 and s8 products, for the same [n, k] weights w and activations x.
void I8AndOneDnnRows(const MatmulBenchOptions& o, ThreadPool* pool_ptr, const CpuFeatures& cpu,
                     const std::vector<float>& w, const std::vector<float>& x,
                     std::vector<float>& y, const RowPrinter& row) {
  ThreadPool& pool = *pool_ptr;
  const int n = o.rows_n, k = o.cols_k;
  // i8 (BASS's INT8): one int8 matrix with row scales, on each of specd's kernels and on
  // oneDNN through specd's wrapper (activation quantization and float steps included).
  std::vector<int8_t> i8(static_cast<size_t>(n) * k);
  std::vector<float> i8_scales(n);
  for (int r = 0; r < n; ++r) {
    i8_scales[r] = QuantizeRowI8(w.data() + static_cast<size_t>(r) * k,
                                 i8.data() + static_cast<size_t>(r) * k, k);
  }
  WeightView i8_view{DType::kI8, i8.data(), n, k};
  i8_view.row_scales = i8_scales.data();
  // Packed copies for specd's kernels; oneDNN's own layout for the first only.
  std::vector<PackedInt8Weights> i8_packed(o.copies);
  std::vector<WeightView> i8_views(o.copies, i8_view);
  if (cpu.packed_kernels()) {
    for (int c = 0; c < o.copies; ++c) {
      i8_packed[c] = PackInt8(i8_view, &pool, HighBitsFor(cpu));
      i8_views[c].packed = &i8_packed[c];
    }
    // oneDNN's int8 product is exact only with VNNI (see --int8-kernel).
    if (cpu.avx512) i8_packed[0].onednn = MakeOneDnnInt8Weights({&i8_view});
  }
  struct I8Kernel {
    const char* name;
    Int8Backend backend;
    bool available;
  };
  for (const I8Kernel& kernel :
       {I8Kernel{"specd i8 (VNNI)", Int8Backend::kSpecd, cpu.avx512},
        I8Kernel{"specd i8 (AVX2)", Int8Backend::kSpecd, cpu.avx2 && !cpu.avx512},
        I8Kernel{"specd i8 (AMX)", Int8Backend::kAmx, cpu.amx_int8},
        I8Kernel{"oneDNN i8 via specd", Int8Backend::kOneDnn, cpu.avx512}}) {
    if (!kernel.available) continue;
    const KernelContext i8_ctx{&pool, cpu, kernel.backend};
    const std::vector<WeightView> used =
        kernel.backend == Int8Backend::kOneDnn ? std::vector<WeightView>{i8_views[0]} : i8_views;
    row(
        kernel.name,
        [&](int m) { return CyclingMatmulMs(i8_ctx, x.data(), m, used, y.data(), o.min_ms); }, 0);
  }
  row(
      "oneDNN bf16 x bf16",
      [&](int m) {
        return OneDnnMs(dnnl::memory::data_type::bf16, dnnl::memory::data_type::bf16, m, n, k,
                        o.min_ms);
      },
      0);
  row(
      "oneDNN s8 x s8 (no block scales)",
      [&](int m) {
        return OneDnnMs(dnnl::memory::data_type::s8, dnnl::memory::data_type::s8, m, n, k,
                        o.min_ms);
      },
      0);
}

// The rows of one weight type: a row per kernel in o.packed_kernels (GMAC/s, medians of calls
// taken in turn) and, with two or more, a row per further kernel of its call time over the first
// kernel's (medians of the ratios of calls side by side).
void PackedTypeRows(const MatmulBenchOptions& o, const KernelContext& ctx, DType type,
                    const std::vector<WeightView>& views, const std::vector<float>& x,
                    std::vector<float>& y, int64_t weight_bytes, const RowPrinter& row) {
  const size_t n_kernels = o.packed_kernels.size();
  std::map<int, std::vector<std::vector<double>>> call_ms;  // [m][kernel][call]
  for (int m : o.m) {
    std::vector<std::function<void()>> fns;
    std::vector<MatmulScratch> scratch(n_kernels);
    std::vector<size_t> next_view(n_kernels, 0);  // each kernel cycles through the copies
    for (size_t i = 0; i < n_kernels; ++i) {
      KernelContext kernel_ctx = ctx;
      kernel_ctx.int8_backend = o.packed_kernels[i].backend;
      fns.push_back([&, kernel_ctx, i, m] {
        size_t& view = next_view[i];
        Matmul(kernel_ctx, x.data(), m, views[view], y.data(), &scratch[i]);
        view = (view + 1) % views.size();
      });
    }
    call_ms[m] = InterleavedCallMs(fns, o.min_ms);
  }
  for (size_t i = 0; i < n_kernels; ++i) {
    const std::string name = "specd " + std::string(DTypeName(type)) +
                             (n_kernels > 1 ? " (" + o.packed_kernels[i].name + ")" : "");
    row(
        name.c_str(), [&](int m) { return Median(call_ms[m][i]); }, weight_bytes);
  }
  for (size_t i = 1; i < n_kernels; ++i) {
    std::printf("| time %s / %s |", o.packed_kernels[i].name.c_str(),
                o.packed_kernels[0].name.c_str());
    for (int m : o.m) {
      const auto& first = call_ms[m][0];
      const auto& other = call_ms[m][i];
      std::vector<double> ratios;
      for (size_t c = 0; c < first.size(); ++c) ratios.push_back(other[c] / first[c]);
      std::printf(" %.3f (%zu pairs) |", Median(ratios), ratios.size());
    }
    std::printf("\n");
  }
}

}  // namespace

void RunMatmulBench(const MatmulBenchOptions& o) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  ThreadPool pool(o.threads);
  const KernelContext ctx{&pool, cpu};
  const int n = o.rows_n, k = o.cols_k;
  const size_t max_m = *std::max_element(o.m.begin(), o.m.end());
  std::vector<float> w(static_cast<size_t>(n) * k), x(max_m * k);
  SplitMix64 rng(1);
  for (float& v : w) v = rng.NextSymmetric();
  for (float& v : x) v = rng.NextSymmetric();
  std::vector<float> y(max_m * n);
  std::printf("Matmul [M, %d] x [%d, %d]^T, %d threads, GMAC/s (higher is better); oneDNN %s\n", k,
              n, k, o.threads, "uses its own OpenMP threads (OMP_NUM_THREADS)");
  std::printf("specd's kernels use %d distinct cop%s of the weights in turn; oneDNN one\n\n",
              o.copies, o.copies == 1 ? "y" : "ies");
  std::printf("| kernel |");
  for (int m : o.m) std::printf(" M=%d |", m);
  std::printf("\n|---|");
  for (size_t i = 0; i < o.m.size(); ++i) std::printf("---|");
  std::printf("\n");
  // A kernel that this CPU does not have (oneDNN refuses bf16 without AVX-512) gets a row that
  // says so instead of ending the benchmark.
  // weight_bytes > 0: each cell also shows the rate the weights were read at, in GB/s.
  const RowPrinter row = [&](const char* name, const std::function<double(int)>& ms_for,
                             int64_t weight_bytes) {
    std::printf("| %s |", name);
    for (int m : o.m) {
      try {
        const double ms = ms_for(m);
        std::printf(" %.0f", static_cast<double>(m) * n * k / ms / 1e6);
        if (weight_bytes > 0) std::printf(" (%.1f GB/s)", weight_bytes / ms / 1e6);
        std::printf(" |");
      } catch (const dnnl::error& e) {
        std::printf(" n/a (oneDNN: %s) |", e.what());
      }
    }
    std::printf("\n");
    std::fflush(stdout);
  };
  for (DType type : o.types) {
    // One copy's bytes, then o.copies views of distinct copies.
    std::vector<uint8_t> bytes(RowBytes(type, k) * n);
    for (int r = 0; r < n; ++r) {
      QuantizeRow(type, w.data() + static_cast<size_t>(r) * k, bytes.data() + r * RowBytes(type, k),
                  k);
    }
    std::vector<std::vector<uint8_t>> copies(o.copies, bytes);
    std::vector<PackedInt8Weights> packed(o.copies);
    std::vector<WeightView> views;
    for (int c = 0; c < o.copies; ++c) {
      views.push_back(WeightView{type, copies[c].data(), n, k});
      if (cpu.packed_kernels() && type != DType::kBF16) {
        packed[c] = PackInt8(views[c], &pool, HighBitsFor(cpu));
        views[c].packed = &packed[c];
      }
    }
    const int64_t weight_bytes =
        packed[0].rows > 0 ? static_cast<int64_t>(packed[0].data.size()) : RowBytes(type, k) * n;
    PackedTypeRows(o, ctx, type, views, x, y, weight_bytes, row);
  }
  if (o.skip_int8_and_onednn) return;
  I8AndOneDnnRows(o, &pool, cpu, w, x, y, row);
}

}  // namespace specd::bench
