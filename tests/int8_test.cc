// i8 weights (BASS's INT8: int8 per output row, activations int8 per token): every path — specd's
// AVX-512 VNNI kernel, oneDNN (AMX or VNNI), the portable fallback — gives the scalar reference's
// bits, for every row count and thread count; and the format approximates the f32 weights.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "base/error.h"
#include "base/rng.h"
#include "engine/generate.h"
#include "engine/model_options.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kernels/onednn_int8.h"
#include "model/model.h"
#include "tensor/quantize.h"
#include "tests/test_util.h"

namespace specd {
namespace {

using testing::RandomVector;
using testing::RelativeError;

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

// Tests run twice: on every path but AMX's, and on AMX's (skipped where the CPU has no AMX-INT8),
// so that a CPU without AMX shows a skipped test, not a pass that tested less.
class Int8Paths : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    if (amx() && !CpuFeatures::Detect().amx_int8) GTEST_SKIP() << "this CPU has no AMX-INT8";
  }
  bool amx() const { return GetParam(); }
  // Whether this instance runs `backend`'s paths.
  bool Runs(Int8Backend backend) const { return (backend == Int8Backend::kAmx) == amx(); }
};

INSTANTIATE_TEST_SUITE_P(Int8, Int8Paths, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Amx" : "NotAmx"; });

// Every path, every row count 1..64, 1 or 2 threads, with and without SmoothQuant's column
// scales: the reference's bits.
TEST_P(Int8Paths, EveryPathEqualsTheReferenceBitForBitForEveryRowCount) {
  testing::UntestedPaths untested;
  const CpuFeatures cpu = CpuFeatures::Detect();
  // An odd number of row groups, the last partial; 11 blocks (AMX's tiles of 64 leave a half).
  const int64_t rows = 69, cols = 352, max_m = 64;
  I8Weights w = MakeI8(rows, cols, 3);
  const auto x = RandomVector(max_m * cols, 4, 3.0f);
  std::vector<float> col_scales = RandomVector(cols, 5, 1.0f);
  for (float& s : col_scales) s = 0.25f + std::abs(s);
  for (bool smooth : {false, true}) {
    w.view.col_scales = smooth ? col_scales.data() : nullptr;
    std::vector<float> want(max_m * rows);
    reference::MatmulI8(x.data(), max_m, w.view, want.data());
    for (int threads : {1, 2}) {
      ThreadPool pool(threads);
      PackedInt8Weights packed;
      WeightView fast = w.view;
      if (cpu.avx512) {
        packed = PackInt8(w.view, &pool, HighBits::kPlanes);  // i8: no high bits
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
                               Path{"specd-amx", true, Int8Backend::kAmx},
                               Path{"onednn", true, Int8Backend::kOneDnn}}) {
        if (!Runs(path.backend) || !untested.Check(!path.avx512 || cpu.avx512, "avx512")) {
          continue;
        }
        KernelContext ctx{&pool, cpu, path.backend};
        ctx.cpu.avx512 = path.avx512;
        const WeightView& view = path.avx512 ? fast : w.view;
        for (int64_t m = 1; m <= max_m; ++m) {
          const int64_t first = (m * 13) % (max_m - m + 1);  // rows from different places
          const std::vector<float> got = RunMatmul(ctx, x, first, m, view);
          const std::vector<float> expected(want.begin() + first * rows,
                                            want.begin() + (first + m) * rows);
          ASSERT_TRUE(SameBits(got, expected))
              << path.name << " m=" << m << " threads=" << threads << " smooth=" << smooth
              << " relative error=" << RelativeError(got, expected);
        }
      }
    }
  }
  SPECD_SKIP_IF_UNTESTED(untested);
}

