// Loading a model: its tensors viewed in the mapped file, adapters, packing for the fast
// kernels, and what the weights cost per token.
#include <cmath>
#include <cstring>
#include <memory>

#include "base/error.h"
#include "kernels/onednn_int8.h"
#include "model/model.h"
#include "model/model_file.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

using model_file::GetInt;
using model_file::Key;
using model_file::Matrix;
using model_file::ShapeString;
using model_file::Vector;

int64_t MatrixBytes(const WeightView& w) { return RowBytes(w.type, w.cols) * w.rows; }

// Rows [first, first + n) of a matrix: a fused matrix's part (its data and scales in place).
WeightView RowSlice(const WeightView& w, int64_t first, int64_t n) {
  WeightView part = w;
  part.data = w.Row(first);
  part.rows = n;
  if (w.row_scales != nullptr) part.row_scales = w.row_scales + first;
  return part;
}

// Frequency factors of the rotary angles: Llama 3's (rope_freqs), or LongRoPE's short and long
// ones (phi3) with the attention factor and the original context that chooses between them.
void ReadRopeFactors(const GgufFile& f, ModelConfig* config) {
  ModelConfig& c = *config;
  const int64_t n = c.rope.rotary_dim / 2;
  auto factors = [&](const char* name) {
    const GgufTensorInfo* t = f.FindTensor(name);
    if (t == nullptr) return std::vector<float>{};
    SPECD_CHECK(t->type == DType::kF32, f.path(), ": ", name, " must be f32");
    std::vector<float> v = Vector(f, name, n);
    for (float x : v) {
      SPECD_CHECK(std::isfinite(x) && x > 0, f.path(), ": ", name, " has a factor ", x);
    }
    return v;
  };
  c.rope.freq_factors = factors("rope_freqs.weight");
  const std::vector<float> short_factors = factors("rope_factors_short.weight");
  const std::vector<float> long_factors = factors("rope_factors_long.weight");
  if (!short_factors.empty()) c.rope.freq_factors = short_factors;
  c.rope.attn_factor = static_cast<float>(f.GetFloat(Key(c.arch, "rope.scaling.attn_factor"), 1.0));
  SPECD_CHECK(c.rope.attn_factor > 0 && c.rope.attn_factor < 100, f.path(), ": ", c.arch,
              ".rope.scaling.attn_factor = ", c.rope.attn_factor, " is out of range");
  if (!long_factors.empty()) {
    c.rope_long = c.rope;
    c.rope_long.freq_factors = long_factors;
    c.rope_original_ctx = static_cast<int>(
        f.GetInt(Key(c.arch, "rope.scaling.original_context_length"), c.n_ctx_train));
  }
}

// A draft's restricted input embedding (`specd.input_tokens`): the listed tokens have rows
// 0..n-1 of token_embd.weight, every other token shares row n (rare tokens cost the file a
// row each otherwise: 22 MB of Qwen's 151,936-token vocabulary at d = 256).
void ReadInputRows(const GgufFile& f, ModelConfig* config) {
  ModelConfig& c = *config;
  const auto& items = f.Find("specd.input_tokens")->AsArray("specd.input_tokens").items;
  SPECD_CHECK(!items.empty() && static_cast<int64_t>(items.size()) < c.n_vocab, f.path(),
              ": specd.input_tokens lists ", items.size(), " tokens of a vocabulary of ", c.n_vocab,
              " (a restricted embedding lists at least one and not all)");
  const int32_t shared_row = static_cast<int32_t>(items.size());
  c.input_rows.assign(c.n_vocab, -1);
  for (size_t row = 0; row < items.size(); ++row) {
    const int64_t id = items[row].AsInt("specd.input_tokens");
    SPECD_CHECK(id >= 0 && id < c.n_vocab && c.input_rows[id] < 0, f.path(),
                ": specd.input_tokens has a token id out of range or twice (", id, ")");
    c.input_rows[id] = static_cast<int32_t>(row);
  }
  for (int32_t& row : c.input_rows) row = row < 0 ? shared_row : row;
}

// The vocabulary's size: the token embedding's rows, or `<arch>.vocab_size` for an EAGLE head
// (no embedding) and a restricted input embedding (fewer rows), whose token -> row map it reads.
void ReadVocabSize(const GgufFile& f, ModelConfig* config) {
  ModelConfig& c = *config;
  const bool restricted = !c.eagle && f.Find("specd.input_tokens") != nullptr;
  if (c.eagle) {
    // The head's block is its target's kind (llama, or qwen2 with q / k / v biases).
    SPECD_CHECK((c.arch == "llama" || c.arch == "qwen2") &&
                    f.FindTensor("token_embd.weight") == nullptr &&
                    f.FindTensor("output.weight") != nullptr,
                f.path(), ": an EAGLE head (specd.eagle) is a llama or qwen2 file with ",
                "output.weight and no token_embd.weight");
  }
  if (c.eagle || restricted) {
    c.n_vocab = GetInt(f, Key(c.arch, "vocab_size"));
    SPECD_CHECK(c.n_vocab >= 1 && c.n_vocab <= (int64_t{1} << 24), f.path(), ": ", c.arch,
                ".vocab_size ", c.n_vocab, " is out of range");
    if (restricted) ReadInputRows(f, &c);
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
}

}  // namespace

