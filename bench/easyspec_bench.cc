#include "bench/easyspec_bench.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/timer.h"
#include "bench/bench_prompts.h"
#include "bench/machine.h"
#include "engine/engine_builder.h"
#include "engine/generate.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace specd::bench {
namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

std::string Fixed(double x, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, x);
  return buf;
}

// A KV cache holding `context` read exactly, and its slot.
std::unique_ptr<KvCache> Prefilled(Model& model, const KernelContext& ctx,
                                   const std::vector<int32_t>& context, int room) {
  auto kv = model.NewKvCache({1, static_cast<int>(context.size()) + room});
  const int seq = kv->Acquire();
  Batch b;
  for (size_t i = 0; i < context.size(); ++i) b.Add(context[i], i, seq, false);
  std::vector<float> logits;
  model.Forward(ctx, b, *kv, AttentionMode::kSplit, &logits);
  return kv;
}

// Median wall time of a `rows`-row forward after `context` (the last row scored), fuzzy in
// `groups` or exact (nullptr).
// With `tree`, the rows form two paths from the committed root (row i's parent is row i - 2), as
// a width-2 tree level's forward re-reads them, and the last two rows are scored.
// `between`, when given, runs untimed before each timed forward (a target verification, which
// evicts the draft's weights from the caches as it does inside decoding).
double ForwardMs(Model& model, const KernelContext& ctx, const std::vector<int32_t>& context,
                 int rows, const LayerGroups* groups, int reps, bool tree = false,
                 const std::function<void()>& between = {}) {
  auto kv = Prefilled(model, ctx, context, rows);
  const int n = static_cast<int>(context.size());
  Batch b;
  for (int i = 0; i < rows; ++i) {
    if (!tree) {
      b.Add(context[i % n], n + i, 0, i + 1 == rows);
      continue;
    }
    // Two children of the committed root, then one child of each row two back: two paths.
    const int parent = i < 2 ? Batch::kCommittedParent : i - 2;
    b.AddNode(context[i % n], n + i / 2, 0, i + 2 >= rows, parent);
  }
  std::vector<float> logits;
  std::vector<double> ms;
  for (int r = 0; r < reps + 10; ++r) {
    if (between) between();
    Timer timer;
    model.Forward(ctx, b, *kv, AttentionMode::kSplit, &logits, groups);
    if (r >= 10) ms.push_back(timer.ElapsedMs());  // the first runs warm caches up
    kv->Truncate(0, n);
  }
  return Median(ms);
}

// Time of one layer's attention block (norm share aside) in a 1-row exact forward.
double AttentionBlockMs(Model& model, const KernelContext& ctx, const std::vector<int32_t>& context,
                        int reps) {
  ForwardProfile profile;
  model.SetProfile(&profile);
  ForwardMs(model, ctx, context, 1, nullptr, reps);
  model.SetProfile(nullptr);
  const double block = profile.ms[ForwardProfile::kQkv] + profile.ms[ForwardProfile::kRopeKvWrite] +
                       profile.ms[ForwardProfile::kAttention] +
                       profile.ms[ForwardProfile::kAttnOut];
  return block / profile.n_forwards / model.config().n_layer;
}

// Over the entries finite in both (a restricted draft head leaves -infinity elsewhere).
double Cosine(const std::vector<float>& a, const std::vector<float>& b) {
  double ab = 0, aa = 0, bb = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) continue;
    ab += double{a[i]} * b[i];
    aa += double{a[i]} * a[i];
    bb += double{b[i]} * b[i];
  }
  return aa > 0 && bb > 0 ? ab / std::sqrt(aa * bb) : 1.0;
}

// Fuzzy against exact activations of the draft's 1-row forward at the end of each prompt
// (the paper's table 4), per layer, averaged over prompts.
struct Drift {
  std::vector<double> input, q, k, v;  // [n_layer]
  double logits = 0;
  double top1_agreement = 0;  // share of prompts whose argmax token agrees
};

