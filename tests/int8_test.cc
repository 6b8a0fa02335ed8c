// i8 weights (BASS's INT8: int8 per output row, activations int8 per token): every path — specd's
// AVX-512 VNNI kernel, oneDNN (AMX or VNNI), the portable fallback — gives the scalar reference's
// bits, for every row count and thread count; and the format approximates the f32 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/rng.h"
#include "kernels/kernels.h"
#include "kernels/onednn_int8.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

std::vector<float> RandomVector(int64_t n, uint64_t seed, float scale = 1.0f) {
  SplitMix64 rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = scale * rng.NextSymmetric();
  return v;
}

// An i8 matrix quantized from random f32 weights (with a few large outliers per row, so that
// row scales differ a lot), and the f32 weights it came from.
struct I8Weights {
  std::vector<float> f32;     // [rows, cols]
  std::vector<int8_t> q;      // [rows, cols]
  std::vector<float> scales;  // [rows]
  WeightView view;
  WeightView f32_view;
};

I8Weights MakeI8(int64_t rows, int64_t cols, uint64_t seed) {
  I8Weights w;
  w.f32 = RandomVector(rows * cols, seed, 0.5f);
  for (int64_t r = 0; r < rows; ++r) w.f32[r * cols + (r * 7) % cols] *= 1.0f + r % 5;
  w.q.resize(rows * cols);
  w.scales.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    w.scales[r] = QuantizeRowI8(w.f32.data() + r * cols, w.q.data() + r * cols, cols);
  }
  w.view = WeightView{DType::kI8, w.q.data(), rows, cols, nullptr, w.scales.data()};
  w.f32_view = WeightView{DType::kF32, w.f32.data(), rows, cols};
  return w;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    den += double(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

TEST(Int8, QuantizeRowI8RoundsToTheNearestLevel) {
  const std::vector<float> row = {0.0f, 1.27f, -1.27f, 0.5f, -0.004f, 0.006f};
  std::vector<int8_t> q(row.size());
  const float scale = QuantizeRowI8(row.data(), q.data(), row.size());
  EXPECT_FLOAT_EQ(scale, 0.01f);
  EXPECT_EQ(q, (std::vector<int8_t>{0, 127, -127, 50, 0, 1}));
  std::vector<float> zeros(64, 0.0f);
  std::vector<int8_t> qz(64, 5);
  EXPECT_EQ(QuantizeRowI8(zeros.data(), qz.data(), 64), 0.0f);
  for (int8_t v : qz) EXPECT_EQ(v, 0);
  EXPECT_EQ(I8ScaleTensorName("blk.3.ffn_up.weight"), "blk.3.ffn_up.scale");
  EXPECT_EQ(I8ScaleTensorName("output"), "output.scale");
}

// The reference is what its comment says: exact integer sums of the quantized values.
TEST(Int8, ReferenceIsTheExactIntegerProductScaled) {
  const int64_t rows = 5, cols = 64, m = 3;
  I8Weights w = MakeI8(rows, cols, 1);
  const auto x = RandomVector(m * cols, 2);
  std::vector<float> y(m * rows);
  reference::MatmulI8(x.data(), m, w.view, y.data());
  std::vector<int8_t> q(m * cols);
  std::vector<float> d(m);
  reference::QuantizeActivationsPerRow(x.data(), m, cols, q.data(), d.data());
  for (int64_t i = 0; i < m; ++i) {
    float amax = 0;
    for (int64_t k = 0; k < cols; ++k) amax = std::max(amax, std::fabs(x[i * cols + k]));
    EXPECT_EQ(d[i], amax / 127.0f);
    for (int64_t n = 0; n < rows; ++n) {
      int32_t s = 0;
      for (int64_t k = 0; k < cols; ++k) s += w.q[n * cols + k] * q[i * cols + k];
      EXPECT_EQ(y[i * rows + n], static_cast<float>(s) * w.scales[n] * d[i]);
    }
  }
  // And it approximates the f32 product (int8 weights and activations: ~1% error).
  std::vector<float> exact(m * rows);
  reference::Matmul(x.data(), m, w.f32_view, exact.data());
  EXPECT_LT(RelativeError(y, exact), 0.02);
}

// Runs Matmul for rows [first, first + m) of x.
std::vector<float> RunMatmul(const KernelContext& ctx, const std::vector<float>& x, int64_t first,
                       int64_t m, const WeightView& w) {
  std::vector<float> y(m * w.rows);
  MatmulScratch scratch;
  Matmul(ctx, x.data() + first * w.cols, m, w, y.data(), &scratch);
  return y;
}

// Every path, every row count 1..64 and 1 or 2 threads: the reference's bits.
TEST(Int8, EveryPathEqualsTheReferenceBitForBitForEveryRowCount) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  const int64_t rows = 53, cols = 320, max_m = 64;  // a partial row group; 10 blocks
  I8Weights w = MakeI8(rows, cols, 3);
  const auto x = RandomVector(max_m * cols, 4, 3.0f);
  std::vector<float> want(max_m * rows);
  reference::MatmulI8(x.data(), max_m, w.view, want.data());
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    PackedInt8Weights packed;
    WeightView fast = w.view;
    if (cpu.avx512) {
      packed = PackInt8(w.view, &pool);
      packed.onednn = MakeOneDnnInt8Weights({&w.view});
      fast.packed = &packed;
    }
    struct Path {
      const char* name;
      bool avx512;
      Int8Backend backend;
    };
    for (const Path& path : {Path{"portable", false, Int8Backend::kSpecd},
                             Path{"specd-vnni", true, Int8Backend::kSpecd},
                             Path{"onednn", true, Int8Backend::kOneDnn}}) {
      if (path.avx512 && !cpu.avx512) continue;
      KernelContext ctx{&pool, cpu, path.backend};
      ctx.cpu.avx512 = path.avx512;
      const WeightView& view = path.avx512 ? fast : w.view;
      for (int64_t m = 1; m <= max_m; ++m) {
        const int64_t first = (m * 13) % (max_m - m + 1);  // rows from different places
        const std::vector<float> got = RunMatmul(ctx, x, first, m, view);
        const std::vector<float> expected(want.begin() + first * rows,
                                          want.begin() + (first + m) * rows);
        ASSERT_TRUE(SameBits(got, expected))
            << path.name << " m=" << m << " threads=" << threads
            << " relative error=" << RelativeError(got, expected);
      }
    }
  }
}

