#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "base/error.h"
#include "base/escapes.h"
#include "base/file_util.h"
#include "cli/commands.h"
#include "cli/reverse_prompts.h"
#include "cli/signals.h"
#include "draft/sdsat_proposer.h"
#include "engine/engine_builder.h"
#include "engine/generate.h"
#include "engine/model_catalog.h"
#include "engine/model_options.h"
#include "model/model.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/prompt_file.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {
namespace {

std::vector<int32_t> ParseTokenList(const std::string& text) {
  std::vector<int32_t> tokens;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = std::string::npos;
    }
    SPECD_CHECK(used == item.size() && value >= 0 && value <= INT32_MAX, "--tokens: '", item,
                "' is not a token id");
    tokens.push_back(static_cast<int32_t>(value));
  }
  SPECD_CHECK(!tokens.empty(), "--tokens: no token ids given");
  return tokens;
}

// Everything the engine needs, typed, from the flags (the prompt's context comes later).
EngineConfig EngineConfigFor(const GenerateOptions& o, bool draft_given) {
  EngineConfig c;
  c.model_path = o.model;
  c.weights = o.weights;
  c.threads = o.threads;
  c.speculation = flags::SpeculationFromFlags(o.speculation, draft_given);
  c.n_slots = o.batch;
  c.n_ctx = o.ctx;
  c.kv_type = o.cache_type;
  c.attention = o.attention;
  return c;
}

// The prompts of the run (-p, -f, --tokens or --prompts; a chat turn with --chat) into `request`;
// `prompt_text` gets the text of -p / -f, `prompt_lines` the --prompts line of each prompt.
void ReadPrompts(const GenerateOptions& o, const LoadedModels& models, GenerateRequest* request,
                 std::string* prompt_text, std::vector<int>* prompt_lines) {
  const Tokenizer* tokenizer = models.tokenizer.get();
  if (!o.tokens.empty()) {
    request->prompt = ParseTokenList(o.tokens);
  } else if (!o.prompts_file.empty()) {
    // One sequence per line: {"prompt": "..."} (or {"tokens": [..]}).
    SPECD_CHECK(tokenizer != nullptr, o.model, " has no tokenizer metadata for --prompts");
    for (const PromptLine& line :
         ParsePromptLines(ReadFileBytes(o.prompts_file), o.prompts_file, /*allow_tokens=*/true)) {
      request->prompts.push_back(
          line.has_tokens ? line.tokens
                          : tokenizer->Encode(line.text, /*add_special=*/true, o.special));
      prompt_lines->push_back(line.line_no);
    }
    SPECD_CHECK(!request->prompts.empty(), o.prompts_file, " has no prompts");
    request->prompt = request->prompts[0];
  } else {
    SPECD_CHECK(tokenizer != nullptr, o.model, " has no tokenizer metadata: pass --tokens");
    *prompt_text = o.prompt_file.empty() ? o.prompt : ReadTextSource(o.prompt_file);
    if (o.escape) *prompt_text = ProcessEscapes(*prompt_text);
    SPECD_CHECK(!prompt_text->empty(), o.prompt_file.empty()
                                           ? "the prompt (-p) is empty"
                                           : "the prompt file '" + o.prompt_file + "' is empty");
    if (o.chat) {
      const ChatTemplate chat =
          ChatTemplate::ForModel(models.target->gguf(), *tokenizer, o.chat_template);
      if (chat.from_vocabulary()) {
        std::fprintf(stderr, "note: %s\n", chat.GuessNote(o.model).c_str());
      }
      std::vector<ChatMessage> messages;
      if (!o.system.empty()) messages.push_back({"system", o.system});
      messages.push_back({"user", *prompt_text});
      // The template's special tokens are parsed; the user's text is not special-parsed unless
      // --special, so a user cannot forge a turn by typing <|im_start|>.
      request->prompt = EncodeChat(*tokenizer, chat, messages, o.special);
      request->stop_tokens = chat.stop_tokens();
    } else {
      request->prompt = tokenizer->Encode(*prompt_text, /*add_special=*/true, o.special);
    }
    SPECD_CHECK(!request->prompt.empty(), "the prompt is empty (and the model adds no BOS token)");
  }
}

