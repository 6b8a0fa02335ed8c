// The forward pass over a model's weights: a batch of rows of any sequences through every
// layer, logits for the rows that want them, keys and values appended to the KV cache; with the
// scratch it reuses and the observers (profile, trace, input maxima) it reports to. Model
// (model.h) owns one and is its front.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/forward_observers.h"
#include "model/forward_scratch.h"
#include "model/layer_groups.h"
#include "model/model_config.h"
#include "model/model_weights.h"

namespace specd {

class ForwardPass {
 public:
  // Over `config` and `weights`, which must outlive it (the model holding all three).
  ForwardPass(const ModelConfig& config, ModelWeights& weights)
      : config_(config), weights_(weights) {}
  ForwardPass(const ForwardPass&) = delete;
  ForwardPass& operator=(const ForwardPass&) = delete;

  // Model::Forward: validates the whole batch first (on an Error the cache is unchanged), then
  // runs it.
  void Run(const KernelContext& ctx, const Batch& batch, KvCache& kv, AttentionMode attention,
           std::vector<float>* logits, const ForwardExtras& extras);
  // The first layer's input for each token (embedding row, LoRA rows, scale): out [n, n_embd].
  void EmbedTokens(std::span<const int32_t> tokens, float* out) const;
  void SetProfile(ForwardProfile* profile) { profile_ = profile; }
  void SetTrace(ForwardTrace* trace) { trace_ = trace; }
  void SetActivationMaxima(ActivationMaxima* maxima) { maxima_ = maxima; }

 private:
  void Validate(const Batch& batch, const KvCache& kv) const;
  // The head's logits rows [n_out, n_vocab] get the run-time LoRA of the output matrix (or, with
  // tied embeddings, of the embedding rows) for its input rows x [n_out, n_embd].
  void AddHeadLora(const KernelContext& ctx, const float* x, int64_t n_out, float* logits);
  // Records rows [m, n] of a matrix input into `max` (the attached maxima).
  static void RecordMax(const float* x, int64_t m, int64_t n, std::vector<float>* max);
  // Forward's stages over a batch of m rows. InputRows: the residual stream x [m, n_embd]
  // from the tokens (or the given rows) and the rows' rotary angles; PrepareAttentionRows: the
  // rows' attention setup in the attention scratch; RunLayers: every layer (fuzzy groups at once);
  // OutputLogits: the rows that want logits through the final norm and the head;
  // AdvanceCache: each sequence's KV length by its rows.
  void InputRows(const Batch& batch, const KvCache& kv, const float* input_rows);
  void PrepareAttentionRows(const Batch& batch, const KvCache& kv);
  void RunLayers(const KernelContext& ctx, const Batch& batch, KvCache& kv, AttentionMode attention,
                 const LayerGroups* fuzzy);
  void OutputLogits(const KernelContext& ctx, const Batch& batch, std::vector<float>* logits);
  static void AdvanceCache(const Batch& batch, KvCache& kv);
  // Parts of Forward over m rows. The attention block reads x ([m, n_embd]) and leaves its
  // output in s.out; s.rows holds the rows' attention setup.
  void AttentionBlock(const KernelContext& ctx, int il, const Batch& batch, KvCache& kv,
                      const float* x, AttentionScratch& s, AttentionMode attention,
                      ForwardProfile* profile);
  void FfnBlock(const KernelContext& ctx, int il, int64_t m);
  // A group's attention blocks, all reading x, at once over the pool's threads (one thread
  // each, round robin); then each layer's residual add and feed-forward block in order.
  void FuzzyGroup(const KernelContext& ctx, int first, int count, const Batch& batch, KvCache& kv,
                  AttentionMode attention);
  void TraceLayer(int il, const AttentionScratch& s, int64_t m);
  // ModelLoadOptions::head_context_tokens: the batch's tokens not in the head join it (their rows
  // copied from the full output matrix into the context head).
  void GrowHead(const KernelContext& ctx, const Batch& batch);
  // Logits of the rows [n_out, n_embd] for the joined tokens, written into their places.
  void ContextHeadLogits(const KernelContext& ctx, int64_t n_out, std::vector<float>* logits);
  // Fills the rows' KV indices and the attention rows' visibility (n_visible; a key mask for token
  // trees).
  void SetUpAttention(const Batch& batch, const KvCache& kv, AttentionRows* rows);

  const ModelConfig& config_;
  ModelWeights& weights_;
  ForwardScratch scratch_;
  ForwardProfile* profile_ = nullptr;
  ForwardTrace* trace_ = nullptr;
  ActivationMaxima* maxima_ = nullptr;
};

}  // namespace specd
