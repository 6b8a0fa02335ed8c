// libFuzzer target: arbitrary bytes as the body of an OpenAI API request (the first byte picks
// /v1/completions or /v1/chat/completions). Parsing must give a request or an ApiError with a
// 4xx status; any other exception or crash is a finding. Accepted requests are checked against
// the limits, and their stop strings run through ChoiceText on the prompt's tokens.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

#include "base/error.h"
#include "gguf/gguf.h"
#include "server/llama_api.h"
#include "server/openai_api.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace {

struct Vocabulary {
  std::unique_ptr<specd::GgufFile> file;
  std::unique_ptr<specd::Tokenizer> tokenizer;
  std::unique_ptr<specd::ChatTemplate> chat;
  specd::server::FimTokens fim;
};

// SPECD_FUZZ_MODEL, else Qwen2.5-Coder (chat template and FIM tokens), else SmolLM2 (a chat
// template), else the shipped 16.5M target.
Vocabulary Load() {
  std::string path;
  if (const char* env = std::getenv("SPECD_FUZZ_MODEL")) path = env;
  for (const char* candidate : {SPECD_FUZZ_PRETRAINED "/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
                                SPECD_FUZZ_PRETRAINED "/SmolLM2-135M-Instruct.Q4_1.gguf",
                                SPECD_FUZZ_MODELS "/specd-target-q8_0.gguf"}) {
    if (path.empty() && std::filesystem::exists(candidate)) path = candidate;
  }
  if (path.empty()) {
    std::fprintf(stderr, "no model for its tokenizer (set SPECD_FUZZ_MODEL)\n");
    std::abort();
  }
  Vocabulary v;
  v.file = specd::GgufFile::Open(path);
  v.tokenizer = specd::Tokenizer::FromGguf(*v.file);
  v.fim = specd::server::FindFimTokens(*v.tokenizer);
  try {
    v.chat = std::make_unique<specd::ChatTemplate>(
        specd::ChatTemplate::FromGguf(*v.file, *v.tokenizer));
  } catch (const specd::Error&) {
  }
  std::fprintf(stderr, "fuzzing requests with %s's tokenizer%s\n", path.c_str(),
               v.chat ? " and chat template" : "");
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const Vocabulary vocab = Load();
  if (size < 1) return 0;
  // The first byte picks the route: OpenAI completions or chat, llama-server /completion or
  // /infill.
  const int route = data[0] % 4;
  const std::string body(reinterpret_cast<const char*>(data + 1), size - 1);
  specd::server::ApiLimits limits;
  limits.model_id = "m";
  limits.n_ctx = 256;
  limits.max_n = 4;
  try {
    specd::server::CompletionRequest r;
    size_t max_stop = 4;
    if (route < 2) {
      r = specd::server::ParseCompletionRequest(body, route == 1, *vocab.tokenizer,
                                                vocab.chat.get(), vocab.fim, limits);
    } else {
      r = specd::server::ParseLlamaCompletion(body, route == 3, *vocab.tokenizer, vocab.fim,
                                              limits)
              .completion;
      max_stop = 16;
    }
    if (r.prompt.empty() || r.max_tokens < 0 || (route < 2 && r.max_tokens < 1) ||
        static_cast<int64_t>(r.prompt.size()) + r.max_tokens > limits.n_ctx || r.n < 1 ||
        r.n > limits.max_n || r.stop.size() > max_stop) {
      std::fprintf(stderr, "a request outside the limits was accepted\n");
      std::abort();
    }
    specd::server::ChoiceText text(*vocab.tokenizer, r.stop, r.text_limits);
    for (int32_t t : r.prompt) {
      if (t < 0 || t >= vocab.tokenizer->n_vocab()) std::abort();
      if (text.Push(t)) break;
      text.TakeDelta(false);
    }
    text.TakeDelta(true);
  } catch (const specd::server::ApiError& e) {
    if (e.status < 400 || e.status >= 500) std::abort();
  }
  return 0;
}
