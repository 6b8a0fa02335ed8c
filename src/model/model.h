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
#include "model/layer_groups.h"
#include "model/lora.h"
#include "threading/thread_pool.h"

namespace specd {

// The feed-forward activation: SwiGLU (llama, qwen2) or GeGLU with tanh GELU (gemma3).
enum class FfnActivation { kSilu, kGeluTanh };

struct ModelConfig {
  std::string arch;  // general.architecture (model/architectures.h lists them)
  std::string name;
  int64_t n_vocab = 0;
  int n_embd = 0;
  int n_layer = 0;
  int n_head = 0;
  int n_head_kv = 0;
  int head_dim = 0;
  int n_ff = 0;
  int n_ctx_train = 0;
  float rms_eps = 1e-5f;
  RopeConfig rope;
  bool qkv_bias = false;
  bool tied_embeddings = false;
  // Gemma 3: embeddings scaled by sqrt(n_embd), per-head RMSNorm of q and k, RMSNorms after the
  // attention and FFN blocks, GeGLU, and local sliding-window layers with their own RoPE base
  // (every layer but each swa_pattern-th).
  float embd_scale = 1.0f;
  bool qk_norm = false;
  bool post_norms = false;
  FfnActivation activation = FfnActivation::kSilu;
  float attn_scale = 0.0f;  // query scale (1 / sqrt(head_dim) unless the model says otherwise)
  int sliding_window = 0;   // keys a local layer's query sees, itself included; 0: none
  int swa_pattern = 0;      // layer il is global iff (il + 1) % swa_pattern == 0
  RopeConfig rope_local;    // RoPE of the local layers
  // LongRoPE (phi3): `rope` holds the short factors; beyond rope_original_ctx positions per
  // sequence the long ones (rope_long) apply, as llama.cpp chooses by the context's size.
  RopeConfig rope_long;
  int rope_original_ctx = 0;
  // The RoPE of the global layers for a KV cache of n_ctx positions per sequence.
  const RopeConfig& GlobalRope(int n_ctx) const {
    return !rope_long.freq_factors.empty() && n_ctx > rope_original_ctx ? rope_long : rope;
  }

  int32_t bos_token = -1;
  int32_t eos_token = -1;
  // Tokens that end generation like EOS, sorted: EOS, the end-of-turn id, and the vocabulary's
  // tokens that llama.cpp treats so by their text (<|endoftext|>, <|im_end|>, <end_of_turn>,
  // <|eot_id|>, Qwen's <|fim_pad|>, <|repo_name|> and <|file_sep|> ...), so that a code model
  // stops at the end of a file as it does under llama.cpp.
  std::vector<int32_t> end_of_generation;
  bool IsEndOfGeneration(int32_t token) const;
  // FR-Spec draft head (`specd.head_tokens`): the output matrix has a row for these token ids
  // only; every other token's logit is -infinity. Empty: the whole vocabulary.
  std::vector<int32_t> head_tokens;
  // A restricted input embedding (`specd.input_tokens`): token -> its row of token_embd.weight,
  // tokens that were not listed sharing the last row. Empty: row = token.
  std::vector<int32_t> input_rows;
  int64_t n_input_rows() const {
    return input_rows.empty() ? n_vocab
                              : *std::max_element(input_rows.begin(), input_rows.end()) + 1;
  }
  // An EAGLE draft head (`specd.eagle`, made by `specd train eagle`): the file has no token
  // embedding. Row i's input is eagle.fc [n_embd, 2 n_embd] times [the target's embedding of
  // token i+1; the target's final normed hidden state at position i], and its own final normed
  // hidden state predicts the target's at position i+1 (Li et al., EAGLE).
  bool eagle = false;

  int kv_dim() const { return n_head_kv * head_dim; }
  bool IsLocalLayer(int il) const {
    return sliding_window > 0 && swa_pattern > 0 && (il + 1) % swa_pattern != 0;
  }
};

// Rows of one forward pass, struct-of-arrays. Rows of one sequence must be contiguous; row j of a
// sequence writes its keys / values at KV index (the sequence's KV length + j). A row follows
// the previous row of its sequence (a chain: position one more, seeing every earlier row), or,
// in a token tree, names its parent row: its position is the parent's + 1 and it sees the
// sequence's committed keys, its ancestors and itself only.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> positions;
  std::vector<int32_t> seq_ids;
  std::vector<uint8_t> output;   // 1: return logits for this row
  std::vector<int32_t> parents;  // batch row of each row's parent, -1: the previous row (a
                                 // chain), kCommittedParent; empty: every row is a chain row

