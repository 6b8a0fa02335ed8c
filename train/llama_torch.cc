#include "train/llama_torch.h"

#include <cmath>

#include "base/error.h"
#include "gguf/gguf.h"
#include "tensor/quantize.h"

namespace specd::train {
namespace {

torch::Tensor RmsNorm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  const auto xf = x.to(torch::kFloat32);
  return (xf * torch::rsqrt(xf.pow(2).mean(-1, true) + eps)).to(x.scalar_type()) * weight;
}

// x [B, T, H, hd]: rotate pairs (2i, 2i+1), or with neox (i, i + hd/2), by pos * base^(-2i/hd);
// cos and sin [1 or B, T, hd/2].
torch::Tensor Rope(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                   bool neox) {
  const auto sizes = x.sizes();
  if (neox) {
    const auto halves = x.chunk(2, -1);  // [B, T, H, hd/2] each
    const auto c = cos.unsqueeze(2), s = sin.unsqueeze(2);
    return torch::cat({halves[0] * c - halves[1] * s, halves[0] * s + halves[1] * c}, -1);
  }
  const auto pairs = x.reshape({sizes[0], sizes[1], sizes[2], sizes[3] / 2, 2});
  const auto x0 = pairs.select(-1, 0), x1 = pairs.select(-1, 1);
  const auto c = cos.unsqueeze(2), s = sin.unsqueeze(2);  // [1 or B, T, 1, hd/2]
  return torch::stack({x0 * c - x1 * s, x0 * s + x1 * c}, -1).reshape(sizes);
}

}  // namespace

LlamaBlockImpl::LlamaBlockImpl(const LlamaShape& s) {
  const int64_t hd = s.head_dim();
  attn_norm = register_parameter("attn_norm", torch::ones({s.dim}));
  ffn_norm = register_parameter("ffn_norm", torch::ones({s.dim}));
  auto linear = [&](const char* name, int64_t in, int64_t out, bool bias = false) {
    auto l = register_module(name, torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias)));
    torch::nn::init::normal_(l->weight, 0.0, 0.02);
    if (bias) torch::nn::init::zeros_(l->bias);
    return l;
  };
  wq = linear("wq", s.dim, s.n_heads * hd, s.qkv_bias);
  wk = linear("wk", s.dim, s.n_kv_heads * hd, s.qkv_bias);
  wv = linear("wv", s.dim, s.n_kv_heads * hd, s.qkv_bias);
  wo = linear("wo", s.n_heads * hd, s.dim);
  w_gate = linear("w_gate", s.dim, s.ffn);
  w_up = linear("w_up", s.dim, s.ffn);
  w_down = linear("w_down", s.ffn, s.dim);
  // GPT-2 style: residual projections scaled down with depth.
  const double residual_std = 0.02 / std::sqrt(2.0 * s.n_layers);
  torch::NoGradGuard no_grad;
  wo->weight.normal_(0.0, residual_std);
  w_down->weight.normal_(0.0, residual_std);
}

torch::nn::Linear& LlamaBlockImpl::matrix(int which) {
  switch (which) {
    case kWq:
      return wq;
    case kWk:
      return wk;
    case kWv:
      return wv;
    case kWo:
      return wo;
    case kWGate:
      return w_gate;
    case kWUp:
      return w_up;
    default:
      return w_down;
  }
}

torch::Tensor LlamaBlockImpl::Project(int which, const torch::Tensor& x) {
  auto y = matrix(which)->forward(x);
  if (!lora_a[which].defined() || !lora_active) return y;
  const auto down = torch::matmul(x, lora_a[which].t().to(x.scalar_type()));  // [..., rank]
  return y + lora_scale * torch::matmul(down, lora_b[which].t().to(x.scalar_type()));
}

LlamaImpl::LlamaImpl(const LlamaShape& s) : shape(s) {
  SPECD_CHECK(s.dim % s.n_heads == 0 && s.n_heads % s.n_kv_heads == 0 && s.head_dim() % 2 == 0,
              "bad model shape: dim ", s.dim, ", heads ", s.n_heads, ", kv heads ", s.n_kv_heads);
  SPECD_CHECK(s.dim % 32 == 0 && s.ffn % 32 == 0, "dim and ffn must be multiples of 32 (GGUF ",
              "quantization blocks)");
  embed = register_module("embed", torch::nn::Embedding(s.n_vocab, s.dim));
  torch::nn::init::normal_(embed->weight, 0.0, 0.02);
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int64_t i = 0; i < s.n_layers; ++i) blocks->push_back(LlamaBlock(s));
  final_norm = register_parameter("final_norm", torch::ones({s.dim}));
}

