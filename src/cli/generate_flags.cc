// `specd generate`'s flags, in groups, and the checks that need to know which were given.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/cli_common.h"
#include "cli/commands.h"

namespace specd::cli {
namespace {

struct GenerateCommandState {
  GenerateOptions options;
  bool no_conversation = false;
  std::vector<std::string> ignored_flags;  // llama.cpp flags taken without effect, and why
};

// Which proposer drafts, how long its drafts are, and how they are verified.
void AddSpeculationFlags(CLI::App* g, GenerateOptions* o) {
  g->add_option("--model-draft", o->draft_model, "draft model for speculative decoding (also -md)");
  g->add_option("--strategy", o->strategy,
                "ar (plain), spec / bass (speculative; default when a draft is given), sdsat "
                "(the target drafts for itself with adaptive tokens; no draft model)")
      ->check(CLI::IsMember({"ar", "spec", "bass", "sdsat"}));
  AddSdsatFlags(g, &o->sdsat);
  g->add_option("--draft-max", o->draft_max,
                "fixed draft length; with --draft-auto its cap, with --draft-adaptive its start")
      ->check(CLI::Range(1, 32));
  g->add_flag("--draft-adaptive", o->draft_adaptive,
              "adapt the draft length by BASS Algorithm 1 (l0 7, +2, limit 32)");
  g->add_flag("--draft-auto", o->draft_auto,
              "choose the draft length from measured costs and acceptance, 0 (plain "
              "steps) when speculation does not pay; the default without --draft-max");
  g->add_option("--spec-sampling", o->spec_sampling,
                "sampled speculation: coupled (draft and target share Gumbel noise per "
                "position; the output is plain sampling's with the same seed, whatever the "
                "draft lengths) or rejection (modified rejection sampling)")
      ->check(CLI::IsMember({"coupled", "rejection"}));
  g->add_option("--spec-type", o->spec_type,
                "proposer: draft (a draft model, -md; the default), ngram (prompt lookup: "
                "the continuation of the text's latest repeat of its last n tokens) or "
                "draft+ngram (lookup first, the draft model where it finds nothing)")
      ->check(CLI::IsMember({"draft", "ngram", "draft+ngram"}));
  AddDraftFlags(g, &o->draft_flags);
  AddTraceStepsFlag(g, &o->trace_steps);
  g->add_option("--ngram-min", o->ngram_min, "shortest n-gram looked up (ngram)")
      ->check(CLI::Range(1, 64));
  g->add_option("--ngram-max", o->ngram_max, "longest n-gram looked up (ngram)")
      ->check(CLI::Range(1, 64));
}

// Where the prompt comes from and what is printed.
void AddPromptFlags(CLI::App* g, GenerateCommandState* state) {
  GenerateOptions* o = &state->options;
  g->add_option("-m,--model", o->model, "target model (GGUF; default: the shipped one)");
  g->add_option("--prompts", o->prompts_file, "JSON lines, one sequence per prompt");
  g->add_option("--time-budget-ms", o->time_budget_ms,
                "return the sequences finished within this time, best first (0: no budget)")
      ->check(CLI::Range(0.0, 1e9));
  g->add_option("-p,--prompt", o->prompt, "prompt text");
  g->add_option("-f,--file", o->prompt_file, "file holding the prompt text");
  g->add_option("--tokens", o->tokens, "prompt as comma-separated token ids");
  g->add_option("-n,--n-predict", o->n_predict,
                "new tokens per sequence (-1: until EOS or the context is full, as llama.cpp)")
      ->check(CLI::Range(-1, 1 << 20));
  g->add_flag("-e,--escape", o->escape, "process escapes (\\n, \\t, ...) in -p");
  g->add_flag("--no-display-prompt", o->no_display_prompt,
              "print only the generated text, not the prompt");
  g->add_flag("--color", o->color, "show the prompt in colour (on a terminal)");
  g->add_flag("--json", o->json, "one JSON object per sequence, then a summary");
  g->add_flag("--ignore-eos", o->ignore_eos, "keep generating past end-of-sequence");
  g->add_flag("--special", o->special, "parse special tokens (<s>, <|im_start|>) in the prompt");
  g->add_flag("--chat,--conversation,-i,--interactive", o->chat,
              "chat: -p is a user turn in the model's chat format (also -cnv); without a "
              "prompt, a conversation read from stdin, one turn per line");
  g->add_option("--system,--system-prompt", o->system, "system message of a chat (also -sys)");
  g->add_flag("--no-conversation", state->no_conversation,
              "llama.cpp's -no-cnv: the prompt is text, not a chat turn (the default here)");
}

void AddSamplingFlags(CLI::App* g, GenerateOptions* o) {
  g->add_option("--temp", o->temperature, "temperature (0: greedy)")->check(CLI::Range(0.0, 100.0));
  g->add_option("--top-k", o->top_k, "keep the k most likely tokens (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  g->add_option("--top-p", o->top_p, "nucleus sampling threshold (1: off)")
      ->check(CLI::Range(0.0, 1.0));
  g->add_option("--min-p", o->min_p, "drop tokens below min-p x the most likely (0: off)")
      ->check(CLI::Range(0.0, 1.0));
  g->add_option("--repeat-penalty", o->repeat_penalty,
                "divide the logits of recent tokens by this (1: off; speculation stays "
                "lossless against the penalized distribution)")
      ->check(CLI::Range(0.01, 100.0));
  g->add_option("--repeat-last-n", o->repeat_last_n,
                "tokens of history the repeat penalty looks at (-1: all, 0: none)")
      ->check(CLI::Range(-1, 1 << 20));
  g->add_option("-s,--seed", o->seed, "random seed (default: random)")
      ->check(CLI::Validator(
          [](std::string& value) -> std::string {
            if (!value.empty() && value[0] == '-') {
              return "--seed must be a non-negative integer (omit it for a random seed)";
            }
            return "";
          },
          "SEED"));
}

void AddLlamaCppNoOpFlags(CLI::App* g, GenerateCommandState* state) {
  // llama.cpp flags for features this CPU engine has no use for: accepted, and said so.
  auto note_ignored = [ignored = &state->ignored_flags](const std::string& flag, const char* why) {
    return [ignored, flag, why](auto&&...) { ignored->push_back(flag + ": " + why); };
  };
  g->add_option_function<std::string>("-g,--n-gpu-layers,--gpu-layers",
                                      note_ignored("-ngl", "no GPU offload: specd runs on the CPU"),
                                      "(llama.cpp; no effect: specd runs on the CPU; also -ngl)")
      ->type_name("N");
  g->add_option_function<std::string>(
       "--flash-attn", note_ignored("-fa", "specd's attention kernels are its own"),
       "(llama.cpp; no effect: specd's attention kernels are its own; also -fa)")
      ->expected(0, 1)
      ->type_name("[on|off|auto]");
  g->add_flag_function("--mlock", note_ignored("--mlock", "weights are read in place, not locked"),
                       "(llama.cpp; no effect)");
  g->add_flag_function("--no-mmap", note_ignored("--no-mmap", "weights are always memory-mapped"),
                       "(llama.cpp; no effect)");
  for (const char* names : {"-b,--batch-size", "--ubatch-size"}) {
    g->add_option_function<std::string>(
         names,
         note_ignored(names[1] == 'b' ? "-b" : "-ub",
                      "prompts are read in chunks of specd's own size (--batch is the "
                      "number of sequences here, not llama.cpp's -b)"),
         "(llama.cpp's prompt batch; no effect: --batch here counts sequences)")
        ->type_name("N");
  }
}

void AddEngineFlags(CLI::App* g, GenerateOptions* o) {
  AddThreadsFlag(g, &o->threads);
  g->add_option("--batch,--parallel", o->batch,
                "sequences decoded together (llama.cpp's -np / --parallel)")
      ->check(CLI::Range(1, 4096));
  g->add_option("-c,--ctx,--ctx-size", o->ctx, "context positions per sequence (default: fit)")
      ->check(CLI::Range(1, 1 << 20));
  g->add_option("--attention", o->attention,
                "attention over ragged sequences: split (BASS-SPLIT, one computation per "
                "sequence), pad (BASS-PAD, all padded to the longest) or row (per row and head)")
      ->check(CLI::IsMember({"pad", "split", "row"}));
  g->add_option("--cache-type", o->cache_type, "KV cache type of both models: f16 (default) or f32")
      ->check(CLI::IsMember({"f32", "f16"}));
  AddWeightFlags(g, &o->weight_flags);
}

}  // namespace

Command AddGenerateCommand(CLI::App& app) {
  auto state = std::make_shared<GenerateCommandState>();
  CLI::App* g = app.add_subcommand("generate", "generate text from a prompt");
  AddPromptFlags(g, state.get());
  AddSpeculationFlags(g, &state->options);
  AddSamplingFlags(g, &state->options);
  AddEngineFlags(g, &state->options);
  AddLlamaCppNoOpFlags(g, state.get());
  return {
      g, [g, state] {
        const GenerateOptions& o = state->options;
        SPECD_CHECK(g->count("--model") == 0 || !o.model.empty(),
                    "-m was given an empty path (omit -m for the shipped model)");
        SPECD_CHECK(g->count("--prompt") == 0 || !o.prompt.empty(), "the prompt (-p) is empty");
        SPECD_CHECK(!(state->no_conversation && o.chat),
                    "-no-cnv and --chat / -cnv contradict each other");
        for (const std::string& note : state->ignored_flags) {
          std::fprintf(stderr, "note: %s; ignored\n", note.c_str());
        }
        GenerateOptions run = o;
        for (const char* flag : {"--spec-type", "--draft-max", "--draft-auto", "--draft-adaptive",
                                 "--spec-sampling", "--draft-vocab", "--draft-vocab-file"}) {
          if (g->count(flag) > 0) run.speculation_flags_given.push_back(flag);
        }
        return RunGenerate(run);
      }};
}

}  // namespace specd::cli
