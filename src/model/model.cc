#include "model/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <unordered_set>

#include "base/error.h"
#include "base/timer.h"
#include "kernels/onednn_int8.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

std::string Key(const std::string& arch, const std::string& suffix) { return arch + "." + suffix; }

int64_t GetInt(const GgufFile& f, const std::string& key) { return f.Get(key).AsInt(key); }

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// A weight matrix with ggml shape [cols, rows]; an i8 matrix with its row scales.
WeightView Matrix(const GgufFile& f, const std::string& name, int64_t cols, int64_t rows) {
  const GgufTensorInfo& t = f.GetTensor(name);
  SPECD_CHECK(t.shape.size() == 2 && t.shape[0] == cols && t.shape[1] == rows, f.path(),
              ": tensor '", name, "' has shape ", ShapeString(t.shape), ", expected [", cols, ", ",
              rows, "]");
  WeightView w{t.type, t.data, rows, cols};
  if (t.type == DType::kI8) {
    const std::string scale_name = I8ScaleTensorName(name);
    const GgufTensorInfo* scale = f.FindTensor(scale_name);
    SPECD_CHECK(scale != nullptr, f.path(), ": i8 tensor '", name, "' has no row scales ('",
                scale_name, "')");
    SPECD_CHECK(scale->type == DType::kF32 && scale->shape.size() == 1 && scale->shape[0] == rows,
                f.path(), ": '", scale_name, "' must be f32 of shape [", rows, "]");
    w.row_scales = reinterpret_cast<const float*>(scale->data);
    if (const GgufTensorInfo* smooth = f.FindTensor(I8SmoothTensorName(name))) {
      SPECD_CHECK(
          smooth->type == DType::kF32 && smooth->shape.size() == 1 && smooth->shape[0] == cols,
          f.path(), ": '", smooth->name, "' must be f32 of shape [", cols, "]");
      w.col_scales = reinterpret_cast<const float*>(smooth->data);
      for (int64_t j = 0; j < cols; ++j) {
        SPECD_CHECK(std::isfinite(w.col_scales[j]) && w.col_scales[j] > 0, f.path(), ": '",
                    smooth->name, "' column ", j, " is not a finite positive multiplier");
      }
    }
    for (int64_t r = 0; r < rows; ++r) {
      SPECD_CHECK(std::isfinite(w.row_scales[r]) && w.row_scales[r] >= 0, f.path(), ": '",
                  scale_name, "' row ", r, " is not a finite non-negative scale");
    }
  }
  return w;
}

// A vector of n values, converted to f32.
std::vector<float> Vector(const GgufFile& f, const std::string& name, int64_t n) {
  const GgufTensorInfo& t = f.GetTensor(name);
  SPECD_CHECK(t.NumElements() == n && t.shape[0] == n, f.path(), ": tensor '", name, "' has shape ",
              ShapeString(t.shape), ", expected [", n, "]");
  std::vector<float> out(n);
  DequantizeRow(t.type, t.data, out.data(), n);
  return out;
}

// Charges the time since the previous mark to an op of a profile; no clock reads without one.
class ProfileMarks {
  using Clock = std::chrono::steady_clock;

 public:
  explicit ProfileMarks(ForwardProfile* profile) : profile_(profile) {
    if (profile_ != nullptr) last_ = Clock::now();
  }
  void Mark(ForwardProfile::Op op) {
    if (profile_ == nullptr) return;
    const Clock::time_point now = Clock::now();
    profile_->ms[op] += std::chrono::duration<double, std::milli>(now - last_).count();
    last_ = now;
  }
  // Restarts the clock without charging anything (time already charged by inner marks).
  void Skip() {
    if (profile_ != nullptr) last_ = Clock::now();
  }

 private:
  ForwardProfile* profile_;
  Clock::time_point last_{};
};

int64_t MatrixBytes(const WeightView& w) { return RowBytes(w.type, w.cols) * w.rows; }

// Gemma 3's additions to the llama hyper-parameters (llama.cpp's reading of the same keys): local
// layers see the last `sliding_window` positions and rotate with base 10000, every sixth layer
// is global with the file's base; embeddings are scaled by sqrt(n_embd).
void ReadGemma3Config(const GgufFile& f, ModelConfig* c) {
  c->embd_scale = std::sqrt(static_cast<float>(c->n_embd));
  c->qk_norm = true;
  c->post_norms = true;
  c->activation = FfnActivation::kGeluTanh;
  const int64_t window = f.GetInt("gemma3.attention.sliding_window", 0);
  SPECD_CHECK(window >= 0 && window < (int64_t{1} << 24), f.path(),
              ": gemma3.attention.sliding_window = ", window, " is out of range");
  c->sliding_window = static_cast<int>(window);
  c->swa_pattern = 6;
  c->rope_local = c->rope;
  c->rope_local.freq_base = 10000.0f;
}

}  // namespace

int64_t Batch::n_outputs() const {
  int64_t n = 0;
  for (uint8_t o : output) n += o != 0;
  return n;
}

void Model::ReadConfig(const GgufFile& f) {
  ModelConfig& c = config_;
  c.arch = f.Get("general.architecture").AsString("general.architecture");
  SPECD_CHECK(c.arch == "llama" || c.arch == "qwen2" || c.arch == "gemma3", f.path(),
              ": architecture '", c.arch, "' is not supported (llama, qwen2, gemma3)");
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
      f.GetFloat(Key(a, "attention.layer_norm_rms_epsilon"), c.arch == "llama" ? 1e-5 : 1e-6));
  SPECD_CHECK(c.rms_eps > 0 && c.rms_eps < 1, f.path(), ": bad RMS norm epsilon ", c.rms_eps);
  c.rope.head_dim = c.head_dim;
  c.rope.rotary_dim = bounded(Key(a, "rope.dimension_count"),
                              f.GetInt(Key(a, "rope.dimension_count"), c.head_dim), 2, c.head_dim);
  SPECD_CHECK(c.rope.rotary_dim % 2 == 0, f.path(), ": rotary dimension must be even");
  c.rope.freq_base = static_cast<float>(f.GetFloat(Key(a, "rope.freq_base"), 10000.0));
  SPECD_CHECK(c.rope.freq_base > 1.0f, f.path(), ": bad RoPE frequency base ", c.rope.freq_base);
  // GGUF llama weights are permuted at conversion for interleaved pairs; qwen2 and gemma3 use
  // NeoX pairs.
  c.rope.neox = c.arch != "llama";
  c.qkv_bias = c.arch == "qwen2";
  c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.arch == "gemma3") ReadGemma3Config(f, &c);
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

