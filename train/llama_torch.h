// The llama architecture in LibTorch, laid out exactly as GGUF stores it (RoPE on adjacent pairs,
// tied embeddings), so export is a copy of tensors and specd's engine computes the same function.
#pragma once

#include <torch/torch.h>

#include <array>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gguf/gguf.h"
#include "tensor/dtype.h"

namespace specd::train {

struct LlamaShape {
  int64_t n_vocab = 4096;
  int64_t dim = 384;
  int64_t n_layers = 6;
  int64_t n_heads = 6;
  int64_t n_kv_heads = 6;
  int64_t ffn = 1024;
  int64_t ctx = 256;
  double rope_base = 10000.0;
  double rms_eps = 1e-5;
  // The GGUF architecture: "llama", or "qwen2" (biases on q / k / v, NeoX rotary pairs).
  std::string arch = "llama";
  bool qkv_bias = false;
  bool neox_rope = false;

  int64_t head_dim() const { return dim / n_heads; }
};

// The block's matrices in a fixed order (LoRA tensors are indexed by it).
enum LlamaMatrix { kWq, kWk, kWv, kWo, kWGate, kWUp, kWDown, kNumLlamaMatrices };

struct LlamaBlockImpl : torch::nn::Module {
  LlamaBlockImpl(const LlamaShape& shape);
  torch::nn::Linear& matrix(int which);
  // y = W x, plus s B A x when LoRA is on.
  torch::Tensor Project(int which, const torch::Tensor& x);

  torch::Tensor attn_norm, ffn_norm;  // [dim]
  torch::nn::Linear wq{nullptr}, wk{nullptr}, wv{nullptr}, wo{nullptr};
  torch::nn::Linear w_gate{nullptr}, w_up{nullptr}, w_down{nullptr};
  // LoRA (empty when off): A [rank, in], B [out, rank] per matrix; B starts at 0.
  std::array<torch::Tensor, kNumLlamaMatrices> lora_a, lora_b;
  double lora_scale = 0.0;  // alpha / rank
  bool lora_active = true;  // false: the block computes the base model's function
};
TORCH_MODULE(LlamaBlock);

// One block's attention keys and values after RoPE, heads repeated for GQA: [batch, heads,
// time, head_dim] each.
struct LayerKv {
  torch::Tensor k, v;
};

struct LlamaImpl : torch::nn::Module {
  explicit LlamaImpl(const LlamaShape& shape);
  // tokens [batch, time] int64 -> logits [batch, time, n_vocab]. By default row t sits at
  // position t and sees rows 0..t; `positions` [batch, time] int64 and `visible` [batch, time,
  // time] bool (row i may attend to row j) override both, for sequences with rows that later rows
  // must not see (SDSAT's adaptive tokens).
  torch::Tensor forward(const torch::Tensor& tokens, const torch::Tensor& positions = {},
                        const torch::Tensor& visible = {});
  // The parts of forward: the blocks and final norm over input rows x [batch, time, dim] ->
  // normed hidden states [batch, time, dim]; and the output layer over them -> logits.
  // With `past` (the keys and values an earlier call left in `present`, per block), the rows
  // also attend to those earlier rows: `visible` is then [batch, time, past + time] and must be
  // given. `present`, when given, receives every block's keys and values, the past's first.
  torch::Tensor Hidden(torch::Tensor x, const torch::Tensor& positions = {},
                       const torch::Tensor& visible = {},
                       const std::vector<LayerKv>* past = nullptr,
                       std::vector<LayerKv>* present = nullptr);
  torch::Tensor Logits(const torch::Tensor& hidden);
  int64_t NumParameters();
  // Restricts the output layer to these token ids (FR-Spec): logits [batch, time, n_head] over
  // the listed tokens only, the embedding's rows for them as the output matrix.
  void SetHeadTokens(const std::vector<int64_t>& ids);
  bool has_head() const { return head_tokens.defined() && head_tokens.numel() > 0; }
  // Gives the model its own output matrix (a file with output.weight), initialized as the
  // embedding; without it the output layer is the embedding (tied).
  void UntieOutput();
  // An EAGLE head of a target with its own output matrix `rows` [n_vocab, dim]: the head's output
  // layer is those rows (the head tokens' when restricted), frozen, instead of the embedding's.
  void SetOutputRows(const torch::Tensor& rows);
  // Targets as indices into the head: [batch, time] token ids -> [batch, time] head indices, -100
  // (cross_entropy's ignore_index) for tokens outside it. Identity without a head.
  torch::Tensor HeadTargets(const torch::Tensor& targets) const;

  // LoRA fine-tuning: freezes every weight, adds rank-`rank` A / B pairs to each block matrix
  // (scale alpha / rank), and, when token >= 0, a trainable change of that token's embedding row
  // (input and, tied, output).
  void EnableLora(int64_t rank, double alpha, int64_t token);
  bool has_lora() const { return lora_rank > 0; }
  // Switches the LoRA (and the token's embedding change) off or back on: off, the model computes
  // the frozen base's function, e.g. for a distillation target.
  void SetLoraActive(bool active);
  // EAGLE head: adds the input projection eagle_fc ([2 dim] -> [dim], no bias) and freezes the
  // embedding (the target's, which the head reads and, as its output layer, shares).
  void EnableEagle();
  bool is_eagle() const { return !eagle_fc.is_empty(); }

  LlamaShape shape;
  int64_t lora_rank = 0;
  double lora_alpha = 0.0;
  int64_t lora_token = -1;
  bool lora_active = true;
  torch::Tensor token_delta;            // [dim] the LoRA token's embedding change, or undefined
  torch::nn::Embedding embed{nullptr};  // [n_vocab, dim], tied with the output unless `output`
  torch::Tensor output;       // [n_vocab or n_head, dim] an untied output matrix, or undefined
  torch::Tensor head_tokens;  // [n_head] int64, empty: the whole vocabulary
  torch::Tensor head_index;   // [n_vocab] int64: position in head_tokens or -100
  torch::nn::ModuleList blocks;
  torch::Tensor final_norm;             // [dim]
  torch::nn::Linear eagle_fc{nullptr};  // [dim, 2 dim], EAGLE heads only
};
TORCH_MODULE(Llama);

// Writes a GGUF model (standard llama keys and tensor names) with matrices in `type` and the
// tokenizer metadata copied from `tokenizer_gguf`.
// `extra` metadata is written as given (e.g. specd.sdsat.*). `embedding_type`, when set, is the
// input embedding's type instead of `type` (a draft over a 152K-token vocabulary reads one row
// of it per token, so q4_0 halves the file at no cost per step).
void ExportGguf(Llama& model, const std::string& tokenizer_gguf, DType type,
                const std::string& name, const std::string& path,
                const std::vector<std::pair<std::string, GgufValue>>& extra = {},
                std::optional<DType> embedding_type = std::nullopt);

// Writes the LoRA of `model` as a llama.cpp adapter GGUF (general.type = adapter, adapter.type =
// lora, adapter.lora.alpha; blk.N.<matrix>.weight.lora_a [in, rank] / .lora_b [rank, out] in
// `type`; the token row as a rank-1 token_embd.weight LoRA in llama.cpp's flipped layout, f32).
void ExportLoraAdapter(Llama& model, DType type, const std::string& name, const std::string& path,
                       const std::vector<std::pair<std::string, GgufValue>>& extra = {});

// Loads a llama GGUF (any supported type, dequantized to f32) into a torch model.
Llama ImportGguf(const std::string& path);

}  // namespace specd::train
