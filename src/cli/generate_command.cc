#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/file_util.h"
#include "cli/commands.h"
#include "decode/autoregressive.h"
#include "model/model.h"
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

}  // namespace

int RunGenerate(const GenerateOptions& o) {
  SPECD_CHECK(!o.model.empty(),
              "no model given: use -m MODEL.gguf (the default trained pair is "
              "not shipped yet)");
  const int n_prompt_sources = !o.prompt.empty() + !o.prompt_file.empty() + !o.tokens.empty();
  SPECD_CHECK(n_prompt_sources == 1, "give exactly one of -p TEXT, -f FILE or --tokens 1,2,3");

  ThreadPool pool(o.threads);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(o.model, &ctx);
  const ModelConfig& config = model->config();
  // Models without tokenizer metadata still generate from token ids.
  std::unique_ptr<Tokenizer> tokenizer;
  if (model->gguf().Find("tokenizer.ggml.model") != nullptr) {
    tokenizer = Tokenizer::FromGguf(model->gguf());
    SPECD_CHECK(tokenizer->n_vocab() == config.n_vocab, o.model, ": the tokenizer has ",
                tokenizer->n_vocab(), " tokens but the model ", config.n_vocab);
  }

  GenerateRequest request;
  if (!o.tokens.empty()) {
    request.prompt = ParseTokenList(o.tokens);
  } else {
    SPECD_CHECK(tokenizer != nullptr, o.model, " has no tokenizer metadata: pass --tokens");
    const std::string text = o.prompt_file.empty() ? o.prompt : ReadFileBytes(o.prompt_file);
    request.prompt = tokenizer->Encode(text, /*add_special=*/true, o.special);
    SPECD_CHECK(!request.prompt.empty(), "the prompt is empty (and the model adds no BOS token)");
  }
  request.n_predict = o.n_predict;
  request.n_sequences = o.batch;
  request.sampling.temperature = o.temperature;
  request.sampling.top_k = o.top_k;
  request.sampling.top_p = o.top_p;
  request.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  request.attention = o.attention == "pad" ? AttentionMode::kPad : AttentionMode::kSplit;
  request.stop_at_eos = !o.ignore_eos;
  ValidateSamplingParams(request.sampling);

  const int64_t wanted = static_cast<int64_t>(request.prompt.size()) + o.n_predict;
  const int n_ctx = o.ctx > 0 ? o.ctx
                              : static_cast<int>(std::min<int64_t>(
                                    config.n_ctx_train, std::max<int64_t>(4096, wanted)));
  auto kv = model->NewKvCache({o.batch, n_ctx});
  if (!o.json) {
    std::fprintf(stderr, "model: %s (%s, %d layers, d=%d, vocab %lld), %d threads, %s kernels\n",
                 o.model.c_str(), config.arch.c_str(), config.n_layer, config.n_embd,
                 static_cast<long long>(config.n_vocab), o.threads, ctx.cpu.Name());
    std::fprintf(stderr, "prompt: %zu tokens; KV cache: %d sequences x %d positions, %.1f MiB\n",
                 request.prompt.size(), o.batch, n_ctx, kv->BytesReserved() / 1048576.0);
  }
  // A single sequence on a terminal-style run streams its text as it is generated.
  std::unique_ptr<StreamingDecoder> stream;
  if (!o.json && o.batch == 1 && tokenizer) {
    stream = std::make_unique<StreamingDecoder>(*tokenizer);
    if (!o.tokens.empty()) {
      std::cout << tokenizer->Decode(request.prompt, /*strip_space_prefix=*/true);
    } else {
      std::cout << (o.prompt_file.empty() ? o.prompt : ReadFileBytes(o.prompt_file));
    }
    std::cout << std::flush;
    request.on_token = [&](int, int32_t token) { std::cout << stream->Push(token) << std::flush; };
  }
  const GenerateResult result = GenerateAutoregressive(*model, ctx, *kv, request);
  if (stream) std::cout << stream->Finish() << "\n";

  const double total_ms = result.t_prefill_ms + result.t_decode_ms;
  const double tokens_per_s = total_ms > 0 ? result.n_tokens / (total_ms / 1000.0) : 0.0;
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
      std::cout << line.dump() << "\n";
    } else if (!stream) {
      std::cout << "[" << seq.index << "]";
      if (tokenizer) {
        std::cout << " " << text << "\n";
      } else {
        for (int32_t t : seq.tokens) std::cout << " " << t;
        std::cout << "\n";
      }
    }
  }
  if (o.json) {
    nlohmann::json summary = {{"type", "summary"},
                              {"strategy", "ar"},
                              {"batch", o.batch},
                              {"n_prompt_tokens", request.prompt.size()},
                              {"n_tokens", result.n_tokens},
                              {"tokens_per_s", tokens_per_s},
                              {"t_prefill_ms", result.t_prefill_ms},
                              {"t_decode_ms", result.t_decode_ms},
                              {"seed", request.sampling.seed}};
    std::cout << summary.dump() << std::endl;
  } else {
    std::fprintf(stderr,
                 "strategy ar, batch %d: %lld tokens in %.1f ms (%.1f tok/s); prefill %.1f ms, "
                 "decode %.1f ms, seed %llu\n",
                 o.batch, static_cast<long long>(result.n_tokens), total_ms, tokens_per_s,
                 result.t_prefill_ms, result.t_decode_ms,
                 static_cast<unsigned long long>(request.sampling.seed));
  }
  return 0;
}