// BOS and EOS inside the vocabulary, and the tokens that end generation.
void CheckSpecialTokens(const GgufFile& f, ModelConfig* config) {
  ModelConfig& c = *config;
  auto check_token = [&](int32_t id, const char* what) {
    SPECD_CHECK(id >= -1 && id < c.n_vocab, f.path(), ": ", what, " ", id,
                " is outside the vocabulary of ", c.n_vocab);
  };
  check_token(c.bos_token, "BOS token");
  check_token(c.eos_token, "EOS token");
  c.end_of_generation = EndOfGenerationTokens(f, c.eos_token, c.n_vocab);
}

}  // namespace

bool ModelConfig::IsEndOfGeneration(int32_t token) const {
  return std::binary_search(end_of_generation.begin(), end_of_generation.end(), token);
}

ModelLoadOptions LoadOptionsFromFlags(const WeightFlags& flags) {
  SPECD_CHECK(flags.weights.empty() || flags.weights == "i8", "{weights}: '", flags.weights,
              "' is not a weight format specd converts to at load (i8; or leave it out to run "
              "the file's own types)");
  ModelLoadOptions options;
  options.int8_weights = flags.weights == "i8";
  options.lora = flags.lora;
  if (flags.lora_merge) options.lora_apply = LoraApply::kMerge;
  return options;
}

Int8Backend Int8BackendFromFlags(const WeightFlags& flags, const CpuFeatures& cpu) {
  if (flags.int8_kernel == "auto") return Int8Backend::kAuto;
  if (flags.int8_kernel == "specd") return Int8Backend::kSpecd;
  if (flags.int8_kernel == "amx") {
    SPECD_CHECK(flags.weights == "i8", "{int8_kernel} amx applies to i8 weights: add {weights} i8");
    SPECD_CHECK(cpu.amx_int8 && cpu.avx512,
                "{int8_kernel} amx needs AMX-INT8 (and AVX-512), which this CPU or OS does not "
                "offer");
    return Int8Backend::kAmx;
  }
  SPECD_CHECK(flags.int8_kernel == "onednn", "{int8_kernel}: '", flags.int8_kernel,
              "' is not one of auto, specd, amx, onednn");
  SPECD_CHECK(flags.weights == "i8",
              "{int8_kernel} onednn applies to i8 weights: add {weights} i8");
  // Without VNNI oneDNN's s8 x s8 path sums pairs in saturating 16-bit arithmetic: not exact.
  SPECD_CHECK(cpu.avx512, "{int8_kernel} onednn needs AVX-512 VNNI, which this CPU lacks");
  return Int8Backend::kOneDnn;
}

std::unique_ptr<Model> Model::Load(const std::string& path, const KernelContext* ctx,
                                   const ModelLoadOptions& options) {
  return FromGguf(GgufFile::Open(path), ctx, options);
}

void Model::ConvertToI8(const std::vector<WeightView*>& parts, const std::vector<float>* input_max,
                        float alpha, ThreadPool* pool) {
  if (parts.front()->type == DType::kI8) return;  // an i8 file: kept as written
  const int64_t cols = parts.front()->cols;
  // SmoothQuant: per input channel s = max|x|^alpha / max|w|^(1 - alpha), the weight maximum
  // over every part (they share the input, so they share s); the weights get w * s and the
  // activations x / s, which leaves the product unchanged before quantization.
  std::vector<float> s;  // [cols]
  if (input_max != nullptr) {
    std::vector<float> w_max(cols, 0.0f);  // [cols]
    std::vector<float> row(cols);
    for (const WeightView* w : parts) {
      for (int64_t r = 0; r < w->rows; ++r) {
        DequantizeRow(w->type, w->Row(r), row.data(), cols);
        for (int64_t j = 0; j < cols; ++j) w_max[j] = std::max(w_max[j], std::fabs(row[j]));
      }
    }
    s.assign(cols, 1.0f);
    for (int64_t j = 0; j < cols; ++j) {
      const float x_max = (*input_max)[j];
      if (x_max > 0.0f && w_max[j] > 0.0f) {
        // Not rounded to a power of two (which would make w * s and x / s exact): measured on
        // SmolLM2, perplexity 18.78 rounded vs 18.69 not (q8_0: 18.49).
        s[j] = std::clamp(std::pow(x_max, alpha) / std::pow(w_max[j], 1.0f - alpha), 1e-5f, 1e5f);
      }
    }
  }
  for (WeightView* w : parts) {
    auto matrix = std::make_unique<I8Matrix>();
    matrix->values.resize(w->rows * cols);  // [rows, cols]
    matrix->scales.resize(w->rows);         // [rows]
    if (!s.empty()) {
      matrix->smooth.resize(cols);  // [cols] the activations' multipliers, 1 / s
      for (int64_t j = 0; j < cols; ++j) matrix->smooth[j] = 1.0f / s[j];
    }
    const WeightView source = *w;
    auto convert = [&](int64_t r0, int64_t r1) {
      std::vector<float> row(cols);
      for (int64_t r = r0; r < r1; ++r) {
        DequantizeRow(source.type, source.Row(r), row.data(), cols);
        if (source.row_scales != nullptr) {
          for (float& v : row) v *= source.row_scales[r];
        }
        for (int64_t j = 0; j < cols && !s.empty(); ++j) row[j] *= s[j];
        matrix->scales[r] = QuantizeRowI8(row.data(), matrix->values.data() + r * cols, cols);
      }
    };
    if (pool != nullptr) {
      pool->ParallelFor(source.rows, 16, convert);
    } else {
      convert(0, source.rows);
    }
    *w = WeightView{DType::kI8,
                    matrix->values.data(),
                    source.rows,
                    cols,
                    nullptr,
                    matrix->scales.data(),
                    s.empty() ? nullptr : matrix->smooth.data()};
    i8_matrices_.push_back(std::move(matrix));
  }
}

void Model::ConvertAllToI8(const KernelContext* ctx, const ModelLoadOptions& options) {
  ActivationMaxima maxima;
  const bool smooth = !options.calibration_tokens.empty();
  if (smooth) {
    SPECD_CHECK(ctx != nullptr, "SmoothQuant calibration needs a kernel context");
    SPECD_CHECK(options.smooth_alpha >= 0.0f && options.smooth_alpha <= 1.0f,
                "SmoothQuant alpha must be in [0, 1], got ", options.smooth_alpha);
    SetActivationMaxima(&maxima);
    const int64_t n = static_cast<int64_t>(options.calibration_tokens.size());
    auto kv = NewKvCache({1, static_cast<int>(n)});
    const int seq = kv->Acquire();
    Batch batch;
    for (int64_t i = 0; i < n; ++i) {
      batch.Add(options.calibration_tokens[i], static_cast<int32_t>(i), seq, true);
    }
    std::vector<float> logits;  // [n, n_vocab]
    Forward(*ctx, batch, *kv, AttentionMode::kSplit, &logits);
    SetActivationMaxima(nullptr);
  }
  ThreadPool* pool = ctx != nullptr ? ctx->pool : nullptr;
  const float alpha = options.smooth_alpha;
  for (size_t il = 0; il < layers_.size(); ++il) {
    Layer& l = layers_[il];
    auto input = [&](const std::vector<std::vector<float>>& per_layer) {
      return smooth ? &per_layer[il] : nullptr;
    };
    ConvertToI8({&l.wq, &l.wk, &l.wv}, input(maxima.qkv_in), alpha, pool);
    ConvertToI8({&l.wo}, input(maxima.wo_in), alpha, pool);
    ConvertToI8({&l.w_gate, &l.w_up}, input(maxima.gate_up_in), alpha, pool);
    ConvertToI8({&l.w_down}, input(maxima.down_in), alpha, pool);
    l.wqkv = WeightView{};  // the stacked forms are rebuilt from the i8 matrices
    l.w_gate_up = WeightView{};
  }
  ConvertToI8({&output_}, smooth ? &maxima.output_in : nullptr, alpha, pool);
  packed_.clear();
}