Drift MeasureDrift(Model& draft, const KernelContext& ctx,
                   const std::vector<std::vector<int32_t>>& prompts, const LayerGroups& groups) {
  const int n_layer = draft.config().n_layer;
  Drift d;
  for (auto* v : {&d.input, &d.q, &d.k, &d.v}) v->assign(n_layer, 0.0);
  for (const auto& prompt : prompts) {
    const std::vector<int32_t> context(prompt.begin(), prompt.end() - 1);
    auto kv = Prefilled(draft, ctx, context, 2);
    Batch b;
    b.Add(prompt.back(), static_cast<int>(context.size()), 0, true);
    ForwardTrace exact, fuzzy;
    std::vector<float> exact_logits, fuzzy_logits;
    draft.SetTrace(&exact);
    draft.Forward(ctx, b, *kv, AttentionMode::kSplit, &exact_logits);
    kv->Truncate(0, static_cast<int>(context.size()));
    draft.SetTrace(&fuzzy);
    draft.Forward(ctx, b, *kv, AttentionMode::kSplit, &fuzzy_logits, &groups);
    draft.SetTrace(nullptr);
    for (int il = 0; il < n_layer; ++il) {
      d.input[il] += Cosine(exact.attn_input[il], fuzzy.attn_input[il]) / prompts.size();
      d.q[il] += Cosine(exact.q[il], fuzzy.q[il]) / prompts.size();
      d.k[il] += Cosine(exact.k[il], fuzzy.k[il]) / prompts.size();
      d.v[il] += Cosine(exact.v[il], fuzzy.v[il]) / prompts.size();
    }
    d.logits += Cosine(exact_logits, fuzzy_logits) / prompts.size();
    d.top1_agreement += double(Argmax(exact_logits) == Argmax(fuzzy_logits)) / prompts.size();
  }
  return d;
}

// One end-to-end configuration: greedy decoding of every prompt at batch 1.
struct Config {
  std::string name;
  bool speculative = true;
  SpeculationConfig options;         // a fixed draft length (draft_max)
  DraftModelOptions drafting;        // fuzzy drafting, calibration, trees
  std::vector<double> tokens_per_s;  // per rep
  SpeculativeStats stats;            // summed over reps
};

struct Pair {
  Model& target;
  Model& draft;
  const KernelContext& ctx;
  KvCache& target_kv;
  KvCache& draft_kv;
};

// Runs every prompt once; checks the output against plain decoding's (greedy must be lossless).
void RunConfig(const Pair& p, const std::vector<std::vector<int32_t>>& prompts, int n_predict,
               const std::vector<std::vector<int32_t>>& plain_tokens, Config* c,
               std::vector<std::vector<int32_t>>* tokens_out) {
  int64_t n_tokens = 0;
  double ms = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateRequest r;
    r.prompt = prompts[i];
    r.n_predict = n_predict;
    r.sampling.temperature = 0.0f;
    r.stop_at_eos = false;
    r.sum_logprob = false;
    const GenerateResult out =
        c->speculative ? GenerateSpeculative(p.target, p.draft, p.ctx, p.target_kv, p.draft_kv, r,
                                             c->options, &c->stats, VerifySampled, c->drafting)
                       : GenerateAutoregressive(p.target, p.ctx, p.target_kv, r);
    n_tokens += out.n_tokens;
    ms += out.t_prefill_ms + out.t_decode_ms;
    const std::vector<int32_t>& tokens = out.sequences.at(0).tokens;
    if (tokens_out != nullptr) tokens_out->push_back(tokens);
    SPECD_CHECK(plain_tokens.empty() || tokens == plain_tokens[i], "bench easyspec: ", c->name,
                " changed the greedy output of prompt ", i, " (a losslessness bug)");
  }
  c->tokens_per_s.push_back(n_tokens / (ms / 1000.0));
}

