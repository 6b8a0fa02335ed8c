// `specd bench ...` (the `specd` binary runs this executable): the benchmarks, kept out of the
// shipped binary. Each subcommand registers its flags here and runs its bench/ function.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/error.h"
#include "bench/attention_bench.h"
#include "bench/easyspec_bench.h"
#include "bench/forward_bench.h"
#include "bench/matmul_bench.h"
#include "bench/sdsat_bench.h"
#include "bench/spec_bench.h"
#include "bench/tokenize_bench.h"
#include "flags/common_flags.h"
#include "flags/speculation_flags.h"
#include "model/synth.h"
#include "tensor/dtype.h"

namespace specd::bench {
namespace {

using flags::AddLoraFlags;
using flags::AddThreadsFlag;
using flags::AddWeightFlags;
using flags::ChooseModels;

// A benchmark subcommand: its flags registered, and what runs once they are parsed.
struct Bench {
  CLI::App* command;
  std::function<void()> run;
};

const std::vector<std::string> kWritableTypes = {"f32",  "f16",  "bf16", "q8_0", "q4_0",
                                                 "q4_1", "q5_0", "q5_1", "q4_K", "q6_K"};

Bench ForwardBench(CLI::App& app) {
  auto fwd = std::make_shared<ForwardBenchOptions>();
  auto fwd_types =
      std::make_shared<std::vector<std::string>>(std::vector<std::string>{"bf16", "q8_0", "q4_0"});
  std::string shape_names;
  for (const auto& s : KnownShapes()) shape_names += (shape_names.empty() ? "" : ", ") + s.name;
  auto* bench_forward = app.add_subcommand("forward", "decode speed vs roofline, M-row cost");
  bench_forward->add_option("--shape", fwd->shape, "model shape: " + shape_names);
  bench_forward
      ->add_option("-m,--model", fwd->model_path, "a model file instead of a synthetic shape")
      ->check(CLI::ExistingFile);
  bench_forward->add_option("--types", *fwd_types, "weight types")
      ->delimiter(',')
      ->check(CLI::IsMember(kWritableTypes));
  bench_forward->add_option("--threads", fwd->threads, "thread counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  bench_forward->add_option("--rows", fwd->rows, "row counts M (512: a prompt's read)")
      ->delimiter(',')
      ->check(CLI::Range(1, 2048));
  bench_forward->add_option("--decode", fwd->n_decode, "timed decode steps")
      ->check(CLI::Range(1, 100000));
  bench_forward->add_option("--reps", fwd->n_reps, "repetitions per M")->check(CLI::Range(1, 1000));
  bench_forward
      ->add_option("--context", fwd->context,
                   "positions already in the cache before the M rows (default 16)")
      ->check(CLI::Range(1, 32768));
  flags::AddCacheTypeFlag(bench_forward, &fwd->cache_type);
  bench_forward->add_flag("--profile", fwd->profile, "time each op of the M-row forwards");
  bench_forward->add_flag("--kernel-choice-ab", fwd->kernel_choice_ab,
                          "also time the engine's measured choice of AMX or VNNI per weight shape "
                          "against AMX from 16 rows, forward by forward in turn (CPUs with AMX)");
  bench_forward->add_option("--model-dir", fwd->model_dir, "where synthetic models are kept");
  bench_forward->add_option("--out", fwd->out_dir, "where results are written");
  bench_forward
      ->add_option("--weights", fwd->weights,
                   "weight forms to run each model in: as-stored and / or i8 (converted at load)")
      ->delimiter(',')
      ->transform([](std::string form) { return form == "as-stored" ? std::string() : form; })
      ->check(CLI::IsMember({"", "i8"}));
  flags::AddInt8KernelFlag(bench_forward, &fwd->weight_options);
  AddLoraFlags(bench_forward, &fwd->weight_options);
  return {bench_forward, [fwd, fwd_types] {
            fwd->types.clear();
            for (const auto& t : (*fwd_types)) fwd->types.push_back(*DTypeFromName(t));
            RunForwardBench(*fwd);
          }};
}

Bench AttentionBench(CLI::App& app) {
  auto ab = std::make_shared<AttentionBenchOptions>();
  auto* bench_attention = app.add_subcommand(
      "attention", "BASS-PAD vs BASS-SPLIT vs per-row attention by context length");
  bench_attention->add_option("--contexts", ab->contexts, "keys per sequence (about)")
      ->delimiter(',')
      ->check(CLI::Range(8, 1 << 17));
  bench_attention->add_option("--batches", ab->batches, "sequences")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  bench_attention->add_option("--rows", ab->rows, "rows per sequence")->check(CLI::Range(1, 64));
  bench_attention->add_option("--heads", ab->n_head, "query heads")->check(CLI::Range(1, 256));
  bench_attention->add_option("--kv-heads", ab->n_head_kv, "KV heads")->check(CLI::Range(1, 256));
  bench_attention->add_option("--head-dim", ab->head_dim, "head dimension (multiple of 16)")
      ->check(CLI::Range(16, 512));
  AddThreadsFlag(bench_attention, &ab->threads);
  bench_attention->add_option("--reps", ab->reps, "runs per setting")->check(CLI::Range(1, 1000));
  bench_attention->add_option("--out", ab->out_dir, "where results are written");
  return {bench_attention, [ab] {
            SPECD_CHECK(ab->n_head % ab->n_head_kv == 0 && ab->head_dim % 16 == 0,
                        "bench attention: heads must be a multiple of KV heads, head-dim of 16");
            RunAttentionBench(*ab);
          }};
}

Bench MatmulBench(CLI::App& app) {
  auto mm = std::make_shared<MatmulBenchOptions>();
  auto mm_types = std::make_shared<std::vector<std::string>>();
  auto* bench_matmul = app.add_subcommand("matmul", "specd's matmul kernels vs oneDNN");
  bench_matmul->add_option("-n,--rows", mm->rows_n, "weight rows (outputs)")
      ->check(CLI::Range(16, 1 << 20));
  bench_matmul->add_option("-k,--cols", mm->cols_k, "weight columns (inputs), a multiple of 32")
      ->check(CLI::Range(32, 1 << 16));
  AddThreadsFlag(bench_matmul, &mm->threads);
  bench_matmul->add_option("-M,--m", mm->m, "row counts")
      ->delimiter(',')
      ->check(CLI::Range(1, 2048));
  bench_matmul
      ->add_option("--copies", mm->copies,
                   "distinct copies of the weights used in turn (e.g. 30: streamed from memory "
                   "like a forward's layers; oneDNN rows use one)")
      ->check(CLI::Range(1, 1024));
  bench_matmul
      ->add_option("--types", *mm_types,
                   "weight types of specd's rows (default bf16,q8_0,q4_0); given, only those rows")
      ->delimiter(',')
      ->check(CLI::IsMember({"bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_K", "q6_K"}));
  auto mm_kernels = std::make_shared<std::vector<std::string>>();
  bench_matmul
      ->add_option("--int8-kernels", *mm_kernels,
                   "kernels of the --types rows, timed call by call in turn with their time "
                   "ratios to the first: auto (AMX from 16 rows, VNNI below), specd (VNNI) or "
                   "amx (its tile kernels at every row count)")
      ->delimiter(',')
      ->check(CLI::IsMember({"auto", "specd", "amx"}));
  return {bench_matmul, [mm, mm_types, mm_kernels] {
            SPECD_CHECK(mm->cols_k % 32 == 0, "--cols must be a multiple of 32");
            if (!mm_kernels->empty()) mm->packed_kernels.clear();
            for (const std::string& name : *mm_kernels) {
              mm->packed_kernels.push_back({name, flags::Int8KernelsByName().at(name)});
            }
            if (!(*mm_types).empty()) {
              mm->types.clear();
              for (const std::string& t : (*mm_types)) mm->types.push_back(*DTypeFromName(t));
              mm->skip_int8_and_onednn = true;
            }
            RunMatmulBench(*mm);
          }};
}

// bench spec's SDSAT sweep: adaptive tokens per step and tree sizes.
void AddSdsatSweepFlags(CLI::App* bench_spec, SdsatBenchOptions* sdsat_bench) {
  bench_spec->add_option("--adaptive-ks", sdsat_bench->ks, "sdsat: adaptive tokens per step")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  bench_spec
      ->add_option("--sdsat-trees", sdsat_bench->tree_nodes,
                   "sdsat: also token trees of these many nodes (two-step loop)")
      ->delimiter(',')
      ->check(CLI::Range(1, 256));
  bench_spec->add_option("--sdsat-tree-width", sdsat_bench->tree_width, "sdsat: tree width")
      ->check(CLI::Range(1, 64));
}

void AddSpecSweepFlags(CLI::App* bench_spec, SpecBenchOptions* sb) {
  bench_spec->add_option("--batches", sb->batches, "batch sizes")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  bench_spec->add_option("--draft-lengths", sb->draft_lengths, "fixed draft lengths to try")
      ->delimiter(',')
      ->check(CLI::Range(1, 32));
  bench_spec->add_option("-n,--n-predict", sb->n_predict, "new tokens per sequence")
      ->check(CLI::Range(1, 4096));
  bench_spec->add_option("--reps", sb->reps, "runs per configuration")->check(CLI::Range(1, 100));
  bench_spec->add_option("--out", sb->out_dir, "where results are written");
  bench_spec->add_option("--prompt-set", sb->prompt_set, "code (Python) or chat prompts")
      ->check(CLI::IsMember({"code", "chat"}));
  bench_spec
      ->add_option("--prompt-groups", sb->prompt_groups,
                   "groups of B prompts run at batch B (0: all prompts at every batch size)")
      ->check(CLI::Range(0, 4096));
  bench_spec->add_option("--temps", sb->temperatures, "temperatures of the sampled settings")
      ->delimiter(',')
      ->check(CLI::Range(0.01, 10.0));
  bench_spec
      ->add_option("--spec-samplings", sb->spec_samplings,
                   "how sampled drafts are verified: rejection and / or coupled")
      ->delimiter(',')
      ->transform(CLI::CheckedTransformer(std::map<std::string, SpecSampling>{
          {"coupled", SpecSampling::kCoupled}, {"rejection", SpecSampling::kRejection}}));
}

Bench SpecBench(CLI::App& app) {
  auto sb = std::make_shared<SpecBenchOptions>();
  auto sdsat_bench = std::make_shared<SdsatBenchOptions>();
  auto spec_flags = std::make_shared<flags::SpeculationFlags>();
  auto* bench_spec = app.add_subcommand("spec", "plain vs speculative decoding by batch size");
  bench_spec->add_option("-m,--model", sb->target, "target (default: the shipped one)");
  AddSpecSweepFlags(bench_spec, sb.get());
  AddSdsatSweepFlags(bench_spec, sdsat_bench.get());
  flags::AddSpeculationFlags(bench_spec, spec_flags.get(), flags::SpeculationFlagSet::kSweep);
  AddThreadsFlag(bench_spec, &sb->threads);
  AddWeightFlags(bench_spec, &sb->weights);
  flags::AddCacheTypeFlag(bench_spec, &sb->cache_type);
  return {bench_spec, [sb, sdsat_bench, spec_flags, bench_spec] {
            flags::SpeculationFlags& f = *spec_flags;
            const bool sdsat = f.strategy == flags::Strategy::kSdsat;
            SPECD_CHECK(f.strategy == flags::Strategy::kUnset ||
                            f.strategy == flags::Strategy::kSpec || sdsat,
                        "bench spec --strategy: spec (a proposer against plain) or sdsat (the "
                        "target drafting for itself)");
            const bool draft_given = !f.config.draft.path.empty();
            const bool lookup_only = f.spec_type == ProposerKind::kNgram;
            ChooseModels(&sb->target, &f.config.draft.path, !sdsat,
                         lookup_only ? nullptr : &f.config.draft);
            const std::string draft = f.config.draft.path;
            const bool sdsat_sweep = bench_spec->count("--adaptive-ks") +
                                         bench_spec->count("--sdsat-trees") +
                                         bench_spec->count("--sdsat-tree-width") >
                                     0;
            SPECD_CHECK(sdsat || !sdsat_sweep,
                        "--adaptive-ks, --sdsat-trees and --sdsat-tree-width go with --strategy "
                        "sdsat");
            if (sdsat) {
              SPECD_CHECK(bench_spec->count("--draft-lengths") == 0,
                          "bench spec --strategy sdsat drafts with the target itself: drop "
                          "--draft-lengths");
            }
            sb->speculation = flags::SpeculationFromFlags(f, draft_given && !lookup_only);
            // Loaded for every proposer: the plain and speculative runs' caches are sized alike.
            sb->speculation.draft.path = draft;
            if (sdsat) {
              RunSdsatBench(*sb, *sdsat_bench);
              return;
            }
            RunSpecBench(*sb);
          }};
}

Bench EasySpecBench(CLI::App& app) {
  auto eb = std::make_shared<EasySpecBenchOptions>();
  auto* bench_easyspec = app.add_subcommand(
      "easyspec", "layer-parallel (fuzzy) and tree drafting: forward times, drift, end to end");
  bench_easyspec->add_option("-m,--model", eb->target, "target (default: generate's)");
  flags::AddDraftModelFlag(bench_easyspec, &eb->draft);
  bench_easyspec->add_option("--lp", eb->lp_sizes, "layer-parallel sizes")
      ->delimiter(',')
      ->check(CLI::Range(1, 64));
  bench_easyspec->add_option("--lp-groups", eb->lp_groups, "packed, aligned or ranges");
  bench_easyspec->add_option("--draft-lengths", eb->draft_lengths, "exact chain lengths")
      ->delimiter(',')
      ->check(CLI::Range(1, 32));
  bench_easyspec->add_option("--fuzzy-length", eb->draft_max, "fuzzy chain length")
      ->check(CLI::Range(1, 32));
  bench_easyspec->add_option("--tree-widths", eb->tree_widths, "token tree widths")
      ->delimiter(',')
      ->check(CLI::Range(2, 16));
  bench_easyspec->add_option("--tree-nodes", eb->tree_nodes, "nodes per tree")
      ->check(CLI::Range(1, 32));
  bench_easyspec->add_option("-n,--n-predict", eb->n_predict, "new tokens per prompt")
      ->check(CLI::Range(1, 4096));
  bench_easyspec->add_option("--prompts", eb->n_prompts, "prompts (of 16)")
      ->check(CLI::Range(2, 16));
  bench_easyspec->add_option("--prompt-set", eb->prompt_set, "code or chat")
      ->check(CLI::IsMember({"code", "chat"}));
  AddThreadsFlag(bench_easyspec, &eb->threads);
  bench_easyspec->add_option("--reps", eb->reps, "round-robin runs")->check(CLI::Range(1, 100));
  bench_easyspec->add_option("--out", eb->out_dir, "where results are written");
  return {bench_easyspec, [eb] {
            ChooseModels(&eb->target, &eb->draft, true);
            RunEasySpecBench(*eb);
          }};
}

Bench TokenizeBench(CLI::App& app) {
  auto tb = std::make_shared<TokenizeBenchOptions>();
  auto* bench_tokenize = app.add_subcommand("tokenize", "encoding throughput on a text file");
  bench_tokenize->add_option("-m,--model", tb->models, "models or vocabularies (GGUF)")->required();
  bench_tokenize->add_option("-f,--file", tb->file, "text file")->required();
  bench_tokenize->add_option("--repeats", tb->repeats, "runs per tokenizer (best kept)")
      ->check(CLI::Range(1, 100));
  return {bench_tokenize, [tb] { RunTokenizeBench(*tb); }};
}

}  // namespace

int Run(int argc, char** argv) {
  CLI::App app{"specd bench: benchmarks of specd's kernels, forward pass and decoding"};
  app.option_defaults()->always_capture_default();  // --help shows every default
  app.name("specd bench");
  app.require_subcommand(1);
  const std::vector<Bench> benches = {ForwardBench(app), AttentionBench(app), MatmulBench(app),
                                      SpecBench(app),    EasySpecBench(app),  TokenizeBench(app)};
  if (const int code = flags::ParseCommandLine(app, argc, argv, "specd bench --help"); code >= 0) {
    return code;
  }
  return flags::RunReportingErrors([&]() -> int {
    for (const Bench& bench : benches) {
      if (*bench.command) bench.run();
    }
    return 0;
  });
}

}  // namespace specd::bench

int main(int argc, char** argv) { return specd::bench::Run(argc, argv); }