void Model::SetActivationMaxima(ActivationMaxima* maxima) {
  maxima_ = maxima;
  if (maxima == nullptr) return;
  const ModelConfig& c = config_;
  maxima->qkv_in.assign(c.n_layer, std::vector<float>(c.n_embd, 0.0f));
  maxima->wo_in.assign(c.n_layer, std::vector<float>(int64_t{c.n_head} * c.head_dim, 0.0f));
  maxima->gate_up_in.assign(c.n_layer, std::vector<float>(c.n_embd, 0.0f));
  maxima->down_in.assign(c.n_layer, std::vector<float>(c.n_ff, 0.0f));
  maxima->output_in.assign(c.n_embd, 0.0f);
}

void Model::RecordMax(const float* x, int64_t m, int64_t n, std::vector<float>* max) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) (*max)[j] = std::max((*max)[j], std::fabs(x[r * n + j]));
  }
}

void Model::ForEachI8Matrix(
    const std::function<void(const std::string&, const WeightView&)>& fn) const {
  for (size_t il = 0; il < layers_.size(); ++il) {
    const Layer& l = layers_[il];
    const std::string p = "blk." + std::to_string(il) + ".";
    const std::pair<const char*, const WeightView*> named[] = {
        {"attn_q.weight", &l.wq},      {"attn_k.weight", &l.wk},       {"attn_v.weight", &l.wv},
        {"attn_output.weight", &l.wo}, {"ffn_gate.weight", &l.w_gate}, {"ffn_up.weight", &l.w_up},
        {"ffn_down.weight", &l.w_down}};
    for (const auto& [name, w] : named) {
      if (w->type == DType::kI8) fn(p + name, *w);
    }
  }
  if (output_.type == DType::kI8) fn("output.weight", output_);
}

std::unique_ptr<Model> Model::FromGguf(std::unique_ptr<GgufFile> file, const KernelContext* ctx,
                                       const ModelLoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  const GgufFile& f = *file;
  model->ReadConfig(f);
  ModelConfig& c = model->config_;
  c.eagle = f.Find("specd.eagle") != nullptr;
  if (c.eagle) {
    SPECD_CHECK(c.arch == "llama" && f.FindTensor("token_embd.weight") == nullptr &&
                    f.FindTensor("output.weight") != nullptr,
                f.path(), ": an EAGLE head (specd.eagle) is a llama file with output.weight and ",
                "no token_embd.weight");
    c.n_vocab = GetInt(f, Key(c.arch, "vocab_size"));
    SPECD_CHECK(c.n_vocab >= 1 && c.n_vocab <= (int64_t{1} << 24), f.path(), ": llama.vocab_size ",
                c.n_vocab, " is out of range");
  } else {
    const GgufTensorInfo& embd = f.GetTensor("token_embd.weight");
    SPECD_CHECK(embd.shape.size() == 2 && embd.shape[0] == c.n_embd, f.path(),
                ": token_embd.weight has shape ", ShapeString(embd.shape), ", expected [", c.n_embd,
                ", n_vocab]");
    c.n_vocab = embd.shape[1];
  }
  if (const GgufValue* v = f.Find(Key(c.arch, "vocab_size"))) {
    SPECD_CHECK(v->AsInt("vocab_size") == c.n_vocab, f.path(), ": ", c.arch, ".vocab_size (",
                v->AsInt("vocab_size"), ") does not match token_embd.weight (", c.n_vocab, ")");
  }
  CheckSpecialTokens(f, &c);

  if (const GgufTensorInfo* freqs = f.FindTensor("rope_freqs.weight")) {
    SPECD_CHECK(freqs->type == DType::kF32, f.path(), ": rope_freqs.weight must be f32");
    c.rope.freq_factors = Vector(f, "rope_freqs.weight", c.rope.rotary_dim / 2);
  }

  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  if (c.eagle) {
    model->eagle_fc_ = Matrix(f, "eagle.fc.weight", 2 * int64_t{c.n_embd}, c.n_embd);
  } else {
    model->token_embd_ = Matrix(f, "token_embd.weight", c.n_embd, c.n_vocab);
  }
  model->output_norm_ = Vector(f, "output_norm.weight", c.n_embd);
  c.tied_embeddings = f.FindTensor("output.weight") == nullptr;
  if (const GgufValue* head = f.Find("specd.head_tokens")) {
    std::vector<char> seen(c.n_vocab, 0);
    for (const GgufValue& v : head->AsArray("specd.head_tokens").items) {
      const int64_t id = v.AsInt("specd.head_tokens");
      SPECD_CHECK(id >= 0 && id < c.n_vocab && !seen[id], f.path(),
                  ": specd.head_tokens has a token id out of range or twice (", id, ")");
      seen[id] = 1;
      c.head_tokens.push_back(static_cast<int32_t>(id));
    }
    SPECD_CHECK(!c.head_tokens.empty() && !c.tied_embeddings, f.path(),
                ": specd.head_tokens needs an output.weight with one row per listed token");
  }
  const int64_t n_output_rows = c.head_tokens.empty() ? c.n_vocab : c.head_tokens.size();
  model->output_ =
      c.tied_embeddings ? model->token_embd_ : Matrix(f, "output.weight", c.n_embd, n_output_rows);
  for (int i = 0; i < c.n_layer; ++i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    Layer l;
    l.attn_norm = Vector(f, p + "attn_norm.weight", c.n_embd);
    l.ffn_norm = Vector(f, p + "ffn_norm.weight", c.n_embd);
    if (c.post_norms) {
      l.post_attn_norm = Vector(f, p + "post_attention_norm.weight", c.n_embd);
      l.post_ffn_norm = Vector(f, p + "post_ffw_norm.weight", c.n_embd);
    }
    if (c.qk_norm) {
      l.q_norm = Vector(f, p + "attn_q_norm.weight", c.head_dim);
      l.k_norm = Vector(f, p + "attn_k_norm.weight", c.head_dim);
    }
    l.wq = Matrix(f, p + "attn_q.weight", c.n_embd, q_dim);
    l.wk = Matrix(f, p + "attn_k.weight", c.n_embd, c.kv_dim());
    l.wv = Matrix(f, p + "attn_v.weight", c.n_embd, c.kv_dim());
    l.wo = Matrix(f, p + "attn_output.weight", q_dim, c.n_embd);
    l.w_gate = Matrix(f, p + "ffn_gate.weight", c.n_embd, c.n_ff);
    l.w_up = Matrix(f, p + "ffn_up.weight", c.n_embd, c.n_ff);
    l.w_down = Matrix(f, p + "ffn_down.weight", c.n_ff, c.n_embd);
    if (c.qkv_bias) {
      l.bq = Vector(f, p + "attn_q.bias", q_dim);
      l.bk = Vector(f, p + "attn_k.bias", c.kv_dim());
      l.bv = Vector(f, p + "attn_v.bias", c.kv_dim());
    }
    model->layers_.push_back(std::move(l));
  }
  model->LoadLora(options.lora, options.lora_apply);
  const bool fast = ctx != nullptr && ctx->cpu.packed_kernels();
  // Calibration runs the model as loaded (packed, so that it is quick); conversion then drops
  // those layouts and the i8 matrices are packed instead.
  if (fast) model->PackWeights(*ctx);
  // A file written in i8 keeps its own conversion: no calibration, no second packing.
  const bool all_i8 = model->MatrixType() == DType::kI8 && model->output_.type == DType::kI8;
  if (options.int8_weights && !all_i8) {
    model->ConvertAllToI8(ctx, options);
    if (fast) model->PackWeights(*ctx);
  }
  model->file_ = std::move(file);
  return model;
}

