// What a forward pass can report beyond its logits, for benchmarks and calibration: times by
// kind of work, per-layer activations, input maxima; and its optional inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layer_groups.h"

namespace specd {

// Wall time of a forward pass by kind of work, summed over calls while attached to a model
// (Model::SetProfile). For benchmarks; the forward pass does no timing when none is attached.
struct ForwardProfile {
  enum Op {
    kEmbed,
    kNorm,
    kQkv,
    kRopeKvWrite,
    kAttention,
    kAttnOut,
    kGateUp,
    kDown,
    kResidual,
    kLogits,
    kParallelAttention,  // a layer group's attention blocks, run at once (fuzzy forwards)
    kCount
  };
  static const char* Name(int op);
  double ms[kCount] = {};
  int64_t n_forwards = 0;
};

// Per-layer activations of the last forward, for comparing fuzzy and exact forwards (EasySpec's
// table 4). Each entry is [n_rows, width] of the named quantity.
struct ForwardTrace {
  std::vector<std::vector<float>> hidden;      // [n_layer] the residual stream entering the layer
  std::vector<std::vector<float>> attn_input;  // [n_layer] what the attention block read
  std::vector<std::vector<float>> q, k, v;     // [n_layer] after bias and RoPE
};

// Optional inputs and outputs of a forward pass.
struct ForwardExtras {
  // The layers of each group run layer-parallel (see LayerGroups): an approximation for
  // drafting, whose keys / values differ from the exact forward's.
  const LayerGroups* fuzzy = nullptr;
  // [m, n_embd] the first layer's input rows, instead of the tokens' embeddings (an EAGLE head's
  // rows); the batch's tokens still name the rows.
  const float* input_rows = nullptr;
  // Receives [m, n_embd]: the final normed hidden state of every row (what the output matrix
  // reads), for proposers that draft from the target's features.
  std::vector<float>* hidden = nullptr;
};

// Per input channel max |x| of every matrix input, over the rows of the forwards it watched.
struct ActivationMaxima {
  std::vector<std::vector<float>> qkv_in;      // [n_layer][n_embd]
  std::vector<std::vector<float>> wo_in;       // [n_layer][n_head * head_dim]
  std::vector<std::vector<float>> gate_up_in;  // [n_layer][n_embd]
  std::vector<std::vector<float>> down_in;     // [n_layer][n_ff]
  std::vector<float> output_in;                // [n_embd]
};

}  // namespace specd
