#include "bench/forward_bench.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
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

// Forwards over m rows of one sequence (a verification chunk: logits for all) after `context`
// positions already in its cache, each timed and its rows then taken back out of the cache.
class ChunkForwards {
 public:
  ChunkForwards(Model& model, const KernelContext& ctx, int m, int context, DType cache_type)
      : model_(model),
        kv_(model.NewKvCache({1, context + m, cache_type})),
        m_(m),
        context_(context) {
    seq_ = kv_->Acquire();
    Batch batch;
    for (int i = 0; i < context; ++i) batch.Add(1 + i % 100, i, seq_, false);
    model.Forward(ctx, batch, *kv_, AttentionMode::kSplit, &logits_);
  }
  double Ms(const KernelContext& ctx) {
    Batch batch;
    for (int i = 0; i < m_; ++i) batch.Add(7 + i, context_ + i, seq_, true);
    Timer t;
    model_.Forward(ctx, batch, *kv_, AttentionMode::kSplit, &logits_);
    const double ms = t.ElapsedMs();
    kv_->Truncate(seq_, context_);
    return ms;
  }

 private:
  Model& model_;
  std::unique_ptr<KvCache> kv_;
  int m_, context_, seq_ = 0;
  std::vector<float> logits_;
};

// Median ms of one of ChunkForwards' forwards. `profile`, when given, times the ops of the
// timed forwards only (not the context's prefill or the warm-up).
double ForwardMs(Model& model, const KernelContext& ctx, int m, int context, DType cache_type,
                 int reps, ForwardProfile* profile = nullptr) {
  ChunkForwards forwards(model, ctx, m, context, cache_type);
  std::vector<double> times;
  for (int rep = 0; rep < reps + 1; ++rep) {
    if (rep == 1) model.SetProfile(profile);
    const double ms = forwards.Ms(ctx);
    if (rep > 0) times.push_back(ms);  // rep 0 warms up
  }
  model.SetProfile(nullptr);
  return Median(times);
}

// The kernel the engine's measurement picked per weight type, shape and row bucket (stderr).
void PrintKernelChoices(const PackedKernelChooser& chooser) {
  for (const auto& [key, amx] : chooser.Decisions()) {
    const std::string type(DTypeName(static_cast<DType>(key.type)));
    std::fprintf(stderr, "[bench] %s [%lld x %lld], %d+ rows: %s\n", type.c_str(),
                 static_cast<long long>(key.rows), static_cast<long long>(key.cols),
                 16 << key.bucket, amx ? "AMX" : "VNNI");
  }
}

// What the bench collects as it goes: the JSON report and the Markdown's sections.
struct ForwardReport {
  nlohmann::json json;
  std::ostringstream md;                // the opening and the decode table
  std::ostringstream md_rows;           // M-row costs
  std::ostringstream md_bounds;         // M-row lower bounds
  std::ostringstream md_profile;        // per-op times
  std::ostringstream md_choice;         // the measured kernel choice against AMX from 16 rows
  std::map<int, double> bandwidth_gbs;  // by thread count, the latest measured
  double peak_gmacs = 0.0, amx_peak_gmacs = 0.0;
};

class ForwardBench {
 public:
  explicit ForwardBench(const ForwardBenchOptions& o)
      : o_(o),
        cpu_(CpuFeatures::Detect()),
        synthetic_(o.model_path.empty()),
        max_threads_(*std::max_element(o.threads.begin(), o.threads.end())) {}

  void Run() {
    std::filesystem::create_directories(o_.model_dir);
    std::filesystem::create_directories(o_.out_dir);
    MeasureMachine();
    const std::vector<DType> types = synthetic_ ? o_.types : std::vector<DType>{DType::kF32};
    for (DType listed_type : types) {
      for (const std::string& form : o_.weights) MeasureModel(listed_type, form);
    }
    Write();
  }

 private:
  void Log(const std::string& s) const {
    if (o_.verbose) std::cerr << "[bench] " << s << std::endl;
  }
  std::string Subject() const {
    return synthetic_ ? StrCat("synthetic ", o_.shape) : o_.model_path;
  }