void Model::LoadLora(const std::vector<LoraSpec>& adapters, LoraApply apply) {
  if (adapters.empty()) return;
  SPECD_CHECK(!config_.eagle, "LoRA adapters do not apply to an EAGLE head");
  // A restricted head (a draft's) has no row per token to add a delta to: merge there.
  if (!config_.head_tokens.empty()) apply = LoraApply::kMerge;
  struct Target {
    WeightView* matrix;
    std::vector<LowRankTerm>* terms;  // where its run-time terms go (token_embd: none)
  };
  std::map<std::string, Target> targets = {{"token_embd.weight", {&token_embd_, nullptr}}};
  if (!config_.tied_embeddings) targets["output.weight"] = {&output_, &output_lora_};
  for (int i = 0; i < config_.n_layer; ++i) {
    Layer& l = layers_[i];
    const std::string p = "blk." + std::to_string(i) + ".";
    for (const auto& [name, view, slot] : {std::tuple{"attn_q", &l.wq, kLoraQ},
                                           {"attn_k", &l.wk, kLoraK},
                                           {"attn_v", &l.wv, kLoraV},
                                           {"attn_output", &l.wo, kLoraO},
                                           {"ffn_gate", &l.w_gate, kLoraGate},
                                           {"ffn_up", &l.w_up, kLoraUp},
                                           {"ffn_down", &l.w_down, kLoraDown}}) {
      targets[p + name + ".weight"] = {view, &l.lora[slot]};
    }
  }
  bool merged_embedding = false;
  for (const LoraSpec& spec : adapters) {
    LoraAdapter adapter = ReadLoraAdapter(spec, config_.arch);
    for (const LoraUpdate& u : adapter.updates) {
      const auto it = targets.find(u.target);
      SPECD_CHECK(it != targets.end(), spec.path, ": a LoRA for '", u.target,
                  "', which this model has no matrix of (or cannot take one for)");
      WeightView& w = *it->second.matrix;
      SPECD_CHECK(u.rows == w.rows && u.cols == w.cols, spec.path, ": the LoRA for '", u.target,
                  "' is [", u.rows, " x ", u.cols, "], the matrix [", w.rows, " x ", w.cols, "]");
      const bool embedding = it->second.terms == nullptr;
      if (apply != LoraApply::kMerge && embedding &&
          u.CountTouchedRows() <= kMaxRuntimeEmbeddingRows) {
        embedding_lora_.Add(u);
        continue;
      }
      const bool run_time = apply == LoraApply::kRunTime ||
                            (apply == LoraApply::kAuto && LoraMergedType(w.type) != w.type);
      if (run_time && !embedding) {
        it->second.terms->push_back(MakeLowRankTerm(u));
        continue;
      }
      SPECD_CHECK(w.type != DType::kI8, spec.path, ": cannot merge a LoRA into the i8 matrix '",
                  u.target, "': load the original model with {lora} (and {weights} i8)");
      lora_merged_.push_back(std::make_unique<std::vector<uint8_t>>(
          MergeLoraUpdate(w.type, static_cast<const uint8_t*>(w.data), u)));
      w.data = lora_merged_.back()->data();
      w.type = LoraMergedType(w.type);
      merged_embedding = merged_embedding || embedding;
    }
    adapters_.push_back(std::move(adapter.file));
  }
  // The merged embedding is the head too; run-time rows are added to the head's logits instead.
  if (config_.tied_embeddings && merged_embedding) output_ = token_embd_;
}

void Model::AddHeadLora(const KernelContext& ctx, const float* x, int64_t n_out, float* logits) {
  const int64_t n_vocab = config_.n_vocab;
  AddLowRank(ctx, {{&output_lora_, logits, n_vocab}}, x, n_out, &lora_scratch_);
  if (!config_.tied_embeddings) return;
  const EmbeddingDelta& e = embedding_lora_;
  for (int64_t o = 0; o < n_out; ++o) {
    for (size_t t = 0; t < e.tokens.size(); ++t) {
      const float* delta = e.rows.data() + t * e.n_embd;
      float dot = 0.0f;  // one fixed order, whatever the batch
      for (int64_t j = 0; j < e.n_embd; ++j) dot += x[o * e.n_embd + j] * delta[j];
      logits[o * n_vocab + e.tokens[t]] += dot;
    }
  }
}

const GgufValue* Model::FindMetadata(const std::string& key) const {
  for (auto it = adapters_.rbegin(); it != adapters_.rend(); ++it) {
    if (const GgufValue* v = (*it)->Find(key)) return v;
  }
  return file_->Find(key);
}