void Model::RestrictHead(const std::string& path, std::vector<int32_t> tokens) {
  ModelConfig& c = config_;
  SPECD_CHECK(c.head_tokens.empty() && !c.eagle && weights_.output_lora.empty(), path,
              ": a draft vocabulary restricts a full output layer; this one is restricted "
              "already (specd.head_tokens), an EAGLE head's, or has a run-time LoRA");
  std::vector<char> seen(c.n_vocab, 0);
  std::vector<int32_t> kept;
  for (const int32_t id : tokens) {
    SPECD_CHECK(id >= 0 && id < c.n_vocab, path, ": a draft vocabulary lists token ", id,
                ", outside the model's ", c.n_vocab);
    if (!seen[id]) kept.push_back(id);
    seen[id] = 1;
  }
  // A draft that can propose the end of a turn keeps its run going to the last token.
  for (const int32_t id : c.end_of_generation) {
    if (!seen[id]) kept.push_back(id);
    seen[id] = 1;
  }
  weights_.context_head.full_output =
      weights_.output;  // rows of tokens that join the head later (GrowHead)
  weights_.context_head.in_head = seen;
  const int64_t row_bytes = RowBytes(weights_.output.type, weights_.output.cols);
  weights_.restricted_head.resize(kept.size() * row_bytes);
  for (size_t j = 0; j < kept.size(); ++j) {
    std::memcpy(weights_.restricted_head.data() + j * row_bytes, weights_.output.Row(kept[j]),
                row_bytes);
  }
  if (weights_.output.row_scales != nullptr) {
    for (const int32_t id : kept)
      weights_.restricted_head_scales.push_back(weights_.output.row_scales[id]);
    weights_.output.row_scales = weights_.restricted_head_scales.data();
  }
  weights_.output.data = weights_.restricted_head.data();
  weights_.output.rows = static_cast<int64_t>(kept.size());
  c.head_tokens = std::move(kept);
}

LayerWeights Model::ReadLayer(const GgufFile& f, const ModelConfig& c, int il) {
  const std::string p = "blk." + std::to_string(il) + ".";
  const int64_t q_dim = static_cast<int64_t>(c.n_head) * c.head_dim;
  LayerWeights l;
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
  // Q, K and V fused into one matrix (phi3; any architecture may) or apart.
  if (f.FindTensor(p + "attn_qkv.weight") != nullptr) {
    const WeightView qkv = Matrix(f, p + "attn_qkv.weight", c.n_embd, q_dim + 2 * c.kv_dim());
    l.wq = RowSlice(qkv, 0, q_dim);
    l.wk = RowSlice(qkv, q_dim, c.kv_dim());
    l.wv = RowSlice(qkv, q_dim + c.kv_dim(), c.kv_dim());
  } else {
    l.wq = Matrix(f, p + "attn_q.weight", c.n_embd, q_dim);
    l.wk = Matrix(f, p + "attn_k.weight", c.n_embd, c.kv_dim());
    l.wv = Matrix(f, p + "attn_v.weight", c.n_embd, c.kv_dim());
  }
  l.wo = Matrix(f, p + "attn_output.weight", q_dim, c.n_embd);
  // Gate and up fused as ffn_up [n_embd, 2 n_ff], the gate's rows first (phi3), or apart.
  if (f.FindTensor(p + "ffn_gate.weight") == nullptr) {
    const WeightView gate_up = Matrix(f, p + "ffn_up.weight", c.n_embd, 2 * int64_t{c.n_ff});
    l.w_gate = RowSlice(gate_up, 0, c.n_ff);
    l.w_up = RowSlice(gate_up, c.n_ff, c.n_ff);
  } else {
    l.w_gate = Matrix(f, p + "ffn_gate.weight", c.n_embd, c.n_ff);
    l.w_up = Matrix(f, p + "ffn_up.weight", c.n_embd, c.n_ff);
  }
  l.w_down = Matrix(f, p + "ffn_down.weight", c.n_ff, c.n_embd);
  if (c.qkv_bias) {
    l.bq = Vector(f, p + "attn_q.bias", q_dim);
    l.bk = Vector(f, p + "attn_k.bias", c.kv_dim());
    l.bv = Vector(f, p + "attn_v.bias", c.kv_dim());
  }
  return l;
}

std::unique_ptr<Model> Model::Load(const std::string& path, const KernelContext* ctx,
                                   const ModelLoadOptions& options) {
  return FromGguf(GgufFile::Open(path), ctx, options);
}