  // Bandwidth per thread count, the int8 peaks, and the Markdown tables' headers.
  void MeasureMachine() {
    r_.json = {{"date", Today()},        {"cpu", CpuName()},
               {"kernels", cpu_.Name()}, {"model", Subject()},
               {"context", o_.context},  {"cache_type", std::string(DTypeName(o_.cache_type))}};
    for (int t : o_.threads) {
      ThreadPool pool(t);
      r_.bandwidth_gbs[t] = MeasureReadBandwidthGBs(pool, size_t{1} << 30, 5);
      Log(StrCat("read bandwidth with ", t, " thread(s): ", r_.bandwidth_gbs[t], " GB/s"));
      r_.json["bandwidth_gbs"][std::to_string(t)] = r_.bandwidth_gbs[t];
    }
    {
      ThreadPool pool(1);
      WeightOptions i8_options = o_.weight_options;
      i8_options.int8 = true;
      const KernelContext ctx{&pool, cpu_, Int8BackendFor(i8_options, cpu_)};
      r_.json["int8_kernel"] = Int8KernelName(ctx);
      r_.md << "Forward benchmark, " << Today() << ", " << CpuName() << " (" << cpu_.Name()
            << " kernels; int8 matmuls on " << Int8KernelName(ctx) << "), ";
    }
    r_.md << Subject() << "\n\n"
          << "| weights | GiB read/token | threads | decode tok/s | read GB/s | roofline tok/s | "
             "fraction |\n"
          << "|---|---|---|---|---|---|---|\n";
    r_.md_rows << "| weights |";
    for (int m : o_.rows) r_.md_rows << " M=" << m << " |";
    r_.md_rows << "\n|---|";
    for (size_t i = 0; i < o_.rows.size(); ++i) r_.md_rows << "---|";
    r_.md_rows << "\n";
    ThreadPool pool(max_threads_);
    r_.peak_gmacs = MeasureInt8PeakGmacs(pool, 3);
    Log(StrCat("int8 VNNI peak with ", max_threads_, " thread(s): ", r_.peak_gmacs, " GMAC/s"));
    r_.json["int8_peak_gmacs"] = r_.peak_gmacs;
    r_.amx_peak_gmacs = MeasureAmxInt8PeakGmacs(pool, 3);
    if (r_.amx_peak_gmacs > 0.0) {
      Log(StrCat("int8 AMX peak with ", max_threads_, " thread(s): ", r_.amx_peak_gmacs,
                 " GMAC/s"));
      r_.json["amx_int8_peak_gmacs"] = r_.amx_peak_gmacs;
    }
  }

  // The model file: the one given, or the synthetic shape in this type (written once).
  std::string ModelPath(DType listed_type) const {
    if (!synthetic_) return o_.model_path;
    const std::string path =
        StrCat(o_.model_dir, "/", o_.shape, "-", DTypeName(listed_type), ".gguf");
    if (!std::filesystem::exists(path)) {
      Log(StrCat("writing ", path));
      ThreadPool pool(max_threads_);
      WriteSyntheticModel(ShapeByName(o_.shape), listed_type, 1, path, &pool);
    }
    return path;
  }

  void MeasureModel(DType listed_type, const std::string& form) {
    const std::string path = ModelPath(listed_type);
    ThreadPool load_pool(max_threads_);
    WeightOptions flags = o_.weight_options;
    flags.int8 = form == "i8";
    const Int8Backend backend = flags.int8 ? Int8BackendFor(flags, cpu_) : Int8Backend::kAuto;
    const KernelContext load_ctx{&load_pool, cpu_, backend};
    auto model = Model::Load(path, &load_ctx, LoadOptionsForModel(flags, path));
    nlohmann::json entry;
    entry["type"] = DTypeName(model->MatrixType());
    entry["weight_bytes_per_token"] = model->WeightBytesPerToken();
    for (int t : o_.threads) Decode(*model, t, backend, &entry);
    ThreadPool pool(max_threads_);
    KernelContext ctx{&pool, cpu_, backend};
    ctx.packed_chooser = std::make_shared<PackedKernelChooser>();  // as the engine runs
    RowCosts(*model, ctx, &entry);
    PrintKernelChoices(*ctx.packed_chooser);
    if (IsPackable(model->MatrixType()) && r_.peak_gmacs > 0.0) Bounds(*model, ctx, &entry);
    if (o_.profile) ProfileOps(*model, ctx, &entry);
    if (o_.kernel_choice_ab && cpu_.amx_int8 && backend == Int8Backend::kAuto) {
      ChoiceAgainstAmx(*model, ctx, &entry);
    }
    r_.json["models"].push_back(entry);
  }