void LlamaImpl::SetHeadTokens(const std::vector<int64_t>& ids) {
  head_tokens = register_buffer("head_tokens", torch::tensor(ids, torch::kInt64));
  auto index = torch::full({shape.n_vocab}, -100, torch::kInt64);
  index.index_put_({head_tokens}, torch::arange(static_cast<int64_t>(ids.size()), torch::kInt64));
  head_index = register_buffer("head_index", index);
}

void LlamaImpl::UntieOutput() {
  SPECD_CHECK(!has_head(), "a restricted head reads the embedding: it cannot be untied");
  torch::NoGradGuard no_grad;
  output = register_parameter("output", embed->weight.clone());
}

void LlamaImpl::SetOutputRows(const torch::Tensor& rows) {
  SPECD_CHECK(!output.defined() && rows.dim() == 2 && rows.size(0) == shape.n_vocab &&
                  rows.size(1) == shape.dim,
              "SetOutputRows: expected [", shape.n_vocab, ", ", shape.dim,
              "] rows on a tied model");
  torch::NoGradGuard no_grad;
  const auto own = has_head() ? rows.index_select(0, head_tokens) : rows;
  output = register_parameter("output", own.detach().clone(), /*requires_grad=*/false);
}

torch::Tensor LlamaImpl::HeadTargets(const torch::Tensor& targets) const {
  return has_head() ? head_index.index({targets}) : targets;
}

int64_t LlamaImpl::NumParameters() {
  int64_t n = 0;
  for (const auto& p : parameters()) n += p.numel();
  return n;
}

torch::Tensor LlamaImpl::forward(const torch::Tensor& tokens, const torch::Tensor& positions,
                                 const torch::Tensor& visible) {
  auto x = embed->forward(tokens);  // [B, T, dim]
  if (token_delta.defined() && lora_active) {
    x = x + (tokens == lora_token).unsqueeze(-1).to(x.scalar_type()) * token_delta;
  }
  return Logits(Hidden(x, positions, visible));
}

torch::Tensor LlamaImpl::Hidden(torch::Tensor x, const torch::Tensor& positions,
                                const torch::Tensor& visible, const std::vector<LayerKv>* past,
                                std::vector<LayerKv>* present) {
  SPECD_CHECK(past == nullptr || (visible.defined() && past->size() == blocks->size()),
              "Hidden: rows after past keys need a visibility mask and one past per block");
  const int64_t batch = x.size(0), time = x.size(1);
  const int64_t hd = shape.head_dim(), group = shape.n_heads / shape.n_kv_heads;
  const auto pos = positions.defined() ? positions.to(torch::kFloat64)
                                       : torch::arange(time, torch::kFloat64).unsqueeze(0);
  const auto inv_freq = torch::pow(shape.rope_base, -torch::arange(0, hd, 2, torch::kFloat64) / hd);
  const auto angles = pos.unsqueeze(-1) * inv_freq;  // [1 or B, T, hd/2]
  const auto cos = angles.cos().to(torch::kFloat32), sin = angles.sin().to(torch::kFloat32);
  // Additive mask: [T, T] causal, or [B, 1, T, past + T] from `visible`.
  const auto mask = visible.defined() ? torch::zeros(visible.sizes(), torch::kFloat32)
                                            .masked_fill(visible.logical_not(), -INFINITY)
                                            .unsqueeze(1)
                                      : torch::full({time, time}, -INFINITY).triu(1);

  if (present != nullptr) present->clear();
  for (size_t layer = 0; layer < blocks->size(); ++layer) {
    auto* block = (*blocks)[layer]->as<LlamaBlockImpl>();
    const auto h = RmsNorm(x, block->attn_norm, shape.rms_eps);
    auto q = block->Project(kWq, h).view({batch, time, shape.n_heads, hd});
    auto k = block->Project(kWk, h).view({batch, time, shape.n_kv_heads, hd});
    auto v = block->Project(kWv, h).view({batch, time, shape.n_kv_heads, hd});
    q = Rope(q.to(torch::kFloat32), cos, sin, shape.neox_rope).to(q.scalar_type());
    k = Rope(k.to(torch::kFloat32), cos, sin, shape.neox_rope).to(k.scalar_type());
    if (group > 1) {
      k = k.repeat_interleave(group, 2);
      v = v.repeat_interleave(group, 2);
    }
    q = q.transpose(1, 2);  // [B, H, T, hd]
    k = k.transpose(1, 2);
    v = v.transpose(1, 2);
    if (past != nullptr) {
      k = torch::cat({(*past)[layer].k, k}, 2);  // [B, H, past + T, hd]
      v = torch::cat({(*past)[layer].v, v}, 2);
    }
    if (present != nullptr) present->push_back({k, v});
    auto scores = torch::matmul(q, k.transpose(-2, -1)).to(torch::kFloat32) / std::sqrt(double(hd));
    auto probs = torch::softmax(scores + mask, -1).to(v.scalar_type());
    auto att = torch::matmul(probs, v).transpose(1, 2).reshape({batch, time, shape.n_heads * hd});
    x = x + block->Project(kWo, att);
    const auto h2 = RmsNorm(x, block->ffn_norm, shape.rms_eps);
    x = x +
        block->Project(kWDown, torch::silu(block->Project(kWGate, h2)) * block->Project(kWUp, h2));
  }
  return RmsNorm(x, final_norm, shape.rms_eps);
}

