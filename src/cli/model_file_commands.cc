// `specd info` (a GGUF file's metadata and shape) and `specd synth` (a model of seeded random
// weights, for tests and benchmarks).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "flags/common_flags.h"
#include "cli/commands.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "threading/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {

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

namespace {

struct SynthOptions {
  std::string shape = "tiny";
  std::string type = "f32";
  std::string out;
  int64_t seed = 1;
  int threads = 2;
};

}  // namespace

Command AddSynthCommand(CLI::App& app) {
  auto options = std::make_shared<SynthOptions>();
  SynthOptions* o = options.get();
  CLI::App* sy = app.add_subcommand("synth", "write a GGUF model with seeded random weights");
  std::string shape_names;
  for (const auto& s : KnownShapes()) shape_names += (shape_names.empty() ? "" : ", ") + s.name;
  sy->add_option("--shape", o->shape, "model shape: " + shape_names);
  const std::vector<std::string> writable_types = {"f32",  "f16",  "bf16", "q8_0", "q4_0",
                                                   "q4_1", "q5_0", "q5_1", "q4_K", "q6_K"};
  sy->add_option("--type", o->type,
                 "weight type: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, "
                 "q5_1, q4_K, q6_K")
      ->check(CLI::IsMember(writable_types));
  sy->add_option("--seed", o->seed, "random seed")->check(CLI::NonNegativeNumber);
  sy->add_option("-o,--output", o->out, "output file")->required();
  flags::AddThreadsFlag(sy, &o->threads);
  return {sy, [options] {
            const SynthOptions& o = *options;
            ThreadPool pool(o.threads);
            WriteSyntheticModel(ShapeByName(o.shape), *DTypeFromName(o.type),
                                static_cast<uint64_t>(o.seed), o.out, &pool);
            std::fprintf(stderr, "wrote %s (%s, %s)\n", o.out.c_str(), o.shape.c_str(),
                         o.type.c_str());
            return 0;
          }};
}

Command AddInfoCommand(CLI::App& app) {
  auto model = std::make_shared<std::string>();
  CLI::App* info = app.add_subcommand("info", "print a GGUF file's metadata and model shape");
  info->add_option("-m,--model", *model, "GGUF file (default: generate's default model)");
  return {info, [model] {
            if (model->empty()) *model = flags::DefaultTargetModel();
            SPECD_CHECK(!model->empty(), "no model given (-m MODEL.gguf) and no default model");
            return RunInfo(*model);
          }};
}

}  // namespace specd::cli