  void Add(int32_t token, int32_t position, int32_t seq_id, bool want_logits) {
    tokens.push_back(token);
    positions.push_back(position);
    seq_ids.push_back(seq_id);
    output.push_back(want_logits ? 1 : 0);
    if (!parents.empty()) parents.push_back(-1);
  }
  // A token-tree node whose parent is batch row `parent` (of the same sequence, earlier), or
  // kCommittedParent: a child of the sequence's last committed token (the root of a tree whose
  // root is already in the cache), seeing the committed keys and itself only.
  static constexpr int32_t kCommittedParent = -2;
  void AddNode(int32_t token, int32_t position, int32_t seq_id, bool want_logits, int32_t parent) {
    if (parents.empty()) parents.assign(tokens.size(), -1);
    tokens.push_back(token);
    positions.push_back(position);
    seq_ids.push_back(seq_id);
    output.push_back(want_logits ? 1 : 0);
    parents.push_back(parent);
  }
  void Clear() {
    tokens.clear();
    positions.clear();
    seq_ids.clear();
    output.clear();
    parents.clear();
  }
  int64_t size() const { return static_cast<int64_t>(tokens.size()); }
  int64_t n_outputs() const;
};

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

// Per input channel max |x| of every matrix input, over the rows of the forwards it watched.
struct ActivationMaxima {
  std::vector<std::vector<float>> qkv_in;      // [n_layer][n_embd]
  std::vector<std::vector<float>> wo_in;       // [n_layer][n_head * head_dim]
  std::vector<std::vector<float>> gate_up_in;  // [n_layer][n_embd]
  std::vector<std::vector<float>> down_in;     // [n_layer][n_ff]
  std::vector<float> output_in;                // [n_embd]
};

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
  DType MatrixType() const { return layers_.front().wq.type; }

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
  const WeightView* eagle_fc() const { return config_.eagle ? &eagle_fc_ : nullptr; }
  // Attaches (or with nullptr detaches) a profile that later forwards add their times to.
  void SetProfile(ForwardProfile* profile) { profile_ = profile; }
  // Attaches (or detaches) a trace that the next forwards fill with per-layer activations.
  void SetTrace(ForwardTrace* trace) { trace_ = trace; }
  // Attaches (or detaches) maxima that the next forwards update (sized here on attach).
  void SetActivationMaxima(ActivationMaxima* maxima);
  // Calls fn(tensor name, matrix) for each i8 matrix (for writing an i8 GGUF).
  void ForEachI8Matrix(const std::function<void(const std::string&, const WeightView&)>& fn) const;

 private:
  // A layer matrix's run-time LoRA terms, by matrix.
  enum LoraSlot { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kLoraSlots };
  struct Layer {
    std::vector<float> attn_norm, ffn_norm;            // [n_embd]
    std::vector<float> post_attn_norm, post_ffn_norm;  // [n_embd], gemma3 only
    std::vector<float> q_norm, k_norm;                 // [head_dim], gemma3 only
    WeightView wq, wk, wv, wo, w_gate, w_up, w_down;
    // Stacked packed forms (AVX-512 only): [q; k; v] and [gate; up], or .packed == nullptr.
    WeightView wqkv, w_gate_up;
    std::vector<float> bq, bk, bv;                          // qwen2 only
    std::array<std::vector<LowRankTerm>, kLoraSlots> lora;  // run-time LoRA, or empty
  };
  // Buffers of one attention block; one per concurrently running layer in fuzzy forwards.
  struct AttentionScratch {
    AlignedBuffer<float> xb, q, k, v, att, stacked;
    AlignedBuffer<float> out;  // [m, n_embd] the block's output, before the residual add
    MatmulScratch matmul;
    LowRankScratch lora;
    AttentionRows rows;
  };
  // An i8 matrix made at load (ModelLoadOptions::int8_weights).
  struct I8Matrix {
    std::vector<int8_t> values;  // [rows, cols]
    std::vector<float> scales;   // [rows]
    std::vector<float> smooth;   // [cols] SmoothQuant's activation multipliers, or empty
  };
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
  // Layer il's norms and matrices (fused Q/K/V and gate/up matrices split into views).
  static Layer ReadLayer(const GgufFile& f, const ModelConfig& c, int il);
  // Forward's stages over a batch of m rows. InputRows: the residual stream x_ [m, n_embd]
  // from the tokens (or the given rows) and the rows' rotary angles; PrepareAttentionRows: the
  // rows' attention setup in attn_.rows; RunLayers: every layer (fuzzy groups at once);
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
  // A group's attention blocks, all reading x_, at once over the pool's threads (one thread
  // each, round robin); then each layer's residual add and feed-forward block in order.
  void FuzzyGroup(const KernelContext& ctx, int first, int count, const Batch& batch, KvCache& kv,
                  AttentionMode attention);
  void TraceLayer(int il, const AttentionScratch& s, int64_t m);
  // ModelLoadOptions::head_tokens: output_ becomes a copy of those rows.
  void RestrictHead(const std::string& path, std::vector<int32_t> tokens);
  // ModelLoadOptions::head_context_tokens: the batch's tokens not in the head join it (their rows
  // copied from the full output matrix into context_head_).
  void GrowHead(const KernelContext& ctx, const Batch& batch);
  // Logits of the rows [n_out, n_embd] for the joined tokens, written into their places.
  void ContextHeadLogits(const KernelContext& ctx, int64_t n_out, std::vector<float>* logits);
  // Fills kv_index_ and the attention rows' visibility (n_visible; a key mask for token trees).
  void SetUpAttention(const Batch& batch, const KvCache& kv, AttentionRows* rows);

  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  WeightView token_embd_;  // [n_input_rows, n_embd]
  WeightView output_;      // [n_vocab or head_tokens.size(), n_embd]
  WeightView eagle_fc_;    // [n_embd, 2 n_embd], EAGLE heads only
  std::vector<float> output_norm_;
  std::vector<Layer> layers_;
  std::vector<std::unique_ptr<PackedInt8Weights>> packed_;          // owned fast layouts
  std::vector<std::unique_ptr<I8Matrix>> i8_matrices_;              // owned i8 conversions
  std::vector<std::unique_ptr<std::vector<uint8_t>>> lora_merged_;  // owned merged matrices
  std::vector<uint8_t> restricted_head_;       // [head_tokens.size(), row bytes]: RestrictHead
  std::vector<float> restricted_head_scales_;  // [head_tokens.size()] an i8 file's row scales
  // The tokens a restricted head took on from the context (GrowHead), and their rows.
  struct ContextHead {
    int max_tokens = 0;                         // 0: the head does not grow
    WeightView full_output;                     // [n_vocab, n_embd] in the file
    std::vector<char> in_head;                  // [n_vocab]
    std::vector<int32_t> tokens;                // joined, in order
    std::vector<uint8_t> rows;                  // [tokens.size(), row bytes]
    std::unique_ptr<PackedInt8Weights> packed;  // of rows, remade when tokens join
    WeightView view;                            // [tokens.size(), n_embd]
    AlignedBuffer<float> logits;                // [n_out, tokens.size()]
  } context_head_;
  std::vector<std::unique_ptr<GgufFile>> adapters_;  // for FindMetadata
  std::vector<LowRankTerm> output_lora_;             // run-time LoRA of an untied output matrix
  EmbeddingDelta embedding_lora_;                    // run-time LoRA rows of token_embd
  LowRankScratch lora_scratch_;

  // Scratch reused across calls.
  AlignedBuffer<float> x_, xb_, gate_, up_, ffn_, out_rows_;
  AttentionScratch attn_;                                 // sequential layers
  std::vector<std::unique_ptr<AttentionScratch>> lanes_;  // a group's layers
  std::vector<std::unique_ptr<ThreadPool>> lane_pools_;   // one-thread pools, one per thread
  AlignedBuffer<float> head_logits_;                      // [n_out, head_tokens.size()]
  AlignedBuffer<float> rope_cos_, rope_sin_;              // [m, rotary_dim / 2]
  AlignedBuffer<float> rope_local_cos_, rope_local_sin_;  // the same for local layers
  std::vector<int32_t> window_first_;                     // [m] first key of local layers
  std::vector<int32_t> kv_index_;                         // [m] where each row's K / V go
  AlignedBuffer<float> stacked_;  // [m, 2 n_ff] from the stacked gate / up matmul
  MatmulScratch matmul_scratch_;
  ForwardProfile* profile_ = nullptr;
  ForwardTrace* trace_ = nullptr;
  ActivationMaxima* maxima_ = nullptr;
  std::vector<std::pair<std::string, WeightView*>> i8_names_;  // i8 matrices by tensor name
};

}  // namespace specd