void Model::PackWeights(const KernelContext& ctx) {
  // oneDNN's copy of i8 matrices, when it runs them (--int8-kernel onednn).
  const bool onednn = ctx.int8_backend == Int8Backend::kOneDnn;
  auto with_onednn = [&](PackedInt8Weights* packed, const std::vector<const WeightView*>& parts) {
    if (onednn && packed->row_scales) packed->onednn = MakeOneDnnInt8Weights(parts);
  };
  auto pack = [&](WeightView& w) {
    if (!IsPackable(w.type) || w.cols % 32 != 0) return;
    packed_.push_back(std::make_unique<PackedInt8Weights>(PackInt8(w, ctx.pool)));
    w.packed = packed_.back().get();
    with_onednn(packed_.back().get(), {&w});
  };
  // Projections of the same input are stacked into one matrix when their types allow it.
  auto stack = [&](const std::vector<WeightView*>& parts, WeightView* stacked) {
    auto packed = std::make_unique<PackedInt8Weights>();
    if (!StackPackedInt8({parts.begin(), parts.end()}, ctx.pool, packed.get())) {
      for (WeightView* w : parts) pack(*w);
      return;
    }
    *stacked = WeightView{packed->source_type, nullptr, packed->rows, packed->cols, packed.get()};
    stacked->col_scales = parts.front()->col_scales;  // shared by the parts (one input)
    with_onednn(packed.get(), {parts.begin(), parts.end()});
    packed_.push_back(std::move(packed));
  };
  for (Layer& l : layers_) {
    stack({&l.wq, &l.wk, &l.wv}, &l.wqkv);
    stack({&l.w_gate, &l.w_up}, &l.w_gate_up);
    for (WeightView* w : {&l.wo, &l.w_down}) pack(*w);
  }
  pack(output_);
  if (config_.eagle) pack(eagle_fc_);
}

int64_t Model::WeightBytesPerToken() const {
  int64_t bytes = MatrixBytes(output_);
  if (config_.eagle) {
    bytes += MatrixBytes(eagle_fc_);
  } else {
    bytes += RowBytes(token_embd_.type, token_embd_.cols);
  }
  for (const LowRankTerm& t : output_lora_) bytes += t.Bytes();
  for (const Layer& l : layers_) {
    for (const WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      bytes += MatrixBytes(*w);
    }
    for (const auto& terms : l.lora) {
      for (const LowRankTerm& t : terms) bytes += t.Bytes();
    }
  }
  return bytes;
}

int64_t Model::MatmulMacsPerToken() const {
  int64_t macs = output_.rows * output_.cols + eagle_fc_.rows * eagle_fc_.cols;
  for (const Layer& l : layers_) {
    for (const WeightView* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_gate, &l.w_up, &l.w_down}) {
      macs += w->rows * w->cols;
    }
  }
  return macs;
}

int64_t Model::NumParameters() const {
  int64_t n = 0;
  for (const GgufTensorInfo& t : file_->tensors()) n += t.NumElements();
  return n;
}

std::unique_ptr<KvCache> Model::NewKvCache(const KvCacheConfig& config) const {
  return std::make_unique<KvCache>(config, config_.n_layer, config_.kv_dim());
}

void Model::Validate(const Batch& batch, const KvCache& kv) const {
  const int64_t n = batch.size();
  SPECD_CHECK(batch.positions.size() == static_cast<size_t>(n) &&
                  batch.seq_ids.size() == static_cast<size_t>(n) &&
                  batch.output.size() == static_cast<size_t>(n) &&
                  (batch.parents.empty() || batch.parents.size() == static_cast<size_t>(n)),
              "batch: token, position, sequence, output and parent arrays differ in length");
  SPECD_CHECK(kv.kv_dim() == config_.kv_dim(), "KV cache was made for another model");
  std::vector<bool> seen(kv.n_slots(), false);
  for (int64_t r = 0; r < n;) {
    const int32_t seq = batch.seq_ids[r];
    SPECD_CHECK(kv.InUse(seq), "batch row ", r, ": sequence ", seq, " is not an active sequence");
    SPECD_CHECK(!seen[seq], "batch: the rows of sequence ", seq, " are not contiguous");
    seen[seq] = true;
    const int64_t first_row = r;
    const int32_t kv_length = kv.Length(seq);
    for (; r < n && batch.seq_ids[r] == seq; ++r) {
      SPECD_CHECK(batch.tokens[r] >= 0 && batch.tokens[r] < config_.n_vocab, "batch row ", r,
                  ": token ", batch.tokens[r], " is outside the vocabulary of ", config_.n_vocab);
      const int32_t parent = batch.parents.empty() ? -1 : batch.parents[r];
      SPECD_CHECK(
          parent == -1 || parent == Batch::kCommittedParent || (parent >= first_row && parent < r),
          "batch row ", r, ": parent row ", parent, " is not an earlier row of sequence ", seq);
      const int32_t expected = parent >= 0 ? batch.positions[parent] + 1
                               : r == first_row || parent == Batch::kCommittedParent
                                   ? kv_length
                                   : batch.positions[r - 1] + 1;
      SPECD_CHECK(batch.positions[r] == expected, "batch row ", r, ": sequence ", seq,
                  " expects position ", expected, ", got ", batch.positions[r]);
      SPECD_CHECK(kv_length + (r - first_row) < kv.n_ctx(), "sequence ", seq,
                  " would exceed the context of ", kv.n_ctx(), " tokens");
    }
  }
}

void Model::SetUpAttention(const Batch& batch, const KvCache& kv, AttentionRows* rows) {
  const int64_t m = batch.size();
  kv_index_.resize(m);
  rows->n_visible.resize(m);
  rows->key_mask.clear();
  rows->key_mask_offset.clear();
  bool tree = false;
  for (int32_t p : batch.parents) tree = tree || p != -1;
  int64_t first_row = 0;
  for (int64_t r = 0; r < m; ++r) {
    if (r == 0 || batch.seq_ids[r] != batch.seq_ids[r - 1]) {
      first_row = r;
      rows->seq_row_begin.push_back(r);
    }
    kv_index_[r] = kv.Length(batch.seq_ids[r]) + static_cast<int32_t>(r - first_row);
    rows->n_visible[r] = kv_index_[r] + 1;
    if (!tree) continue;
    // Committed keys and the row's ancestors (a chain row's parent is the row before it).
    const int32_t committed = kv.Length(batch.seq_ids[r]);
    rows->key_mask_offset.push_back(static_cast<int64_t>(rows->key_mask.size()));
    rows->key_mask.resize(rows->key_mask.size() + rows->n_visible[r], 0);
    uint8_t* mask = rows->key_mask.data() + rows->key_mask_offset.back();
    std::fill(mask, mask + committed, 1);
    for (int64_t a = r; a >= first_row;) {
      mask[committed + (a - first_row)] = 1;
      const int32_t parent = batch.parents[a];
      a = parent >= 0 ? parent : parent == Batch::kCommittedParent ? first_row - 1 : a - 1;
    }
  }
  rows->seq_row_begin.push_back(m);
}

const char* ForwardProfile::Name(int op) {
  static constexpr const char* kNames[kCount] = {"embed + rope angles",
                                                 "rms norm",
                                                 "q/k/v matmul",
                                                 "rope + kv write",
                                                 "attention",
                                                 "attention out matmul",
                                                 "gate/up matmul + swiglu",
                                                 "down matmul",
                                                 "residual adds",
                                                 "output norm + logits matmul",
                                                 "layer-parallel attention"};
  return op >= 0 && op < kCount ? kNames[op] : "?";
}

