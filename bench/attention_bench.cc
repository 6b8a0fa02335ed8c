#include "bench/attention_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/cpu_features.h"
#include "base/rng.h"
#include "base/timer.h"
#include "bench/machine.h"
#include "kernels/kernels.h"

namespace specd::bench {
namespace {

// B sequences of f16 K / V caches: sequence s holds about `context` keys (ragged: +-25%) and
// verifies its last `rows` positions.
struct SyntheticBatch {
  std::vector<std::vector<uint16_t>> k, v;  // [B][n_ctx * kv_dim]
  std::vector<float> q, out;                // [n_rows, n_head * head_dim]
  AttentionRows rows;
};

SyntheticBatch MakeBatch(const AttentionBenchOptions& o, int batch, int context) {
  SyntheticBatch b;
  const int kv_dim = o.n_head_kv * o.head_dim;
  SplitMix64 rng(static_cast<uint64_t>(batch) * 1000 + context);
  AttentionRows& r = b.rows;
  r.n_head = o.n_head;
  r.n_head_kv = o.n_head_kv;
  r.head_dim = o.head_dim;
  r.scale = 1.0f / std::sqrt(static_cast<float>(o.head_dim));
  r.kv_type = DType::kF16;
  b.k.resize(batch);
  b.v.resize(batch);
  for (int s = 0; s < batch; ++s) {
    // Ragged: sequence s has context * (0.75 .. 1.25) keys, the longest decides PAD's padding.
    const int length = std::max(o.rows, context * (3 + (s * 2) % 5) / 4);
    std::vector<float> values(static_cast<size_t>(length) * kv_dim);
    for (auto& x : values) x = rng.NextSymmetric();
    b.k[s].resize(values.size());
    b.v[s].resize(values.size());
    reference::StoreKvRow(values.data(), values.size(), DType::kF16, b.k[s].data());
    for (auto& x : values) x = rng.NextSymmetric();
    reference::StoreKvRow(values.data(), values.size(), DType::kF16, b.v[s].data());
    r.seq_row_begin.push_back(r.n_rows);
    for (int i = 0; i < o.rows; ++i) {
      r.k.push_back(b.k[s].data());
      r.v.push_back(b.v[s].data());
      r.n_visible.push_back(length - o.rows + i + 1);
      ++r.n_rows;
    }
  }
  r.seq_row_begin.push_back(r.n_rows);
  b.q.resize(static_cast<size_t>(r.n_rows) * o.n_head * o.head_dim);
  for (auto& x : b.q) x = 2.0f * rng.NextSymmetric();
  b.out.resize(b.q.size());
  r.q = b.q.data();
  r.out = b.out.data();
  return b;
}

}  // namespace

void RunAttentionBench(const AttentionBenchOptions& o) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  ThreadPool pool(o.threads);
  const KernelContext ctx{&pool, cpu};
  std::filesystem::create_directories(o.out_dir);
  nlohmann::json report;
  report["date"] = Today();
  report["cpu"] = CpuName();
  report["kernels"] = cpu.Name();
  std::ostringstream md;
  md << "Attention benchmark, " << Today() << ", " << CpuName() << " (" << cpu.Name()
     << " kernels), " << o.threads << " threads. f16 KV cache, " << o.n_head << " heads / "
     << o.n_head_kv << " KV heads of " << o.head_dim << ", " << o.rows
     << " rows per sequence (a verification), contexts ragged +-25% around C; ms per call, "
        "median of "
     << o.reps << " interleaved runs. All three give the same bits.\n\n"
     << "| batch | C | row ms | BASS-PAD ms | BASS-SPLIT ms | row / SPLIT | PAD / SPLIT |\n"
     << "|---|---|---|---|---|---|---|\n";
  const AttentionMode modes[3] = {AttentionMode::kRow, AttentionMode::kPad, AttentionMode::kSplit};
  for (int batch : o.batches) {
    for (int context : o.contexts) {
      SyntheticBatch b = MakeBatch(o, batch, context);
      std::vector<double> ms[3];
      for (int rep = 0; rep < o.reps + 1; ++rep) {
        for (int i = 0; i < 3; ++i) {  // interleaved: the VM's state changes within minutes
          Timer t;
          Attention(ctx, b.rows, modes[i]);
          if (rep > 0) ms[i].push_back(t.ElapsedMs());
        }
      }
      double median[3];
      for (int i = 0; i < 3; ++i) {
        std::sort(ms[i].begin(), ms[i].end());
        median[i] = ms[i][ms[i].size() / 2];
      }
      char line[200];
      std::snprintf(line, sizeof(line), "| %d | %d | %.3f | %.3f | %.3f | %.2fx | %.2fx |\n",
                    batch, context, median[0], median[1], median[2], median[0] / median[2],
                    median[1] / median[2]);
      md << line;
      std::cerr << line;
      report["runs"].push_back({{"batch", batch},
                                {"context", context},
                                {"row_ms", median[0]},
                                {"pad_ms", median[1]},
                                {"split_ms", median[2]}});
    }
  }
  std::cout << md.str() << std::flush;
  std::ofstream(o.out_dir + "/attention.md") << md.str();
  std::ofstream(o.out_dir + "/attention.json") << report.dump(2) << "\n";
}

}  // namespace specd::bench