torch::Tensor LlamaImpl::Logits(const torch::Tensor& x) {
  const auto matrix = output.defined() ? output
                      : has_head()     ? embed->weight.index_select(0, head_tokens)
                                       : embed->weight;
  auto logits = torch::matmul(x, matrix.t().to(x.scalar_type()));  // [B, T, n_head]
  if (token_delta.defined() && lora_active && !has_head() && !output.defined()) {
    // Tied: the token's output row changes with its embedding.
    const auto extra = torch::matmul(x, token_delta.to(x.scalar_type()));  // [B, T]
    logits = logits.index_add(-1, torch::tensor({lora_token}), extra.unsqueeze(-1));
  }
  return logits;
}

void LlamaImpl::EnableEagle() {
  SPECD_CHECK(!is_eagle() && !has_lora(),
              "EnableEagle: the model is already an EAGLE head or LoRA");
  eagle_fc = register_module(
      "eagle_fc",
      torch::nn::Linear(torch::nn::LinearOptions(2 * shape.dim, shape.dim).bias(false)));
  torch::nn::init::normal_(eagle_fc->weight, 0.0, 0.02);
  embed->weight.set_requires_grad(false);
}

void LlamaImpl::EnableLora(int64_t rank, double alpha, int64_t token) {
  SPECD_CHECK(rank >= 1 && rank <= shape.dim, "LoRA rank must be in 1..", shape.dim, ", got ",
              rank);
  SPECD_CHECK(!has_head(), "LoRA on a model with a restricted head is not supported");
  SPECD_CHECK(token < shape.n_vocab, "the LoRA token ", token, " is outside the vocabulary");
  for (auto& p : parameters()) p.set_requires_grad(false);
  lora_rank = rank;
  lora_alpha = alpha;
  lora_token = token;
  const char* names[kNumLlamaMatrices] = {"wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"};
  for (const auto& module : *blocks) {
    auto* block = module->as<LlamaBlockImpl>();
    block->lora_scale = alpha / static_cast<double>(rank);
    for (int m = 0; m < kNumLlamaMatrices; ++m) {
      const auto& w = block->matrix(m)->weight;  // [out, in]
      // A ~ Kaiming-uniform-like, B = 0: training starts from the base model exactly.
      const double bound = 1.0 / std::sqrt(static_cast<double>(w.size(1)));
      block->lora_a[m] =
          block->register_parameter(std::string(names[m]) + "_lora_a",
                                    torch::empty({rank, w.size(1)}).uniform_(-bound, bound));
      block->lora_b[m] = block->register_parameter(std::string(names[m]) + "_lora_b",
                                                   torch::zeros({w.size(0), rank}));
    }
  }
  if (token >= 0) token_delta = register_parameter("token_delta", torch::zeros({shape.dim}));
}

void LlamaImpl::SetLoraActive(bool active) {
  lora_active = active;
  for (const auto& module : *blocks) module->as<LlamaBlockImpl>()->lora_active = active;
}