void Model::WarmUp(const KernelContext& ctx, int rows) {
  auto kv = NewKvCache({1, rows});
  const int seq = kv->Acquire();
  std::vector<float> logits;
  ForwardExtras extras;
  std::vector<float> input_rows;  // [rows, n_embd], an EAGLE head's input
  if (config_.eagle) {
    input_rows.assign(static_cast<size_t>(rows) * config_.n_embd, 0.0f);
    extras.input_rows = input_rows.data();
  }
  for (int n : {1, rows}) {
    // A one-row forward (the decode shape), then `rows` rows (a verification's shape).
    kv->Truncate(seq, 0);
    Batch batch;
    for (int i = 0; i < n; ++i)
      batch.Add(config_.bos_token >= 0 ? config_.bos_token : 0, i, seq, true);
    Forward(ctx, batch, *kv, AttentionMode::kSplit, &logits, extras);
  }
}

void Model::EmbedTokens(std::span<const int32_t> tokens, float* out) const {
  SPECD_CHECK(!config_.eagle, "an EAGLE head has no token embedding");
  const int64_t d = config_.n_embd;
  for (size_t r = 0; r < tokens.size(); ++r) {
    const int32_t token = tokens[r];
    SPECD_CHECK(token >= 0 && token < config_.n_vocab, "token ", token,
                " is outside the vocabulary");
    float* xr = out + r * d;
    DequantizeRow(token_embd_.type, token_embd_.Row(token), xr, d);
    if (token_embd_.row_scales != nullptr) {  // i8 embeddings: the row's scale
      for (int64_t i = 0; i < d; ++i) xr[i] *= token_embd_.row_scales[token];
    }
    if (const float* delta = embedding_lora_.Find(token)) {
      for (int64_t i = 0; i < d; ++i) xr[i] += delta[i];
    }
    if (config_.embd_scale != 1.0f) {
      for (int64_t i = 0; i < d; ++i) xr[i] *= config_.embd_scale;
    }
  }
}

void Model::Forward(const KernelContext& ctx, const Batch& batch, KvCache& kv,
                    AttentionMode attention, std::vector<float>* logits, const LayerGroups* fuzzy) {
  ForwardExtras extras;
  extras.fuzzy = fuzzy;
  Forward(ctx, batch, kv, attention, logits, extras);
}

void Model::Forward(const KernelContext& ctx, const Batch& batch, KvCache& kv,
                    AttentionMode attention, std::vector<float>* logits,
                    const ForwardExtras& extras) {
  SPECD_CHECK(extras.input_rows != nullptr || !config_.eagle,
              "an EAGLE head's forward needs its input rows");
  Validate(batch, kv);
  if (extras.fuzzy != nullptr) extras.fuzzy->Validate(config_.n_layer);
  ProfileMarks marks(profile_);
  if (profile_ != nullptr) ++profile_->n_forwards;
  logits->resize(batch.n_outputs() * config_.n_vocab);  // fully written by the output matmul
  if (batch.size() == 0) return;

  InputRows(batch, extras.input_rows);
  marks.Mark(ForwardProfile::kEmbed);
  PrepareAttentionRows(batch, kv);
  RunLayers(ctx, batch, kv, attention, extras.fuzzy);
  marks.Skip();  // the blocks charged their own time
  const int64_t m = batch.size();
  const int64_t d = config_.n_embd;
  if (extras.hidden != nullptr) {
    extras.hidden->resize(m * d);  // [m, n_embd]
    RmsNorm(x_.data(), output_norm_.data(), extras.hidden->data(), m, d, config_.rms_eps);
  }
  OutputLogits(ctx, batch, logits);
  marks.Mark(ForwardProfile::kLogits);
  AdvanceCache(batch, kv);
}

void Model::InputRows(const Batch& batch, const float* input_rows) {
  const ModelConfig& c = config_;
  const int64_t m = batch.size();
  const int64_t d = c.n_embd;
  const int half = c.rope.rotary_dim / 2;
  x_.ResizeForOverwrite(m * d);            // [m, n_embd] residual stream
  xb_.ResizeForOverwrite(m * d);           // [m, n_embd] normalized
  gate_.ResizeForOverwrite(m * c.n_ff);    // [m, n_ff]
  up_.ResizeForOverwrite(m * c.n_ff);      // [m, n_ff]
  ffn_.ResizeForOverwrite(m * d);          // [m, n_embd]
  rope_cos_.ResizeForOverwrite(m * half);  // [m, rotary_dim / 2]
  rope_sin_.ResizeForOverwrite(m * half);  // [m, rotary_dim / 2]
  const bool local_rope = c.sliding_window > 0;
  if (local_rope) {
    rope_local_cos_.ResizeForOverwrite(m * half);  // [m, rotary_dim / 2]
    rope_local_sin_.ResizeForOverwrite(m * half);  // [m, rotary_dim / 2]
    window_first_.resize(m);
  }
  if (input_rows != nullptr) {
    std::copy(input_rows, input_rows + m * d, x_.data());
  } else {
    EmbedTokens(batch.tokens, x_.data());
  }
  for (int64_t r = 0; r < m; ++r) {
    const int32_t pos = batch.positions[r];
    RopeAngles(c.rope, pos, rope_cos_.data() + r * half, rope_sin_.data() + r * half);
    if (local_rope) {
      RopeAngles(c.rope_local, pos, rope_local_cos_.data() + r * half,
                 rope_local_sin_.data() + r * half);
      window_first_[r] = std::max(0, pos + 1 - c.sliding_window);
    }
  }
}

void Model::PrepareAttentionRows(const Batch& batch, const KvCache& kv) {
  const ModelConfig& c = config_;
  const int64_t m = batch.size();
  AttentionRows& rows = attn_.rows;
  rows = AttentionRows{};
  rows.n_rows = m;
  rows.n_head = c.n_head;
  rows.n_head_kv = c.n_head_kv;
  rows.head_dim = c.head_dim;
  rows.scale = c.attn_scale;
  rows.kv_type = kv.type();
  rows.k.resize(m);
  rows.v.resize(m);
  SetUpAttention(batch, kv, &rows);
  if (trace_ != nullptr) {
    for (auto* t : {&trace_->hidden, &trace_->attn_input, &trace_->q, &trace_->k, &trace_->v})
      t->assign(c.n_layer, {});
  }
}

void Model::RunLayers(const KernelContext& ctx, const Batch& batch, KvCache& kv,
                      AttentionMode attention, const LayerGroups* fuzzy) {
  const int64_t m = batch.size();
  const int64_t d = config_.n_embd;
  size_t next_group = 0;
  for (int il = 0; il < config_.n_layer;) {
    if (fuzzy != nullptr && next_group < fuzzy->groups.size() &&
        fuzzy->groups[next_group].first == il) {
      const int count = fuzzy->groups[next_group++].second;
      FuzzyGroup(ctx, il, count, batch, kv, attention);
      il += count;
      continue;
    }
    if (trace_ != nullptr) trace_->hidden[il].assign(x_.data(), x_.data() + m * d);
    AttentionBlock(ctx, il, batch, kv, x_.data(), attn_, attention, profile_);
    TraceLayer(il, attn_, m);
    for (int64_t i = 0; i < m * d; ++i) x_[i] += attn_.out[i];
    FfnBlock(ctx, il, m);
    ++il;
  }
}