std::vector<Config> EndToEndConfigs(const EasySpecBenchOptions& o, int n_layer) {
  std::vector<Config> configs;
  configs.push_back({"plain", false, {}, {}, {}, {}});
  for (int k : o.draft_lengths) {
    Config c{"chain K=" + std::to_string(k), true, {}, {}, {}, {}};
    c.options.draft_max = k;
    configs.push_back(c);
  }
  for (int lp : o.lp_sizes) {
    if (lp <= 1) continue;
    for (bool calibrate : {true, false}) {
      if (!calibrate && lp != 2) continue;  // the ablation at LP = 2
      Config c{"chain K=" + std::to_string(o.draft_max) + ", LP=" + std::to_string(lp) +
                   (calibrate ? "" : ", no calibration"),
               true,
               {},
               {},
               {},
               {}};
      c.options.draft_max = o.draft_max;
      c.drafting.fuzzy = LayerGroups::Parse(o.lp_groups, n_layer, lp);
      c.drafting.calibrate = calibrate;
      configs.push_back(c);
    }
  }
  for (int width : o.tree_widths) {
    for (int lp : {1, 2}) {
      Config c{"tree width " + std::to_string(width) + ", " + std::to_string(o.tree_nodes) +
                   " nodes" + (lp > 1 ? ", LP=2" : ""),
               true,
               {},
               {},
               {},
               {}};
      c.options.draft_max = o.tree_nodes;
      c.drafting.tree_width = width;
      if (lp > 1) c.drafting.fuzzy = LayerGroups::Parse(o.lp_groups, n_layer, lp);
      configs.push_back(c);
    }
  }
  return configs;
}

// What every section of the bench shares, and what it writes.
struct EasySpecRun {
  explicit EasySpecRun(const EasySpecBenchOptions& options) : o(options) {}
  const EasySpecBenchOptions& o;
  std::unique_ptr<LoadedModels> models;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> context;  // 64 tokens of the prompts, the forwards' context
  int n_layer = 0;               // the draft's
  nlohmann::json report;
  std::ostringstream md;
};

void SetUp(EasySpecRun& r) {
  const EasySpecBenchOptions& o = r.o;
  SPECD_CHECK(!o.target.empty() && !o.draft.empty(), "bench easyspec needs a target and a draft");
  EngineConfig config;
  config.model_path = o.target;
  config.speculation.proposer = ProposerKind::kDraftModel;
  config.speculation.draft.path = o.draft;
  config.threads = o.threads;
  r.models = LoadModels(config);  // warmed up
  SPECD_CHECK(r.models->tokenizer != nullptr, o.target, " has no tokenizer");
  r.prompts = BenchPrompts(*r.models->target, *r.models->tokenizer, o.prompt_set);
  r.prompts.resize(std::min<size_t>(r.prompts.size(), std::max(o.n_prompts, 1)));
  r.n_layer = r.models->draft->config().n_layer;
  r.context = r.prompts.front();
  while (r.context.size() < 64) {
    r.context.insert(r.context.end(), r.prompts[1].begin(), r.prompts[1].end());
  }
  r.context.resize(64);
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d", std::gmtime(&now));
  const KernelContext& ctx = r.models->ctx;
  r.report = {{"date", date},
              {"cpu", CpuName()},
              {"kernels", ctx.cpu.Name()},
              {"threads", o.threads},
              {"target", o.target},
              {"draft", o.draft},
              {"draft_layers", r.n_layer},
              {"lp_groups", o.lp_groups}};
  r.md << "EasySpec benchmark, " << date << ", " << CpuName() << " (" << ctx.cpu.Name()
       << " kernels), " << o.threads << " threads; target " << o.target << ", draft " << o.draft
       << " (" << r.n_layer << " layers); layer groups: " << o.lp_groups << ".\n\n";
}

