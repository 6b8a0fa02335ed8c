// How to load a model beyond what its file says: i8 conversion, LoRA, a restricted head.
#pragma once

#include <cstdint>
#include <vector>

#include "model/lora.h"

namespace specd {

// How a LoRA update reaches its matrix.
enum class LoraApply {
  // Merged where the matrix keeps its type (f32, f16, bf16, q8_0: no run-time cost), at run
  // time where merging would widen it (4- to 6-bit types would become q8_0, ~1.7x the bytes).
  kAuto,
  kMerge,    // merged into every matrix at load (--lora-merge)
  kRunTime,  // y = W x + s B (A x) for every matrix
};

// How to load a model, beyond what its file says.
struct ModelLoadOptions {
  // Convert every matrix (layers and output head) to i8 at load: int8 per output row with an f32
  // scale, activations quantized per row at run time (BASS's INT8). Files already in i8 stay so.
  bool int8_weights = false;
  // SmoothQuant (Xiao et al.) for i8: tokens to run through the model before converting it,
  // recording each matrix input's per-channel |max|; then per input channel
  // s = max|x|^alpha / max|w|^(1 - alpha) moves activation outliers into the weights.
  // Empty: no migration.
  std::vector<int32_t> calibration_tokens;
  float smooth_alpha = 0.5f;
  // LoRA adapters, in order, applied as `lora_apply` says.
  std::vector<LoraSpec> lora;
  LoraApply lora_apply = LoraApply::kAuto;
  // FR-Spec (Zhao et al. 2025) at load: the output layer keeps only these tokens' rows (a draft's
  // frequent tokens); the model's end-of-generation tokens are kept too. Every other token's
  // logit is -infinity, so a draft never proposes it. Empty: the file's head as it is.
  std::vector<int32_t> head_tokens;
  // With head_tokens: every token the model reads (prompts, accepted tokens) joins the head too,
  // at most this many beyond the listed ones. A name in the prompt (`(arr`) or one the target
  // just wrote (` pivot`) is what a frequency ranking misses and what a draft is asked to repeat.
  int head_context_tokens = 0;
};

}  // namespace specd