void Model::OutputLogits(const KernelContext& ctx, const Batch& batch, std::vector<float>* logits) {
  const ModelConfig& c = config_;
  const int64_t d = c.n_embd;
  // Only the rows that want logits go through the (large) output matrix.
  const int64_t n_out = batch.n_outputs();
  out_rows_.ResizeForOverwrite(n_out * d);  // [n_out, n_embd]
  for (int64_t r = 0, o = 0; r < batch.size(); ++r) {
    if (batch.output[r]) {
      RmsNorm(x_.data() + r * d, output_norm_.data(), out_rows_.data() + o * d, 1, d, c.rms_eps);
      ++o;
    }
  }
  if (maxima_ != nullptr) RecordMax(out_rows_.data(), n_out, d, &maxima_->output_in);
  if (c.head_tokens.empty()) {
    Matmul(ctx, out_rows_.data(), n_out, output_, logits->data(), &matmul_scratch_);
    AddHeadLora(ctx, out_rows_.data(), n_out, logits->data());
    return;
  }
  // A restricted head: its logits scattered into the vocabulary, -infinity elsewhere.
  const int64_t n_head = static_cast<int64_t>(c.head_tokens.size());
  head_logits_.ResizeForOverwrite(n_out * n_head);  // [n_out, n_head_tokens]
  Matmul(ctx, out_rows_.data(), n_out, output_, head_logits_.data(), &matmul_scratch_);
  std::fill(logits->begin(), logits->end(), -std::numeric_limits<float>::infinity());
  for (int64_t o = 0; o < n_out; ++o) {
    float* row = logits->data() + o * c.n_vocab;
    const float* head_row = head_logits_.data() + o * n_head;
    for (int64_t j = 0; j < n_head; ++j) row[c.head_tokens[j]] = head_row[j];
  }
}

void Model::AdvanceCache(const Batch& batch, KvCache& kv) {
  const int64_t m = batch.size();
  int32_t prev = -1;
  for (int64_t r = 0; r < m; ++r) {
    if (batch.seq_ids[r] != prev) {
      prev = batch.seq_ids[r];
      int64_t count = 0;
      while (r + count < m && batch.seq_ids[r + count] == prev) ++count;
      kv.Advance(prev, static_cast<int>(count));
    }
  }
}

void Model::FuzzyGroup(const KernelContext& ctx, int first, int count, const Batch& batch,
                       KvCache& kv, AttentionMode attention) {
  ProfileMarks marks(profile_);
  const int64_t m = batch.size();
  const int64_t d = config_.n_embd;
  const int n_threads = ctx.pool->size();
  while (static_cast<int>(lanes_.size()) < count) {
    lanes_.push_back(std::make_unique<AttentionScratch>());
  }
  while (static_cast<int>(lane_pools_.size()) < n_threads) {
    lane_pools_.push_back(std::make_unique<ThreadPool>(1));
  }
  for (int j = 0; j < count; ++j) lanes_[j]->rows = attn_.rows;  // the same rows, own buffers
  ctx.pool->RunOnAll([&](int t) {
    const KernelContext lane_ctx{lane_pools_[t].get(), ctx.cpu};
    for (int j = t; j < count; j += n_threads) {
      AttentionBlock(lane_ctx, first + j, batch, kv, x_.data(), *lanes_[j], attention, nullptr);
    }
  });
  marks.Mark(ForwardProfile::kParallelAttention);
  for (int j = 0; j < count; ++j) {
    const int il = first + j;
    if (trace_ != nullptr) {
      trace_->hidden[il].assign(x_.data(), x_.data() + m * d);
      TraceLayer(il, *lanes_[j], m);
    }
    for (int64_t i = 0; i < m * d; ++i) x_[i] += lanes_[j]->out[i];
    marks.Mark(ForwardProfile::kResidual);
    FfnBlock(ctx, il, m);
    marks.Skip();
  }
}

void Model::TraceLayer(int il, const AttentionScratch& s, int64_t m) {
  if (trace_ == nullptr) return;
  const int64_t d = config_.n_embd;
  const int64_t q_dim = static_cast<int64_t>(config_.n_head) * config_.head_dim;
  const int64_t kv_dim = config_.kv_dim();
  trace_->attn_input[il].assign(s.xb.data(), s.xb.data() + m * d);
  trace_->q[il].assign(s.q.data(), s.q.data() + m * q_dim);
  trace_->k[il].assign(s.k.data(), s.k.data() + m * kv_dim);
  trace_->v[il].assign(s.v.data(), s.v.data() + m * kv_dim);
}

