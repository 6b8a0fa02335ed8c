// A model's hyper-parameters, read from its GGUF metadata (model_config.cc).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace specd {

// The feed-forward activation: SwiGLU (llama, qwen2) or GeGLU with tanh GELU (gemma3).
enum class FfnActivation { kSilu, kGeluTanh };

struct ModelConfig {
  std::string arch;  // general.architecture (model/architectures.h lists them)
  std::string name;
  int64_t n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeConfig rope;
  bool qkv_bias = false;
  bool tied_embeddings = false;
  // Gemma 3: embeddings scaled by sqrt(n_embd), per-head RMSNorm of q and k, RMSNorms after the
  // attention and FFN blocks, GeGLU, and local sliding-window layers with their own RoPE base
  // (every layer but each swa_pattern-th).
  float embd_scale = 1.0f;
  bool qk_norm = false;
  bool post_norms = false;
  FfnActivation activation = FfnActivation::kSilu;
  float attn_scale = 0.0f;  // query scale (1 / sqrt(head_dim) unless the model says otherwise)
  int sliding_window = 0;   // keys a local layer's query sees, itself included; 0: none
  int swa_pattern = 0;      // layer il is global iff (il + 1) % swa_pattern == 0
  RopeConfig rope_local;    // RoPE of the local layers
  // LongRoPE (phi3): `rope` holds the short factors; beyond rope_original_ctx positions per
  // sequence the long ones (rope_long) apply, as llama.cpp chooses by the context's size.
  RopeConfig rope_long;
  int rope_original_ctx = 0;
  // The RoPE of the global layers for a KV cache of n_ctx positions per sequence.
  const RopeConfig& GlobalRope(int n_ctx) const {
    return !rope_long.freq_factors.empty() && n_ctx > rope_original_ctx ? rope_long : rope;
  }

  int32_t bos_token = -1;
  int32_t eos_token = -1;
  // Tokens that end generation like EOS, sorted: EOS, the end-of-turn id, and the vocabulary's
  // tokens that llama.cpp treats so by their text (<|endoftext|>, <|im_end|>, <end_of_turn>,
  // <|eot_id|>, Qwen's <|fim_pad|>, <|repo_name|> and <|file_sep|> ...), so that a code model
  // stops at the end of a file as it does under llama.cpp.
  std::vector<int32_t> end_of_generation;
  bool IsEndOfGeneration(int32_t token) const;
  // FR-Spec draft head (`specd.head_tokens`): the output matrix has a row for these token ids
  // only; every other token's logit is -infinity. Empty: the whole vocabulary.
  std::vector<int32_t> head_tokens;
  // A restricted input embedding (`specd.input_tokens`): token -> its row of token_embd.weight,
  // tokens that were not listed sharing the last row. Empty: row = token.
  std::vector<int32_t> input_rows;
  int64_t n_input_rows() const {
    return input_rows.empty() ? n_vocab
                              : *std::max_element(input_rows.begin(), input_rows.end()) + 1;
  }
  // An EAGLE draft head (`specd.eagle`, made by `specd train eagle`): the file has no token
  // embedding. Row i's input is eagle.fc [n_embd, 2 n_embd] times [the target's embedding of
  // token i+1; the target's final normed hidden state at position i], and its own final normed
  // hidden state predicts the target's at position i+1 (Li et al., EAGLE).
  bool eagle = false;

  int kv_dim() const { return n_head_kv * head_dim; }
  bool IsLocalLayer(int il) const {
    return sliding_window > 0 && swa_pattern > 0 && (il + 1) % swa_pattern != 0;
  }
};

}  // namespace specd
