#include "model/architectures.h"

#include <cmath>
#include <cstdint>

#include "base/error.h"

namespace specd {
namespace {

// Gemma 3's additions to the llama hyper-parameters (llama.cpp's reading of the same keys): local
// layers see the last `sliding_window` positions and rotate with base 10000, every sixth layer
// is global with the file's base; embeddings are scaled by sqrt(n_embd).
void ReadGemma3Keys(const GgufFile& f, ModelConfig* c) {
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

// Qwen3 (dense): per-head RMSNorm of q and k before RoPE, no biases.
void ReadQwen3Keys(const GgufFile&, ModelConfig* c) { c->qk_norm = true; }

constexpr Architecture kArchitectures[] = {
    {"llama", 1e-5, /*neox_rope=*/false, /*qkv_bias=*/false, nullptr},
    {"qwen2", 1e-6, /*neox_rope=*/true, /*qkv_bias=*/true, nullptr},
    {"gemma3", 1e-6, /*neox_rope=*/true, /*qkv_bias=*/false, ReadGemma3Keys},
    {"qwen3", 1e-6, /*neox_rope=*/true, /*qkv_bias=*/false, ReadQwen3Keys},
    // Phi-3 / Phi-3.5 / Phi-4-mini: fused attn_qkv and gate-up matrices, partial rotary where
    // rope.dimension_count says so, LongRoPE factors (model_load.cc reads both).
    {"phi3", 1e-5, /*neox_rope=*/true, /*qkv_bias=*/false, nullptr},
};

}  // namespace

const Architecture* FindArchitecture(std::string_view name) {
  for (const Architecture& a : kArchitectures) {
    if (a.name == name) return &a;
  }
  return nullptr;
}

std::string SupportedArchitectures() {
  std::string names;
  for (const Architecture& a : kArchitectures) {
    names += (names.empty() ? "" : ", ") + std::string(a.name);
  }
  return names;
}

}  // namespace specd