void Model::AttentionBlock(const KernelContext& ctx, int il, const Batch& batch, KvCache& kv,
                           const float* x, AttentionScratch& s, AttentionMode attention,
                           ForwardProfile* profile) {
  ProfileMarks marks(profile);
  auto mark = [&](ForwardProfile::Op op) { marks.Mark(op); };
  const ModelConfig& c = config_;
  const Layer& l = layers_[il];
  const int64_t m = batch.size();
  const int64_t d = c.n_embd;
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  const int64_t kv_dim = c.kv_dim();
  const int half = c.rope.rotary_dim / 2;
  const bool local = c.IsLocalLayer(il);
  s.xb.ResizeForOverwrite(m * d);       // [m, n_embd] normalized
  s.q.ResizeForOverwrite(m * q_dim);    // [m, n_head * head_dim]
  s.k.ResizeForOverwrite(m * kv_dim);   // [m, kv_dim]
  s.v.ResizeForOverwrite(m * kv_dim);   // [m, kv_dim]
  s.att.ResizeForOverwrite(m * q_dim);  // [m, n_head * head_dim]
  s.out.ResizeForOverwrite(m * d);      // [m, n_embd]
  AttentionRows& rows = s.rows;
  rows.q = s.q.data();
  rows.out = s.att.data();
  RmsNorm(x, l.attn_norm.data(), s.xb.data(), m, d, c.rms_eps);
  if (maxima_ != nullptr) RecordMax(s.xb.data(), m, d, &maxima_->qkv_in[il]);
  mark(ForwardProfile::kNorm);
  if (ctx.cpu.packed_kernels() && l.wqkv.packed != nullptr) {
    const int64_t width = q_dim + 2 * kv_dim;
    s.stacked.ResizeForOverwrite(m * width);  // [m, q_dim + 2 kv_dim]
    Matmul(ctx, s.xb.data(), m, l.wqkv, s.stacked.data(), &s.matmul);
    for (int64_t r = 0; r < m; ++r) {
      const float* row = s.stacked.data() + r * width;
      std::copy(row, row + q_dim, s.q.data() + r * q_dim);
      std::copy(row + q_dim, row + q_dim + kv_dim, s.k.data() + r * kv_dim);
      std::copy(row + q_dim + kv_dim, row + width, s.v.data() + r * kv_dim);
    }
  } else {
    Matmul(ctx, s.xb.data(), m, l.wq, s.q.data(), &s.matmul);
    Matmul(ctx, s.xb.data(), m, l.wk, s.k.data(), &s.matmul);
    Matmul(ctx, s.xb.data(), m, l.wv, s.v.data(), &s.matmul);
  }
  AddLowRank(ctx,
             {{&l.lora[kLoraQ], s.q.data(), q_dim},
              {&l.lora[kLoraK], s.k.data(), kv_dim},
              {&l.lora[kLoraV], s.v.data(), kv_dim}},
             s.xb.data(), m, &s.lora);
  mark(ForwardProfile::kQkv);
  if (c.qk_norm) {  // per head: rows of head_dim values
    RmsNorm(s.q.data(), l.q_norm.data(), s.q.data(), m * c.n_head, c.head_dim, c.rms_eps);
    RmsNorm(s.k.data(), l.k_norm.data(), s.k.data(), m * c.n_head_kv, c.head_dim, c.rms_eps);
  }
  const RopeConfig& rope = local ? c.rope_local : c.rope;
  const float* cos_all = local ? rope_local_cos_.data() : rope_cos_.data();
  const float* sin_all = local ? rope_local_sin_.data() : rope_sin_.data();
  for (int64_t r = 0; r < m; ++r) {
    float* qr = s.q.data() + r * q_dim;
    float* kr = s.k.data() + r * kv_dim;
    float* vr = s.v.data() + r * kv_dim;
    if (c.qkv_bias) {
      for (int64_t i = 0; i < q_dim; ++i) qr[i] += l.bq[i];
      for (int64_t i = 0; i < kv_dim; ++i) kr[i] += l.bk[i];
      for (int64_t i = 0; i < kv_dim; ++i) vr[i] += l.bv[i];
    }
    Rope(rope, cos_all + r * half, sin_all + r * half, qr, c.n_head);
    Rope(rope, cos_all + r * half, sin_all + r * half, kr, c.n_head_kv);
    const int32_t seq = batch.seq_ids[r];
    const int64_t at = static_cast<int64_t>(kv_index_[r]) * RowBytes(kv.type(), kv_dim);
    StoreKvRow(ctx, kr, kv_dim, kv.type(), static_cast<uint8_t*>(kv.K(il, seq)) + at);
    StoreKvRow(ctx, vr, kv_dim, kv.type(), static_cast<uint8_t*>(kv.V(il, seq)) + at);
    rows.k[r] = kv.K(il, seq);
    rows.v[r] = kv.V(il, seq);
  }
  if (local) {
    rows.first_visible = window_first_;
  } else {
    rows.first_visible.clear();
  }
  mark(ForwardProfile::kRopeKvWrite);
  Attention(ctx, rows, attention);
  if (maxima_ != nullptr) RecordMax(s.att.data(), m, q_dim, &maxima_->wo_in[il]);
  mark(ForwardProfile::kAttention);
  Matmul(ctx, s.att.data(), m, l.wo, s.out.data(), &s.matmul);
  AddLowRank(ctx, {{&l.lora[kLoraO], s.out.data(), d}}, s.att.data(), m, &s.lora);
  mark(ForwardProfile::kAttnOut);
  if (c.post_norms) RmsNorm(s.out.data(), l.post_attn_norm.data(), s.out.data(), m, d, c.rms_eps);
  mark(ForwardProfile::kResidual);
}

void Model::FfnBlock(const KernelContext& ctx, int il, int64_t m) {
  ProfileMarks marks(profile_);
  auto mark = [&](ForwardProfile::Op op) { marks.Mark(op); };
  const ModelConfig& c = config_;
  const Layer& l = layers_[il];
  const int64_t d = c.n_embd;
  auto glu = [&](const float* gate, const float* up, float* y, int64_t n) {
    if (c.activation == FfnActivation::kGeluTanh) {
      GeGlu(ctx, gate, up, y, n);
    } else {
      SwiGlu(ctx, gate, up, y, n);
    }
  };
  RmsNorm(x_.data(), l.ffn_norm.data(), xb_.data(), m, d, c.rms_eps);
  mark(ForwardProfile::kNorm);
  if (ctx.cpu.packed_kernels() && l.w_gate_up.packed != nullptr) {
    stacked_.ResizeForOverwrite(m * 2 * c.n_ff);  // [m, 2 n_ff]: gate then up
    Matmul(ctx, xb_.data(), m, l.w_gate_up, stacked_.data(), &matmul_scratch_);
    AddLowRank(ctx,
               {{&l.lora[kLoraGate], stacked_.data(), 2 * c.n_ff},
                {&l.lora[kLoraUp], stacked_.data() + c.n_ff, 2 * c.n_ff}},
               xb_.data(), m, &lora_scratch_);
    // Rows on the pool's threads (an exp and a few multiplies per value: ~8 multiply-adds).
    ctx.pool->ParallelFor(
        m, 1,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const float* row = stacked_.data() + r * 2 * c.n_ff;
            glu(row, row + c.n_ff, gate_.data() + r * c.n_ff, c.n_ff);
          }
        },
        MinItemsPerThread(8 * c.n_ff));
  } else {
    Matmul(ctx, xb_.data(), m, l.w_gate, gate_.data(), &matmul_scratch_);
    Matmul(ctx, xb_.data(), m, l.w_up, up_.data(), &matmul_scratch_);
    AddLowRank(ctx,
               {{&l.lora[kLoraGate], gate_.data(), c.n_ff}, {&l.lora[kLoraUp], up_.data(), c.n_ff}},
               xb_.data(), m, &lora_scratch_);
    glu(gate_.data(), up_.data(), gate_.data(), m * c.n_ff);
  }
  if (maxima_ != nullptr) {
    RecordMax(xb_.data(), m, d, &maxima_->gate_up_in[il]);
    RecordMax(gate_.data(), m, c.n_ff, &maxima_->down_in[il]);
  }
  mark(ForwardProfile::kGateUp);
  Matmul(ctx, gate_.data(), m, l.w_down, ffn_.data(), &matmul_scratch_);
  AddLowRank(ctx, {{&l.lora[kLoraDown], ffn_.data(), d}}, gate_.data(), m, &lora_scratch_);
  mark(ForwardProfile::kDown);
  if (c.post_norms) RmsNorm(ffn_.data(), l.post_ffn_norm.data(), ffn_.data(), m, d, c.rms_eps);
  for (int64_t i = 0; i < m * d; ++i) x_[i] += ffn_[i];
  mark(ForwardProfile::kResidual);
}

}  // namespace specd
