// `specd info` (a GGUF file's metadata and shape) and `specd synth` (a model of seeded random
// weights, for tests and benchmarks).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "cli/commands.h"
#include "flags/common_flags.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "model/synth.h"
#include "threading/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace specd::cli {

namespace {

// llama.cpp's general.file_type (enum llama_ftype): what most of a file's matrices are.
std::string FileTypeName(uint64_t id) {
  static const std::map<uint64_t, const char*> kNames = {
      {0, "F32"},      {1, "F16"},      {2, "Q4_0"},    {3, "Q4_1"},    {7, "Q8_0"},
      {8, "Q5_0"},     {9, "Q5_1"},     {10, "Q2_K"},   {11, "Q3_K_S"}, {12, "Q3_K_M"},
      {13, "Q3_K_L"},  {14, "Q4_K_S"},  {15, "Q4_K_M"}, {16, "Q5_K_S"}, {17, "Q5_K_M"},
      {18, "Q6_K"},    {19, "IQ2_XXS"}, {20, "IQ2_XS"}, {21, "Q2_K_S"}, {22, "IQ3_XS"},
      {23, "IQ3_XXS"}, {24, "IQ1_S"},   {25, "IQ4_NL"}, {26, "IQ3_S"},  {27, "IQ3_M"},
      {28, "IQ2_S"},   {29, "IQ2_M"},   {30, "IQ4_XS"}, {31, "IQ1_M"},  {32, "BF16"},
      {36, "TQ1_0"},   {37, "TQ2_0"}};
  const auto it = kNames.find(id);
  return it != kNames.end() ? it->second : "unknown (" + std::to_string(id) + ")";
}

void PrintMetadataValue(const std::string& key, const GgufValue& value) {
  std::cout << "  " << key << " (" << GgufTypeName(value.type) << ")";
  if (const auto* s = std::get_if<std::string>(&value.value)) {
    std::cout << " = " << (s->size() > 200 ? s->substr(0, 200) + "..." : *s);
  }
  if (const auto* u = std::get_if<uint64_t>(&value.value)) {
    std::cout << " = " << *u;
    if (key == "general.file_type") std::cout << " (" << FileTypeName(*u) << ")";
  }
  if (const auto* i = std::get_if<int64_t>(&value.value)) std::cout << " = " << *i;
  if (const auto* f = std::get_if<double>(&value.value)) std::cout << " = " << *f;
  if (const auto* b = std::get_if<bool>(&value.value))
    std::cout << " = " << (*b ? "true" : "false");
  if (const auto* a = std::get_if<GgufArray>(&value.value)) {
    std::cout << " = [" << a->items.size() << " x " << GgufTypeName(a->element_type) << "]";
  }
  std::cout << "\n";
}

// Every tensor (name, type, shape in ggml's order, size), then the counts by type.
void PrintTensors(const GgufFile& file) {
  std::map<std::string, std::pair<int, uint64_t>> by_type;  // type -> (tensors, bytes)
  std::cout << "tensors:\n";
  for (const GgufTensorInfo& t : file.tensors()) {
    std::string shape;
    for (int64_t d : t.shape) shape += (shape.empty() ? "" : " x ") + std::to_string(d);
    const std::string type(DTypeName(t.type));
    std::cout << "  " << t.name << " " << type << " [" << shape << "] "
              << static_cast<double>(t.n_bytes) / 1048576.0 << " MiB\n";
    by_type[type].first += 1;
    by_type[type].second += t.n_bytes;
  }
  std::cout << "tensors by type:";
  for (const auto& [type, count] : by_type) {
    std::cout << " " << type << " " << count.first << " (" << count.second / 1048576.0 << " MiB)";
  }
  std::cout << "\n";
}

}  // namespace

int RunInfo(const std::string& path) {
  auto file = GgufFile::Open(path);
  std::cout << "GGUF version " << file->version() << ", " << file->metadata().size()
            << " metadata keys, " << file->tensors().size() << " tensors\n";
  for (const auto& [key, value] : file->metadata()) PrintMetadataValue(key, value);
  PrintTensors(*file);
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
