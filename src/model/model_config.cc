// A model's hyper-parameters from its GGUF metadata: those every architecture shares, then each
// architecture's own (model/architectures.cc); the special tokens; and its end-of-generation
// tokens.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "base/error.h"
#include "model/architectures.h"
#include "model/model.h"
#include "model/model_file.h"

namespace specd {

using model_file::GetInt;
using model_file::Key;

void Model::ReadConfig(const GgufFile& f) {
  ModelConfig& c = config_;
  c.arch = f.Get("general.architecture").AsString("general.architecture");
  const Architecture* arch = FindArchitecture(c.arch);
  SPECD_CHECK(arch != nullptr, f.path(), ": architecture '", c.arch, "' is not supported (",
              SupportedArchitectures(), ")");
  if (const GgufValue* v = f.Find("general.name")) c.name = v->AsString("general.name");
  const std::string& a = c.arch;
  auto bounded = [&](const std::string& key, int64_t value, int64_t lo, int64_t hi) {
    SPECD_CHECK(value >= lo && value <= hi, f.path(), ": ", key, " = ", value, " is out of range [",
                lo, ", ", hi, "]");
    return static_cast<int>(value);
  };
  c.n_embd = bounded(Key(a, "embedding_length"), GetInt(f, Key(a, "embedding_length")), 1, 65536);
  c.n_layer = bounded(Key(a, "block_count"), GetInt(f, Key(a, "block_count")), 1, 1024);
  c.n_ff =
      bounded(Key(a, "feed_forward_length"), GetInt(f, Key(a, "feed_forward_length")), 1, 1 << 20);
  c.n_head =
      bounded(Key(a, "attention.head_count"), GetInt(f, Key(a, "attention.head_count")), 1, 1024);
  c.n_head_kv = bounded(Key(a, "attention.head_count_kv"),
                        f.GetInt(Key(a, "attention.head_count_kv"), c.n_head), 1, c.n_head);
  SPECD_CHECK(c.n_head % c.n_head_kv == 0, f.path(), ": ", c.n_head,
              " attention heads cannot be grouped over ", c.n_head_kv, " KV heads");
  SPECD_CHECK(c.n_embd % c.n_head == 0 || f.Find(Key(a, "attention.key_length")), f.path(),
              ": embedding length ", c.n_embd, " is not a multiple of ", c.n_head, " heads");
  c.head_dim = bounded(Key(a, "attention.key_length"),
                       f.GetInt(Key(a, "attention.key_length"), c.n_embd / c.n_head), 2, 1024);
  SPECD_CHECK(c.head_dim % 2 == 0, f.path(), ": head dimension ", c.head_dim, " must be even");
  SPECD_CHECK(c.head_dim <= 512, f.path(), ": head dimension ", c.head_dim,
              " is over 512, the most the attention kernels take");
  c.n_ctx_train =
      bounded(Key(a, "context_length"), f.GetInt(Key(a, "context_length"), 2048), 1, 1 << 24);
  c.rms_eps = static_cast<float>(
      f.GetFloat(Key(a, "attention.layer_norm_rms_epsilon"), arch->default_rms_eps));
  SPECD_CHECK(c.rms_eps > 0 && c.rms_eps < 1, f.path(), ": bad RMS norm epsilon ", c.rms_eps);
  c.rope.head_dim = c.head_dim;
  c.rope.rotary_dim = bounded(Key(a, "rope.dimension_count"),
                              f.GetInt(Key(a, "rope.dimension_count"), c.head_dim), 2, c.head_dim);
  SPECD_CHECK(c.rope.rotary_dim % 2 == 0, f.path(), ": rotary dimension must be even");
  c.rope.freq_base = static_cast<float>(f.GetFloat(Key(a, "rope.freq_base"), 10000.0));
  SPECD_CHECK(c.rope.freq_base > 1.0f, f.path(), ": bad RoPE frequency base ", c.rope.freq_base);
  c.rope.neox = arch->neox_rope;
  c.qkv_bias = arch->qkv_bias;
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (arch->read_own_keys != nullptr) arch->read_own_keys(f, &c);
  c.bos_token = static_cast<int32_t>(f.GetInt("tokenizer.ggml.bos_token_id", -1));
  c.eos_token = static_cast<int32_t>(f.GetInt("tokenizer.ggml.eos_token_id", -1));
}

namespace {

// The end-of-generation ids llama.cpp's vocabulary loader marks (llama-vocab.cpp): EOS, the
// EOT id, and tokens recognised by their text.
std::vector<int32_t> EndOfGenerationTokens(const GgufFile& f, int32_t eos, int64_t n_vocab) {
  static const std::unordered_set<std::string> kTexts = {
      "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
      "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
      "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
      "<\uFF5Cend\u2581of\u2581sentence\uFF5C>", "[e~[",
      // FIM padding, repository and file-separator tokens end generation too.
      "<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>",
      "<REPO>", "<reponame>", "<|file_sep|>"};
  std::vector<int32_t> ids;
  if (eos >= 0) ids.push_back(eos);
  const int64_t eot = f.GetInt("tokenizer.ggml.eot_token_id", -1);
  if (eot >= 0 && eot < n_vocab) ids.push_back(static_cast<int32_t>(eot));
  if (const GgufValue* tokens = f.Find("tokenizer.ggml.tokens")) {
    const auto& items = tokens->AsArray("tokenizer.ggml.tokens").items;
    for (size_t id = 0; id < items.size() && static_cast<int64_t>(id) < n_vocab; ++id) {
      if (kTexts.count(items[id].AsString("tokenizer.ggml.tokens"))) {
        ids.push_back(static_cast<int32_t>(id));
      }
    }
  }
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  return ids;
}

}  // namespace

void model_file::CheckSpecialTokens(const GgufFile& f, ModelConfig* config) {
  ModelConfig& c = *config;
  auto check_token = [&](int32_t id, const char* what) {
    SPECD_CHECK(id >= -1 && id < c.n_vocab, f.path(), ": ", what, " ", id,
                " is outside the vocabulary of ", c.n_vocab);
  };
  check_token(c.bos_token, "BOS token");
  check_token(c.eos_token, "EOS token");
  c.end_of_generation = EndOfGenerationTokens(f, c.eos_token, c.n_vocab);
}

bool ModelConfig::IsEndOfGeneration(int32_t token) const {
  return std::binary_search(end_of_generation.begin(), end_of_generation.end(), token);
}

}  // namespace specd