void ExportGguf(Llama& model, const std::string& tokenizer_gguf, DType type,
                const std::string& name, const std::string& path,
                const std::vector<std::pair<std::string, GgufValue>>& extra,
                std::optional<DType> embedding_type) {
  const LlamaShape& s = model->shape;
  auto tok = GgufFile::Open(tokenizer_gguf);
  GgufWriter w;
  const std::string& a = s.arch;  // the metadata keys' prefix
  w.Set("general.architecture", GgufValue::Str(a));
  w.Set("general.name", GgufValue::Str(name));
  w.Set("general.file_type", GgufValue::U32(LlamaFileType(type)));
  if (type == DType::kQ8_0 || type == DType::kQ4_0) {
    w.Set("general.quantization_version", GgufValue::U32(2));
  }
  w.Set(a + ".context_length", GgufValue::U32(static_cast<uint32_t>(s.ctx)));
  w.Set(a + ".embedding_length", GgufValue::U32(static_cast<uint32_t>(s.dim)));
  w.Set(a + ".block_count", GgufValue::U32(static_cast<uint32_t>(s.n_layers)));
  w.Set(a + ".feed_forward_length", GgufValue::U32(static_cast<uint32_t>(s.ffn)));
  w.Set(a + ".attention.head_count", GgufValue::U32(static_cast<uint32_t>(s.n_heads)));
  w.Set(a + ".attention.head_count_kv", GgufValue::U32(static_cast<uint32_t>(s.n_kv_heads)));
  w.Set(a + ".attention.layer_norm_rms_epsilon", GgufValue::F32(static_cast<float>(s.rms_eps)));
  w.Set(a + ".rope.freq_base", GgufValue::F32(static_cast<float>(s.rope_base)));
  w.Set(a + ".rope.dimension_count", GgufValue::U32(static_cast<uint32_t>(s.head_dim())));
  w.Set(a + ".vocab_size", GgufValue::U32(static_cast<uint32_t>(s.n_vocab)));
  for (const auto& [key, value] : tok->metadata()) {
    if (key.rfind("tokenizer.", 0) == 0) w.Set(key, value);
  }
  for (const auto& [key, value] : extra) w.Set(key, value);
  torch::NoGradGuard no_grad;
  auto add = [&](const std::string& tensor_name, const torch::Tensor& t, DType t_type) {
    const auto f = t.detach().to(torch::kFloat32).contiguous();
    const int64_t cols = f.dim() == 1 ? f.size(0) : f.size(1);
    const int64_t rows = f.dim() == 1 ? 1 : f.size(0);
    const int64_t row_bytes = RowBytes(t_type, cols);
    std::vector<uint8_t> bytes(row_bytes * rows);
    const float* data = f.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r)
      QuantizeRow(t_type, data + r * cols, bytes.data() + r * row_bytes, cols);
    std::vector<int64_t> shape = {cols};
    if (f.dim() == 2) shape.push_back(rows);
    w.AddTensor(tensor_name, t_type, shape, std::move(bytes));
  };
  if (model->is_eagle()) {
    // The head reads the target's embedding: only its input projection is written.
    w.Set("specd.eagle", GgufValue::Bool(true));
    add("eagle.fc.weight", model->eagle_fc->weight, type);
  } else {
    add("token_embd.weight", model->embed->weight, embedding_type.value_or(type));
  }
  add("output_norm.weight", model->final_norm, DType::kF32);
  if (model->has_head()) {
    // The FR-Spec head: the output matrix's (or the tied embedding's) rows of the listed tokens,
    // and the list.
    add("output.weight",
        model->output.defined() ? model->output
                                : model->embed->weight.index_select(0, model->head_tokens),
        type);
    std::vector<GgufValue> ids;
    const auto head = model->head_tokens.contiguous();
    for (int64_t i = 0; i < head.numel(); ++i) {
      ids.push_back(GgufValue::I32(static_cast<int32_t>(head.data_ptr<int64_t>()[i])));
    }
    w.Set("specd.head_tokens", GgufValue::Array(GgufType::kInt32, std::move(ids)));
  } else if (model->output.defined()) {
    add("output.weight", model->output, type);
  }
  for (int64_t i = 0; i < s.n_layers; ++i) {
    auto* b = model->blocks[i]->as<LlamaBlockImpl>();
    const std::string p = "blk." + std::to_string(i) + ".";
    add(p + "attn_norm.weight", b->attn_norm, DType::kF32);
    add(p + "attn_q.weight", b->wq->weight, type);
    add(p + "attn_k.weight", b->wk->weight, type);
    add(p + "attn_v.weight", b->wv->weight, type);
    if (s.qkv_bias) {
      add(p + "attn_q.bias", b->wq->bias, DType::kF32);
      add(p + "attn_k.bias", b->wk->bias, DType::kF32);
      add(p + "attn_v.bias", b->wv->bias, DType::kF32);
    }
    add(p + "attn_output.weight", b->wo->weight, type);
    add(p + "ffn_norm.weight", b->ffn_norm, DType::kF32);
    add(p + "ffn_gate.weight", b->w_gate->weight, type);
    add(p + "ffn_up.weight", b->w_up->weight, type);
    add(p + "ffn_down.weight", b->w_down->weight, type);
  }
  w.Write(path);
}