// The request's limits, sampling and batch from the flags.
void SetRequestOptions(const GenerateOptions& o, GenerateRequest* request) {
  request->n_predict = o.n_predict;
  request->n_sequences =
      request->prompts.empty() ? o.batch : static_cast<int>(request->prompts.size());
  request->time_budget_ms = o.time_budget_ms;
  // Read only by the budget's ranking and the JSON lines.
  request->sum_logprob = o.time_budget_ms > 0 || o.json;
  SPECD_CHECK(request->prompts.empty() || o.batch == 1 ||
                  o.batch == static_cast<int>(request->prompts.size()),
              "--batch ", o.batch, " with --prompts: the batch is one sequence per prompt (",
              request->prompts.size(), " in ", o.prompts_file, "); drop --batch");
  // Validated by the engine when the sequences join (the errors name the flags).
  request->sampling = o.sampling;
  request->sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  request->stop_at_eos = !o.ignore_eos;
}

// What to do when a prompt does not fit: raise -c while the model allows more positions.
std::string RoomAdvice(int n_ctx, int n_ctx_train, bool can_lower_n) {
  const std::string lower_n = can_lower_n ? "lower -n or " : "";
  if (n_ctx < n_ctx_train) {
    return StrCat("raise -c, up to the model's ", n_ctx_train, can_lower_n ? ", or lower -n" : "");
  }
  return StrCat(lower_n, "shorten the prompt: the model was trained on ", n_ctx_train,
                " positions");
}

// The context for the request's prompts: -c, or what they need (at least 4096 positions, at most
// the model's); -n -1 resolved to what the context leaves. Says which prompt does not fit.
int ContextForPrompts(const GenerateOptions& o, const EngineConfig& config, const Model& model,
                      const std::vector<int>& prompt_lines, GenerateRequest* request) {
  size_t longest_prompt = request->prompt.size();
  for (const auto& p : request->prompts) longest_prompt = std::max(longest_prompt, p.size());
  const int n_ctx_train = model.config().n_ctx_train;
  const int n_ctx = ContextFor(config, model, static_cast<int64_t>(longest_prompt) + o.n_predict);
  // -n -1: until EOS or the context is full (llama.cpp's meaning), for the longest prompt.
  if (o.n_predict < 0) {
    request->n_predict = n_ctx - static_cast<int>(longest_prompt);
    SPECD_CHECK(request->n_predict >= 1, "the prompt (", longest_prompt,
                " tokens) fills the context of ", n_ctx, " positions (",
                RoomAdvice(n_ctx, n_ctx_train, /*can_lower_n=*/false), ")");
  }
  // Every prompt must leave room for -n new tokens: said before anything is printed, naming
  // the --prompts line.
  for (size_t i = 0; i < std::max<size_t>(1, request->prompts.size()); ++i) {
    const size_t size =
        request->prompts.empty() ? request->prompt.size() : request->prompts[i].size();
    SPECD_CHECK(static_cast<int64_t>(size) + o.n_predict <= n_ctx,
                request->prompts.empty()
                    ? std::string("the prompt")
                    : StrCat(o.prompts_file, ":", prompt_lines[i], ": the prompt"),
                " (", size, " tokens) plus ", o.n_predict, " new tokens exceed the context of ",
                n_ctx, " positions (", RoomAdvice(n_ctx, n_ctx_train, /*can_lower_n=*/true), ")");
  }
  if (n_ctx > n_ctx_train) {
    std::fprintf(stderr,
                 "warning: -c %d is beyond the %d positions %s was trained on: past them its "
                 "output degrades\n",
                 n_ctx, n_ctx_train, o.model.c_str());
  }
  return n_ctx;
}

// BASS's per-token latency: a sequence's wall time from the request's start to its last token,
// over the tokens it generated; of the first and last finished sequences and their mean.
struct PerTokenLatency {
  double first_ms = 0, last_ms = 0, all_ms = 0;
};

