// Moving cached keys to other positions (llama-server's --cache-reuse): a key is stored rotated
// by its position (RoPE), so a chunk of the cache reused d positions earlier or later has its
// keys rotated by d more. Values carry no position and move as they are.
#pragma once

#include "kv/kv_cache.h"
#include "model/model.h"

namespace specd {

// Rotates the keys of positions [first, first + n) of sequence `seq`, in every layer, by
// `delta` positions (each layer with its own RoPE: Gemma 3's local layers have another base).
// f32 caches lose only rounding; f16 ones round again to f16.
void ShiftKeyPositions(const ModelConfig& config, KvCache& kv, int seq, int first, int n,
                       int delta);

}  // namespace specd