  // Decode tokens/s with `threads` against the DRAM roofline.
  void Decode(Model& model, int threads, Int8Backend backend, nlohmann::json* entry) {
    ThreadPool pool(threads);
    const KernelContext ctx{&pool, cpu_, backend};
    const DType type = model.MatrixType();
    // The machine is shared and its memory speed changes state within minutes: the bandwidth
    // is measured just before and just after this decode (the better of the two), not carried
    // over from other types, so that the fraction compares figures of one state.
    double& bandwidth = r_.bandwidth_gbs[threads];
    bandwidth = MeasureReadBandwidthGBs(pool, size_t{1} << 30, 3);
    double tps = 0.0;
    for (int rep = 0; rep < 3; ++rep) {
      tps = std::max(tps, DecodeTokensPerSecond(model, ctx, o_.n_decode, o_.cache_type));
    }
    bandwidth = std::max(bandwidth, MeasureReadBandwidthGBs(pool, size_t{1} << 30, 3));
    const double roof = bandwidth * 1e9 / model.WeightBytesPerToken();
    Log(StrCat(DTypeName(type), " threads=", threads, ": ", tps, " tok/s, roofline ", roof));
    (*entry)["decode"][std::to_string(threads)] = {{"tokens_per_s", tps},
                                                   {"bandwidth_gbs", bandwidth},
                                                   {"roofline_tokens_per_s", roof},
                                                   {"fraction", tps / roof}};
    char line[256];
    std::snprintf(line, sizeof(line), "| %s | %.2f | %d | %.1f | %.1f | %.1f | %.2f |\n",
                  std::string(DTypeName(type)).c_str(),
                  model.WeightBytesPerToken() / double(1ull << 30), threads, tps, bandwidth, roof,
                  tps / roof);
    r_.md << line;
  }

  // One forward over M rows after the context, relative to the first M.
  void RowCosts(Model& model, const KernelContext& ctx, nlohmann::json* entry) {
    const DType type = model.MatrixType();
    double base_ms = 0.0;
    r_.md_rows << "| " << DTypeName(type) << " |";
    for (int m : o_.rows) {
      const double ms = ForwardMs(model, ctx, m, o_.context, o_.cache_type, o_.n_reps);
      if (m == o_.rows.front()) base_ms = ms;
      Log(StrCat(DTypeName(type), " M=", m, ": ", ms, " ms (", ms / base_ms, "x)"));
      (*entry)["rows"][std::to_string(m)] = {{"ms", ms}, {"relative", ms / base_ms}};
      char cell[64];
      std::snprintf(cell, sizeof(cell), " %.2fx (%.3g ms) |", ms / base_ms, ms);
      r_.md_rows << cell;
    }
    r_.md_rows << "\n";
  }

  // Forwards over M rows with `chosen` (its chooser decided by RowCosts) and with AMX at every
  // row count from 16 in turn, one of each per round: the median ratio of the pairs' times.
  void ChoiceAgainstAmx(Model& model, const KernelContext& chosen, nlohmann::json* entry) {
    KernelContext all_amx = chosen;
    all_amx.packed_chooser = nullptr;
    r_.md_choice << "| " << DTypeName(model.MatrixType()) << " |";
    for (int m : o_.rows) {
      ChunkForwards forwards(model, chosen, m, o_.context, o_.cache_type);
      std::vector<double> ratios;
      for (int rep = 0; rep < o_.n_reps + 1; ++rep) {
        const double chosen_ms = forwards.Ms(chosen);
        const double amx_ms = forwards.Ms(all_amx);
        if (rep > 0) ratios.push_back(chosen_ms / amx_ms);  // round 0 warms up
      }
      const double ratio = Median(ratios);
      (*entry)["rows"][std::to_string(m)]["chosen_over_amx"] = ratio;
      char cell[48];
      std::snprintf(cell, sizeof(cell), " %.3f |", ratio);
      r_.md_choice << cell;
    }
    r_.md_choice << "\n";
  }

  // What no kernel can beat: the weights streamed once from DRAM, and the matmul work done at
  // the peak of the arithmetic that runs it (AMX where a tile kernel does, else VNNI).
  // Verifying K drafts is cheap only while the first bound dominates.
  void Bounds(const Model& model, const KernelContext& ctx, nlohmann::json* entry) {
    const DType type = model.MatrixType();
    const double macs = static_cast<double>(model.MatmulMacsPerToken());
    for (int m : o_.rows) {
      nlohmann::json& row = (*entry)["rows"][std::to_string(m)];
      const double ms = row["ms"].get<double>();
      const double memory_ms = model.WeightBytesPerToken() / (r_.bandwidth_gbs[max_threads_] * 1e6);
      const bool on_amx = r_.amx_peak_gmacs > 0.0 &&
                          (type == DType::kI8 ? RunsOnAmx(ctx, m) : PackedRunsOnAmx(ctx, m));
      const double compute_ms = m * macs / ((on_amx ? r_.amx_peak_gmacs : r_.peak_gmacs) * 1e6);
      row["dram_bound_ms"] = memory_ms;
      row["int8_compute_bound_ms"] = compute_ms;
      char line[160];
      std::snprintf(line, sizeof(line), "| %s | %d | %.3g | %.3g | %.3g | %.2f |\n",
                    std::string(DTypeName(type)).c_str(), m, ms, memory_ms, compute_ms,
                    std::max(memory_ms, compute_ms) / ms);
      r_.md_bounds << line;
    }
  }

