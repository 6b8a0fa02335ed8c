// The subcommands of the `specd` binary; main.cc parses flags and dispatches here.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "cli/cli_common.h"
#include "draft/draft_model_proposer.h"

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
  std::string draft_model;  // -md: speculative decoding with this draft
  std::string strategy;     // ar | spec | bass | sdsat (empty: spec when a draft is available)
  SdsatFlags sdsat;
  int draft_max = 0;            // > 0 alone: fixed draft length; with a policy: its cap / start
  bool draft_auto = false;      // cost-aware draft length in 0..draft_max (8 when not given)
  bool draft_adaptive = false;  // BASS Algorithm 1 (starting at draft_max, 7 when not given)
  std::string prompts_file;     // --prompts FILE.jsonl: one sequence per prompt
  double time_budget_ms = 0;
  std::string prompt;
  std::string prompt_file;
  std::string tokens;
  int n_predict = 128;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  int repeat_last_n = 64;
  bool escape = false;             // -e: \n, \t, \\, ... in -p are control characters
  bool no_display_prompt = false;  // --no-display-prompt: print only the generated text
  bool color = false;              // --color: the echoed prompt in another colour
  int64_t seed = -1;
  int threads = 2;
  int batch = 1;
  int ctx = 0;
  std::string attention = "split";
  std::string cache_type = "f16";  // KV cache element type: f32 | f16 (llama.cpp default: f16)
  bool json = false;
  bool ignore_eos = false;
  bool special = false;
  bool chat = false;   // --chat / -cnv: the prompt is a user turn in the model's chat format
  std::string system;  // --system: the conversation's system message
  // Sampled speculation: "coupled" (Gumbel-max with shared per-position noise; every sampled run,
  // plain or speculative, then samples by Gumbel-max) or "rejection".
  std::string spec_sampling = "coupled";
  std::string spec_type = "draft";  // draft (a draft model, -md) or ngram (prompt lookup)
  // Flags given that only speculation reads: refused when the run does not speculate.
  std::vector<std::string> speculation_flags_given;
  int ngram_min = 1;  // n-gram sizes the lookup tries, longest first
  int ngram_max = 3;
  DraftFlags
      draft_flags;  // EasySpec: --draft-lp, --draft-lp-groups, --no-calibration, --draft-tree
  WeightFlags weight_flags;  // --weights i8, --int8-kernel
  std::string trace_steps;   // --trace-steps FILE: every speculative step as a JSON line
};
int RunGenerate(const GenerateOptions& options);
// `generate --chat` without a prompt: a multi-turn conversation read from stdin, one user turn
// per line, keeping the KV cache between turns.
int RunInteractiveChat(const GenerateOptions& options);

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
  WeightFlags weight_flags;
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
  WeightFlags weight_flags;
  std::string model;
  std::string draft_model;
  std::string spec_type = "draft";  // none | draft | ngram | draft+ngram | sdsat
  bool spec_type_given = false;     // --spec-type was on the command line
  SdsatFlags sdsat;                 // --spec-type sdsat
  int draft_max = 0;                // > 0: fixed draft length; else cost-aware 0..8
  int ngram_min = 1;
  int ngram_max = 3;
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
  int max_prefill_rows = 512;      // prompt rows per step: a long prompt delays others less
  int threads = 2;
  DraftFlags draft_flags;
  std::string trace_steps;  // --trace-steps FILE
};
int RunServe(const ServeOptions& options);

}  // namespace specd::cli