PerTokenLatency LatencyOf(const GenerateResult& result) {
  PerTokenLatency l;
  double first_end = 1e300, last_end = -1;
  int n = 0;
  for (const SequenceResult& seq : result.sequences) {
    if (seq.tokens.empty() || seq.finish_reason == "budget") continue;
    const double ptl = seq.elapsed_ms / seq.tokens.size();
    l.all_ms += ptl;
    ++n;
    if (seq.elapsed_ms < first_end) first_end = seq.elapsed_ms, l.first_ms = ptl;
    if (seq.elapsed_ms > last_end) last_end = seq.elapsed_ms, l.last_ms = ptl;
  }
  if (n > 0) l.all_ms /= n;
  return l;
}

// What the run reports besides the sequences.
struct RunSummary {
  const char* strategy = "ar";  // ar | spec | bass | sdsat
  int n_seq = 0;
  size_t prompt_tokens = 0;
  int n_over_budget = 0;
  PerTokenLatency latency;
};

// Acceptance at each draft position; null where nothing was ever drafted.
nlohmann::json AcceptanceByPosition(const SpeculativeStats& stats) {
  nlohmann::json per_position = nlohmann::json::array();
  for (size_t i = 0; i < stats.drafted_at_position.size(); ++i) {
    if (stats.drafted_at_position[i] == 0) {
      per_position.push_back(nullptr);
    } else {
      per_position.push_back(double(stats.accepted_at_position[i]) / stats.drafted_at_position[i]);
    }
  }
  return per_position;
}

void PrintJsonSummary(const GenerateRequest& request, const GenerateResult& result,
                      const RunSummary& run, EngineStack& stack) {
  const double total_ms = result.t_prefill_ms + result.t_decode_ms;
  nlohmann::json summary = {
      {"type", "summary"},
      {"strategy", run.strategy},
      {"batch", run.n_seq},
      {"ptl_first_ms", run.latency.first_ms},
      {"ptl_last_ms", run.latency.last_ms},
      {"ptl_all_ms", run.latency.all_ms},
      {"n_prompt_tokens", run.prompt_tokens},
      {"n_sequences_returned", result.sequences.size()},
      {"n_over_budget", run.n_over_budget},
      {"n_tokens", result.n_tokens},
      {"tokens_per_s", total_ms > 0 ? result.n_tokens / (total_ms / 1000.0) : 0.0},
      {"t_prefill_ms", result.t_prefill_ms},
      {"t_decode_ms", result.t_decode_ms},
      {"seed", request.sampling.seed},
      {"spec_sampling",
       stack.speculation().sampling == SpecSampling::kCoupled ? "coupled" : "rejection"}};
  if (request.constraint != nullptr) summary["t_mask_ms"] = stack.engine().stats().t_mask_ms;
  if (stack.speculative()) {
    const SpeculativeStats& stats = stack.engine().stats();
    const SpeculationConfig& spec = stack.speculation();
    summary["draft_max"] = spec.draft_max;
    summary["draft_min"] = spec.draft_min;
    summary["draft_policy"] = DraftLengthPolicyName(spec.policy);
    summary["n_plain_steps"] = stats.n_plain_steps;
    summary["n_drafted"] = stats.n_drafted;
    summary["n_accepted"] = stats.n_accepted;
    summary["acceptance_rate"] = stats.acceptance_rate();
    summary["mean_accepted_length"] = stats.mean_accepted_length();  // tokens per step
    summary["tokens_per_step"] = stats.mean_accepted_length();
    summary["acceptance_by_position"] = AcceptanceByPosition(stats);
    summary["t_draft_ms"] = stats.t_draft_ms;
    summary["t_verify_ms"] = stats.t_verify_ms;
  }
  std::cout << summary.dump() << std::endl;
}

