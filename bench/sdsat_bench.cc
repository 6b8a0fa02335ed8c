#include "bench/sdsat_bench.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/error.h"
#include "bench/bench_prompts.h"
#include "bench/machine.h"
#include "draft/sdsat_proposer.h"
#include "engine/engine_builder.h"
#include "engine/generate.h"
#include "engine/model_options.h"
#include "tokenizer/tokenizer.h"

namespace specd::bench {
namespace {

struct Run {
  double tokens_per_s = 0;
  SpeculativeStats stats;
};

// Median by tokens/s.
Run Median(std::vector<Run> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.tokens_per_s < b.tokens_per_s; });
  return runs[runs.size() / 2];
}

std::string PerPosition(const SpeculativeStats& s, nlohmann::json* out) {
  std::string text;
  for (size_t i = 0; i < s.drafted_at_position.size(); ++i) {
    const double rate =
        s.drafted_at_position[i] ? double(s.accepted_at_position[i]) / s.drafted_at_position[i] : 0;
    out->push_back(rate);
    char cell[16];
    std::snprintf(cell, sizeof(cell), "%s%.2f", i ? " " : "", rate);
    text += cell;
  }
  return text;
}

// Requests of `batch` sequences each that together cover every prompt once (the last one may
// wrap around), so that batch 1 is not measured on a single prompt.
std::vector<GenerateRequest> RequestsOverEveryPrompt(
    const std::vector<std::vector<int32_t>>& prompts, int batch, int n_predict,
    const SamplingParams& sampling) {
  std::vector<GenerateRequest> requests;
  for (size_t first = 0; first < prompts.size(); first += batch) {
    GenerateRequest request;
    request.sum_logprob = false;
    for (int b = 0; b < batch; ++b)
      request.prompts.push_back(prompts[(first + b) % prompts.size()]);
    request.prompt = request.prompts[0];
    request.n_sequences = batch;
    request.n_predict = n_predict;
    request.sampling = sampling;
    request.stop_at_eos = false;
    requests.push_back(std::move(request));
  }
  return requests;
}

// Runs every request with `generate` and sums tokens and time (and, through it, statistics).
template <typename Generate>
Run RunAll(const std::vector<GenerateRequest>& requests, Generate generate) {
  Run run;
  double n_tokens = 0, ms = 0;
  for (const GenerateRequest& request : requests) {
    const GenerateResult r = generate(request, &run);
    n_tokens += r.n_tokens;
    ms += r.t_prefill_ms + r.t_decode_ms;
  }
  run.tokens_per_s = n_tokens / (ms / 1000.0);
  return run;
}

struct Setting {
  std::string name;
  SamplingParams params;
  SpecSampling mode;
};

// Greedy, then each temperature (top-k 10, top-p 0.95) with each way of verifying.
std::vector<Setting> Settings(const SpecBenchOptions& o) {
  std::vector<Setting> settings = {{"greedy", {0.0f, 0, 1.0f, 1}, SpecSampling::kRejection}};
  for (float t : o.temperatures) {
    for (const SpecSampling mode : o.spec_samplings) {
      const bool coupled = mode == SpecSampling::kCoupled;
      char name[64];
      std::snprintf(name, sizeof(name), "t=%.1f top-k=10 top-p=0.95 %s", t,
                    coupled ? "coupled" : "rejection");
      settings.push_back({name, {t, 10, 0.95f, 1}, mode});
    }
  }
  return settings;
}

// One SDSAT loop tried: k adaptive tokens, merged or two-step, a tree or a chain.
struct Candidate {
  int k;
  bool merge;
  int tree_nodes;
  std::vector<Run> runs;
  std::string Loop() const {
    return merge            ? "merged"
           : tree_nodes > 0 ? StrCat("two-step, tree of ", tree_nodes)
                            : "two-step";
  }
};

// The target drafting for itself, and what it runs on.
struct SdsatRun {
  std::unique_ptr<LoadedModels> models;
  std::vector<std::vector<int32_t>> prompts;
  SdsatOptions base;            // adaptive token and the longest k
  std::unique_ptr<KvCache> kv;  // [max batch, 512 + rider rows]
};

SdsatRun SetUp(const SpecBenchOptions& o, const SdsatBenchOptions& so) {
  SPECD_CHECK(!o.target.empty(), "bench spec --strategy sdsat needs a target model (-m)");
  EngineConfig config;
  config.model_path = o.target;
  config.weights = o.weights;
  config.threads = o.threads;
  SdsatRun r;
  r.models = LoadModels(config);  // warmed up
  const Model& target = *r.models->target;
  SPECD_CHECK(r.models->tokenizer != nullptr, o.target, " has no tokenizer");
  r.prompts = BenchPrompts(target, *r.models->tokenizer, o.prompt_set);
  const int k_max = *std::max_element(so.ks.begin(), so.ks.end());
  r.base = SdsatOptionsForModel(target, k_max, o.speculation.sdsat.adaptive_token);
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  const int max_nodes =
      so.tree_nodes.empty() ? 0 : *std::max_element(so.tree_nodes.begin(), so.tree_nodes.end());
  r.kv = r.models->target->NewKvCache(
      {max_batch, 512 + std::max(2 * k_max, max_nodes) + 1, o.cache_type});
  return r;
}

