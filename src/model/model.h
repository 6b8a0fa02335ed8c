// A Llama-family decoder (every architecture of model/architectures.cc: llama, qwen2, qwen3,
// gemma3, phi3) loaded from GGUF: its config, its weights (model_weights.h, made by the load in
// model_load.cc, model_i8.cc, model_lora.cc) and the pass over them (forward_pass.h), behind one
// front that the engine, the proposers and the benches use.
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
#include "model/forward_pass.h"
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
  void EmbedTokens(std::span<const int32_t> tokens, float* out) const {
    pass_.EmbedTokens(tokens, out);
  }
  // An EAGLE head's input projection, [n_embd, 2 n_embd]; nullptr for other models.
  const WeightView* eagle_fc() const { return config_.eagle ? &weights_.eagle_fc : nullptr; }
  // Attaches (or with nullptr detaches) a profile that later forwards add their times to.
  void SetProfile(ForwardProfile* profile) { pass_.SetProfile(profile); }
  // Attaches (or detaches) a trace that the next forwards fill with per-layer activations.
  void SetTrace(ForwardTrace* trace) { pass_.SetTrace(trace); }
  // Attaches (or detaches) maxima that the next forwards update (sized here on attach).
  void SetActivationMaxima(ActivationMaxima* maxima);
  // Calls fn(tensor name, matrix) for each i8 matrix (for writing an i8 GGUF).
  void ForEachI8Matrix(const std::function<void(const std::string&, const WeightView&)>& fn) const;

 private:
  Model() = default;
  Model(const Model&) = delete;  // the pass refers to the config and weights it holds
  Model& operator=(const Model&) = delete;
  // Converts every matrix to i8 (options.int8_weights), with SmoothQuant when it has
  // calibration tokens.
  void ConvertAllToI8(const KernelContext* ctx, const ModelLoadOptions& options);
  // Reads the adapters: each update is kept as a run-time term of the matrix it names or merged
  // into an owned copy, as `apply` says; token_embd updates are kept as rows unless merging is
  // asked for or they touch too many rows.
  void LoadLora(const std::vector<LoraSpec>& adapters, LoraApply apply);
  // Replaces each of *parts (matrices reading one input) by its i8 form, a copy the model owns;
  // with input maxima (else nullptr), one SmoothQuant migration shared by the parts.
  void ConvertToI8(const std::vector<WeightView*>& parts, const std::vector<float>* input_max,
                   float alpha, ThreadPool* pool);
  // Builds the AVX-512 layouts (and oneDNN's, for i8 where it may run) of every matrix.
  void PackWeights(const KernelContext& ctx);
  // Reads the hyper-parameters of config_.arch from the file's metadata.
  void ReadConfig(const GgufFile& f);
  // LayerWeights il's norms and matrices (fused Q/K/V and gate/up matrices split into views).
  static LayerWeights ReadLayer(const GgufFile& f, const ModelConfig& c, int il);
  // ModelLoadOptions::head_tokens: the output head becomes a copy of those rows.
  void RestrictHead(const std::string& path, std::vector<int32_t> tokens);
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  ModelWeights weights_;                 // what the file and the load options make of the matrices
  ForwardPass pass_{config_, weights_};  // the pass over them, with its scratch
  std::vector<std::pair<std::string, WeightView*>> i8_names_;  // i8 matrices by tensor name
};

}  // namespace specd
