#include "model/synth.h"

#include <cmath>

#include "base/error.h"
#include "base/rng.h"
#include "gguf/gguf.h"
#include "tensor/quantize.h"

namespace specd {
namespace {

// A byte-level SPM vocabulary: <unk>, <s>, </s>, the 256 byte tokens, then filler pieces.
void AddVocabulary(GgufWriter& w, int64_t n_vocab) {
  SPECD_CHECK(n_vocab >= 4, "a synthetic vocabulary needs at least 4 tokens");
  std::vector<GgufValue> tokens, scores, types;
  auto add = [&](std::string text, float score, int32_t type) {
    tokens.push_back(GgufValue::Str(std::move(text)));
    scores.push_back(GgufValue::F32(score));
    types.push_back(GgufValue::I32(type));
  };
  add("<unk>", 0.0f, 2);
  add("<s>", 0.0f, 3);
  add("</s>", 0.0f, 3);
  // Byte tokens when there is room for them (a tiny vocabulary has none: no byte fallback).
  const bool bytes = n_vocab >= 259;
  for (int b = 0; bytes && b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    add(piece, 0.0f, 6);
  }
  for (int64_t i = bytes ? 259 : 3; i < n_vocab; ++i) {
    add("\xE2\x96\x81t" + std::to_string(i), -static_cast<float>(i), 1);
  }
  w.Set("tokenizer.ggml.model", GgufValue::Str("llama"));
  w.Set("tokenizer.ggml.tokens", GgufValue::Array(GgufType::kString, std::move(tokens)));
  w.Set("tokenizer.ggml.scores", GgufValue::Array(GgufType::kFloat32, std::move(scores)));
  w.Set("tokenizer.ggml.token_type", GgufValue::Array(GgufType::kInt32, std::move(types)));
  w.Set("tokenizer.ggml.bos_token_id", GgufValue::U32(1));
  w.Set("tokenizer.ggml.eos_token_id", GgufValue::U32(2));
  w.Set("tokenizer.ggml.unknown_token_id", GgufValue::U32(0));
}

}  // namespace

std::vector<ModelShape> KnownShapes() {
  std::vector<ModelShape> shapes;
  ModelShape tiny;
  tiny.name = "tiny";
  tiny.n_vocab = 384;
  tiny.n_embd = 64;
  tiny.n_layer = 2;
  tiny.n_head = 4;
  tiny.n_head_kv = 2;
  tiny.n_ff = 160;
  tiny.n_ctx = 512;
  shapes.push_back(tiny);

  // A vocabulary small enough to enumerate two-token distributions exactly (statistical tests).
  ModelShape micro = tiny;
  micro.name = "micro";
  micro.n_vocab = 24;
  shapes.push_back(micro);

  ModelShape tiny_qwen = tiny;
  tiny_qwen.name = "tiny-qwen2";
  tiny_qwen.arch = "qwen2";
  tiny_qwen.tied_embeddings = true;
  tiny_qwen.rms_eps = 1e-6f;
  shapes.push_back(tiny_qwen);

  ModelShape tiny_qwen3 = tiny_qwen;
  tiny_qwen3.name = "tiny-qwen3";
  tiny_qwen3.arch = "qwen3";
  shapes.push_back(tiny_qwen3);

  // Phi-3's layout: fused attn_qkv and gate-up, 12 of 16 dims rotating, LongRoPE (short factors
  // up to 64 positions per sequence, long ones beyond).
  ModelShape tiny_phi3 = tiny;
  tiny_phi3.name = "tiny-phi3";
  tiny_phi3.arch = "phi3";
  tiny_phi3.fused = true;
  tiny_phi3.rotary_dim = 12;
  tiny_phi3.long_rope_original_ctx = 64;
  shapes.push_back(tiny_phi3);
  ModelShape tiny_phi3_apart = tiny_phi3;  // the same weights in separate matrices
  tiny_phi3_apart.name = "tiny-phi3-apart";
  tiny_phi3_apart.fused = false;
  shapes.push_back(tiny_phi3_apart);

  // The shipped target's shape, and a larger one of the same family whose q8_0 weights (48 MB)
  // no longer fit this machine's 32 MB L3: decoding it is DRAM-bound, like real models.
  ModelShape specd16;
  specd16.name = "specd-16m";
  specd16.n_vocab = 4096;
  specd16.n_embd = 448;
  specd16.n_layer = 6;
  specd16.n_head = 7;
  specd16.n_head_kv = 7;
  specd16.n_ff = 1216;
  specd16.n_ctx = 256;
  shapes.push_back(specd16);

  ModelShape specd45 = specd16;
  specd45.name = "specd-45m";
  specd45.n_embd = 640;
  specd45.n_layer = 8;
  specd45.n_head = 10;
  specd45.n_head_kv = 10;
  specd45.n_ff = 1728;
  shapes.push_back(specd45);

  ModelShape llama32;
  llama32.name = "llama-3.2-1b";
  llama32.n_vocab = 128256;
  llama32.n_embd = 2048;
  llama32.n_layer = 16;
  llama32.n_head = 32;
  llama32.n_head_kv = 8;
  llama32.n_ff = 8192;
  llama32.n_ctx = 131072;
  llama32.rope_base = 500000.0f;
  llama32.tied_embeddings = true;
  llama32.llama3_rope_factors = true;
  shapes.push_back(llama32);

  ModelShape qwen;
  qwen.name = "qwen2.5-0.5b";
  qwen.arch = "qwen2";
  qwen.n_vocab = 151936;
  qwen.n_embd = 896;
  qwen.n_layer = 24;
  qwen.n_head = 14;
  qwen.n_head_kv = 2;
  qwen.n_ff = 4864;
  qwen.n_ctx = 32768;
  qwen.rope_base = 1000000.0f;
  qwen.rms_eps = 1e-6f;
  qwen.tied_embeddings = true;
  shapes.push_back(qwen);

  ModelShape tinyllama;
  tinyllama.name = "tinyllama-1.1b";
  tinyllama.n_vocab = 32000;
  tinyllama.n_embd = 2048;
  tinyllama.n_layer = 22;
  tinyllama.n_head = 32;
  tinyllama.n_head_kv = 4;
  tinyllama.n_ff = 5632;
  shapes.push_back(tinyllama);

  // TinyLlama's width with 16 layers, 8 KV heads and an FFN of 8192 (about 1.1B parameters):
  // random weights of that shape for comparisons with llama.cpp on the same file.
  ModelShape peer = tinyllama;
  peer.name = "llama-1.1b-peer";
  peer.n_layer = 16;
  peer.n_head_kv = 8;
  peer.n_ff = 8192;
  shapes.push_back(peer);
  return shapes;
}

ModelShape ShapeByName(const std::string& name) {
  std::string known;
  for (const ModelShape& s : KnownShapes()) {
    if (s.name == name) return s;
    known += (known.empty() ? "" : ", ") + s.name;
  }
  Fail("unknown model shape '", name, "' (known: ", known, ")");
}

namespace {

// The hyper-parameters and a vocabulary, as llama.cpp's converters write them.
void WriteShapeMetadata(const ModelShape& s, DType type, GgufWriter& w) {
  const std::string& a = s.arch;
  w.Set("general.architecture", GgufValue::Str(a));
  w.Set("general.name", GgufValue::Str("specd-synthetic-" + s.name));
  w.Set("general.file_type", GgufValue::U32(LlamaFileType(type)));
  if (BlockElements(type) > 1) {
    w.Set("general.quantization_version", GgufValue::U32(2));
  }
  w.Set(a + ".context_length", GgufValue::U32(s.n_ctx));
  w.Set(a + ".embedding_length", GgufValue::U32(s.n_embd));
  w.Set(a + ".block_count", GgufValue::U32(s.n_layer));
  w.Set(a + ".feed_forward_length", GgufValue::U32(s.n_ff));
  w.Set(a + ".attention.head_count", GgufValue::U32(s.n_head));
  w.Set(a + ".attention.head_count_kv", GgufValue::U32(s.n_head_kv));
  w.Set(a + ".attention.layer_norm_rms_epsilon", GgufValue::F32(s.rms_eps));
  w.Set(a + ".rope.freq_base", GgufValue::F32(s.rope_base));
  w.Set(a + ".vocab_size", GgufValue::U32(static_cast<uint32_t>(s.n_vocab)));
  AddVocabulary(w, s.n_vocab);
}

// Llama 3.1's rotary scaling (factor 8, low 1, high 4, original context 8192): factor 1 for high
// frequencies, 8 for low ones, a smooth ramp between. [head_dim / 2]
std::vector<float> Llama3RopeFactors(const ModelShape& s, int head_dim) {
  std::vector<float> factors(head_dim / 2);
  for (int i = 0; i < head_dim / 2; ++i) {
    const double freq = std::pow(double(s.rope_base), -2.0 * i / head_dim);
    const double wavelen = 2 * M_PI / freq;
    const double low_wavelen = 8192.0 / 1.0, high_wavelen = 8192.0 / 4.0;
    if (wavelen < high_wavelen) {
      factors[i] = 1.0f;
    } else if (wavelen > low_wavelen) {
      factors[i] = 8.0f;
    } else {
      const double smooth = (8192.0 / wavelen - 1.0) / (4.0 - 1.0);
      factors[i] = static_cast<float>(1.0 / ((1 - smooth) / 8.0 + smooth));
    }
  }
  return factors;
}

}  // namespace

namespace {

// The tensors of a synthetic model, each seeded by (seed, its index), rows by (tensor, row), so
// the weights do not depend on the thread count, and a fused matrix holds exactly the rows its
// parts would have had apart.
class SyntheticTensors {
 public:
  SyntheticTensors(const ModelShape& s, DType type, uint64_t seed, ThreadPool* pool, GgufWriter* w)
      : s_(s), type_(type), seed_(seed), pool_(pool), w_(*w), head_dim_(s.n_embd / s.n_head) {}

