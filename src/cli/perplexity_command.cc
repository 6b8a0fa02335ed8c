// `specd perplexity`: llama-perplexity's measure, so numbers compare across engines. The text is
// tokenized whole (BOS as the model asks), cut into non-overlapping chunks of n_ctx tokens whose
// first token is replaced by BOS when the model adds one, and in each chunk only the predictions
// of the second half are scored: PPL = exp(mean negative log-likelihood).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "base/cpu_features.h"
#include "base/error.h"
#include "base/file_util.h"
#include "base/timer.h"
#include "cli/commands.h"
#include "engine/model_options.h"
#include "flags/common_flags.h"
#include "model/model.h"
#include "sampling/sampler.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {
namespace {

// Rows per forward pass: the logits of a whole 512-token chunk of a 262k vocabulary would take
// 0.5 GB, so a chunk is evaluated in slices.
constexpr int kRowsPerForward = 64;

// Negative log-likelihoods of the scored predictions of one chunk: tokens[i + 1] given the
// prefix up to i, for i in [n_ctx / 2, n_ctx - 1).
std::vector<double> ScoreChunk(const KernelContext& ctx, Model& model, KvCache& kv,
                               const std::vector<int32_t>& chunk) {
  const int n_ctx = static_cast<int>(chunk.size());
  const int first = n_ctx / 2;
  const int64_t n_vocab = model.config().n_vocab;
  const int seq = kv.Acquire();
  std::vector<double> nll;
  std::vector<float> logits;
  for (int begin = 0; begin < n_ctx - 1; begin += kRowsPerForward) {
    const int end = std::min(n_ctx - 1, begin + kRowsPerForward);
    Batch batch;
    for (int i = begin; i < end; ++i) batch.Add(chunk[i], i, seq, i >= first);
    model.Forward(ctx, batch, kv, AttentionMode::kSplit, &logits);
    int64_t row = 0;
    for (int i = std::max(begin, first); i < end; ++i, ++row) {
      const std::span<const float> row_logits(logits.data() + row * n_vocab, n_vocab);
      nll.push_back(-LogProb(row_logits, chunk[i + 1]));
    }
  }
  kv.Release(seq);
  return nll;
}

}  // namespace

int RunPerplexity(const PerplexityOptions& o) {
  SPECD_CHECK(!o.model.empty(), "perplexity needs -m MODEL.gguf");
  SPECD_CHECK(!o.text_file.empty(), "perplexity needs -f TEXT_FILE");
  SPECD_CHECK(o.ctx >= 16, "-c must be at least 16 tokens, got ", o.ctx);
  const std::string text = ReadFileBytes(o.text_file);
  ThreadPool pool(o.threads);
  const CpuFeatures cpu = CpuFeatures::Detect();
  const KernelContext ctx{&pool, cpu, Int8BackendFor(o.weights, cpu)};
  auto model = Model::Load(o.model, &ctx, LoadOptionsForModel(o.weights, o.model));
  const auto tokenizer = Tokenizer::FromGguf(model->gguf());
  SPECD_CHECK(o.ctx <= model->config().n_ctx_train, "-c ", o.ctx, " exceeds the ",
              model->config().n_ctx_train, " positions the model was trained on");
  const std::vector<int32_t> tokens = tokenizer->Encode(text, true, false);
  int64_t n_chunks = static_cast<int64_t>(tokens.size()) / o.ctx;
  if (o.max_chunks > 0) n_chunks = std::min<int64_t>(n_chunks, o.max_chunks);
  SPECD_CHECK(n_chunks >= 1, o.text_file, " has ", tokens.size(), " tokens: at least -c ", o.ctx,
              " are needed for one chunk");
  std::fprintf(stderr, "perplexity: %s, %zu tokens, %lld chunks of %d, %d threads\n",
               o.model.c_str(), tokens.size(), static_cast<long long>(n_chunks), o.ctx, o.threads);
  KvCacheConfig kv_config;
  kv_config.n_ctx = o.ctx;
  kv_config.type = DType::kF16;
  auto kv = model->NewKvCache(kv_config);
  const bool replace_bos = tokenizer->add_bos() && tokenizer->bos() >= 0;
  Timer timer;
  double sum = 0, sum_sq = 0;
  int64_t count = 0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    std::vector<int32_t> chunk(tokens.begin() + c * o.ctx, tokens.begin() + (c + 1) * o.ctx);
    if (replace_bos) chunk[0] = tokenizer->bos();
    for (double v : ScoreChunk(ctx, *model, *kv, chunk)) {
      sum += v;
      sum_sq += v * v;
      ++count;
    }
    std::fprintf(stderr, "[%lld]%.4f ", static_cast<long long>(c + 1), std::exp(sum / count));
  }
  std::fprintf(stderr, "\n");
  const double mean = sum / count;
  // Standard error of the PPL by the delta method on the mean NLL, as llama-perplexity reports.
  const double var = std::max(0.0, sum_sq / count - mean * mean);
  const double ppl = std::exp(mean);
  const double ppl_err = ppl * std::sqrt(var / std::max<int64_t>(count - 1, 1));
  const double seconds = timer.ElapsedMs() / 1000;
  if (o.json) {
    nlohmann::json j = {{"model", o.model},      {"file", o.text_file}, {"n_ctx", o.ctx},
                        {"n_chunks", n_chunks},  {"n_scored", count},   {"ppl", ppl},
                        {"ppl_stderr", ppl_err}, {"seconds", seconds}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("Final estimate: PPL = %.4f +/- %.5f (%lld scored tokens, %.1f s)\n", ppl, ppl_err,
                static_cast<long long>(count), seconds);
  }
  return 0;
}

Command AddPerplexityCommand(CLI::App& app) {
  auto options = std::make_shared<PerplexityOptions>();
  PerplexityOptions* o = options.get();
  CLI::App* p =
      app.add_subcommand("perplexity", "perplexity of a model on a text (as llama-perplexity)");
  p->add_option("-m,--model", o->model, "model (GGUF)")->required();
  p->add_option("-f,--file", o->text_file, "text file")->required();
  p->add_option("-c,--ctx", o->ctx, "tokens per chunk (the second half is scored)")
      ->check(CLI::Range(16, 1 << 20));
  p->add_option("--chunks", o->max_chunks, "score at most this many chunks (0: all)")
      ->check(CLI::NonNegativeNumber);
  flags::AddThreadsFlag(p, &o->threads);
  p->add_flag("--json", o->json, "print the result as one JSON object");
  flags::AddWeightFlags(p, &o->weights);

  return {p, [options] { return RunPerplexity(*options); }};
}

}  // namespace specd::cli