TEST_P(Int8Paths, StackedI8EqualsSeparateMatmulsBitForBit) {
  testing::UntestedPaths untested;
  const CpuFeatures cpu = CpuFeatures::Detect();
  if (!cpu.avx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  ThreadPool pool(2);
  I8Weights a = MakeI8(32, 96, 5), b = MakeI8(16, 96, 6), c = MakeI8(21, 96, 7);
  PackedInt8Weights stacked;
  ASSERT_TRUE(StackPackedInt8({&a.view, &b.view, &c.view}, &pool, HighBits::kPlanes, &stacked));
  stacked.onednn = MakeOneDnnInt8Weights({&a.view, &b.view, &c.view});
  const WeightView stacked_view{DType::kI8, nullptr, stacked.rows, 96, &stacked};
  const int64_t m = 9;
  const auto x = RandomVector(m * 96, 8);
  for (Int8Backend backend : {Int8Backend::kSpecd, Int8Backend::kAmx, Int8Backend::kOneDnn}) {
    if (!Runs(backend)) continue;
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
  SPECD_SKIP_IF_UNTESTED(untested);
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

// ---- Whole models in i8 -------------------------------------------------------------------

using testing::Greedy;

// The tiny pair converted to i8 at load, SmoothQuant calibrated on a prompt, on one backend.
struct I8Pair {
  I8Pair(Int8Backend backend, bool avx512) : pool(2), ctx{&pool, CpuFeatures::Detect(), backend} {
    ctx.cpu.avx512 = ctx.cpu.avx512 && avx512;
    ModelLoadOptions options;
    options.int8_weights = true;
    options.calibration_tokens = testing::Prompt(40, 3);
    target = Model::Load(testing::TinyModel("tiny", DType::kQ8_0, 7), &ctx, options);
    draft = Model::Load(testing::TinyModel("tiny", DType::kQ8_0, 99), &ctx, options);
  }
  ThreadPool pool;
  KernelContext ctx;
  std::unique_ptr<Model> target, draft;
};

// The merge gate for i8: greedy speculative output equals plain greedy output, at batch 1
// (several draft lengths and the cost-aware policy) and batch 8 (BASS, ragged acceptance), on
// specd's kernel and on oneDNN.
TEST_P(Int8Paths, I8ModelGreedySpeculativeEqualsPlainGreedyAtBatch1And8) {
  testing::UntestedPaths untested;
  const CpuFeatures cpu = CpuFeatures::Detect();
  for (Int8Backend backend : {Int8Backend::kSpecd, Int8Backend::kAmx, Int8Backend::kOneDnn}) {
    if (!Runs(backend) || !untested.Check(backend == Int8Backend::kSpecd || cpu.avx512, "avx512")) {
      continue;
    }
    I8Pair p(backend, true);
    ASSERT_EQ(p.target->MatrixType(), DType::kI8);
    const int n = 8;
    auto target_kv = p.target->NewKvCache({n, 256});
    auto draft_kv = p.draft->NewKvCache({n, 256});
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<int32_t>> expected;
    for (int b = 0; b < n; ++b) {
      prompts.push_back(testing::Prompt(3 + 5 * b, b));
      expected.push_back(
          GenerateAutoregressive(*p.target, p.ctx, *target_kv, Greedy(prompts[b], 30))
              .sequences[0]
              .tokens);
    }
    for (int k : {1, 3, 6}) {
      const SpeculationConfig o = testing::FixedDrafts(k);
      const auto out = GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv,
                                           Greedy(prompts[1], 30), o, nullptr);
      EXPECT_EQ(out.sequences[0].tokens, expected[1]) << "K=" << k;
    }
    SpeculationConfig cost_aware = testing::FixedDrafts(8);
    cost_aware.policy = DraftLengthPolicyKind::kCostAware;
    EXPECT_EQ(GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv,
                                  Greedy(prompts[4], 30), cost_aware, nullptr)
                  .sequences[0]
                  .tokens,
              expected[4]);
    for (AttentionMode mode : {AttentionMode::kPad, AttentionMode::kSplit}) {
      GenerateRequest r = Greedy({}, 30);
      r.prompts = prompts;
      r.attention = mode;
      const auto out =
          GenerateSpeculative(*p.target, *p.draft, p.ctx, *target_kv, *draft_kv, r, 3, nullptr);
      ASSERT_EQ(out.sequences.size(), static_cast<size_t>(n));
      for (int b = 0; b < n; ++b) EXPECT_EQ(out.sequences[b].tokens, expected[b]) << b;
    }
  }
  SPECD_SKIP_IF_UNTESTED(untested);
}

// The tiny target written as an i8 file once (its weights then do not depend on the kernels
// that ran its SmoothQuant calibration).
std::string TinyI8File() {
  const std::string path = testing::TempDir() + "/tiny-i8-fixed.gguf";
  if (!std::filesystem::exists(path)) {
    const testing::CliRun run = testing::RunSpecd(
        "quantize " + testing::TinyModel("tiny", DType::kQ8_0, 7) + " " + path + " --type i8");
    EXPECT_EQ(run.exit_code, 0) << run.out;
  }
  return path;
}

// A row's logits are the same bits decoded alone, inside a verification chunk or in a ragged
// batch; on specd's VNNI kernel and on oneDNN alike. (The portable path is batch invariant too,
// but its attention and activation kernels round differently from the AVX-512 ones, so it is
// compared with itself; its matmul equals the others' in the kernel tests above.)
TEST_P(Int8Paths, I8ModelRowLogitsDoNotDependOnBatchBackendOrKernel) {
  testing::UntestedPaths untested;
  const CpuFeatures cpu = CpuFeatures::Detect();
  const std::vector<int32_t> seq_a = testing::Prompt(12, 1), seq_b = testing::Prompt(5, 2);
  std::vector<float> reference;  // [12, n_vocab] sequence a, one forward per token
  const std::string path_i8 = TinyI8File();
  const Int8Backend backends[] = {Int8Backend::kSpecd, Int8Backend::kSpecd, Int8Backend::kOneDnn,
                                  Int8Backend::kAmx};
  for (int path = 0; path < 4; ++path) {
    const bool avx512 = path > 0;
    // AMX's instance compares with specd's VNNI path (path 1) too.
    if ((!Runs(backends[path]) && !(amx() && path == 1)) ||
        !untested.Check(!avx512 || cpu.avx512, "avx512")) {
      continue;
    }
    ThreadPool pool(2);
    KernelContext ctx{&pool, cpu, backends[path]};
    ctx.cpu.avx512 = avx512;
    struct {
      KernelContext ctx;
      std::unique_ptr<Model> target;
    } p{ctx, Model::Load(path_i8, &ctx)};
    const int64_t n_vocab = p.target->config().n_vocab;
    auto kv = p.target->NewKvCache({2, 64});
    // Sequence a token by token.
    const int a = kv->Acquire();
    std::vector<float> one_by_one, logits;
    for (size_t i = 0; i < seq_a.size(); ++i) {
      Batch batch;
      batch.Add(seq_a[i], static_cast<int32_t>(i), a, true);
      p.target->Forward(p.ctx, batch, *kv, AttentionMode::kSplit, &logits);
      one_by_one.insert(one_by_one.end(), logits.begin(), logits.end());
    }
    if (reference.empty() || path == 1) reference = one_by_one;
    EXPECT_EQ(0, std::memcmp(one_by_one.data(), reference.data(), reference.size() * 4))
        << "path " << path;
    // The first 4 tokens, then 8 rows at once beside another sequence's 5-row prompt.
    kv->Truncate(a, 4);
    const int b = kv->Acquire();
    Batch batch;
    for (int i = 4; i < 12; ++i) batch.Add(seq_a[i], i, a, true);
    for (int i = 0; i < 5; ++i) batch.Add(seq_b[i], i, b, false);
    p.target->Forward(p.ctx, batch, *kv, AttentionMode::kPad, &logits);
    EXPECT_EQ(0, std::memcmp(logits.data(), reference.data() + 4 * n_vocab, 8 * n_vocab * 4))
        << "path " << path;
  }
  SPECD_SKIP_IF_UNTESTED(untested);
}

// specd quantize --type i8 writes the conversion --weights i8 makes at load (SmoothQuant on the
// built-in calibration text included): the same logits, bit for bit.
TEST(I8Model, QuantizedFileEqualsTheLoadTimeConversion) {
  const std::string source = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string path = testing::TempDir() + "/tiny-i8.gguf";
  const testing::CliRun run = testing::RunSpecd("quantize " + source + " " + path + " --type i8");
  ASSERT_EQ(run.exit_code, 0) << run.out;
  ThreadPool pool(2);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  WeightOptions flags;
  flags.int8 = true;
  auto converted = Model::Load(source, &ctx, LoadOptionsForModel(flags, source));
  auto from_file = Model::Load(path, &ctx);
  ASSERT_EQ(from_file->MatrixType(), DType::kI8);
  ASSERT_NE(from_file->gguf().FindTensor("blk.0.attn_q.smooth"), nullptr);
  std::vector<float> want, got;
  for (Model* model : {converted.get(), from_file.get()}) {
    auto kv = model->NewKvCache({1, 64});
    const int seq = kv->Acquire();
    Batch batch;
    const auto prompt = testing::Prompt(9, 4);
    for (size_t i = 0; i < prompt.size(); ++i) batch.Add(prompt[i], i, seq, true);
    model->Forward(ctx, batch, *kv, AttentionMode::kSplit, model == converted.get() ? &want : &got);
  }
  EXPECT_EQ(want, got);
  // Without SmoothQuant the logits differ (so the migration is really applied).
  flags.smooth_alpha = 0.0f;
  auto plain = Model::Load(source, &ctx, LoadOptionsForModel(flags, source));
  auto kv = plain->NewKvCache({1, 64});
  const int seq = kv->Acquire();
  Batch batch;
  const auto prompt = testing::Prompt(9, 4);
  for (size_t i = 0; i < prompt.size(); ++i) batch.Add(prompt[i], i, seq, true);
  std::vector<float> unsmoothed;
  plain->Forward(ctx, batch, *kv, AttentionMode::kSplit, &unsmoothed);
  EXPECT_NE(unsmoothed, want);
}

// A damaged i8 file is refused with an error naming what is wrong.
TEST(I8Model, MissingOrBadRowScalesAreClearErrors) {
  const std::string source = testing::TinyModel("tiny", DType::kQ8_0, 7);
  const std::string good = testing::TempDir() + "/tiny-i8-good.gguf";
  ASSERT_EQ(testing::RunSpecd("quantize " + source + " " + good + " --type i8").exit_code, 0);
  auto in = GgufFile::Open(good);
  auto rewrite = [&](const std::string& path, const std::string& drop, bool negative_scale) {
    GgufWriter w;
    for (const auto& [k, v] : in->metadata()) w.Set(k, v);
    for (const auto& t : in->tensors()) {
      if (t.name == drop) continue;
      std::vector<uint8_t> bytes(t.data, t.data + t.n_bytes);
      if (negative_scale && t.name == "blk.1.ffn_up.scale") bytes[3] |= 0x80;
      w.AddTensor(t.name, t.type, t.shape, std::move(bytes));
    }
    w.Write(path);
  };
  const std::string missing = testing::TempDir() + "/tiny-i8-missing.gguf";
  rewrite(missing, "blk.0.attn_k.scale", false);
  const std::string negative = testing::TempDir() + "/tiny-i8-negative.gguf";
  rewrite(negative, "", true);
  ThreadPool pool(1);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  for (const auto& [path, message] :
       {std::pair<std::string, std::string>{missing, "has no row scales ('blk.0.attn_k.scale')"},
        {negative, "'blk.1.ffn_up.scale' row 0 is not a finite non-negative scale"}}) {
    try {
      Model::Load(path, &ctx);
      ADD_FAILURE() << path << " loaded";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace specd