void PrintTextSummary(const GenerateRequest& request, const GenerateResult& result,
                      const RunSummary& run, EngineStack& stack) {
  std::cout << std::flush;  // the text before the statistics, also under 2>&1
  // As llama.cpp reports them: the prompt's rate, then decoding's alone (the step that finishes
  // a prompt writes each sequence's first token: those are the prefill's).
  const auto rate = [](double tokens, double ms) { return ms > 0 ? tokens / (ms / 1000.0) : 0.0; };
  const int64_t decoded = std::max<int64_t>(0, result.n_tokens - run.n_seq);
  const std::string seed =
      request.sampling.greedy()
          ? ""
          : ", seed " + std::to_string(static_cast<unsigned long long>(request.sampling.seed));
  std::fprintf(stderr,
               "strategy %s, batch %d: prefill %zu tokens in %.1f ms (%.1f tok/s); decode %lld "
               "tokens in %.1f ms (%.1f tok/s)%s\n",
               run.strategy, run.n_seq, run.prompt_tokens, result.t_prefill_ms,
               rate(static_cast<double>(run.prompt_tokens), result.t_prefill_ms),
               static_cast<long long>(decoded), result.t_decode_ms,
               rate(static_cast<double>(decoded), result.t_decode_ms), seed.c_str());
  std::fprintf(stderr, "per-token latency: first %.2f ms, last %.2f ms, all %.2f ms\n",
               run.latency.first_ms, run.latency.last_ms, run.latency.all_ms);
  if (request.constraint != nullptr) {
    std::fprintf(stderr, "grammar: %.1f ms masking rows and advancing (%.1f%% of decoding)\n",
                 stack.engine().stats().t_mask_ms,
                 result.t_decode_ms > 0
                     ? 100.0 * stack.engine().stats().t_mask_ms / result.t_decode_ms
                     : 0.0);
  }
  if (!stack.speculative()) return;
  const SpeculativeStats& stats = stack.engine().stats();
  std::fprintf(stderr,
               "draft %s, draft length %s: acceptance %.3f (%lld of %lld), tokens per step "
               "%.2f, draft %.1f ms, verify %.1f ms, %lld of %lld steps without drafts\n",
               DescribeProposer(stack.speculation()).c_str(),
               DescribeDraftLength(stack.speculation()).c_str(), stats.acceptance_rate(),
               static_cast<long long>(stats.n_accepted), static_cast<long long>(stats.n_drafted),
               stats.mean_accepted_length(), stats.t_draft_ms, stats.t_verify_ms,
               static_cast<long long>(stats.n_plain_steps), static_cast<long long>(stats.n_steps));
}

// Each sequence: a JSON line with --json, "[i] text" when not streamed.
void PrintSequences(const GenerateOptions& o, const Tokenizer* tokenizer,
                    const GenerateResult& result, bool streamed, bool speculative) {
  for (const SequenceResult& seq : result.sequences) {
    const std::string text = tokenizer ? tokenizer->Decode(seq.tokens) : "";
    if (o.json) {
      nlohmann::json line = {{"index", seq.index},
                             {"tokens", seq.tokens},
                             {"text", text},
                             {"n_tokens", seq.tokens.size()},
                             {"finish_reason", seq.finish_reason},
                             {"mean_logprob", seq.mean_logprob()},
                             {"elapsed_ms", seq.elapsed_ms}};
      if (speculative) {
        line["n_drafted"] = seq.n_drafted;
        line["n_accepted"] = seq.n_accepted;
      }
      std::cout << line.dump() << "\n";
    } else if (!streamed) {
      std::cout << "[" << seq.index << "]";
      if (tokenizer) {
        std::cout << " " << text << "\n";
      } else {
        for (int32_t t : seq.tokens) std::cout << " " << t;
        std::cout << "\n";
      }
    }
  }
}

// A single sequence on a terminal-style run streams its text as it is generated: the prompt
// first (llama.cpp's --color: in yellow, on a terminal only), then each token.
std::unique_ptr<StreamingDecoder> StartStream(const GenerateOptions& o, const Tokenizer* tokenizer,
                                              const std::string& prompt_text,
                                              GenerateRequest* request) {
  if (o.json || request->n_sequences != 1 || tokenizer == nullptr) return nullptr;
  auto stream = std::make_unique<StreamingDecoder>(*tokenizer);
  const bool color = o.color && ::isatty(STDOUT_FILENO);
  if (color) std::cout << "\033[33m";
  if (o.no_display_prompt || o.chat) {
    // A chat prints only the assistant's answer.
  } else if (!o.tokens.empty()) {
    std::cout << tokenizer->Decode(request->prompt, /*strip_space_prefix=*/true);
  } else {
    std::cout << prompt_text;
  }
  if (color) std::cout << "\033[0m";
  std::cout << std::flush;
  return stream;
}