  void Write() {
    Matrix("token_embd.weight", s_.n_embd, s_.n_vocab, 1.0f);
    Vector("output_norm.weight", s_.n_embd, 1.0f, 0.0f);
    if (!s_.tied_embeddings) {
      Matrix("output.weight", s_.n_embd, s_.n_vocab, 1.0f / std::sqrt(float(s_.n_embd)));
    }
    if (s_.llama3_rope_factors) Factors("rope_freqs.weight", Llama3RopeFactors(s_, head_dim_));
    if (s_.long_rope_original_ctx > 0) {
      const int half = RotaryDim() / 2;
      std::vector<float> short_factors(half), long_factors(half);
      for (int i = 0; i < half; ++i) {
        short_factors[i] = 1.0f + 0.5f * i / half;
        long_factors[i] = 1.0f + 7.0f * i / half;
      }
      Factors("rope_factors_short.weight", short_factors);
      Factors("rope_factors_long.weight", long_factors);
    }
    for (int i = 0; i < s_.n_layer; ++i) Layer(i);
  }

  int RotaryDim() const { return s_.rotary_dim > 0 ? s_.rotary_dim : head_dim_; }

 private:
  // A [cols, rows] matrix's bytes (ggml order) of uniform weights of std `stddev`.
  std::vector<uint8_t> MatrixBytes(int64_t cols, int64_t rows, float stddev) {
    const uint64_t tensor_seed = seed_ * 0x9E3779B97F4A7C15ull + (++tensor_index_) * 0x632BE59Bull;
    const float amplitude = stddev * std::sqrt(3.0f);
    const int64_t row_bytes = RowBytes(type_, cols);
    std::vector<uint8_t> data(row_bytes * rows);
    pool_->ParallelFor(rows, 64, [&](int64_t r0, int64_t r1) {
      std::vector<float> values(cols);
      for (int64_t r = r0; r < r1; ++r) {
        SplitMix64 rng(tensor_seed ^ (static_cast<uint64_t>(r) * 0xD1B54A32D192ED03ull));
        for (int64_t i = 0; i < cols; ++i) values[i] = amplitude * rng.NextSymmetric();
        QuantizeRow(type_, values.data(), data.data() + r * row_bytes, cols);
      }
    });
    return data;
  }
  void Matrix(const std::string& name, int64_t cols, int64_t rows, float stddev) {
    w_.AddTensor(name, type_, {cols, rows}, MatrixBytes(cols, rows, stddev));
  }
  // Matrices reading the same input, as one matrix of their rows in order or apart.
  void Matrices(const std::vector<std::string>& names, const std::string& fused_name, int64_t cols,
                const std::vector<int64_t>& rows, float stddev) {
    std::vector<std::vector<uint8_t>> parts;
    for (int64_t r : rows) parts.push_back(MatrixBytes(cols, r, stddev));
    if (!s_.fused) {
      for (size_t i = 0; i < parts.size(); ++i) {
        w_.AddTensor(names[i], type_, {cols, rows[i]}, std::move(parts[i]));
      }
      return;
    }
    std::vector<uint8_t> all;
    int64_t total_rows = 0;
    for (size_t i = 0; i < parts.size(); ++i) {
      all.insert(all.end(), parts[i].begin(), parts[i].end());
      total_rows += rows[i];
    }
    w_.AddTensor(fused_name, type_, {cols, total_rows}, std::move(all));
  }
  void Vector(const std::string& name, int64_t n, float value, float noise) {
    SplitMix64 rng(seed_ ^ (++tensor_index_ * 0x94D049BB133111EBull));
    std::vector<float> values(n);
    for (int64_t i = 0; i < n; ++i) values[i] = value + noise * rng.NextSymmetric();
    Factors(name, values);
  }
  void Factors(const std::string& name, const std::vector<float>& values) {
    std::vector<uint8_t> data(values.size() * 4);
    std::memcpy(data.data(), values.data(), data.size());
    w_.AddTensor(name, DType::kF32, {static_cast<int64_t>(values.size())}, std::move(data));
  }
  void Layer(int i) {
    const std::string p = "blk." + std::to_string(i) + ".";
    const int64_t q_dim = s_.n_embd;
    const int64_t kv_dim = static_cast<int64_t>(s_.n_head_kv) * head_dim_;
    const float in_std = 1.0f / std::sqrt(float(s_.n_embd));
    Vector(p + "attn_norm.weight", s_.n_embd, 1.0f, 0.1f);
    Matrices({p + "attn_q.weight", p + "attn_k.weight", p + "attn_v.weight"}, p + "attn_qkv.weight",
             s_.n_embd, {q_dim, kv_dim, kv_dim}, in_std);
    if (s_.arch == "qwen2") {
      Vector(p + "attn_q.bias", q_dim, 0.0f, 0.1f);
      Vector(p + "attn_k.bias", kv_dim, 0.0f, 0.1f);
      Vector(p + "attn_v.bias", kv_dim, 0.0f, 0.1f);
    }
    if (s_.arch == "qwen3") {
      Vector(p + "attn_q_norm.weight", head_dim_, 1.0f, 0.1f);
      Vector(p + "attn_k_norm.weight", head_dim_, 1.0f, 0.1f);
    }
    Matrix(p + "attn_output.weight", q_dim, s_.n_embd, 1.0f / std::sqrt(float(q_dim)));
    Vector(p + "ffn_norm.weight", s_.n_embd, 1.0f, 0.1f);
    // Fused, the gate's rows come first in ffn_up (phi3).
    Matrices({p + "ffn_gate.weight", p + "ffn_up.weight"}, p + "ffn_up.weight", s_.n_embd,
             {s_.n_ff, s_.n_ff}, in_std);
    Matrix(p + "ffn_down.weight", s_.n_ff, s_.n_embd, 1.0f / std::sqrt(float(s_.n_ff)));
  }

  const ModelShape& s_;
  const DType type_;
  const uint64_t seed_;
  ThreadPool* pool_;
  GgufWriter& w_;
  const int head_dim_;
  uint64_t tensor_index_ = 0;
};

}  // namespace

void WriteSyntheticModel(const ModelShape& s, DType type, uint64_t seed, const std::string& path,
                         ThreadPool* pool) {
  SPECD_CHECK(s.n_embd % s.n_head == 0 && s.n_head % s.n_head_kv == 0, "shape '", s.name,
              "' has inconsistent head counts");
  GgufWriter w;
  WriteShapeMetadata(s, type, w);
  SyntheticTensors tensors(s, type, seed, pool, &w);
  w.Set(s.arch + ".rope.dimension_count", GgufValue::U32(tensors.RotaryDim()));
  if (s.long_rope_original_ctx > 0) {
    w.Set(s.arch + ".rope.scaling.original_context_length",
          GgufValue::U32(s.long_rope_original_ctx));
    w.Set(s.arch + ".rope.scaling.attn_factor", GgufValue::F32(1.1f));
  }
  tensors.Write();
  w.Write(path);
}

}  // namespace specd
