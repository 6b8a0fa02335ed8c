// `specd generate`'s flags, in groups, and the checks that need to know which were given.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/file_util.h"
#include "cli/commands.h"
#include "flags/common_flags.h"
#include "flags/speculation_flags.h"

namespace specd::cli {
namespace {

struct GenerateCommandState {
  GenerateOptions options;
  bool no_conversation = false;
  std::vector<std::string> ignored_flags;  // llama.cpp flags taken without effect, and why
};

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
  g->add_option("--chat-template", o->chat_template,
                "chat format for a model whose file has none, as llama-cli's: chatml or gemma "
                "(turn markers the vocabulary lacks are written as text; the end-of-turn marker "
                "is then a reverse prompt)")
      ->check(CLI::IsMember({"chatml", "gemma"}));
  g->add_flag("--single-turn", o->single_turn,
              "chat: answer -p (or one line of stdin) and end (also -st, as llama-cli)");
  g->add_option("-r,--reverse-prompt", o->reverse_prompts,
                "stop generating when the text ends with this (repeatable; llama.cpp's -r)")
      ->allow_extra_args(false);
  g->add_option("--system,--system-prompt", o->system, "system message of a chat (also -sys)");
  g->add_flag("--no-conversation", state->no_conversation,
              "llama.cpp's -no-cnv: the prompt is text, not a chat turn (the default here)");
}

// Structured output: the flags llama.cpp spells, the files read at once (an unreadable one is an
// error that names it).
void AddGrammarFlags(CLI::App* g, GenerateOptions* o) {
  auto read_into = [](std::string* text) {
    return [text](const std::string& path) { *text = ReadFileBytes(path); };
  };
  g->add_option("--grammar", o->grammar, "GBNF grammar the output follows (llama.cpp's)");
  g->add_option_function<std::string>("--grammar-file", read_into(&o->grammar),
                                      "file holding a GBNF grammar");
  g->add_option("-j,--json-schema", o->json_schema,
                "JSON schema the output follows ('{}': any JSON object)");
  g->add_option_function<std::string>("--json-schema-file", read_into(&o->json_schema),
                                      "file holding a JSON schema (also -jf)");
}

void AddSamplingFlags(CLI::App* g, GenerateOptions* o) {
  SamplingParams* s = &o->sampling;
  g->add_option("--temp", s->temperature, "temperature (0: greedy)")->check(CLI::Range(0.0, 100.0));
  g->add_option("--top-k", s->top_k, "keep the k most likely tokens (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  g->add_option("--top-p", s->top_p, "nucleus sampling threshold (1: off)")
      ->check(CLI::Range(0.0, 1.0));
  g->add_option("--min-p", s->min_p, "drop tokens below min-p x the most likely (0: off)")
      ->check(CLI::Range(0.0, 1.0));
  g->add_option("--repeat-penalty", s->repeat_penalty,
                "divide the logits of recent tokens by this (1: off; speculation stays "
                "lossless against the penalized distribution)")
      ->check(CLI::Range(0.01, 100.0));
  g->add_option("--repeat-last-n", s->repeat_last_n,
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

void AddEngineFlags(CLI::App* g, GenerateOptions* o) {
  flags::AddThreadsFlag(g, &o->threads);
  g->add_option("--batch,--parallel", o->batch,
                "sequences decoded together (llama.cpp's -np / --parallel)")
      ->check(CLI::Range(1, 4096));
  g->add_option("-c,--ctx,--ctx-size", o->ctx, "context positions per sequence (default: fit)")
      ->check(CLI::Range(1, 1 << 20));
  g->add_option("--attention", o->attention,
                "attention over ragged sequences: split (BASS-SPLIT, one computation per "
                "sequence), pad (BASS-PAD, all padded to the longest) or row (per row and head)")
      ->transform(CLI::CheckedTransformer(
          std::map<std::string, AttentionMode>{{"split", AttentionMode::kSplit},
                                               {"pad", AttentionMode::kPad},
                                               {"row", AttentionMode::kRow}}))
      ->default_str("split");
  flags::AddCacheTypeFlag(g, &o->cache_type);
  flags::AddWeightFlags(g, &o->weights);
}

}  // namespace

Command AddGenerateCommand(CLI::App& app) {
  auto state = std::make_shared<GenerateCommandState>();
  CLI::App* g = app.add_subcommand("generate", "generate text from a prompt");
  AddPromptFlags(g, state.get());
  flags::AddSpeculationFlags(g, &state->options.speculation);
  AddSamplingFlags(g, &state->options);
  AddGrammarFlags(g, &state->options);
  AddEngineFlags(g, &state->options);
  flags::AddLlamaCppNoOpFlags(g, &state->ignored_flags);
  return {g, [g, state] {
            const GenerateOptions& o = state->options;
            SPECD_CHECK(g->count("--model") == 0 || !o.model.empty(),
                        "-m was given an empty path (omit -m for the shipped model)");
            SPECD_CHECK(g->count("--prompt") == 0 || !o.prompt.empty(), "the prompt (-p) is empty");
            SPECD_CHECK(!(state->no_conversation && o.chat),
                        "-no-cnv and --chat / -cnv contradict each other");
            SPECD_CHECK(!o.single_turn || o.chat, "-st / --single-turn ends a chat: add -cnv");
            flags::PrintIgnoredFlagNotes(state->ignored_flags);
            return RunGenerate(o);
          }};
}

}  // namespace specd::cli
