// A Llama-family decoder (every architecture of model/architectures.cc: llama, qwen2, qwen3,
// gemma3, phi3) loaded from GGUF, and its forward pass over a ragged batch: rows of many
// sequences, each row with its own sequence and position.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kv/kv_cache.h"
#include "model/batch.h"
#include "model/forward_observers.h"
#include "model/forward_scratch.h"
#include "model/layer_groups.h"
#include "model/load_options.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "model/model_weights.h"
#include "threading/thread_pool.h"

namespace specd {

class Model {
 public:
  // Loads and validates a model; the GGUF stays mapped for the model's lifetime. With a context
  // whose CPU has AVX-512, q8_0 / q4_0 matrices are re-laid for the fast kernel (a copy in RAM).
  static std::unique_ptr<Model> Load(const std::string& path, const KernelContext* ctx = nullptr,
                                     const ModelLoadOptions& options = {});
  static std::unique_ptr<Model> FromGguf(std::unique_ptr<GgufFile> file,
                                         const KernelContext* ctx = nullptr,
                                         const ModelLoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const GgufFile& gguf() const { return *file_; }
  // A metadata key of the merged LoRA adapters (the last one first) or else of the model file:
  // an adapter may say what its fine-tune is for (specd.sdsat.*). nullptr when none has it.
  const GgufValue* FindMetadata(const std::string& key) const;
  // Bytes of weights read by one decode step (all matrices plus one embedding row).
  int64_t WeightBytesPerToken() const;
  // Multiply-accumulates of the matrices (layers and output head) for one row.
  int64_t MatmulMacsPerToken() const;
  int64_t NumParameters() const;
  // Type of the layer matrices (the first layer's attention query).
  DType MatrixType() const { return weights_.layers.front().wq.type; }

  // A KV cache shaped for this model.
  std::unique_ptr<KvCache> NewKvCache(const KvCacheConfig& config) const;
  // Runs `rows` throwaway rows through the model on a scratch KV cache: the first forwards of
  // a process are slow (threads starting, weights and code not yet in the caches, scratch
  // buffers growing), and timing-driven decisions (the cost-aware draft length) should not be
  // made on them.
  void WarmUp(const KernelContext& ctx, int rows = 4);

  // Runs the batch, appending its keys/values to `kv` and writing logits of the flagged rows, in
  // row order, to `logits` ([n_outputs, n_vocab]). Validates the whole batch first: on an Error,
  // the cache is unchanged.
  // With `fuzzy` (non-empty), the layers of each group run layer-parallel (see LayerGroups):
  // an approximation for drafting, whose keys / values differ from the exact forward's.
  void Forward(const KernelContext& ctx, const Batch& batch, KvCache& kv, AttentionMode attention,
               std::vector<float>* logits, const LayerGroups* fuzzy = nullptr);
  void Forward(const KernelContext& ctx, const Batch& batch, KvCache& kv, AttentionMode attention,
               std::vector<float>* logits, const ForwardExtras& extras);
  // The first layer's input for each token (embedding row, LoRA rows, scale): out [n, n_embd].
  void EmbedTokens(std::span<const int32_t> tokens, float* out) const;
  // An EAGLE head's input projection, [n_embd, 2 n_embd]; nullptr for other models.
  const WeightView* eagle_fc() const { return config_.eagle ? &weights_.eagle_fc : nullptr; }
  // Attaches (or with nullptr detaches) a profile that later forwards add their times to.
  void SetProfile(ForwardProfile* profile) { profile_ = profile; }
  // Attaches (or detaches) a trace that the next forwards fill with per-layer activations.
  void SetTrace(ForwardTrace* trace) { trace_ = trace; }
  // Attaches (or detaches) maxima that the next forwards update (sized here on attach).
  void SetActivationMaxima(ActivationMaxima* maxima);
  // Calls fn(tensor name, matrix) for each i8 matrix (for writing an i8 GGUF).
  void ForEachI8Matrix(const std::function<void(const std::string&, const WeightView&)>& fn) const;

 private:
  Model() = default;
  // Converts every matrix to i8 (options.int8_weights), with SmoothQuant when it has
  // calibration tokens.
  void ConvertAllToI8(const KernelContext* ctx, const ModelLoadOptions& options);
  // Reads the adapters: each update is kept as a run-time term of the matrix it names or merged
  // into an owned copy, as `apply` says; token_embd updates are kept as rows unless merging is
  // asked for or they touch too many rows.
  void LoadLora(const std::vector<LoraSpec>& adapters, LoraApply apply);
  // The head's logits rows [n_out, n_vocab] get the run-time LoRA of the output matrix (or, with
  // tied embeddings, of the embedding rows) for its input rows x [n_out, n_embd].
  void AddHeadLora(const KernelContext& ctx, const float* x, int64_t n_out, float* logits);
  // Replaces each of *parts (matrices reading one input) by its i8 form, a copy the model owns;
  // with input maxima (else nullptr), one SmoothQuant migration shared by the parts.
  void ConvertToI8(const std::vector<WeightView*>& parts, const std::vector<float>* input_max,
                   float alpha, ThreadPool* pool);
  // Records rows [m, n] of a matrix input into maxima_ (when attached).
  static void RecordMax(const float* x, int64_t m, int64_t n, std::vector<float>* max);
  // Builds the AVX-512 layouts (and oneDNN's, for i8 where it may run) of every matrix.
  void PackWeights(const KernelContext& ctx);
  void Validate(const Batch& batch, const KvCache& kv) const;
  // Reads the hyper-parameters of config_.arch from the file's metadata.
  void ReadConfig(const GgufFile& f);
  // LayerWeights il's norms and matrices (fused Q/K/V and gate/up matrices split into views).
  static LayerWeights ReadLayer(const GgufFile& f, const ModelConfig& c, int il);
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
  // ModelLoadOptions::head_tokens: the output head becomes a copy of those rows.
  void RestrictHead(const std::string& path, std::vector<int32_t> tokens);
  // ModelLoadOptions::head_context_tokens: the batch's tokens not in the head join it (their rows
  // copied from the full output matrix into the context head).
  void GrowHead(const KernelContext& ctx, const Batch& batch);
  // Logits of the rows [n_out, n_embd] for the joined tokens, written into their places.
  void ContextHeadLogits(const KernelContext& ctx, int64_t n_out, std::vector<float>* logits);
  // Fills the rows' KV indices and the attention rows' visibility (n_visible; a key mask for token
  // trees).
  void SetUpAttention(const Batch& batch, const KvCache& kv, AttentionRows* rows);

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;    // what the file and the load options make of the matrices
  ForwardScratch scratch_;  // buffers reused across forward passes
  ForwardProfile* profile_ = nullptr;
  ForwardTrace* trace_ = nullptr;
  ActivationMaxima* maxima_ = nullptr;
  std::vector<std::pair<std::string, WeightView*>> i8_names_;  // i8 matrices by tensor name
};

}  // namespace specd