  // Where an M-row forward's time goes, per op: what grows with M and what does not.
  void ProfileOps(Model& model, const KernelContext& ctx, nlohmann::json* entry) {
    std::vector<ForwardProfile> profiles(o_.rows.size());
    for (size_t i = 0; i < o_.rows.size(); ++i) {
      ForwardMs(model, ctx, o_.rows[i], o_.context, o_.cache_type, o_.n_reps, &profiles[i]);
      (*entry)["profile"][std::to_string(o_.rows[i])]["forwards"] = profiles[i].n_forwards;
    }
    std::ostringstream& md = r_.md_profile;
    md << "\n"
       << DTypeName(model.MatrixType()) << ": ms per forward by op, " << max_threads_
       << " threads\n\n| op |";
    for (int m : o_.rows) md << " M=" << m << " |";
    md << "\n|---|";
    for (size_t i = 0; i < o_.rows.size(); ++i) md << "---|";
    md << "\n";
    for (int op = 0; op <= ForwardProfile::kCount; ++op) {
      const char* name = op < ForwardProfile::kCount ? ForwardProfile::Name(op) : "total";
      md << "| " << name << " |";
      for (size_t i = 0; i < o_.rows.size(); ++i) {
        const ForwardProfile& p = profiles[i];
        double ms = 0.0;
        for (int j = 0; j < ForwardProfile::kCount; ++j) {
          if (j == op || op == ForwardProfile::kCount) ms += p.ms[j];
        }
        ms /= std::max<int64_t>(1, p.n_forwards);
        (*entry)["profile"][std::to_string(o_.rows[i])][name] = ms;
        char cell[32];
        std::snprintf(cell, sizeof(cell), " %.4f |", ms);
        md << cell;
      }
      md << "\n";
    }
  }

  void Write() {
    std::ostringstream& md = r_.md;
    md << "\nCost of one forward over M rows (one sequence, logits for every row) after "
       << o_.context << " positions (" << DTypeName(o_.cache_type)
       << " KV cache), relative to M=" << o_.rows.front() << ", " << max_threads_ << " threads:\n\n"
       << r_.md_rows.str();
    if (!r_.md_bounds.str().empty()) {
      char peak[64];
      std::snprintf(peak, sizeof(peak), "%.0f", r_.peak_gmacs);
      char amx_peak[96] = "";
      if (r_.amx_peak_gmacs > 0.0) {
        std::snprintf(amx_peak, sizeof(amx_peak),
                      "; i8 rows on AMX tiles at the AMX peak, %.0f GMAC/s", r_.amx_peak_gmacs);
      }
      md << "\nLower bounds of an M-row forward, " << max_threads_
         << " threads: all weights read once from DRAM, and the matmul multiply-accumulates at "
            "the int8 VNNI peak measured here ("
         << peak << " GMAC/s" << amx_peak
         << "). A model that fits the L3 cache reads faster than DRAM.\n\n"
         << "| weights | M | ms | DRAM bound ms | int8 compute bound ms | larger bound / ms (> 1: "
            "weights came from cache) |\n"
         << "|---|---|---|---|---|---|\n"
         << r_.md_bounds.str();
    }
    md << r_.md_profile.str();
    if (!r_.md_choice.str().empty()) {
      md << "\nTime of a forward with the engine's measured kernel choice (AMX or VNNI per weight "
            "shape, from 16 rows) over one with AMX from 16 rows, paired forwards in turn, "
            "medians:\n\n| weights |";
      for (int m : o_.rows) md << " M=" << m << " |";
      md << "\n|---|";
      for (size_t i = 0; i < o_.rows.size(); ++i) md << "---|";
      md << "\n" << r_.md_choice.str();
    }
    std::cout << md.str() << std::flush;
    std::ofstream(o_.out_dir + "/forward.md") << md.str();
    std::ofstream(o_.out_dir + "/forward.json") << r_.json.dump(2) << "\n";
  }

  const ForwardBenchOptions& o_;
  const CpuFeatures cpu_;
  const bool synthetic_;
  const int max_threads_;
  ForwardReport r_;
};

}  // namespace

void RunForwardBench(const ForwardBenchOptions& o) { ForwardBench(o).Run(); }

}  // namespace specd::bench
