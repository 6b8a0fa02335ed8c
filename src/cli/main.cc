// The `specd` command line.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/cpu_features.h"
#include "base/error.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "model/model.h"
#include "model/synth.h"

namespace {

// `specd train ...` runs the `specd-train` executable next to this one (LibTorch takes ~0.4 s to
// load, which every other command would pay if it were linked in here), and `specd bench ...`
// runs `specd-bench`: the shipped binary links no benchmark code.
int RunSubcommandExecutable(int argc, char** argv) {
  const std::string command = argv[1];
  if (command == "train") {
    return specd::cli::ExecSibling(
        "specd-train", std::vector<char*>(argv, argv + argc),
        "which is built only when LibTorch is installed (Debian: libtorch-dev; "
        "then rebuild)");
  }
  std::vector<char*> args(argv + 1, argv + argc);  // "bench" stands for the program's name
  return specd::cli::ExecSibling("specd-bench", args, "which is built with specd (cmake --build)");
}

}  // namespace

int main(int argc, char** argv) {
  using namespace specd;
  using namespace specd::cli;
  if (argc >= 2 && (std::string(argv[1]) == "train" || std::string(argv[1]) == "bench")) {
    return RunSubcommandExecutable(argc, argv);
  }
  CLI::App app{"specd: speculative decoding inference engine for GGUF Llama-family models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "specd 0.1.0");

  GenerateOptions gen;
  auto* generate = app.add_subcommand("generate", "generate text from a prompt");
  generate->add_option("-m,--model", gen.model, "target model (GGUF; default: the shipped one)");
  generate->add_option("--model-draft", gen.draft_model,
                       "draft model for speculative decoding (also -md)");
  generate
      ->add_option("--strategy", gen.strategy,
                   "ar (plain), spec / bass (speculative; default when a draft is given), sdsat "
                   "(the target drafts for itself with adaptive tokens; no draft model)")
      ->check(CLI::IsMember({"ar", "spec", "bass", "sdsat"}));
  generate
      ->add_option("--adaptive-k", gen.adaptive_k,
                   "sdsat: adaptive tokens appended per step = tokens drafted (default 5)")
      ->check(CLI::Range(1, 64));
  generate
      ->add_option("--adaptive-token", gen.adaptive_token,
                   "sdsat: the adaptive token id (default: the one the fine-tuned model records)")
      ->check(CLI::NonNegativeNumber);
  generate
      ->add_option("--sdsat-loop", gen.sdsat_loop,
                   "sdsat: two-step (the paper's loop: adaptive tokens ride on steps without "
                   "drafts; the default, faster on CPUs) or merged (they ride on every "
                   "verification: one forward per loop while every draft is kept)")
      ->check(CLI::IsMember({"two-step", "merged"}));
  generate->add_option("--sdsat-tree", gen.sdsat_tree,
                       "sdsat: draft a token tree of at most NODES nodes, as deep as "
                       "--adaptive-k, each node with at most WIDTH children (default 10), "
                       "verified in one forward: NODES[,WIDTH]");
  generate
      ->add_option("--draft-max", gen.draft_max,
                   "fixed draft length; with --draft-auto its cap, with --draft-adaptive its start")
      ->check(CLI::Range(1, 32));
  generate->add_flag("--draft-adaptive", gen.draft_adaptive,
                     "adapt the draft length by BASS Algorithm 1 (l0 7, +2, limit 32)");
  generate->add_flag("--draft-auto", gen.draft_auto,
                     "choose the draft length from measured costs and acceptance, 0 (plain "
                     "steps) when speculation does not pay; the default without --draft-max");
  generate->add_option("--prompts", gen.prompts_file, "JSON lines, one sequence per prompt");
  generate
      ->add_option("--time-budget-ms", gen.time_budget_ms,
                   "return the sequences finished within this time, best first (0: no budget)")
      ->check(CLI::Range(0.0, 1e9));
  generate->add_option("-p,--prompt", gen.prompt, "prompt text");
  generate->add_option("-f,--file", gen.prompt_file, "file holding the prompt text");
  generate->add_option("--tokens", gen.tokens, "prompt as comma-separated token ids");
  generate
      ->add_option("-n,--n-predict", gen.n_predict,
                   "new tokens per sequence (-1: until EOS or the context is full, as llama.cpp)")
      ->check(CLI::Range(-1, 1 << 20));
  bool no_conversation = false;
  generate->add_flag("--no-conversation", no_conversation,
                     "llama.cpp's -no-cnv: the prompt is text, not a chat turn (the default here)");
  generate->add_option("--temp", gen.temperature, "temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  generate->add_option("--top-k", gen.top_k, "keep the k most likely tokens (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  generate->add_option("--top-p", gen.top_p, "nucleus sampling threshold (1: off)")
      ->check(CLI::Range(0.0, 1.0));
  generate->add_option("--min-p", gen.min_p, "drop tokens below min-p x the most likely (0: off)")
      ->check(CLI::Range(0.0, 1.0));
  generate
      ->add_option("--repeat-penalty", gen.repeat_penalty,
                   "divide the logits of recent tokens by this (1: off; speculation stays "
                   "lossless against the penalized distribution)")
      ->check(CLI::Range(0.01, 100.0));
  generate
      ->add_option("--repeat-last-n", gen.repeat_last_n,
                   "tokens of history the repeat penalty looks at (-1: all, 0: none)")
      ->check(CLI::Range(-1, 1 << 20));
  generate->add_flag("-e,--escape", gen.escape, "process escapes (\\n, \\t, ...) in -p");
  generate->add_flag("--no-display-prompt", gen.no_display_prompt,
                     "print only the generated text, not the prompt");
  generate->add_flag("--color", gen.color, "show the prompt in colour (on a terminal)");
  // llama.cpp flags for features this CPU engine has no use for: accepted, and said so.
  std::vector<std::string> ignored_flags;
  auto note_ignored = [&ignored_flags](const std::string& flag, const char* why) {
    return [&ignored_flags, flag, why](auto&&...) { ignored_flags.push_back(flag + ": " + why); };
  };
  generate
      ->add_option_function<std::string>(
          "-g,--n-gpu-layers,--gpu-layers",
          note_ignored("-ngl", "no GPU offload: specd runs on the CPU"),
          "(llama.cpp; no effect: specd runs on the CPU; also -ngl)")
      ->type_name("N");
  generate
      ->add_option_function<std::string>(
          "--flash-attn", note_ignored("-fa", "specd's attention kernels are its own"),
          "(llama.cpp; no effect: specd's attention kernels are its own; also -fa)")
      ->expected(0, 1)
      ->type_name("[on|off|auto]");
  generate->add_flag_function("--mlock",
                              note_ignored("--mlock", "weights are read in place, not locked"),
                              "(llama.cpp; no effect)");
  generate->add_flag_function("--no-mmap",
                              note_ignored("--no-mmap", "weights are always memory-mapped"),
                              "(llama.cpp; no effect)");
  for (const char* names : {"-b,--batch-size", "--ubatch-size"}) {
    generate
        ->add_option_function<std::string>(
            names,
            note_ignored(names[1] == 'b' ? "-b" : "-ub",
                         "prompts are read in chunks of specd's own size (--batch is the "
                         "number of sequences here, not llama.cpp's -b)"),
            "(llama.cpp's prompt batch; no effect: --batch here counts sequences)")
        ->type_name("N");
  }
  generate->add_option("-s,--seed", gen.seed, "random seed (default: random)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            if (!value.empty() && value[0] == '-') {
              return "--seed must be a non-negative integer (omit it for a random seed)";
            }
            return "";
          },
          "SEED"));
  generate->add_option("-t,--threads", gen.threads, "threads")->check(CLI::Range(1, 256));
  generate->add_option("--batch", gen.batch, "sequences decoded together")
      ->check(CLI::Range(1, 4096));
  generate
      ->add_option("-c,--ctx,--ctx-size", gen.ctx, "context positions per sequence (default: fit)")
      ->check(CLI::Range(1, 1 << 20));
  generate
      ->add_option("--attention", gen.attention,
                   "attention over ragged sequences: split (BASS-SPLIT, one computation per "
                   "sequence), pad (BASS-PAD, all padded to the longest) or row (per row and head)")
      ->check(CLI::IsMember({"pad", "split", "row"}));
  generate
      ->add_option("--cache-type", gen.cache_type,
                   "KV cache type of both models: f16 (default) or f32")
      ->check(CLI::IsMember({"f32", "f16"}));
  generate->add_flag("--json", gen.json, "one JSON object per sequence, then a summary");
  generate->add_flag("--ignore-eos", gen.ignore_eos, "keep generating past end-of-sequence");
  generate->add_flag("--special", gen.special,
                     "parse special tokens (<s>, <|im_start|>) in the prompt");
  generate->add_flag("--chat,--conversation,-i,--interactive", gen.chat,
                     "chat: -p is a user turn in the model's chat format (also -cnv); without a "
                     "prompt, a conversation read from stdin, one turn per line");
  generate->add_option("--system,--system-prompt", gen.system,
                       "system message of a chat (also -sys)");
  generate
      ->add_option("--spec-sampling", gen.spec_sampling,
                   "sampled speculation: coupled (draft and target share Gumbel noise per "
                   "position; the output is plain sampling's with the same seed, whatever the "
                   "draft lengths) or rejection (modified rejection sampling)")
      ->check(CLI::IsMember({"coupled", "rejection"}));
  generate
      ->add_option("--spec-type", gen.spec_type,
                   "proposer: draft (a draft model, -md; the default), ngram (prompt lookup: "
                   "the continuation of the text's latest repeat of its last n tokens) or "
                   "draft+ngram (lookup first, the draft model where it finds nothing)")
      ->check(CLI::IsMember({"draft", "ngram", "draft+ngram"}));
  AddDraftFlags(generate, &gen.draft_flags);
  AddTraceStepsFlag(generate, &gen.trace_steps);
  AddWeightFlags(generate, &gen.weight_flags);
  generate->add_option("--ngram-min", gen.ngram_min, "shortest n-gram looked up (ngram)")
      ->check(CLI::Range(1, 64));
  generate->add_option("--ngram-max", gen.ngram_max, "longest n-gram looked up (ngram)")
      ->check(CLI::Range(1, 64));

  TokenizeOptions tok;
  auto* tokenize = app.add_subcommand("tokenize", "print the tokens of a text");
  tokenize->add_option("-m,--model", tok.model,
                       "model or vocabulary (GGUF; default: generate's default model)");
  tokenize->add_option("-p,--prompt", tok.prompt, "text");
  tokenize->add_option("-f,--file", tok.prompt_file, "file holding the text");
  tokenize->add_flag("--ids-only", tok.ids_only, "print only the ids, as a list");
  tokenize->add_flag("--special", tok.special, "parse special tokens written in the text");
  tokenize->add_flag("--no-bos", tok.no_bos, "do not add BOS / EOS as the model asks");

  std::string synth_shape = "tiny", synth_type = "f32", synth_out;
  int64_t synth_seed = 1;
  int synth_threads = 2;
  auto* synth = app.add_subcommand("synth", "write a GGUF model with seeded random weights");
  std::string shape_names;
  for (const auto& s : KnownShapes()) shape_names += (shape_names.empty() ? "" : ", ") + s.name;
  synth->add_option("--shape", synth_shape, "model shape: " + shape_names);
  const std::vector<std::string> writable_types = {"f32",  "f16",  "bf16", "q8_0", "q4_0",
                                                   "q4_1", "q5_0", "q5_1", "q4_K", "q6_K"};
  synth
      ->add_option("--type", synth_type,
                   "weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                   "q5_1, q4_K, q6_K")
      ->check(CLI::IsMember(writable_types));
  synth->add_option("--seed", synth_seed, "random seed")->check(CLI::NonNegativeNumber);
  synth->add_option("-o,--output", synth_out, "output file")->required();
  synth->add_option("-t,--threads", synth_threads, "threads")->check(CLI::Range(1, 256));

  std::string info_model;
  auto* info = app.add_subcommand("info", "print a GGUF file's metadata and model shape");
  info->add_option("-m,--model", info_model, "GGUF file (default: generate's default model)");

  PerplexityOptions ppl;
  auto* perplexity =
      app.add_subcommand("perplexity", "perplexity of a model on a text (as llama-perplexity)");
  perplexity->add_option("-m,--model", ppl.model, "model (GGUF)")->required();
  perplexity->add_option("-f,--file", ppl.text_file, "text file")->required();
  perplexity->add_option("-c,--ctx", ppl.ctx, "tokens per chunk (the second half is scored)")
      ->check(CLI::Range(16, 1 << 20));
  perplexity->add_option("--chunks", ppl.max_chunks, "score at most this many chunks (0: all)")
      ->check(CLI::NonNegativeNumber);
  perplexity->add_option("-t,--threads", ppl.threads, "threads")->check(CLI::Range(1, 256));
  perplexity->add_flag("--json", ppl.json, "print the result as one JSON object");
  AddWeightFlags(perplexity, &ppl.weight_flags);

  QuantizeOptions quant;
  auto* quantize =
      app.add_subcommand("quantize", "convert a model's matrices to another type (llama-quantize)");
  quantize->add_option("input", quant.input, "input GGUF")->required();
  quantize->add_option("output", quant.output, "output GGUF")->required();
  quantize
      ->add_option("--type", quant.type,
                   "q8_0, q4_0, q4_1, q4_K, q6_K, f16, bf16, f32 or i8 (specd only)")
      ->required()
      ->check(CLI::IsMember({"q8_0", "q4_0", "q4_1", "q4_K", "q4_k", "q6_K", "q6_k", "q5_0", "q5_1",
                             "i8", "f16", "bf16", "f32"}));
  quantize->add_option("-t,--threads", quant.threads, "threads")->check(CLI::Range(1, 256));
  quantize
      ->add_option("--smooth-alpha", quant.smooth_alpha,
                   "i8: SmoothQuant migration strength (0 = none; default 0.5)")
      ->check(CLI::Range(0.0, 1.0));
  quantize
      ->add_option("--calibration", quant.calibration_file,
                   "i8: calibration text (default: a built-in mix of prose, code and chat)")
      ->check(CLI::ExistingFile);

  ServeOptions srv;
  auto* serve = app.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server with continuous batching and speculation");
  serve->add_option("-m,--model", srv.model, "target model (GGUF; default: generate's)");
  serve->add_option("--model-draft", srv.draft_model, "draft model (also -md)");
  serve
      ->add_option("--spec-type", srv.spec_type,
                   "proposer: draft (the default), ngram, draft+ngram, none (no speculation)")
      ->check(CLI::IsMember({"none", "draft", "ngram", "draft+ngram"}));
  serve
      ->add_option("--draft-max", srv.draft_max,
                   "fixed draft length (default: cost-aware, 0..8 per step from measured costs)")
      ->check(CLI::Range(1, 32));
  serve->add_option("--host", srv.host, "address to listen on");
  serve->add_option("--port", srv.port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  serve->add_option("--parallel", srv.parallel, "sequences decoded at once (KV slots)")
      ->check(CLI::Range(1, 256));
  serve->add_option("--max-queue", srv.max_queue, "requests waiting beyond those (then 503)")
      ->check(CLI::Range(0, 100000));
  serve->add_option("-c,--ctx-size", srv.ctx, "positions per slot (0: the model's, <= 4096)")
      ->check(CLI::Range(0, 1 << 20));
  serve->add_option("--api-key", srv.api_key, "require 'Authorization: Bearer KEY'");
  serve->add_option("-a,--alias", srv.alias, "model id (default: the file name)");
  serve->add_option("--max-body-bytes", srv.max_body_bytes, "largest request body")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  serve
      ->add_option("--shutdown-timeout", srv.shutdown_timeout_s,
                   "seconds that requests in flight get to finish on SIGTERM / SIGINT (new ones "
                   "get 503 meanwhile); those still running then end")
      ->check(CLI::Range(0.0, 86400.0));
  serve->add_option("--cors-origins", srv.cors_origins,
                    "origins browsers may call from: * (the default, as llama-server), a list "
                    "separated by commas, or '' (no CORS headers)");
  AddDraftFlags(serve, &srv.draft_flags);
  AddTraceStepsFlag(serve, &srv.trace_steps);
  serve->add_option("-t,--threads", srv.threads, "threads")->check(CLI::Range(1, 256));
  AddWeightFlags(serve, &srv.weight_flags);

  // Listed for --help; handled before parsing by RunSubcommandExecutable.
  app.add_subcommand("train", "train tokenizers and models (runs specd-train, built with LibTorch)")
      ->allow_extras();
  app.add_subcommand("bench",
                     "benchmarks: forward, matmul, attention, spec, easyspec, tokenize "
                     "(runs specd-bench)")
      ->allow_extras();

  if (argc == 1) {  // as llama.cpp's tools: the usage, not an error about a missing command
    std::fputs(app.help().c_str(), stdout);
    return 1;
  }
  std::vector<std::string> args;
  if (!ArgsWithLlamaCppSpellings(argc, argv, &args)) return 1;
  // A mistyped command is named, with the nearest real one.
  if (argc >= 2 && argv[1][0] != '-') {
    const std::string command = argv[1];
    std::string nearest;
    size_t nearest_distance = 3;  // suggest only within two edits
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      known = known || sub->get_name() == command;
      const size_t d = EditDistance(command, sub->get_name());
      if (d < nearest_distance) nearest_distance = d, nearest = sub->get_name();
    }
    if (!known) {
      std::fprintf(stderr, "error: unknown command '%s'%s (see specd --help)\n", command.c_str(),
                   nearest.empty() ? "" : (" (did you mean '" + nearest + "'?)").c_str());
      return 1;
    }
  }
  if (const int code = ParseArgs(app, args, "--help"); code >= 0) return code;
  return RunReportingErrors([&]() -> int {
    if (*generate) {
      SPECD_CHECK(generate->count("--model") == 0 || !gen.model.empty(),
                  "-m was given an empty path (omit -m for the shipped model)");
      SPECD_CHECK(generate->count("--prompt") == 0 || !gen.prompt.empty(),
                  "the prompt (-p) is empty");
      SPECD_CHECK(!(no_conversation && gen.chat),
                  "-no-cnv and --chat / -cnv contradict each other");
      for (const std::string& note : ignored_flags) {
        std::fprintf(stderr, "note: %s; ignored\n", note.c_str());
      }
      return RunGenerate(gen);
    }
    if (*synth) {
      const auto type = DTypeFromName(synth_type);
      ThreadPool pool(synth_threads);
      WriteSyntheticModel(ShapeByName(synth_shape), *type, static_cast<uint64_t>(synth_seed),
                          synth_out, &pool);
      std::fprintf(stderr, "wrote %s (%s, %s)\n", synth_out.c_str(), synth_shape.c_str(),
                   synth_type.c_str());
      return 0;
    }
    if (*info) {
      if (info_model.empty()) info_model = DefaultTargetModel();
      SPECD_CHECK(!info_model.empty(), "no model given (-m MODEL.gguf) and no default model");
      return RunInfo(info_model);
    }
    if (*perplexity) return RunPerplexity(ppl);
    if (*serve) {
      srv.spec_type_given = serve->count("--spec-type") > 0;
      return RunServe(srv);
    }
    if (*quantize) return RunQuantize(quant);
    if (*tokenize) {
      if (tok.model.empty()) tok.model = DefaultTargetModel();
      SPECD_CHECK(!tok.model.empty(), "no model given (-m MODEL.gguf) and no default model");
      SPECD_CHECK(tokenize->count("--prompt") == 0 || !tok.prompt.empty(),
                  "the text (-p) is empty");
      return RunTokenize(tok);
    }
    return 0;
  });
}
