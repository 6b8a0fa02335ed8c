// The architectures specd runs, each as what it changes in ModelConfig beyond the hyper-parameters
// every llama-family file has (model_config.cc reads those). The forward pass follows the
// config's fields, so adding an architecture is an entry here (and, where its blocks differ, the
// fields that say how, read in its own function).
#pragma once

#include <string>
#include <string_view>

#include "gguf/gguf.h"
#include "model/model.h"

namespace specd {

struct Architecture {
  std::string_view name;  // general.architecture
  double default_rms_eps;
  // Rotary pairs (i, i + d/2) as GPT-NeoX; llama's GGUF weights are permuted at conversion for
  // interleaved pairs (i, i + 1).
  bool neox_rope;
  bool qkv_bias;  // attn_q / attn_k / attn_v have biases
  // Reads the architecture's own keys into the config (nullptr: none).
  void (*read_own_keys)(const GgufFile& f, ModelConfig* c);
};

// nullptr for an architecture specd does not run.
const Architecture* FindArchitecture(std::string_view name);
// "llama, qwen2, gemma3": for errors.
std::string SupportedArchitectures();

}  // namespace specd
