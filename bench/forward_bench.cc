#include "bench/forward_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/timer.h"
#include "bench/compute_peak.h"
#include "bench/machine.h"
#include "bench/membw.h"
#include "engine/model_options.h"
#include "model/model.h"
#include "model/synth.h"

namespace specd::bench {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Decode tokens/s: a short prompt, then n single-row forwards.
double DecodeTokensPerSecond(Model& model, const KernelContext& ctx, int n_decode,
                             DType cache_type) {
  auto kv = model.NewKvCache({1, 64 + n_decode + 8, cache_type});
  const int seq = kv->Acquire();
  std::vector<float> logits;
  Batch batch;
  for (int i = 0; i < 8; ++i) batch.Add(1 + i, i, seq, i == 7);
  model.Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
  for (int warm = 0; warm < 2; ++warm) {  // first touches of the mapping, page faults
    batch.Clear();
    batch.Add(3, kv->Length(seq), seq, true);
    model.Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
  }
  Timer t;
  for (int i = 0; i < n_decode; ++i) {
    batch.Clear();
    batch.Add(5 + i % 100, kv->Length(seq), seq, true);
    model.Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
  }
  return n_decode / (t.ElapsedMs() / 1000.0);
}

// Median ms of one forward over m rows of one sequence (a verification chunk: logits for all)
// after `context` positions already in the cache. `profile`, when given, times the ops of the
// timed forwards only (not the context's prefill or the warm-up).
double ForwardMs(Model& model, const KernelContext& ctx, int m, int context, DType cache_type,
                 int reps, ForwardProfile* profile = nullptr) {
  auto kv = model.NewKvCache({1, context + m, cache_type});
  const int seq = kv->Acquire();
  std::vector<float> logits;
  Batch batch;
  for (int i = 0; i < context; ++i) batch.Add(1 + i % 100, i, seq, false);
  model.Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
  std::vector<double> times;
  for (int rep = 0; rep < reps + 1; ++rep) {
    batch.Clear();
    for (int i = 0; i < m; ++i) batch.Add(7 + i, context + i, seq, true);
    if (rep == 1) model.SetProfile(profile);
    Timer t;
    model.Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits);
    if (rep > 0) times.push_back(t.ElapsedMs());  // rep 0 warms up
    kv->Truncate(seq, context);
  }
  model.SetProfile(nullptr);
  return Median(times);
}

}  // namespace