// -r's texts, and with --chat --chat-template the end-of-turn marker the vocabulary has as text.
std::vector<std::string> ReversePromptsOf(const GenerateOptions& o, const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return {};
  std::vector<std::string> texts = o.reverse_prompts;
  if (o.chat && !o.chat_template.empty()) {
    const auto ends = ChatTemplate::Named(o.chat_template, *tokenizer).stop_strings();
    texts.insert(texts.end(), ends.begin(), ends.end());
  }
  return texts;
}

// What each generated token does as it arrives: ends a sequence at a reverse prompt (-r), and
// streams a single sequence's text.
void WatchTokens(StreamingDecoder* stream, ReversePrompts* reverse, GenerateRequest* request) {
  if (stream == nullptr && reverse == nullptr) return;
  request->on_token = [stream, reverse](int index, int32_t token) {
    const bool printing = reverse == nullptr || !reverse->stopped(index);
    const bool go_on = reverse == nullptr || reverse->Push(index, token);
    if (stream != nullptr && printing) std::cout << stream->Push(token) << std::flush;
    return go_on;
  };
}

// A sequence stopped at a reverse prompt keeps its tokens up to the one that showed it (a
// speculative step may have committed more).
void CutAtReversePrompts(const ReversePrompts* reverse, GenerateResult* result) {
  if (reverse == nullptr) return;
  for (SequenceResult& seq : result->sequences) {
    if (!reverse->stopped(seq.index)) continue;
    result->n_tokens -= static_cast<int64_t>(seq.tokens.size()) - reverse->kept(seq.index);
    seq.tokens.resize(reverse->kept(seq.index));
    seq.finish_reason = "stop";
  }
}

void WarnAboutThreads(int threads) {
  if (const unsigned cores = std::thread::hardware_concurrency();
      cores > 0 && static_cast<unsigned>(threads) > cores) {
    std::fprintf(stderr,
                 "warning: -t %d is more than the %u hardware threads here: threads that share a "
                 "core wait for each other at every step (many times slower)\n",
                 threads, cores);
  }
}

void CheckPromptSources(const GenerateOptions& o) {
  const int n_prompt_sources =
      !o.prompt.empty() + !o.prompt_file.empty() + !o.tokens.empty() + !o.prompts_file.empty();
  SPECD_CHECK(!o.chat || (o.tokens.empty() && o.prompts_file.empty()),
              "--chat takes its turn from -p or -f (or stdin), not --tokens or --prompts");
  SPECD_CHECK(n_prompt_sources == 1,
              "give exactly one of -p TEXT, -f FILE, --tokens 1,2,3 or --prompts FILE.jsonl");
}

}  // namespace

// --grammar / -j as the request's constraint (null without either).
std::shared_ptr<const TokenConstraintFactory> ConstraintFromFlags(const GenerateOptions& o,
                                                                  LoadedModels& models) {
  SPECD_CHECK(o.grammar.empty() || o.json_schema.empty(),
              "give --grammar or --json-schema, not both");
  if (o.grammar.empty() && o.json_schema.empty()) return nullptr;
  GrammarSpec spec;
  spec.kind = o.grammar.empty() ? GrammarKind::kJsonSchema : GrammarKind::kGbnf;
  spec.text = o.grammar.empty() ? o.json_schema : o.grammar;
  try {
    return models.grammar().Compile(spec);
  } catch (const Error& e) {
    throw Error(StrCat(o.grammar.empty() ? "--json-schema" : "--grammar",
                       " cannot be compiled: ", e.what()));
  }
}