// 1. The draft's forward by layer-parallel size: one row (a fuzzy drafting step) and K + 1
//    rows (the shape of a calibration forward after full acceptance).
void ForwardTimes(EasySpecRun& r) {
  const EasySpecBenchOptions& o = r.o;
  Model& target = *r.models->target;
  Model& draft = *r.models->draft;
  const KernelContext& ctx = r.models->ctx;
  const std::vector<int32_t>& context = r.context;
  const int reps = 300;
  // The exact forward's time, measured apart (LP = 1 in the table is the same forward again).
  const double exact_ms = ForwardMs(draft, ctx, context, 1, nullptr, reps);
  // A verification-shaped target forward, run between timed draft forwards for the "after a
  // verification" column: inside decoding the target's weights pass through the caches there.
  auto verify_kv = Prefilled(target, ctx, context, o.draft_max + 1);
  Batch verify_rows;
  for (int i = 0; i <= o.draft_max; ++i) {
    verify_rows.Add(context[i], static_cast<int>(context.size()) + i, 0, true);
  }
  std::vector<float> target_logits;
  const auto verification = [&] {
    target.Forward(ctx, verify_rows, *verify_kv, AttentionMode::kSplit, &target_logits);
    verify_kv->Truncate(0, static_cast<int>(context.size()));
  };
  const double exact_cold_ms =
      ForwardMs(draft, ctx, context, 1, nullptr, reps / 3, false, verification);
  r.md << "## Draft forward time by layer-parallel size (64 tokens of context, median of " << reps
       << "; after a verification: each forward follows a " << o.draft_max + 1
       << "-row target forward, median of " << reps / 3 << ")\n\n| LP | fuzzy layer groups | 1 row "
       << "(ms) | " << o.draft_max + 1
       << " rows (ms) | 1-row speedup | 1 row after a verification (ms) | its speedup |\n"
       << "|---|---|---|---|---|---|---|\n";
  for (int lp : o.lp_sizes) {
    // LP = 1 is the exact forward even where the groups are named explicitly.
    const LayerGroups groups =
        lp == 1 ? LayerGroups{} : LayerGroups::Parse(o.lp_groups, r.n_layer, lp);
    const LayerGroups* g = groups.empty() ? nullptr : &groups;
    const double one = ForwardMs(draft, ctx, context, 1, g, reps);
    const double many = ForwardMs(draft, ctx, context, o.draft_max + 1, g, reps);
    const double cold = ForwardMs(draft, ctx, context, 1, g, reps / 3, false, verification);
    r.md << "| " << lp << " | " << groups.ToString() << " | " << Fixed(one, 4) << " | "
         << Fixed(many, 4) << " | " << Fixed(exact_ms / one, 2) << "x | " << Fixed(cold, 4) << " | "
         << Fixed(exact_cold_ms / cold, 2) << "x |\n";
    r.report["forward"].push_back({{"lp", lp},
                                   {"groups", groups.ToString()},
                                   {"ms_1_row", one},
                                   {"ms_k1_rows", many},
                                   {"ms_1_row_after_verification", cold}});
  }
}

// A tree level's forward against a chain's, and one attention block on 1 and n threads.
void TreeAndAttentionTimes(EasySpecRun& r) {
  Model& draft = *r.models->draft;
  const KernelContext& ctx = r.models->ctx;
  const int reps = 300;
  const int rows = 6;
  const double chain = ForwardMs(draft, ctx, r.context, rows, nullptr, reps);
  const double tree = ForwardMs(draft, ctx, r.context, rows, nullptr, reps, /*tree=*/true);
  r.md << "\nA tree level's forward (" << rows
       << " rows as two 3-token paths, exact): " << Fixed(tree, 4)
       << " ms; the same rows as a chain: " << Fixed(chain, 4) << " ms.\n";
  r.report["tree_forward_ms"] = {{"rows", rows}, {"tree", tree}, {"chain", chain}};
  ThreadPool one_thread(1);
  const KernelContext ctx1{&one_thread, ctx.cpu};
  const double attn1 = AttentionBlockMs(draft, ctx1, r.context, reps);
  const double attn2 = AttentionBlockMs(draft, ctx, r.context, reps);
  r.md << "\nOne layer's attention block (q/k/v, RoPE and KV write, attention, output matmul) in "
          "a 1-row exact forward: "
       << Fixed(attn1 * 1000, 1) << " us on 1 thread, " << Fixed(attn2 * 1000, 1) << " us on "
       << r.o.threads << " threads. A fuzzy group of N layers on N cores costs one 1-thread block "
       << "instead of N blocks on N threads, so it saves time only where splitting a block over "
          "threads is inefficient (synchronisation, small matrices).\n\n";
  r.report["attention_block_us"] = {{"threads_1", attn1 * 1000}, {"threads_n", attn2 * 1000}};
}

