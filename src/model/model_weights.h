// A model's weights as loaded: the file's matrices (views into the mapping) and what the load
// made of them (packed layouts, i8 conversions, merged LoRA, a restricted output head), with the
// run-time LoRA terms.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/lora.h"

namespace specd {

// A layer matrix's run-time LoRA terms, by matrix.
enum LoraSlot { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kLoraSlots };
struct LayerWeights {
  std::vector<float> attn_norm, ffn_norm;            // [n_embd]
  std::vector<float> post_attn_norm, post_ffn_norm;  // [n_embd], gemma3 only
  std::vector<float> q_norm, k_norm;                 // [head_dim], gemma3 only
  WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
  // Stacked packed forms (AVX-512 only): [q; k; v] and [gate; up], or .packed == nullptr.
  WeightView wqkv, w_gate_up;
  std::vector<float> bq, bk, bv;                          // qwen2 only
  std::array<std::vector<LowRankTerm>, kLoraSlots> lora;  // run-time LoRA, or empty
};

// An i8 matrix made at load (ModelLoadOptions::int8_weights).
struct I8Matrix {
  std::vector<int8_t> values;  // [rows, cols]
  std::vector<float> scales;   // [rows]
  std::vector<float> smooth;   // [cols] SmoothQuant's activation multipliers, or empty
};

struct ModelWeights {
  WeightView token_embd;  // [n_input_rows, n_embd]
  WeightView output;      // [n_vocab or head_tokens.size(), n_embd]
  WeightView eagle_fc;    // [n_embd, 2 n_embd], EAGLE heads only
  std::vector<float> output_norm;
  std::vector<LayerWeights> layers;
  std::vector<std::unique_ptr<PackedInt8Weights>> packed;          // owned fast layouts
  std::vector<std::unique_ptr<I8Matrix>> i8_matrices;              // owned i8 conversions
  std::vector<std::unique_ptr<std::vector<uint8_t>>> lora_merged;  // owned merged matrices
  std::vector<uint8_t> restricted_head;       // [head_tokens.size(), row bytes]: RestrictHead
  std::vector<float> restricted_head_scales;  // [head_tokens.size()] an i8 file's row scales
  // The tokens a restricted head took on from the context (GrowHead), and their rows.
  struct ContextHead {
    int max_tokens = 0;                         // 0: the head does not grow
    WeightView full_output;                     // [n_vocab, n_embd] in the file
    std::vector<char> in_head;                  // [n_vocab]
    std::vector<int32_t> tokens;                // joined, in order
    std::vector<uint8_t> rows;                  // [tokens.size(), row bytes]
    std::unique_ptr<PackedInt8Weights> packed;  // of rows, remade when tokens join
    WeightView view;                            // [tokens.size(), n_embd]
    AlignedBuffer<float> logits;                // [n_out, tokens.size()]
  } context_head;
  std::vector<std::unique_ptr<GgufFile>> adapters;  // for FindMetadata
  std::vector<LowRankTerm> output_lora;             // run-time LoRA of an untied output matrix
  EmbeddingDelta embedding_lora;                    // run-time LoRA rows of token_embd
};

}  // namespace specd
