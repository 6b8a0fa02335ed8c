#include "bench/spec_bench.h"

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/cpu_features.h"
#include "base/error.h"
#include "bench/bench_prompts.h"
#include "bench/machine.h"
#include "draft/combined_proposer.h"
#include "draft/draft_model_proposer.h"
#include "draft/eagle_proposer.h"
#include "draft/ngram_proposer.h"
#include "engine/engine_builder.h"
#include "engine/generate.h"
#include "engine/model_options.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specd::bench {
namespace {

struct Run {
  double tokens_per_s = 0, ptl_first = 0, ptl_last = 0, ptl_all = 0;
  double acceptance = 0, mean_accepted_length = 0;
};

// Summarizes one configuration's run over a batch size's prompt groups (decoded one after the
// other): per-token latency of all sequences averaged over every sequence, of the first and last
// finished averaged over groups, tokens/s over the whole run.
Run Measure(const std::vector<GenerateResult>& groups, const SpeculativeStats* stats) {
  Run out;
  int n_sequences = 0;
  int64_t n_tokens = 0;
  double total_ms = 0;
  for (const GenerateResult& r : groups) {
    double first_ms = 1e300, last_ms = -1, ptl_first = 0, ptl_last = 0;
    for (const SequenceResult& s : r.sequences) {
      if (s.tokens.empty()) continue;
      const double ptl = s.elapsed_ms / s.tokens.size();
      out.ptl_all += ptl;
      ++n_sequences;
      if (s.elapsed_ms < first_ms) first_ms = s.elapsed_ms, ptl_first = ptl;
      if (s.elapsed_ms > last_ms) last_ms = s.elapsed_ms, ptl_last = ptl;
    }
    out.ptl_first += ptl_first / groups.size();
    out.ptl_last += ptl_last / groups.size();
    n_tokens += r.n_tokens;
    total_ms += r.t_prefill_ms + r.t_decode_ms;
  }
  if (n_sequences) out.ptl_all /= n_sequences;
  out.tokens_per_s = n_tokens / (total_ms / 1000.0);
  if (stats) {
    out.acceptance = stats->acceptance_rate();
    out.mean_accepted_length = stats->mean_accepted_length();
  }
  return out;
}

// The requests that run a batch size over the prompts: every prompt once, `batch` at a time
// (ceil(P / batch) groups; the last group wraps around to fill its batch), at most max_groups
// groups when max_groups > 0. Measuring batch 1 on one prompt made its column one prompt's luck.
std::vector<GenerateRequest> PromptGroups(const std::vector<std::vector<int32_t>>& prompts,
                                          int batch, int max_groups,
                                          const GenerateRequest& settings) {
  const int n_prompts = static_cast<int>(prompts.size());
  int n_groups = (n_prompts + batch - 1) / batch;
  if (max_groups > 0) n_groups = std::min(n_groups, max_groups);
  std::vector<GenerateRequest> groups;
  for (int g = 0; g < n_groups; ++g) {
    GenerateRequest request = settings;
    for (int i = 0; i < batch; ++i) request.prompts.push_back(prompts[(g * batch + i) % n_prompts]);
    request.prompt = request.prompts[0];
    request.n_sequences = batch;
    groups.push_back(std::move(request));
  }
  return groups;
}

std::string Svg(const std::vector<int>& batches,
                const std::vector<std::pair<std::string, std::vector<double>>>& series) {
  const double w = 640, h = 400, left = 60, right = 170, top = 30, bottom = 50;
  double y_max = 0;
  for (const auto& [_, ys] : series) {
    for (double y : ys) y_max = std::max(y_max, y);
  }
  y_max *= 1.1;
  auto x_of = [&](size_t i) {
    return left +
           (w - left - right) * (batches.size() > 1 ? double(i) / (batches.size() - 1) : 0.5);
  };
  auto y_of = [&](double y) { return top + (h - top - bottom) * (1 - y / y_max); };
  std::ostringstream s;
  s << "<svg xmlns='http://www.w3.org/2000/svg' width='" << w << "' height='" << h
    << "' font-family='sans-serif' font-size='12'>\n<rect width='100%' height='100%' "
       "fill='white'/>\n";
  s << "<text x='" << left
    << "' y='18'>per-token latency of all sequences (ms) vs batch size</text>\n";
  s << "<line x1='" << left << "' y1='" << h - bottom << "' x2='" << w - right << "' y2='"
    << h - bottom << "' stroke='black'/>\n<line x1='" << left << "' y1='" << top << "' x2='" << left
    << "' y2='" << h - bottom << "' stroke='black'/>\n";
  for (size_t i = 0; i < batches.size(); ++i) {
    s << "<text x='" << x_of(i) - 5 << "' y='" << h - bottom + 18 << "'>" << batches[i]
      << "</text>\n";
  }
  for (int t = 0; t <= 4; ++t) {
    const double y = y_max * t / 4;
    char label[32];
    std::snprintf(label, sizeof(label), "%.2f", y);
    s << "<text x='5' y='" << y_of(y) + 4 << "'>" << label << "</text>\n";
  }
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#1f77b4", "#ff7f0e", "#2ca02c"};
  for (size_t k = 0; k < series.size(); ++k) {
    // Greedy solid, sampled dashed.
    s << "<polyline fill='none' stroke-width='2' stroke='" << colors[k % 6] << "'"
      << (k >= 3 ? " stroke-dasharray='6,4'" : "") << " points='";
    for (size_t i = 0; i < series[k].second.size(); ++i) {
      s << x_of(i) << "," << y_of(series[k].second[i]) << " ";
    }
    s << "'/>\n<text x='" << w - right + 10 << "' y='" << top + 20 * k + 10 << "' fill='"
      << colors[k % 6] << "'>" << series[k].first << "</text>\n";
  }
  s << "<text x='" << (left + w - right) / 2 - 30 << "' y='" << h - 10
    << "'>batch size</text>\n</svg>\n";
  return s.str();
}

}  // namespace

