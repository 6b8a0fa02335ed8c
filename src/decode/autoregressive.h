// Plain autoregressive decoding of n sequences of one prompt, batched: the prompt is encoded once
// and forked, then every step runs one forward over one row per unfinished sequence.
#pragma once

#include "decode/generation.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace specd {

// `kv` must have at least request.n_sequences free slots; they are released on return.
GenerateResult GenerateAutoregressive(Model& model, const KernelContext& ctx, KvCache& kv,
                                      const GenerateRequest& request);

}  // namespace specd