void ExportLoraAdapter(Llama& model, DType type, const std::string& name, const std::string& path,
                       const std::vector<std::pair<std::string, GgufValue>>& extra) {
  SPECD_CHECK(model->has_lora(), "the model has no LoRA to export");
  GgufWriter w;
  w.Set("general.architecture", GgufValue::Str(model->shape.arch));
  w.Set("general.type", GgufValue::Str("adapter"));
  w.Set("general.name", GgufValue::Str(name));
  w.Set("adapter.type", GgufValue::Str("lora"));
  w.Set("adapter.lora.alpha", GgufValue::F32(static_cast<float>(model->lora_alpha)));
  for (const auto& [key, value] : extra) w.Set(key, value);
  torch::NoGradGuard no_grad;
  // A row-major [rows, cols] matrix as a GGUF tensor of ggml shape [cols, rows].
  auto add = [&](const std::string& tensor_name, const torch::Tensor& t, DType t_type) {
    const auto f = t.detach().to(torch::kFloat32).contiguous();
    const int64_t rows = f.size(0), cols = f.size(1);
    const int64_t row_bytes = RowBytes(t_type, cols);
    std::vector<uint8_t> bytes(row_bytes * rows);
    for (int64_t r = 0; r < rows; ++r) {
      QuantizeRow(t_type, f.data_ptr<float>() + r * cols, bytes.data() + r * row_bytes, cols);
    }
    w.AddTensor(tensor_name, t_type, {cols, rows}, std::move(bytes));
  };
  const char* names[kNumLlamaMatrices] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                          "ffn_gate", "ffn_up", "ffn_down"};
  for (int64_t i = 0; i < model->shape.n_layers; ++i) {
    auto* b = model->blocks[i]->as<LlamaBlockImpl>();
    for (int m = 0; m < kNumLlamaMatrices; ++m) {
      const std::string base = "blk." + std::to_string(i) + "." + names[m] + ".weight";
      add(base + ".lora_a", b->lora_a[m], type);  // [rank, in]
      add(base + ".lora_b", b->lora_b[m], type);  // [out, rank]
    }
  }
  if (model->token_delta.defined()) {
    // Rank 1, llama.cpp's embedding layout: a [n_vocab, 1] one-hot at the token, b [n_embd, 1]
    // the row change over the adapter's scale (alpha / 1).
    auto a = torch::zeros({model->shape.n_vocab, 1});
    a[model->lora_token][0] = 1.0;
    const double s = model->lora_alpha != 0.0 ? model->lora_alpha : 1.0;
    add("token_embd.weight.lora_a", a, DType::kF32);
    add("token_embd.weight.lora_b", (model->token_delta / s).unsqueeze(1), DType::kF32);
  }
  w.Write(path);
}

// A restricted input embedding (specd quantize --restrict-input-embedding) into the model's
// full one: every token not listed starts from the shared last row. `load` reads a tensor.
template <typename Load>
void LoadRestrictedEmbedding(const GgufValue& input_tokens, const std::string& path,
                             const Load& load, Llama& model) {
  const auto& items = input_tokens.AsArray("specd.input_tokens").items;
  const int64_t n_rows = static_cast<int64_t>(items.size()) + 1;
  const int64_t n_vocab = model->shape.n_vocab;
  auto rows = torch::empty({n_rows, model->shape.dim}, torch::kFloat32);
  load("token_embd.weight", rows);
  auto row_of_token = torch::full({n_vocab}, n_rows - 1, torch::kInt64);
  for (size_t r = 0; r < items.size(); ++r) {
    const int64_t id = items[r].AsInt("specd.input_tokens");
    SPECD_CHECK(id >= 0 && id < n_vocab, path, ": specd.input_tokens has token ", id,
                " outside the vocabulary");
    row_of_token[id] = static_cast<int64_t>(r);
  }
  model->embed->weight.copy_(rows.index_select(0, row_of_token));
}

