// `specd generate --chat` without a prompt: a conversation, one user turn per line of stdin, on
// the same engine as every other run (speculation and every sampling flag apply). Each turn's
// prompt is the whole conversation rendered again; the engine's prompt cache keeps the last
// turn's KV, so only the tokens after the shared prefix are read. Ctrl-C stops an answer and
// returns to the prompt; at the prompt it ends the program, as llama-cli's.
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <random>

#include "base/error.h"
#include "cli/commands.h"
#include "cli/reverse_prompts.h"
#include "cli/signals.h"
#include "engine/generate.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {
namespace {

// One turn's request: the conversation so far, answered under the run's sampling flags.
GenerateRequest TurnRequest(const GenerateOptions& o, const std::vector<int32_t>& prompt,
                            int n_answer, const ChatTemplate& chat, uint64_t seed) {
  GenerateRequest request;
  request.prompt = prompt;
  request.n_predict = n_answer;
  request.sampling = o.sampling;
  request.sampling.seed = seed;
  request.stop_at_eos = !o.ignore_eos;
  request.stop_tokens = chat.stop_tokens();
  request.cache_prompt = true;
  request.sum_logprob = false;
  return request;
}

// Streams one answer to stdout; returns its tokens (up to a reverse prompt).
std::vector<int32_t> Answer(Engine& engine, const Tokenizer& tokenizer,
                            const std::vector<std::string>& reverse_prompts,
                            GenerateRequest request) {
  StreamingDecoder stream(tokenizer);
  ReversePrompts reverse(tokenizer, reverse_prompts, 1);
  request.on_token = [&](int, int32_t token) {
    const bool printing = !reverse.stopped(0);
    const bool go_on = reverse.Push(0, token);
    if (printing) std::cout << stream.Push(token) << std::flush;
    return go_on;
  };
  GenerateResult result = RunRequest(engine, request);
  std::cout << stream.Finish() << "\n" << std::flush;
  std::vector<int32_t> tokens = result.sequences.at(0).tokens;
  if (reverse.stopped(0)) tokens.resize(reverse.kept(0));
  return tokens;
}

}  // namespace

int RunInteractiveChat(const GenerateOptions& o, EngineConfig config) {
  SignalWatcher signals;  // before the thread pool starts, so that its threads inherit the mask
  const auto models = LoadModels(config);
  SPECD_CHECK(models->tokenizer != nullptr, o.model, " has no tokenizer metadata: chat needs one");
  const Tokenizer& tokenizer = *models->tokenizer;
  const ChatTemplate chat =
      ChatTemplate::ForModel(models->target->gguf(), tokenizer, o.chat_template);
  if (chat.from_vocabulary()) std::fprintf(stderr, "note: %s\n", chat.GuessNote(o.model).c_str());
  // A named template's end-of-turn marker, when the vocabulary has it only as text, ends a turn.
  std::vector<std::string> reverse_prompts = o.reverse_prompts;
  reverse_prompts.insert(reverse_prompts.end(), chat.stop_strings().begin(),
                         chat.stop_strings().end());
  config.n_slots = 1;
  const auto stack = BuildEngine(*models, config);
  const auto constraint = ConstraintFromFlags(o, *models);  // every answer follows it
  const int n_ctx = stack->n_ctx();
  const uint64_t seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  const bool terminal = ::isatty(STDIN_FILENO) != 0;
  std::fprintf(stderr, "chat: %s, %s format, context %d, seed %llu, speculation %s%s\n",
               o.model.c_str(), chat.name(), n_ctx, static_cast<unsigned long long>(seed),
               stack->speculative() ? DescribeProposer(stack->speculation()).c_str() : "off",
               terminal ? "; an empty line or Ctrl-D ends, Ctrl-C stops an answer" : "");
  std::atomic<bool> answering{false}, interrupted{false};
  signals.Start([&](int) {
    if (!answering) std::_Exit(130);  // at the prompt: nothing is in flight
    interrupted = true;
  });
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  std::string line;
  for (int turn = 0; !(o.single_turn && turn == 1); ++turn) {
    if (terminal) std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line) || (terminal && line.empty())) break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    const std::vector<int32_t> prompt = EncodeChat(tokenizer, chat, messages, o.special);
    // -n -1: as much as the context leaves.
    const int n_answer = o.n_predict < 0 ? n_ctx - static_cast<int>(prompt.size()) : o.n_predict;
    SPECD_CHECK(n_answer >= 1 && static_cast<int64_t>(prompt.size()) + n_answer <= n_ctx, "turn ",
                turn + 1, ": the conversation (", prompt.size(), " tokens) and -n ", o.n_predict,
                " new tokens do not fit the context of ", n_ctx, " positions");
    GenerateRequest request = TurnRequest(o, prompt, n_answer, chat, seed);
    request.constraint = constraint;
    interrupted = false;
    request.interrupt = &interrupted;
    answering = true;
    const std::vector<int32_t> answer =
        Answer(stack->engine(), tokenizer, reverse_prompts, std::move(request));
    answering = false;
    messages.push_back({"assistant", tokenizer.Decode(answer)});
  }
  return 0;
}

}  // namespace specd::cli