std::unique_ptr<Model> Model::FromGguf(std::unique_ptr<GgufFile> file, const KernelContext* ctx,
                                       const ModelLoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  const GgufFile& f = *file;
  model->ReadConfig(f);
  ModelConfig& c = model->config_;
  c.eagle = f.Find("specd.eagle") != nullptr;
  ReadVocabSize(f, &c);
  model_file::CheckSpecialTokens(f, &c);

  ReadRopeFactors(f, &c);

  if (c.eagle) {
    model->weights_.eagle_fc = Matrix(f, "eagle.fc.weight", 2 * int64_t{c.n_embd}, c.n_embd);
  } else {
    model->weights_.token_embd = Matrix(f, "token_embd.weight", c.n_embd, c.n_input_rows());
  }
  model->weights_.output_norm = Vector(f, "output_norm.weight", c.n_embd);
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
  SPECD_CHECK(c.input_rows.empty() || !c.tied_embeddings, f.path(),
              ": specd.input_tokens needs an output.weight of its own (the embedding is not the "
              "head)");
  const int64_t n_output_rows = c.head_tokens.empty() ? c.n_vocab : c.head_tokens.size();
  model->weights_.output = c.tied_embeddings ? model->weights_.token_embd
                                             : Matrix(f, "output.weight", c.n_embd, n_output_rows);
  for (int i = 0; i < c.n_layer; ++i) model->weights_.layers.push_back(ReadLayer(f, c, i));
  model->LoadLora(options.lora, options.lora_apply);
  if (!options.head_tokens.empty()) {
    model->RestrictHead(f.path(), options.head_tokens);
    model->weights_.context_head.max_tokens = options.head_context_tokens;
  }
  const bool fast = ctx != nullptr && ctx->cpu.packed_kernels();
  // Calibration runs the model as loaded (packed, so that it is quick); conversion then drops
  // those layouts and the i8 matrices are packed instead.
  if (fast) model->PackWeights(*ctx);
  // A file written in i8 keeps its own conversion: no calibration, no second packing.
  const bool all_i8 =
      model->MatrixType() == DType::kI8 && model->weights_.output.type == DType::kI8;
  if (options.int8_weights && !all_i8) {
    model->ConvertAllToI8(ctx, options);
    if (fast) model->PackWeights(*ctx);
  }
  // The packed copies are what the forward reads; the mapped pages they came from are not.
  if (fast) file->ReleaseResidentPages();
  model->file_ = std::move(file);
  return model;
}

const GgufValue* Model::FindMetadata(const std::string& key) const {
  for (auto it = weights_.adapters.rbegin(); it != weights_.adapters.rend(); ++it) {
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
    weights_.packed.push_back(
        std::make_unique<PackedInt8Weights>(PackInt8(w, ctx.pool, HighBitsFor(ctx.cpu))));
    w.packed = weights_.packed.back().get();
    with_onednn(weights_.packed.back().get(), {&w});
  };
  // Projections of the same input are stacked into one matrix when their types allow it.
  auto stack = [&](const std::vector<WeightView*>& parts, WeightView* stacked) {
    auto packed = std::make_unique<PackedInt8Weights>();
    if (!StackPackedInt8({parts.begin(), parts.end()}, ctx.pool, HighBitsFor(ctx.cpu),
                         packed.get())) {
      for (WeightView* w : parts) pack(*w);
      return;
    }
    *stacked = WeightView{packed->source_type, nullptr, packed->rows, packed->cols, packed.get()};
    stacked->col_scales = parts.front()->col_scales;  // shared by the parts (one input)
    with_onednn(packed.get(), {parts.begin(), parts.end()});
    weights_.packed.push_back(std::move(packed));
  };
  for (LayerWeights& l : weights_.layers) {
    stack({&l.wq, &l.wk, &l.wv}, &l.wqkv);
    stack({&l.w_gate, &l.w_up}, &l.w_gate_up);
    for (WeightView* w : {&l.wo, &l.w_down}) pack(*w);
  }
  pack(weights_.output);
  if (config_.eagle) pack(weights_.eagle_fc);
}

int64_t Model::WeightBytesPerToken() const {
  int64_t bytes = MatrixBytes(weights_.output);
  if (config_.eagle) {
    bytes += MatrixBytes(weights_.eagle_fc);
  } else {
    bytes += RowBytes(weights_.token_embd.type, weights_.token_embd.cols);
  }
  for (const LowRankTerm& t : weights_.output_lora) bytes += t.Bytes();
  for (const LayerWeights& l : weights_.layers) {
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
  int64_t macs =
      weights_.output.rows * weights_.output.cols + weights_.eagle_fc.rows * weights_.eagle_fc.cols;
  for (const LayerWeights& l : weights_.layers) {
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

}  // namespace specd
