// The `specd` command line.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "base/cpu_features.h"
#include "base/error.h"
#include "bench/forward_bench.h"
#include "bench/matmul_bench.h"
#include "decode/autoregressive.h"
#include "model/model.h"
#include "model/synth.h"

namespace specd {
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

AttentionMode ParseAttention(const std::string& s) {
  return s == "pad" ? AttentionMode::kPad : AttentionMode::kSplit;
}

struct GenerateOptions {
  std::string model;
  std::string prompt;
  std::string prompt_file;
  std::string tokens;
  int n_predict = 128;
  float temperature = 0.8f;
  int top_k = 40;
  float top_p = 0.95f;
  int64_t seed = -1;
  int threads = 2;
  int batch = 1;
  int ctx = 0;
  std::string attention = "split";
  bool json = false;
  bool ignore_eos = false;
};

int RunGenerate(const GenerateOptions& o) {
  SPECD_CHECK(!o.model.empty(), "no model given: use -m MODEL.gguf (the default trained pair is "
                                "not shipped yet)");
  const int n_prompt_sources = !o.prompt.empty() + !o.prompt_file.empty() + !o.tokens.empty();
  SPECD_CHECK(n_prompt_sources == 1, "give exactly one of -p TEXT, -f FILE or --tokens 1,2,3");
  SPECD_CHECK(o.tokens.size() > 0, "text prompts (-p, -f) need the tokenizer, which is not ",
              "implemented yet; pass token ids with --tokens");
  GenerateRequest request;
  request.prompt = ParseTokenList(o.tokens);
  request.n_predict = o.n_predict;
  request.n_sequences = o.batch;
  request.sampling.temperature = o.temperature;
  request.sampling.top_k = o.top_k;
  request.sampling.top_p = o.top_p;
  request.sampling.seed = o.seed >= 0 ? static_cast<uint64_t>(o.seed) : std::random_device{}();
  request.attention = ParseAttention(o.attention);
  request.stop_at_eos = !o.ignore_eos;
  ValidateSamplingParams(request.sampling);

  ThreadPool pool(o.threads);
  const KernelContext ctx{&pool, CpuFeatures::Detect()};
  auto model = Model::Load(o.model, &ctx);
  const ModelConfig& config = model->config();
  const int n_ctx = o.ctx > 0 ? o.ctx
                              : std::min<int>(config.n_ctx_train,
                                              std::max<int>(4096, request.prompt.size() + o.n_predict));
  auto kv = model->NewKvCache({o.batch, n_ctx});
  if (!o.json) {
    std::fprintf(stderr, "model: %s (%s, %d layers, d=%d, vocab %lld), %d threads, %s kernels\n",
                 o.model.c_str(), config.arch.c_str(), config.n_layer, config.n_embd,
                 static_cast<long long>(config.n_vocab), o.threads, ctx.cpu.Name());
    std::fprintf(stderr, "KV cache: %d sequences x %d positions, %.1f MiB reserved\n", o.batch,
                 n_ctx, kv->BytesReserved() / 1048576.0);
  }
  const GenerateResult result = GenerateAutoregressive(*model, ctx, *kv, request);
  const double total_ms = result.t_prefill_ms + result.t_decode_ms;
  const double tokens_per_s = total_ms > 0 ? result.n_tokens / (total_ms / 1000.0) : 0.0;
  for (const SequenceResult& seq : result.sequences) {
    if (o.json) {
      nlohmann::json line = {{"index", seq.index},
                             {"tokens", seq.tokens},
                             {"text", ""},
                             {"n_tokens", seq.tokens.size()},
                             {"finish_reason", seq.finish_reason},
                             {"mean_logprob", seq.mean_logprob()},
                             {"elapsed_ms", seq.elapsed_ms}};
      std::cout << line.dump() << "\n";
    } else {
      std::cout << "[" << seq.index << "]";
      for (int32_t t : seq.tokens) std::cout << " " << t;
      std::cout << "\n";
    }
  }
  if (o.json) {
    nlohmann::json summary = {{"type", "summary"},
                              {"strategy", "ar"},
                              {"batch", o.batch},
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
    if (const auto* s = std::get_if<std::string>(&value.value)) std::cout << " = " << *s;
    if (const auto* u = std::get_if<uint64_t>(&value.value)) std::cout << " = " << *u;
    if (const auto* i = std::get_if<int64_t>(&value.value)) std::cout << " = " << *i;
    if (const auto* f = std::get_if<double>(&value.value)) std::cout << " = " << *f;
    if (const auto* b = std::get_if<bool>(&value.value)) std::cout << " = " << (*b ? "true" : "false");
    if (const auto* a = std::get_if<GgufArray>(&value.value)) {
      std::cout << " = [" << a->items.size() << " x " << GgufTypeName(a->element_type) << "]";
    }
    std::cout << "\n";
  }
  auto model = Model::FromGguf(std::move(file));
  const ModelConfig& c = model->config();
  std::cout << "model: " << c.arch << ", " << model->NumParameters() << " parameters, vocab "
            << c.n_vocab << ", d=" << c.n_embd << ", " << c.n_layer << " layers, " << c.n_head
            << " heads / " << c.n_head_kv << " KV heads, FFN " << c.n_ff << ", "
            << model->WeightBytesPerToken() / 1048576.0 << " MiB read per token\n";
  return 0;
}

}  // namespace
}  // namespace specd

