// The buffers a model's forward pass reuses across calls (grown as batches need them).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/aligned_buffer.h"
#include "kernels/kernels.h"
#include "model/lora.h"
#include "threading/thread_pool.h"

namespace specd {

// Buffers of one attention block; one per concurrently running layer in fuzzy forwards.
struct AttentionScratch {
  AlignedBuffer<float> xb, q, k, v, att, stacked;
  AlignedBuffer<float> out;  // [m, n_embd] the block's output, before the residual add
  MatmulScratch matmul;
  LowRankScratch lora;
  AttentionRows rows;
};

struct ForwardScratch {
  AlignedBuffer<float> x, xb, gate, up, ffn, out_rows;
  AttentionScratch attn;                                 // sequential layers
  std::vector<std::unique_ptr<AttentionScratch>> lanes;  // a group's layers
  std::vector<std::unique_ptr<ThreadPool>> lane_pools;   // one-thread pools, one per thread
  AlignedBuffer<float> head_logits;                      // [n_out, head_tokens.size()]
  AlignedBuffer<float> rope_cos, rope_sin;               // [m, rotary_dim / 2]
  AlignedBuffer<float> rope_local_cos, rope_local_sin;   // the same for local layers
  std::vector<int32_t> window_first;                     // [m] first key of local layers
  std::vector<int32_t> kv_index;                         // [m] where each row's K / V go
  AlignedBuffer<float> stacked;  // [m, 2 n_ff] from the stacked gate / up matmul
  MatmulScratch matmul_scratch;
  LowRankScratch lora_scratch;  // run-time LoRA terms of the head and the FFN
};

}  // namespace specd
