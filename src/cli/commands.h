// The subcommands of the `specd` binary; main.cc parses flags and dispatches here.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine_builder.h"
#include "engine/model_options.h"
#include "flags/common_flags.h"
#include "flags/speculation_flags.h"
#include "sampling/sampler.h"

namespace specd::cli {

// A subcommand of `specd`: its flags registered on the app by its own Add*Command (in its own
// file), and what runs it once they are parsed (checks that need to know which flags were given,
// then the command itself).
struct Command {
  CLI::App* app = nullptr;
  std::function<int()> run;
};
Command AddGenerateCommand(CLI::App& app);  // generate_flags.cc
Command AddTokenizeCommand(CLI::App& app);
Command AddSynthCommand(CLI::App& app);  // model_file_commands.cc
Command AddInfoCommand(CLI::App& app);   // model_file_commands.cc
Command AddPerplexityCommand(CLI::App& app);
Command AddQuantizeCommand(CLI::App& app);
Command AddServeCommand(CLI::App& app);

struct GenerateOptions {
  std::string model;
  flags::SpeculationFlags speculation;  // -md, --strategy, --spec-type, --draft-max ...
  std::string prompts_file;             // --prompts FILE.jsonl: one sequence per prompt
  double time_budget_ms = 0;
  std::string prompt;
  std::string prompt_file;
  std::string tokens;
  std::vector<std::string> reverse_prompts;  // -r: text that ends generation (llama.cpp's)
  std::string chat_template;  // --chat-template: a chat format by name ("": the file's)
  int n_predict = 128;
  // --temp, --top-k, --top-p, --min-p, --repeat-penalty, --repeat-last-n; the seed is set from
  // `seed` (random when negative) once the flags are parsed.
  SamplingParams sampling;
  bool escape = false;             // -e: \n, \t, \\, ... in -p are control characters
  bool no_display_prompt = false;  // --no-display-prompt: print only the generated text
  bool color = false;              // --color: the echoed prompt in another colour
  int64_t seed = -1;
  int threads = 2;
  int batch = 1;
  int ctx = 0;
  AttentionMode attention = AttentionMode::kSplit;
  DType cache_type = DType::kF16;  // KV cache element type (llama.cpp's default: f16)
  bool json = false;
  bool ignore_eos = false;
  bool special = false;
  bool chat = false;         // --chat / -cnv: the prompt is a user turn in the model's chat format
  bool single_turn = false;  // -st: the chat ends after one answer (llama-cli's --single-turn)
  std::string system;        // --system: the conversation's system message
  WeightOptions weights;     // --weights i8, --int8-kernel, --lora ...
  // Structured output (llama.cpp's flags): a GBNF grammar (--grammar, --grammar-file) or a JSON
  // schema (-j, -jf); the text itself, files read when the flags are parsed.
  std::string grammar;
  std::string json_schema;
};
int RunGenerate(const GenerateOptions& options);
// --grammar / -j as a request's constraint, compiled over the loaded target's vocabulary (null
// without either); an Error naming the flag when the library cannot compile it.
std::shared_ptr<const TokenConstraintFactory> ConstraintFromFlags(const GenerateOptions& o,
                                                                  LoadedModels& models);
// `generate --chat` without a prompt: a multi-turn conversation read from stdin, one user turn
// per line, on the engine `config` describes (speculation and every sampling flag apply), the
// conversation's KV cache kept between turns.
int RunInteractiveChat(const GenerateOptions& options, EngineConfig config);

struct TokenizeOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  bool ids_only = false;
  bool special = false;
  bool no_bos = false;
};
int RunTokenize(const TokenizeOptions& options);

int RunInfo(const std::string& path);

struct PerplexityOptions {
  std::string model;
  std::string text_file;
  int ctx = 512;
  int threads = 2;
  int64_t max_chunks = 0;  // 0: all
  bool json = false;
  WeightOptions weights;
};
int RunPerplexity(const PerplexityOptions& options);

struct QuantizeOptions {
  std::string input;
  std::string output;
  std::string type;
  int threads = 2;
  float smooth_alpha = 0.5f;     // i8: SmoothQuant's migration strength (0: none)
  std::string calibration_file;  // i8: calibration text (default: the built-in one)
  // A draft's input embedding kept for its FR-Spec head's tokens and the control tokens only,
  // every other token sharing one row (their mean): `specd.input_tokens`.
  bool restrict_input_embedding = false;
};
int RunQuantize(const QuantizeOptions& options);

struct ServeOptions {
  WeightOptions weights;
  std::string model;
  flags::SpeculationFlags speculation;  // -md, --spec-type, --draft-max ...
  std::string host = "127.0.0.1";
  int port = 8080;
  int parallel = 4;    // sequences decoded at once (KV slots)
  int max_queue = 64;  // requests waiting for slots beyond those; more get 503
  int ctx = 0;         // positions per slot (0: the model's, at most 4096)
  std::string api_key;
  std::string alias;  // the model id clients send (default: the file name without .gguf)
  size_t max_body_bytes = 1 << 20;
  double read_timeout_s = 10;      // a request's sender silent this long is closed
  double write_timeout_s = 60;     // a reader that takes nothing this long is dropped
  int keep_alive_timeout_s = 5;    // an idle kept-alive connection is closed after this
  double shutdown_timeout_s = 30;  // on SIGTERM / SIGINT, time for requests in flight to finish
  std::string cors_origins = "*";  // Access-Control-Allow-Origin: "*", origins, or "" (none)
  int cache_reuse = 0;             // --cache-reuse: the shortest moved chunk reused (0: off)
  bool webui = true;               // the chat page at / (--no-webui: off)
  std::string chat_template;       // --chat-template: a format by name ("": the file's)
  int max_prefill_rows = 512;      // prompt rows per step: a long prompt delays others less
  int threads = 2;
  DType cache_type = DType::kF16;
  std::vector<std::string> ignored_flags;  // llama.cpp flags taken without effect, and why
};
int RunServe(const ServeOptions& options);

}  // namespace specd::cli