std::string Opening(const SpecBenchOptions& o, const SdsatBenchOptions& so, const SdsatRun& r) {
  std::ostringstream md;
  md << "SDSAT benchmark, " << Today() << ", " << CpuName() << " (" << r.models->ctx.cpu.Name()
     << " kernels), " << o.threads << " threads, " << o.target
     << " drafting for itself with adaptive token " << r.base.adaptive_token << ", " << o.n_predict
     << " new tokens per sequence, one " << (o.prompt_set == "chat" ? "chat" : "Python")
     << " prompt per sequence, every one of the " << r.prompts.size()
     << " prompts in each setting (batch B: " << r.prompts.size()
     << " / B batches in turn), median of " << o.reps
     << " round-robin runs. `merged`: adaptive tokens ride on every verification "
     << "(one forward per loop when every draft is kept); `two-step`: the paper's loop; "
     << "`tree of N`: the two-step loop drafting a token tree of N nodes (width " << so.tree_width
     << "), as deep as k.\n\n"
     << "| sampling | batch | k | loop | plain tok/s | sdsat tok/s | speedup | acceptance | "
        "mean accepted length | acceptance by position |\n"
     << "|---|---|---|---|---|---|---|---|---|---|\n";
  return md.str();
}

// Plain decoding and every candidate over the requests, `reps` rounds in turn; the plain runs.
std::vector<Run> RunCandidates(const SpecBenchOptions& o, const SdsatBenchOptions& so, SdsatRun& r,
                               const Setting& setting, const std::vector<GenerateRequest>& requests,
                               std::vector<Candidate>* candidates) {
  Model& target = *r.models->target;
  const KernelContext& ctx = r.models->ctx;
  std::vector<Run> plain_runs;
  for (int rep = 0; rep < o.reps; ++rep) {
    plain_runs.push_back(RunAll(requests, [&](const GenerateRequest& request, Run*) {
      return GenerateAutoregressive(target, ctx, *r.kv, request, setting.mode);
    }));
    for (Candidate& c : *candidates) {
      SdsatOptions options = r.base;
      options.n_adaptive = c.k;
      options.merge = c.merge;
      options.tree_nodes = c.tree_nodes;
      options.tree_width = so.tree_width;
      SpeculationConfig spec;
      spec.policy = DraftLengthPolicyKind::kFixed;
      spec.draft_max = c.tree_nodes > 0 ? c.tree_nodes : c.k;
      spec.sampling = setting.mode;
      c.runs.push_back(RunAll(requests, [&](const GenerateRequest& request, Run* run) {
        SdsatProposer proposer(options);
        SpeculativeStats stats;
        GenerateResult result =
            GenerateWithProposer(target, ctx, *r.kv, proposer, request, spec, &stats);
        run->stats.Add(stats);
        return result;
      }));
    }
  }
  return plain_runs;
}

}  // namespace

void RunSdsatBench(const SpecBenchOptions& o, const SdsatBenchOptions& so) {
  SdsatRun r = SetUp(o, so);
  nlohmann::json report = {{"date", Today()},
                           {"cpu", CpuName()},
                           {"kernels", r.models->ctx.cpu.Name()},
                           {"target", o.target},
                           {"threads", o.threads},
                           {"n_predict", o.n_predict},
                           {"adaptive_token", r.base.adaptive_token},
                           {"prompt_set", o.prompt_set}};
  std::ostringstream md;
  md << Opening(o, so, r);
  for (const Setting& setting : Settings(o)) {
    for (int batch : o.batches) {
      const std::vector<GenerateRequest> requests =
          RequestsOverEveryPrompt(r.prompts, batch, o.n_predict, setting.params);
      std::vector<Candidate> candidates;
      for (int k : so.ks) {
        candidates.push_back({k, true, 0, {}});
        if (so.unmerged_too) candidates.push_back({k, false, 0, {}});
        for (int nodes : so.tree_nodes) candidates.push_back({k, false, nodes, {}});
      }
      const Run plain = Median(RunCandidates(o, so, r, setting, requests, &candidates));
      for (const Candidate& c : candidates) {
        const Run run = Median(c.runs);
        nlohmann::json by_position = nlohmann::json::array();
        const std::string positions = PerPosition(run.stats, &by_position);
        char line[1024];
        std::snprintf(
            line, sizeof(line), "| %s | %d | %d | %s | %.1f | %.1f | %.2fx | %.3f | %.2f | %s |\n",
            setting.name.c_str(), batch, c.k, c.Loop().c_str(), plain.tokens_per_s,
            run.tokens_per_s, run.tokens_per_s / plain.tokens_per_s, run.stats.acceptance_rate(),
            run.stats.mean_accepted_length(), positions.c_str());
        md << line;
        std::fprintf(stderr, "[bench sdsat] %s", line);
        report["runs"].push_back({{"sampling", setting.name},
                                  {"batch", batch},
                                  {"k", c.k},
                                  {"merged", c.merge},
                                  {"tree_nodes", c.tree_nodes},
                                  {"plain_tokens_per_s", plain.tokens_per_s},
                                  {"tokens_per_s", run.tokens_per_s},
                                  {"acceptance_rate", run.stats.acceptance_rate()},
                                  {"mean_accepted_length", run.stats.mean_accepted_length()},
                                  {"acceptance_by_position", by_position}});
      }
    }
  }
  std::printf("%s", md.str().c_str());
  std::filesystem::create_directories(o.out_dir);
  std::ofstream(o.out_dir + "/sdsat.md") << md.str();
  std::ofstream(o.out_dir + "/sdsat.json") << report.dump(2) << "\n";
}

}  // namespace specd::bench