namespace {

// The models, prompts and caches every run of the bench shares.
struct SpecBench {
  std::unique_ptr<LoadedModels> models;
  std::vector<std::vector<int32_t>> prompts;
  DraftModelOptions draft_options;
  std::unique_ptr<KvCache> target_kv;  // [max batch, 512 positions]
  std::unique_ptr<KvCache> draft_kv;
};

SpecBench SetUp(const SpecBenchOptions& o) {
  const SpeculationConfig& spec = o.speculation;
  SPECD_CHECK(!o.target.empty() && !spec.draft.path.empty(),
              "bench spec needs a target and a draft model");
  SPECD_CHECK(spec.proposer == ProposerKind::kDraftModel || spec.proposer == ProposerKind::kNgram ||
                  spec.proposer == ProposerKind::kNgramOrDraft,
              "bench spec compares draft, ngram or draft+ngram with plain decoding (sdsat: "
              "--strategy sdsat)");
  EngineConfig config;
  config.model_path = o.target;
  config.weights = o.weights;
  config.threads = o.threads;
  // The draft is loaded for every proposer (its caches are sized alike), with its vocabulary.
  config.speculation.proposer = ProposerKind::kDraftModel;
  config.speculation.draft = spec.draft;
  SpecBench b;
  b.models = LoadModels(config);
  const Model& target = *b.models->target;
  SPECD_CHECK(b.models->tokenizer != nullptr, o.target, " has no tokenizer");
  b.prompts = BenchPrompts(target, *b.models->tokenizer, o.prompt_set);
  b.draft_options = DraftModelOptionsFor(spec.draft, *b.models->draft);
  const int max_batch = *std::max_element(o.batches.begin(), o.batches.end());
  b.target_kv = target.NewKvCache({max_batch, 512, o.cache_type});
  b.draft_kv = b.models->draft->NewKvCache({max_batch, 512, o.cache_type});
  return b;
}

// One speculative run with the chosen proposer.
GenerateResult RunSpeculative(const SpecBenchOptions& o, SpecBench& b,
                              const GenerateRequest& request, const SpeculationConfig& options,
                              SpeculativeStats* stats) {
  Model& target = *b.models->target;
  Model& draft = *b.models->draft;
  const KernelContext& ctx = b.models->ctx;
  const ProposerKind proposer = o.speculation.proposer;
  if (proposer == ProposerKind::kDraftModel) {
    return GenerateSpeculative(target, draft, ctx, *b.target_kv, *b.draft_kv, request, options,
                               stats, VerifySampled, b.draft_options);
  }
  NgramProposer lookup(o.speculation.ngram_min, o.speculation.ngram_max, target.config().n_vocab);
  if (proposer == ProposerKind::kNgram) {
    return GenerateWithProposer(target, ctx, *b.target_kv, lookup, request, options, stats);
  }
  const auto draft_proposer =
      MakeModelProposer(target, draft, *b.draft_kv, ctx, request.attention, b.draft_options);
  CombinedProposer both(lookup, *draft_proposer);
  return GenerateWithProposer(target, ctx, *b.target_kv, both, request, options, stats);
}

struct Setting {
  std::string name;
  SamplingParams params;
  SpecSampling mode = SpecSampling::kRejection;
};

// Greedy, then each temperature (top-p 0.95) with each way of verifying sampled drafts.
std::vector<Setting> Settings(const SpecBenchOptions& o) {
  std::vector<Setting> settings = {{"greedy", {0.0f, 0, 1.0f, 1}}};
  for (float t : o.temperatures) {
    for (const SpecSampling mode : o.spec_samplings) {
      const bool coupled = mode == SpecSampling::kCoupled;
      char name[64];
      std::snprintf(name, sizeof(name), "t=%.1f top-p=0.95 %s", t,
                    coupled ? "coupled" : "rejection");
      settings.push_back({name, {t, 0, 0.95f, 1}, mode});
    }
  }
  return settings;
}

// EasySpec's drafting, when asked for, in words.
std::string DraftingDescription(const DraftModelOptions& d) {
  std::string drafting;
  if (!d.fuzzy.empty()) {
    drafting += ", fuzzy drafting (layer groups " + d.fuzzy.ToString() +
                (d.calibrate ? ", bonus calibration)" : ", no calibration)");
  }
  if (d.tree_width > 1) {
    drafting += ", token trees of width " + std::to_string(d.tree_width) +
                (d.tree_depth > 0 ? ", depth " + std::to_string(d.tree_depth) : std::string()) +
                " (draft length = tree nodes)";
  }
  return drafting;
}

// The report's fields that describe the run, and the Markdown's opening paragraph and table
// header.
void DescribeRun(const SpecBenchOptions& o, const SpecBench& b, nlohmann::json* report,
                 std::ostringstream* md) {
  const KernelContext& ctx = b.models->ctx;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  const std::string drafting = DraftingDescription(b.draft_options);
  *report = {{"date", date},
             {"target", o.target},
             {"draft", o.speculation.draft.path},
             {"cache_type", DTypeName(o.cache_type)},
             {"cpu", CpuName()},
             {"kernels", ctx.cpu.Name()},
             {"weights", o.weights.int8 ? "i8" : "as stored"},
             {"int8_kernel", Int8KernelName(ctx)},
             {"prompt_set", o.prompt_set},
             {"spec_type", ProposerKindName(o.speculation.proposer)},
             {"n_prompts", b.prompts.size()},
             {"prompt_groups", o.prompt_groups},
             {"drafting", drafting}};
  *md << "Speculative decoding benchmark, " << date << ", " << CpuName() << " (" << ctx.cpu.Name()
      << " kernels" << (o.weights.int8 ? "; i8 weights on " + Int8KernelName(ctx) : std::string())
      << "), " << o.threads << " threads, target " << o.target << ", proposer "
      << DescribeProposer(o.speculation) << drafting << ", " << DTypeName(o.cache_type)
      << " KV caches, " << o.n_predict << " new tokens per sequence, one "
      << (o.prompt_set == "chat" ? "chat" : "Python") << " prompt per sequence, "
      << (o.prompt_groups > 0
              ? "at most " + std::to_string(o.prompt_groups) + " group(s) of prompts per batch"
              : "all " + std::to_string(b.prompts.size()) +
                    " prompts at every batch size (batch B: groups of B decoded in turn)")
      << ", median of " << o.reps
      << " runs per setting (plain decoding and every candidate in turn, prompt group by prompt "
         "group). Per batch: the best fixed / adaptive draft "
      << "length (chosen in hindsight), BASS Algorithm 1 (`adaptive`) and `auto`, the "
      << "cost-aware policy (chosen online; the default).\n\n"
      << "| sampling | batch | plain tok/s | draft length | spec tok/s | acceptance | ptl first "
         "(ms) | ptl last (ms) | ptl all (ms) | speedup first | speedup last | speedup all |\n"
      << "|---|---|---|---|---|---|---|---|---|---|---|---|\n";
}

// A draft-length policy tried against plain decoding, summarized by its median run
// (all-sequence latency).
struct Candidate {
  std::string name;
  SpeculationConfig options;
  std::vector<Run> runs;
  Run median;
};

// Fixed lengths, BASS Algorithm 1, and the cost-aware policy (last).
std::vector<Candidate> Candidates(const SpecBenchOptions& o, const Setting& setting) {
  std::vector<Candidate> candidates;
  for (int k : o.draft_lengths) {
    Candidate c{"K=" + std::to_string(k), {}, {}, {}};
    c.options.policy = DraftLengthPolicyKind::kFixed;
    c.options.draft_max = k;
    candidates.push_back(c);
  }
  // The policies with their defaults (BASS from 7 up to 32, cost-aware 0..8) unless --draft-max.
  Candidate adaptive{"adaptive", {}, {}, {}};
  adaptive.options.policy = DraftLengthPolicyKind::kBass;
  candidates.push_back(adaptive);
  Candidate automatic{"auto", {}, {}, {}};
  automatic.options.policy = DraftLengthPolicyKind::kCostAware;
  candidates.push_back(automatic);
  for (Candidate& c : candidates) {
    if (c.options.policy != DraftLengthPolicyKind::kFixed) {
      c.options.draft_max = o.speculation.draft_max;
    }
    c.options.sampling = setting.mode;
  }
  return candidates;
}

Run MedianRun(std::vector<Run> runs) {
  std::sort(runs.begin(), runs.end(),
            [](const Run& a, const Run& b) { return a.ptl_all < b.ptl_all; });
  return runs[runs.size() / 2];
}

// One batch size of one setting: plain decoding and every candidate.
struct BatchRuns {
  Run plain;
  std::vector<Candidate> candidates;
  double auto_plain_share = 0.0;  // the cost-aware policy's plain steps (median over reps)
};

BatchRuns RunBatch(const SpecBenchOptions& o, SpecBench& b, const Setting& setting, int batch) {
  GenerateRequest request;
  request.n_predict = o.n_predict;
  request.sampling = setting.params;
  request.stop_at_eos = false;
  request.sum_logprob = false;  // as `specd generate` without --json or a budget
  const std::vector<GenerateRequest> groups =
      PromptGroups(b.prompts, batch, o.prompt_groups, request);
  BatchRuns out;
  out.candidates = Candidates(o, setting);
  std::vector<Candidate>& candidates = out.candidates;
  std::vector<Run> plain_runs;
  std::vector<double> auto_plain_share;
  for (int rep = 0; rep < o.reps; ++rep) {
    // Group by group, plain decoding and every candidate in turn, starting one further along
    // each group: this VM's speed moves by 10-30% within a minute, and a candidate run as a
    // whole block minutes after plain decoding took that drift as its own (SmolLM2 on Zen 4,
    // greedy batch 8: the cost-aware policy "1.16x" at 98% plain steps).
    const size_t n_runners = candidates.size() + 1;  // plain decoding is the last
    std::vector<std::vector<GenerateResult>> results(n_runners);
    std::vector<SpeculativeStats> stats(candidates.size());  // summed over the groups
    for (size_t g = 0; g < groups.size(); ++g) {
      for (size_t turn = 0; turn < n_runners; ++turn) {
        const size_t runner = (g + rep + turn) % n_runners;
        if (runner == candidates.size()) {
          results[runner].push_back(GenerateAutoregressive(*b.models->target, b.models->ctx,
                                                           *b.target_kv, groups[g], setting.mode));
          continue;
        }
        const Candidate& c = candidates[runner];
        SpeculationConfig options = c.options;
        options.trace_steps_path = o.speculation.trace_steps_path;
        options.trace_label = setting.name + " batch " + std::to_string(batch) + " " + c.name +
                              " rep " + std::to_string(rep);
        results[runner].push_back(RunSpeculative(o, b, groups[g], options, &stats[runner]));
      }
    }
    plain_runs.push_back(Measure(results.back(), nullptr));
    for (size_t i = 0; i < candidates.size(); ++i) {
      Candidate& c = candidates[i];
      c.runs.push_back(Measure(results[i], &stats[i]));
      if ((c.options.policy == DraftLengthPolicyKind::kCostAware)) {
        auto_plain_share.push_back(
            stats[i].n_steps ? double(stats[i].n_plain_steps) / stats[i].n_steps : 0.0);
      }
    }
  }
  out.plain = MedianRun(plain_runs);
  for (Candidate& c : candidates) c.median = MedianRun(c.runs);
  std::sort(auto_plain_share.begin(), auto_plain_share.end());
  out.auto_plain_share = auto_plain_share[auto_plain_share.size() / 2];
  return out;
}

// The best fixed or adaptive setting (chosen in hindsight; the cost-aware policy chooses
// online, without it).
const Candidate* BestInHindsight(const std::vector<Candidate>& candidates) {
  const Candidate* best = nullptr;
  for (const Candidate& c : candidates) {
    if ((c.options.policy == DraftLengthPolicyKind::kCostAware)) continue;
    if (best == nullptr || c.median.ptl_all < best->median.ptl_all) best = &c;
  }
  return best;
}

// The batch's JSON entry, and Markdown rows for the best, adaptive and cost-aware candidates.
nlohmann::json ReportBatch(const Setting& setting, int batch, const BatchRuns& runs,
                           const Candidate* best, std::ostringstream* md) {
  const Run& plain = runs.plain;
  nlohmann::json entry = {{"sampling", setting.name},
                          {"batch", batch},
                          {"plain",
                           {{"tokens_per_s", plain.tokens_per_s},
                            {"ptl_first_ms", plain.ptl_first},
                            {"ptl_last_ms", plain.ptl_last},
                            {"ptl_all_ms", plain.ptl_all}}}};
  for (const Candidate& c : runs.candidates) {
    const Run& r = c.median;
    entry["speculative"].push_back({{"draft", c.name},
                                    {"tokens_per_s", r.tokens_per_s},
                                    {"acceptance_rate", r.acceptance},
                                    {"mean_accepted_length", r.mean_accepted_length},
                                    {"ptl_first_ms", r.ptl_first},
                                    {"ptl_last_ms", r.ptl_last},
                                    {"ptl_all_ms", r.ptl_all},
                                    {"speedup_all", plain.ptl_all / r.ptl_all}});
    if (&c != best && !(c.options.policy == DraftLengthPolicyKind::kCostAware) &&
        !(c.options.policy == DraftLengthPolicyKind::kBass))
      continue;
    std::string label = (c.options.policy == DraftLengthPolicyKind::kBass) ? "adaptive" : c.name;
    if (&c == best) label += " (best)";
    char line[512];
    if ((c.options.policy == DraftLengthPolicyKind::kCostAware)) {
      std::snprintf(line, sizeof(line), " (default; %.0f%% plain steps)",
                    100.0 * runs.auto_plain_share);
      label += line;
    }
    std::snprintf(
        line, sizeof(line),
        "| %s | %d | %.0f | %s | %.0f | %.2f | %.3f | %.3f | %.3f | %.2fx | %.2fx | %.2fx |\n",
        setting.name.c_str(), batch, plain.tokens_per_s, label.c_str(), r.tokens_per_s,
        r.acceptance, r.ptl_first, r.ptl_last, r.ptl_all, plain.ptl_first / r.ptl_first,
        plain.ptl_last / r.ptl_last, plain.ptl_all / r.ptl_all);
    *md << line;
    std::fprintf(stderr, "[bench spec] %s", line);
  }
  entry["auto_plain_step_share"] = runs.auto_plain_share;
  return entry;
}

}  // namespace