TEST(Int8, StackedI8EqualsSeparateMatmulsBitForBit) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (!cpu.avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  ThreadPool pool(2);
  I8Weights a = MakeI8(32, 96, 5), b = MakeI8(16, 96, 6), c = MakeI8(21, 96, 7);
  PackedInt8Weights stacked;
  ASSERT_TRUE(StackPackedInt8({&a.view, &b.view, &c.view}, &pool, &stacked));
  stacked.onednn = MakeOneDnnInt8Weights({&a.view, &b.view, &c.view});
  const WeightView stacked_view{DType::kI8, nullptr, stacked.rows, 96, &stacked};
  const int64_t m = 9;
  const auto x = RandomVector(m * 96, 8);
  for (Int8Backend backend : {Int8Backend::kSpecd, Int8Backend::kOneDnn}) {
    const KernelContext ctx{&pool, cpu, backend};
    const std::vector<float> together = RunMatmul(ctx, x, 0, m, stacked_view);
    int64_t offset = 0;
    for (I8Weights* w : {&a, &b, &c}) {
      std::vector<float> alone(m * w->view.rows);
      reference::MatmulI8(x.data(), m, w->view, alone.data());
      for (int64_t i = 0; i < m; ++i) {
        ASSERT_EQ(0, std::memcmp(together.data() + i * stacked.rows + offset,
                                 alone.data() + i * w->view.rows, w->view.rows * sizeof(float)));
      }
      offset += w->view.rows;
    }
  }
}

TEST(Int8, FastActivationQuantizationEqualsTheReference) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (!cpu.avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  const int64_t m = 7, k = 576;
  auto x = RandomVector(m * k, 9, 20.0f);
  x[5] = 0.0f;
  std::fill(x.begin() + 2 * k, x.begin() + 3 * k, 0.0f);  // an all-zero row: scale 0
  std::vector<int8_t> q_ref(m * k), q_fast(m * k);
  std::vector<float> d_ref(m), d_fast(m);
  std::vector<int32_t> sums(m);
  reference::QuantizeActivationsPerRow(x.data(), m, k, q_ref.data(), d_ref.data());
  avx512::QuantizeActivationsPerRow(x.data(), m, k, q_fast.data(), d_fast.data(), sums.data());
  EXPECT_EQ(q_ref, q_fast);
  EXPECT_EQ(d_ref, d_fast);
  for (int64_t i = 0; i < m; ++i) {
    int32_t s = 0;
    for (int64_t j = 0; j < k; ++j) s += q_ref[i * k + j];
    EXPECT_EQ(sums[i], s);
  }
}

// A wrong scale order or a lost offset correction would show here: the check can fail.
TEST(Int8, ADifferentScaleOrderIsNotBitIdentical) {
  I8Weights w = MakeI8(64, 256, 10);
  const int64_t m = 16;
  const auto x = RandomVector(m * 256, 11, 7.0f);
  std::vector<float> want(m * 64);
  reference::MatmulI8(x.data(), m, w.view, want.data());
  std::vector<int8_t> q(m * 256);
  std::vector<float> d(m), other(m * 64);
  reference::QuantizeActivationsPerRow(x.data(), m, 256, q.data(), d.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t n = 0; n < 64; ++n) {
      int32_t s = 0;
      for (int64_t k = 0; k < 256; ++k) s += w.q[n * 256 + k] * q[i * 256 + k];
      other[i * 64 + n] = static_cast<float>(s) * (w.scales[n] * d[i]);
    }
  }
  EXPECT_FALSE(SameBits(other, want));
  EXPECT_LT(RelativeError(other, want), 1e-6);
}

}  // namespace
}  // namespace specd