// 2. Drift of fuzzy activations (cosine similarity with the exact forward's).
void DriftSection(EasySpecRun& r) {
  r.md << "## Fuzzy vs exact activations (cosine similarity, mean over " << r.prompts.size()
       << " prompts, 1-row forward at each prompt's end)\n\n";
  for (int lp : r.o.lp_sizes) {
    const LayerGroups groups = LayerGroups::Parse(r.o.lp_groups, r.n_layer, lp);
    if (lp == 1 || groups.FuzzyLayers() == 0) continue;
    const Drift d = MeasureDrift(*r.models->draft, r.models->ctx, r.prompts, groups);
    r.md << "LP=" << lp << " (groups " << groups.ToString() << "): logits " << Fixed(d.logits, 4)
         << ", top-1 token agreement " << Fixed(d.top1_agreement, 2) << "\n\n| layer | attention "
         << "input | q | k | v |\n|---|---|---|---|---|\n";
    nlohmann::json layers;
    for (int il = 0; il < r.n_layer; ++il) {
      r.md << "| " << il << " | " << Fixed(d.input[il], 4) << " | " << Fixed(d.q[il], 4) << " | "
           << Fixed(d.k[il], 4) << " | " << Fixed(d.v[il], 4) << " |\n";
      layers.push_back({{"input", d.input[il]}, {"q", d.q[il]}, {"k", d.k[il]}, {"v", d.v[il]}});
    }
    r.md << "\n";
    r.report["drift"].push_back({{"lp", lp},
                                 {"logits", d.logits},
                                 {"top1_agreement", d.top1_agreement},
                                 {"layers", layers}});
  }
}

// 3. End to end, round-robin reps; every run's output checked against plain decoding's.
void EndToEnd(EasySpecRun& r) {
  const EasySpecBenchOptions& o = r.o;
  auto target_kv = r.models->target->NewKvCache({1, 1024});
  auto draft_kv = r.models->draft->NewKvCache({1, 1024});
  const Pair pair{*r.models->target, *r.models->draft, r.models->ctx, *target_kv, *draft_kv};
  std::vector<Config> configs = EndToEndConfigs(o, r.n_layer);
  std::vector<std::vector<int32_t>> plain_tokens;
  for (int rep = 0; rep < o.reps; ++rep) {
    for (Config& c : configs) {
      const bool first_plain = !c.speculative && plain_tokens.empty();
      RunConfig(pair, r.prompts, o.n_predict,
                first_plain ? std::vector<std::vector<int32_t>>{} : plain_tokens, &c,
                first_plain ? &plain_tokens : nullptr);
    }
  }
  const double plain_tps = Median(configs.front().tokens_per_s);
  r.md << "## End to end: greedy, batch 1, " << r.prompts.size() << " " << o.prompt_set
       << " prompts x " << o.n_predict << " tokens, median of " << o.reps
       << " round-robin runs (every run's output equals plain decoding's)\n\n| drafting | tok/s | "
          "speedup | acceptance | mean accepted length | draft ms / step | verify ms / step "
          "|\n|---|---|---|---|---|---|---|\n";
  for (const Config& c : configs) {
    const double tps = Median(c.tokens_per_s);
    const SpeculativeStats& s = c.stats;
    const double steps = std::max<double>(s.n_steps, 1);
    r.md << "| " << c.name << " | " << Fixed(tps, 1) << " | " << Fixed(tps / plain_tps, 2) << "x | "
         << (c.speculative ? Fixed(s.acceptance_rate(), 3) : "-") << " | "
         << (c.speculative ? Fixed(s.mean_accepted_length(), 2) : "-") << " | "
         << (c.speculative ? Fixed(s.t_draft_ms / steps, 3) : "-") << " | "
         << (c.speculative ? Fixed(s.t_verify_ms / steps, 3) : "-") << " |\n";
    r.report["end_to_end"].push_back({{"name", c.name},
                                      {"tokens_per_s", tps},
                                      {"speedup", tps / plain_tps},
                                      {"acceptance", s.acceptance_rate()},
                                      {"mean_accepted_length", s.mean_accepted_length()},
                                      {"draft_ms_per_step", s.t_draft_ms / steps},
                                      {"verify_ms_per_step", s.t_verify_ms / steps}});
  }
}

}  // namespace

void RunEasySpecBench(const EasySpecBenchOptions& o) {
  EasySpecRun r(o);
  SetUp(r);
  ForwardTimes(r);
  TreeAndAttentionTimes(r);
  DriftSection(r);
  EndToEnd(r);
  std::filesystem::create_directories(o.out_dir);
  std::ofstream(o.out_dir + "/easyspec.md") << r.md.str();
  std::ofstream(o.out_dir + "/easyspec.json") << r.report.dump(2) << "\n";
  std::cout << r.md.str();
}

}  // namespace specd::bench