int main(int argc, char** argv) {
  using namespace specd;
  CLI::App app{"specd: speculative decoding inference engine for GGUF Llama-family models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "specd 0.1.0");

  GenerateOptions gen;
  auto* generate = app.add_subcommand("generate", "generate text from a prompt");
  generate->add_option("-m,--model", gen.model, "target model (GGUF)");
  generate->add_option("-p,--prompt", gen.prompt, "prompt text");
  generate->add_option("-f,--file", gen.prompt_file, "file holding the prompt text");
  generate->add_option("--tokens", gen.tokens, "prompt as comma-separated token ids");
  generate->add_option("-n,--n-predict", gen.n_predict, "new tokens per sequence")
      ->check(CLI::Range(0, 1 << 20));
  generate->add_option("--temp", gen.temperature, "temperature (0: greedy)")
      ->check(CLI::Range(0.0, 100.0));
  generate->add_option("--top-k", gen.top_k, "keep the k most likely tokens (0: all)")
      ->check(CLI::Range(0, 1 << 30));
  generate->add_option("--top-p", gen.top_p, "nucleus sampling threshold (1: off)")
      ->check(CLI::Range(0.0, 1.0));
  generate->add_option("--seed", gen.seed, "random seed (default: random)")
      ->check(CLI::NonNegativeNumber);
  generate->add_option("-t,--threads", gen.threads, "threads")->check(CLI::Range(1, 256));
  generate->add_option("--batch", gen.batch, "sequences decoded together")
      ->check(CLI::Range(1, 4096));
  generate->add_option("-c,--ctx", gen.ctx, "context positions per sequence (default: fit)")
      ->check(CLI::Range(1, 1 << 20));
  generate->add_option("--attention", gen.attention, "attention over ragged sequences")
      ->check(CLI::IsMember({"pad", "split"}));
  generate->add_flag("--json", gen.json, "one JSON object per sequence, then a summary");
  generate->add_flag("--ignore-eos", gen.ignore_eos, "keep generating past end-of-sequence");

  std::string synth_shape = "tiny", synth_type = "f32", synth_out;
  int64_t synth_seed = 1;
  int synth_threads = 2;
  auto* synth = app.add_subcommand("synth", "write a GGUF model with seeded random weights");
  std::string shape_names;
  for (const auto& s : KnownShapes()) shape_names += (shape_names.empty() ? "" : ", ") + s.name;
  synth->add_option("--shape", synth_shape, "model shape: " + shape_names);
  synth->add_option("--type", synth_type, "weight type: f32, f16, bf16, q8_0, q4_0")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  synth->add_option("--seed", synth_seed, "random seed")->check(CLI::NonNegativeNumber);
  synth->add_option("-o,--output", synth_out, "output file")->required();
  synth->add_option("-t,--threads", synth_threads, "threads")->check(CLI::Range(1, 256));

  std::string info_model;
  auto* info = app.add_subcommand("info", "print a GGUF file's metadata and model shape");
  info->add_option("-m,--model", info_model, "GGUF file")->required();

  auto* bench = app.add_subcommand("bench", "benchmarks");
  bench->require_subcommand(1);
  bench::ForwardBenchOptions fwd;
  std::vector<std::string> fwd_types = {"bf16", "q8_0", "q4_0"};
  auto* bench_forward = bench->add_subcommand("forward", "decode speed vs roofline, M-row cost");
  bench_forward->add_option("--shape", fwd.shape, "model shape: " + shape_names);
  bench_forward->add_option("--types", fwd_types, "weight types")->delimiter(',')
      ->check(CLI::IsMember({"f32", "f16", "bf16", "q8_0", "q4_0"}));
  bench_forward->add_option("--threads", fwd.threads, "thread counts")->delimiter(',')->check(CLI::Range(1, 256));
  bench_forward->add_option("--rows", fwd.rows, "row counts M")->delimiter(',')->check(CLI::Range(1, 256));
  bench_forward->add_option("--decode", fwd.n_decode, "timed decode steps")
      ->check(CLI::Range(1, 100000));
  bench_forward->add_option("--reps", fwd.n_reps, "repetitions per M")->check(CLI::Range(1, 1000));
  bench_forward->add_option("--model-dir", fwd.model_dir, "where synthetic models are kept");
  bench_forward->add_option("--out", fwd.out_dir, "where results are written");

  bench::MatmulBenchOptions mm;
  auto* bench_matmul = bench->add_subcommand("matmul", "specd's matmul kernels vs oneDNN");
  bench_matmul->add_option("-n,--rows", mm.rows_n, "weight rows (outputs)")->check(CLI::Range(16, 1 << 20));
  bench_matmul->add_option("-k,--cols", mm.cols_k, "weight columns (inputs), a multiple of 32")
      ->check(CLI::Range(32, 1 << 16));
  bench_matmul->add_option("-t,--threads", mm.threads, "threads")->check(CLI::Range(1, 256));
  bench_matmul->add_option("-M,--m", mm.m, "row counts")->delimiter(',')->check(CLI::Range(1, 64));

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (*generate) return RunGenerate(gen);
    if (*synth) {
      const auto type = DTypeFromName(synth_type);
      ThreadPool pool(synth_threads);
      WriteSyntheticModel(ShapeByName(synth_shape), *type, static_cast<uint64_t>(synth_seed),
                          synth_out, &pool);
      std::fprintf(stderr, "wrote %s (%s, %s)\n", synth_out.c_str(), synth_shape.c_str(),
                   synth_type.c_str());
      return 0;
    }
    if (*info) return RunInfo(info_model);
    if (*bench_matmul) {
      SPECD_CHECK(mm.cols_k % 32 == 0, "--cols must be a multiple of 32");
      bench::RunMatmulBench(mm);
      return 0;
    }
    if (*bench_forward) {
      fwd.types.clear();
      for (const auto& t : fwd_types) fwd.types.push_back(*DTypeFromName(t));
      bench::RunForwardBench(fwd);
      return 0;
    }
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "error: out of memory\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
