// `specd generate --chat` without a prompt: a conversation, one user turn per line of stdin. The
// KV cache is kept between turns: each turn's prompt is the whole conversation rendered again,
// and only the tokens after the longest prefix already in the cache are evaluated.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>

#include "base/cpu_features.h"
#include "base/error.h"
#include "cli/commands.h"
#include "engine/model_options.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {
namespace {

// Conversation state: the model's KV cache of one sequence and the tokens it holds.
struct Conversation {
  Model* model;
  const KernelContext* ctx;
  KvCache* kv;
  int seq;
  std::vector<int32_t> cached;  // tokens whose keys / values are in the cache
  std::vector<float> logits;    // [1, n_vocab] of the last evaluated token

  // Makes the cache hold `tokens` (reusing the common prefix) and leaves the last one's logits.
  void Feed(const std::vector<int32_t>& tokens) {
    size_t common = 0;
    while (common < cached.size() && common < tokens.size() && cached[common] == tokens[common]) {
      ++common;
    }
    if (common == tokens.size()) --common;  // re-evaluate the last token for its logits
    kv->Truncate(seq, static_cast<int>(common));
    cached.resize(common);
    Batch batch;
    for (size_t i = common; i < tokens.size(); ++i) {
      batch.Add(tokens[i], static_cast<int32_t>(i), seq, i + 1 == tokens.size());
    }
    model->Forward(*ctx, batch, *kv, AttentionMode::kSplit, &logits);
    cached = tokens;
  }
};

}  // namespace

int RunInteractiveChat(const GenerateOptions& options) {
  GenerateOptions o = options;
  if (o.model.empty()) o.model = DefaultTargetModel();
  SPECD_CHECK(!o.model.empty(), "chat needs a model (-m MODEL.gguf)");
  SPECD_CHECK(o.trace_steps.empty(),
              "--trace-steps: the interactive chat decodes without a draft, so has no speculative "
              "steps to trace");
  ThreadPool pool(o.threads);
  const CpuFeatures cpu = CpuFeatures::Detect();
  const KernelContext ctx{&pool, cpu, Int8BackendFromFlags(o.weight_flags, cpu)};
  auto model = Model::Load(o.model, &ctx, LoadOptionsForModel(o.weight_flags, o.model));
  SPECD_CHECK(model->gguf().Find("tokenizer.ggml.model") != nullptr, o.model,
              " has no tokenizer metadata: chat needs one");
  const auto tokenizer = Tokenizer::FromGguf(model->gguf());
  const ChatTemplate chat = ChatTemplate::FromGguf(model->gguf(), *tokenizer);
  if (chat.from_vocabulary()) std::fprintf(stderr, "note: %s\n", chat.GuessNote(o.model).c_str());
  const int n_ctx = o.ctx > 0 ? o.ctx : std::min(model->config().n_ctx_train, 4096);
  SPECD_CHECK(n_ctx <= model->config().n_ctx_train, "-c ", n_ctx, " exceeds the ",
              model->config().n_ctx_train, " positions the model was trained on");
  auto kv = model->NewKvCache({1, n_ctx, *DTypeFromName(o.cache_type)});
  Conversation conv{model.get(), &ctx, kv.get(), kv->Acquire(), {}, {}};
  SamplingParams sampling{o.temperature, o.top_k, o.top_p,
                          o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}()};
  ValidateSamplingParams(sampling);
  const bool terminal = ::isatty(STDIN_FILENO) != 0;
  std::fprintf(stderr, "chat: %s, %s format, context %d, seed %llu%s\n", o.model.c_str(),
               chat.name(), n_ctx, static_cast<unsigned long long>(sampling.seed),
               terminal ? "; an empty line or Ctrl-D ends" : "");
  std::vector<ChatMessage> messages;
  if (!o.system.empty()) messages.push_back({"system", o.system});
  std::string line;
  for (int turn = 0;; ++turn) {
    if (terminal) std::cout << "> " << std::flush;
    if (!std::getline(std::cin, line) || (terminal && line.empty())) break;
    if (line.empty()) continue;
    messages.push_back({"user", line});
    const std::vector<int32_t> prompt = EncodeChat(*tokenizer, chat, messages, o.special);
    // -n -1: as much as the context leaves.
    const int n_answer = o.n_predict < 0 ? n_ctx - static_cast<int>(prompt.size()) : o.n_predict;
    SPECD_CHECK(n_answer >= 1 && static_cast<int64_t>(prompt.size()) + n_answer <= n_ctx, "turn ",
                turn + 1, ": the conversation (", prompt.size(), " tokens) and -n ", o.n_predict,
                " new tokens do not fit the context of ", n_ctx, " (raise -c)");
    conv.Feed(prompt);
    StreamingDecoder stream(*tokenizer);
    std::vector<int32_t> answer;
    while (static_cast<int>(answer.size()) < n_answer) {
      const RngKey key{sampling.seed, 0, conv.cached.size(), RngPurpose::kSample};
      const int32_t token = SampleToken(conv.logits, sampling, key);
      const auto& stops = chat.stop_tokens();
      if (std::find(stops.begin(), stops.end(), token) != stops.end()) break;
      answer.push_back(token);
      std::cout << stream.Push(token) << std::flush;
      std::vector<int32_t> next = conv.cached;
      next.push_back(token);
      conv.Feed(next);
    }
    std::cout << stream.Finish() << "\n" << std::flush;
    messages.push_back({"assistant", tokenizer->Decode(answer)});
  }
  return 0;
}

}  // namespace specd::cli