Llama ImportGguf(const std::string& path) {
  auto f = GgufFile::Open(path);
  LlamaShape s;
  s.arch = f->Get("general.architecture").AsString("arch");
  SPECD_CHECK(s.arch == "llama" || s.arch == "qwen2", path, ": the trainer imports llama and ",
              "qwen2 models, not ", s.arch);
  s.qkv_bias = s.neox_rope = s.arch == "qwen2";
  auto key = [&](const char* name) { return f->Get(s.arch + "." + name); };
  s.dim = key("embedding_length").AsInt("dim");
  s.n_layers = key("block_count").AsInt("layers");
  s.n_heads = key("attention.head_count").AsInt("heads");
  s.n_kv_heads = key("attention.head_count_kv").AsInt("kv heads");
  s.ffn = key("feed_forward_length").AsInt("ffn");
  s.ctx = key("context_length").AsInt("ctx");
  s.rope_base = key("rope.freq_base").AsFloat("rope");
  s.rms_eps = key("attention.layer_norm_rms_epsilon").AsFloat("eps");
  const GgufValue* input_tokens = f->Find("specd.input_tokens");
  s.n_vocab = input_tokens != nullptr ? key("vocab_size").AsInt("vocab")
                                      : f->GetTensor("token_embd.weight").shape[1];
  const GgufValue* head = f->Find("specd.head_tokens");
  Llama model(s);
  const bool untied = f->FindTensor("output.weight") != nullptr && head == nullptr;
  if (untied) model->UntieOutput();
  if (head != nullptr) {
    // The head's output rows are the embedding's rows of the listed tokens.
    std::vector<int64_t> ids;
    for (const GgufValue& v : head->AsArray("specd.head_tokens").items) {
      ids.push_back(v.AsInt("specd.head_tokens"));
    }
    model->SetHeadTokens(ids);
  }
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, torch::Tensor target) {
    const GgufTensorInfo& t = f->GetTensor(name);
    SPECD_CHECK(t.NumElements() == target.numel(), path, ": tensor '", name,
                "' has the wrong size");
    const int64_t cols = t.shape[0], rows = t.NumElements() / cols;
    auto values = torch::empty({rows, cols}, torch::kFloat32);
    for (int64_t r = 0; r < rows; ++r) {
      DequantizeRow(t.type, t.data + r * RowBytes(t.type, cols),
                    values.data_ptr<float>() + r * cols, cols);
    }
    target.copy_(values.view(target.sizes()));
  };
  if (input_tokens != nullptr) {
    LoadRestrictedEmbedding(*input_tokens, path, load, model);
  } else {
    load("token_embd.weight", model->embed->weight);
  }
  load("output_norm.weight", model->final_norm);
  if (untied) load("output.weight", model->output);
  for (int64_t i = 0; i < s.n_layers; ++i) {
    auto* b = model->blocks[i]->as<LlamaBlockImpl>();
    const std::string p = "blk." + std::to_string(i) + ".";
    load(p + "attn_norm.weight", b->attn_norm);
    load(p + "attn_q.weight", b->wq->weight);
    load(p + "attn_k.weight", b->wk->weight);
    load(p + "attn_v.weight", b->wv->weight);
    if (s.qkv_bias) {
      load(p + "attn_q.bias", b->wq->bias);
      load(p + "attn_k.bias", b->wk->bias);
      load(p + "attn_v.bias", b->wv->bias);
    }
    load(p + "attn_output.weight", b->wo->weight);
    load(p + "ffn_norm.weight", b->ffn_norm);
    load(p + "ffn_gate.weight", b->w_gate->weight);
    load(p + "ffn_up.weight", b->w_up->weight);
    load(p + "ffn_down.weight", b->w_down->weight);
  }
  return model;
}

}  // namespace specd::train