int RunGenerate(const GenerateOptions& options) {
  GenerateOptions o = options;
  // A model with a shipped draft decodes speculatively unless asked otherwise.
  flags::SpeculationFlags& spec = o.speculation;
  flags::ChooseModels(&o.model, &spec.config.draft.path, flags::WantsDraftModel(spec),
                      &spec.config.draft);
  EngineConfig config = EngineConfigFor(o, !options.speculation.config.draft.path.empty());
  SPECD_CHECK(o.system.empty() || o.chat, "--system needs --chat");
  if (o.chat && o.prompt.empty() && o.prompt_file.empty() && o.tokens.empty() &&
      o.prompts_file.empty()) {
    return RunInteractiveChat(o, config);
  }
  CheckPromptSources(o);
  WarnAboutThreads(o.threads);
  // Before any thread starts, so that all inherit the blocked signals.
  const auto signals = std::make_unique<SignalWatcher>();
  if (!o.json) std::fprintf(stderr, "specd: %s\n", flags::DescribeLoading(config).c_str());
  const auto models = LoadModels(config);
  const Tokenizer* tokenizer = models->tokenizer.get();
  GenerateRequest request;
  std::string prompt_text;        // -p or -f (read once: -f - is standard input)
  std::vector<int> prompt_lines;  // --prompts: the line of each prompt
  ReadPrompts(o, *models, &request, &prompt_text, &prompt_lines);
  SetRequestOptions(o, &request);
  request.constraint = ConstraintFromFlags(o, *models);
  RunSummary run;
  run.n_seq = request.n_sequences;
  run.strategy = flags::StrategyName(spec, config.speculation.proposer, run.n_seq);
  run.prompt_tokens = request.prompt.size();
  if (!request.prompts.empty()) run.prompt_tokens = 0;
  for (const auto& p : request.prompts) run.prompt_tokens += p.size();
  config.n_slots = run.n_seq;
  config.n_ctx = ContextForPrompts(o, config, *models->target, prompt_lines, &request);
  const auto stack = BuildEngine(*models, config);
  if (!o.json) {
    const ModelConfig& mc = models->target->config();
    std::fprintf(stderr, "model: %s (%s, %d layers, d=%d, vocab %lld), %d threads, %s kernels\n",
                 o.model.c_str(), mc.arch.c_str(), mc.n_layer, mc.n_embd,
                 static_cast<long long>(mc.n_vocab), o.threads, models->ctx.cpu.Name().c_str());
    std::fprintf(stderr,
                 "prompt%s: %zu tokens; KV cache: %d sequences x %d positions, %s, %.1f MiB "
                 "reserved (committed as positions are written)\n",
                 request.prompts.empty() ? "" : "s", run.prompt_tokens, run.n_seq, stack->n_ctx(),
                 std::string(DTypeName(o.cache_type)).c_str(),
                 stack->kv().BytesReserved() / 1048576.0);
  }
  const auto stream = StartStream(o, tokenizer, prompt_text, &request);
  std::unique_ptr<ReversePrompts> reverse;
  const std::vector<std::string> reverse_prompts = ReversePromptsOf(o, tokenizer);
  if (!reverse_prompts.empty()) {
    reverse = std::make_unique<ReversePrompts>(*tokenizer, reverse_prompts, run.n_seq);
  }
  WatchTokens(stream.get(), reverse.get(), &request);
  // Ctrl-C ends the sequences where they are; what was generated and the statistics follow.
  std::atomic<bool> interrupted{false};
  request.interrupt = &interrupted;
  signals->Start([&interrupted](int) { interrupted = true; });
  GenerateResult result = RunRequest(stack->engine(), request);
  CutAtReversePrompts(reverse.get(), &result);
  if (interrupted) std::fprintf(stderr, "\ninterrupted\n");
  run.latency = LatencyOf(result);
  if (o.time_budget_ms > 0) {
    // BASS 4.5: only sequences finished within the budget, best mean log-probability first.
    run.n_over_budget = KeepFinishedRankedByLogProb(&result);
    if (run.n_over_budget > 0) {
      std::fprintf(stderr, "%s: %d of %d sequences did not finish within --time-budget-ms %g%s\n",
                   result.sequences.empty() ? "warning" : "note", run.n_over_budget, run.n_seq,
                   o.time_budget_ms,
                   result.sequences.empty() ? ": none to print (raise the budget)" : "");
    }
  }
  if (stream) std::cout << stream->Finish() << "\n";
  PrintSequences(o, tokenizer, result, stream != nullptr, stack->speculative());
  if (o.json) {
    PrintJsonSummary(request, result, run, *stack);
  } else {
    PrintTextSummary(request, result, run, *stack);
  }
  std::cout.flush();
  SPECD_CHECK(std::cout.good(), "cannot write the output (disk full, or the reader went away?)");
  return 0;
}

}  // namespace specd::cli