void RunSpecBench(const SpecBenchOptions& o) {
  SpecBench b = SetUp(o);
  nlohmann::json report;
  std::ostringstream md;
  DescribeRun(o, b, &report, &md);
  std::vector<std::pair<std::string, std::vector<double>>> series;
  for (const Setting& setting : Settings(o)) {
    std::vector<double> plain_ptl, spec_ptl, auto_ptl;
    for (int batch : o.batches) {
      const BatchRuns runs = RunBatch(o, b, setting, batch);
      const Candidate* best = BestInHindsight(runs.candidates);
      plain_ptl.push_back(runs.plain.ptl_all);
      spec_ptl.push_back(best->median.ptl_all);
      auto_ptl.push_back(runs.candidates.back().median.ptl_all);
      report["runs"].push_back(ReportBatch(setting, batch, runs, best, &md));
    }
    series.push_back({std::string("plain, ") + setting.name, plain_ptl});
    series.push_back({std::string("best K, ") + setting.name, spec_ptl});
    series.push_back({std::string("auto, ") + setting.name, auto_ptl});
  }
  std::printf("%s", md.str().c_str());
  std::filesystem::create_directories(o.out_dir);
  std::ofstream(o.out_dir + "/spec.md") << md.str();
  std::ofstream(o.out_dir + "/spec.json") << report.dump(2) << "\n";
  std::ofstream(o.out_dir + "/spec.svg") << Svg(o.batches, series);
}

}  // namespace specd::bench