int RunInfo(const std::string& path) {
  auto file = GgufFile::Open(path);
  std::cout << "GGUF version " << file->version() << ", " << file->metadata().size()
            << " metadata keys, " << file->tensors().size() << " tensors\n";
  for (const auto& [key, value] : file->metadata()) {
    std::cout << "  " << key << " (" << GgufTypeName(value.type) << ")";
    if (const auto* s = std::get_if<std::string>(&value.value)) {
      std::cout << " = " << (s->size() > 200 ? s->substr(0, 200) + "..." : *s);
    }
    if (const auto* u = std::get_if<uint64_t>(&value.value)) std::cout << " = " << *u;
    if (const auto* i = std::get_if<int64_t>(&value.value)) std::cout << " = " << *i;
    if (const auto* f = std::get_if<double>(&value.value)) std::cout << " = " << *f;
    if (const auto* b = std::get_if<bool>(&value.value))
      std::cout << " = " << (*b ? "true" : "false");
    if (const auto* a = std::get_if<GgufArray>(&value.value)) {
      std::cout << " = [" << a->items.size() << " x " << GgufTypeName(a->element_type) << "]";
    }
    std::cout << "\n";
  }
  if (file->Find("tokenizer.ggml.model") != nullptr) {
    const auto tokenizer = Tokenizer::FromGguf(*file);
    std::cout << "tokenizer: " << (tokenizer->kind() == TokenizerKind::kSpm ? "SPM" : "BPE") << ", "
              << tokenizer->n_vocab() << " tokens"
              << (tokenizer->pre_tokenizer().empty() ? "" : ", pre " + tokenizer->pre_tokenizer())
              << "\n";
  }
  if (file->FindTensor("token_embd.weight") == nullptr) {
    std::cout << "no weights (a vocabulary-only file)\n";
    return 0;
  }
  auto model = Model::FromGguf(std::move(file));
  const ModelConfig& c = model->config();
  std::cout << "model: " << c.arch << ", " << model->NumParameters() << " parameters, vocab "
            << c.n_vocab << ", d=" << c.n_embd << ", " << c.n_layer << " layers, " << c.n_head
            << " heads / " << c.n_head_kv << " KV heads, FFN " << c.n_ff << ", "
            << model->WeightBytesPerToken() / 1048576.0 << " MiB read per token\n";
  return 0;
}

}  // namespace specd::cli