void RunForwardBench(const ForwardBenchOptions& o) {
  const CpuFeatures cpu = CpuFeatures::Detect();
  const bool synthetic = o.model_path.empty();
  const std::string subject = synthetic ? StrCat("synthetic ", o.shape) : o.model_path;
  std::filesystem::create_directories(o.model_dir);
  std::filesystem::create_directories(o.out_dir);
  auto log = [&](const std::string& s) {
    if (o.verbose) std::cerr << "[bench] " << s << std::endl;
  };

  nlohmann::json report;
  report["date"] = Today();
  report["cpu"] = CpuName();
  report["kernels"] = cpu.Name();
  report["model"] = subject;
  report["context"] = o.context;
  report["cache_type"] = std::string(DTypeName(o.cache_type));

  std::map<int, double> bandwidth;
  for (int t : o.threads) {
    ThreadPool pool(t);
    bandwidth[t] = MeasureReadBandwidthGBs(pool, size_t{1} << 30, 5);
    log(StrCat("read bandwidth with ", t, " thread(s): ", bandwidth[t], " GB/s"));
    report["bandwidth_gbs"][std::to_string(t)] = bandwidth[t];
  }

  std::ostringstream md;
  {
    ThreadPool pool(1);
    WeightFlags i8_flags = o.weight_flags;
    i8_flags.weights = "i8";
    const KernelContext ctx{&pool, cpu, Int8BackendFromFlags(i8_flags, cpu)};
    report["int8_kernel"] = Int8KernelName(ctx);
    md << "Forward benchmark, " << Today() << ", " << CpuName() << " (" << cpu.Name()
       << " kernels; i8 weights, where run, on " << Int8KernelName(ctx) << "), ";
  }
  md << subject << "\n\n";
  md << "| weights | GiB read/token | threads | decode tok/s | read GB/s | roofline tok/s | "
        "fraction |\n";
  md << "|---|---|---|---|---|---|---|\n";
  std::ostringstream md_rows;
  md_rows << "| weights |";
  for (int m : o.rows) md_rows << " M=" << m << " |";
  md_rows << "\n|---|";
  for (size_t i = 0; i < o.rows.size(); ++i) md_rows << "---|";
  md_rows << "\n";

  const int max_threads = *std::max_element(o.threads.begin(), o.threads.end());
  const std::vector<DType> types = synthetic ? o.types : std::vector<DType>{DType::kF32};
  std::ostringstream md_profile;
  std::ostringstream md_bounds;
  double peak_gmacs = 0.0, amx_peak_gmacs = 0.0;
  {
    ThreadPool pool(max_threads);
    peak_gmacs = MeasureInt8PeakGmacs(pool, 3);
    log(StrCat("int8 VNNI peak with ", max_threads, " thread(s): ", peak_gmacs, " GMAC/s"));
    report["int8_peak_gmacs"] = peak_gmacs;
    amx_peak_gmacs = MeasureAmxInt8PeakGmacs(pool, 3);
    if (amx_peak_gmacs > 0.0) {
      log(StrCat("int8 AMX peak with ", max_threads, " thread(s): ", amx_peak_gmacs, " GMAC/s"));
      report["amx_int8_peak_gmacs"] = amx_peak_gmacs;
    }
  }
  std::vector<std::pair<DType, std::string>> variants;  // (listed type, weights form)
  for (DType listed_type : types) {
    for (const std::string& form : o.weights) variants.emplace_back(listed_type, form);
  }
  for (const auto& [listed_type, form] : variants) {
    std::string path = o.model_path;
    if (synthetic) {
      path = StrCat(o.model_dir, "/", o.shape, "-", DTypeName(listed_type), ".gguf");
      if (!std::filesystem::exists(path)) {
        log(StrCat("writing ", path));
        ThreadPool pool(max_threads);
        WriteSyntheticModel(ShapeByName(o.shape), listed_type, 1, path, &pool);
      }
    }
    ThreadPool load_pool(max_threads);
    WeightFlags flags = o.weight_flags;
    flags.weights = form;
    const Int8Backend backend =
        form.empty() ? Int8Backend::kAuto : Int8BackendFromFlags(flags, cpu);
    const KernelContext load_ctx{&load_pool, cpu, backend};
    auto model = Model::Load(path, &load_ctx, LoadOptionsForModel(flags, path));
    const DType type = model->MatrixType();
    const double gib = model->WeightBytesPerToken() / double(1ull << 30);
    nlohmann::json entry;
    entry["type"] = DTypeName(type);
    entry["weight_bytes_per_token"] = model->WeightBytesPerToken();
    for (int t : o.threads) {
      ThreadPool pool(t);
      const KernelContext ctx{&pool, cpu, backend};
      // The machine is shared and its memory speed changes state within minutes: the bandwidth
      // is measured just before and just after this decode (the better of the two), not carried
      // over from other types, so that the fraction compares figures of one state.
      bandwidth[t] = MeasureReadBandwidthGBs(pool, size_t{1} << 30, 3);
      double tps = 0.0;
      for (int rep = 0; rep < 3; ++rep) {
        tps = std::max(tps, DecodeTokensPerSecond(*model, ctx, o.n_decode, o.cache_type));
      }
      bandwidth[t] = std::max(bandwidth[t], MeasureReadBandwidthGBs(pool, size_t{1} << 30, 3));
      const double roof = bandwidth[t] * 1e9 / model->WeightBytesPerToken();
      log(StrCat(DTypeName(type), " threads=", t, ": ", tps, " tok/s, roofline ", roof));
      entry["decode"][std::to_string(t)] = {{"tokens_per_s", tps},
                                            {"bandwidth_gbs", bandwidth[t]},
                                            {"roofline_tokens_per_s", roof},
                                            {"fraction", tps / roof}};
      char line[256];
      std::snprintf(line, sizeof(line), "| %s | %.2f | %d | %.1f | %.1f | %.1f | %.2f |\n",
                    std::string(DTypeName(type)).c_str(), gib, t, tps, bandwidth[t], roof,
                    tps / roof);
      md << line;
    }
    ThreadPool pool(max_threads);
    const KernelContext ctx{&pool, cpu, backend};
    double base_ms = 0.0;
    md_rows << "| " << DTypeName(type) << " |";
    for (int m : o.rows) {
      const double ms = ForwardMs(*model, ctx, m, o.context, o.cache_type, o.n_reps);
      if (m == o.rows.front()) base_ms = ms;
      log(StrCat(DTypeName(type), " M=", m, ": ", ms, " ms (", ms / base_ms, "x)"));
      entry["rows"][std::to_string(m)] = {{"ms", ms}, {"relative", ms / base_ms}};
      char cell[64];
      std::snprintf(cell, sizeof(cell), " %.2fx (%.3g ms) |", ms / base_ms, ms);
      md_rows << cell;
    }
    md_rows << "\n";
    if (IsPackable(type) && peak_gmacs > 0.0) {
      // What no kernel can beat: the weights streamed once from DRAM, and the matmul work done at
      // the peak of the arithmetic that runs it (AMX where the i8 tile kernel does, else VNNI).
      // Verifying K drafts is cheap only while the first bound dominates.
      const double macs = static_cast<double>(model->MatmulMacsPerToken());
      for (int m : o.rows) {
        const double ms = entry["rows"][std::to_string(m)]["ms"].get<double>();
        const double memory_ms = model->WeightBytesPerToken() / (bandwidth[max_threads] * 1e6);
        const bool on_amx = type == DType::kI8 && amx_peak_gmacs > 0.0 && RunsOnAmx(ctx, m);
        const double compute_ms = m * macs / ((on_amx ? amx_peak_gmacs : peak_gmacs) * 1e6);
        entry["rows"][std::to_string(m)]["dram_bound_ms"] = memory_ms;
        entry["rows"][std::to_string(m)]["int8_compute_bound_ms"] = compute_ms;
        char line[160];
        std::snprintf(line, sizeof(line), "| %s | %d | %.3g | %.3g | %.3g | %.2f |\n",
                      std::string(DTypeName(type)).c_str(), m, ms, memory_ms, compute_ms,
                      std::max(memory_ms, compute_ms) / ms);
        md_bounds << line;
      }
    }
    if (o.profile) {
      // Where an M-row forward's time goes, per op: what grows with M and what does not.
      std::vector<ForwardProfile> profiles(o.rows.size());
      for (size_t i = 0; i < o.rows.size(); ++i) {
        ForwardMs(*model, ctx, o.rows[i], o.context, o.cache_type, o.n_reps, &profiles[i]);
        entry["profile"][std::to_string(o.rows[i])]["forwards"] = profiles[i].n_forwards;
      }
      md_profile << "\n"
                 << DTypeName(type) << ": ms per forward by op, " << max_threads
                 << " threads\n\n| op |";
      for (int m : o.rows) md_profile << " M=" << m << " |";
      md_profile << "\n|---|";
      for (size_t i = 0; i < o.rows.size(); ++i) md_profile << "---|";
      md_profile << "\n";
      for (int op = 0; op <= ForwardProfile::kCount; ++op) {
        md_profile << "| " << (op < ForwardProfile::kCount ? ForwardProfile::Name(op) : "total")
                   << " |";
        for (size_t i = 0; i < o.rows.size(); ++i) {
          const ForwardProfile& p = profiles[i];
          double ms = 0.0;
          for (int j = 0; j < ForwardProfile::kCount; ++j) {
            if (j == op || op == ForwardProfile::kCount) ms += p.ms[j];
          }
          ms /= std::max<int64_t>(1, p.n_forwards);
          entry["profile"][std::to_string(o.rows[i])]
               [op < ForwardProfile::kCount ? ForwardProfile::Name(op) : "total"] = ms;
          char cell[32];
          std::snprintf(cell, sizeof(cell), " %.4f |", ms);
          md_profile << cell;
        }
        md_profile << "\n";
      }
    }
    report["models"].push_back(entry);
  }
  md << "\nCost of one forward over M rows (one sequence, logits for every row) after " << o.context
     << " positions (" << DTypeName(o.cache_type) << " KV cache), relative to M=" << o.rows.front()
     << ", " << max_threads << " threads:\n\n"
     << md_rows.str();
  if (!md_bounds.str().empty()) {
    char peak[64];
    std::snprintf(peak, sizeof(peak), "%.0f", peak_gmacs);
    char amx_peak[96] = "";
    if (amx_peak_gmacs > 0.0) {
      std::snprintf(amx_peak, sizeof(amx_peak),
                    "; i8 rows on AMX tiles at the AMX peak, %.0f GMAC/s", amx_peak_gmacs);
    }
    md << "\nLower bounds of an M-row forward, " << max_threads
       << " threads: all weights read once from DRAM, and the matmul multiply-accumulates at the "
          "int8 VNNI peak measured here ("
       << peak << " GMAC/s" << amx_peak
       << "). A model that fits the L3 cache reads faster than DRAM.\n\n"
       << "| weights | M | ms | DRAM bound ms | int8 compute bound ms | larger bound / ms (> 1: "
          "weights came from cache) |\n"
       << "|---|---|---|---|---|---|\n"
       << md_bounds.str();
  }
  md << md_profile.str();
  std::cout << md.str() << std::flush;
  std::ofstream(o.out_dir + "/forward.md") << md.str();
  std::ofstream(o.out_dir + "/forward.json") << report.dump(2) << "\n";
}

}  // namespace specd::bench
