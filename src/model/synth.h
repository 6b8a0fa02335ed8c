// Synthetic models: GGUF files with seeded random weights in the shape of real models, so tests
// and benchmarks get realistic workloads without downloads. The files carry standard tensor names
// and metadata (and a byte-level SPM vocabulary) so that llama.cpp loads them as well.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "threading/thread_pool.h"

namespace specd {

struct ModelShape {
  std::string name;
  std::string arch = "llama";
  int64_t n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int n_ff = 0;
  int n_ctx = 2048;
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  bool tied_embeddings = false;
  bool llama3_rope_factors = false;  // writes rope_freqs.weight as Llama 3.x does
  bool fused = false;                // attn_qkv and ffn_up = [gate; up] (phi3's layout)
  int rotary_dim = 0;                // rotating dims per head (0: all)
  int long_rope_original_ctx = 0;    // > 0: LongRoPE short and long factors (phi3)
};

// The named shapes: tiny, micro, tiny-qwen2, tiny-qwen3, tiny-phi3 (and tiny-phi3-apart, the same
// weights unfused), specd-16m, specd-45m, llama-3.2-1b, qwen2.5-0.5b,
// tinyllama-1.1b, llama-1.1b-peer.
std::vector<ModelShape> KnownShapes();
// Throws an Error listing the known names if `name` is unknown.
ModelShape ShapeByName(const std::string& name);

// Writes a model with weights drawn from a seeded uniform distribution (std 1/sqrt(fan_in);
// embeddings std 1; norms 1). Matrices are stored in `type`; norms, biases and rope factors f32.
void WriteSyntheticModel(const ModelShape& shape, DType type, uint64_t seed,
                         const std::string& path, ThreadPool* pool);

}  // namespace specd
