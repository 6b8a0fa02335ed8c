// The one place where an engine is put together, for every edge (`specd generate`, `specd
// serve`, the benches): the edges parse their flags into a typed EngineConfig once, then
//   LoadModels   starts the thread pool, loads the target, the draft (checked against the
//                target) and the tokenizer, and warms the models up;
//   BuildEngine  resolves the speculation config (defaults, validation), makes the draft-length
//                policy and the proposer, sizes the KV caches from their own maxima (the longest
//                draft, the rider rows), and starts the engine.
// Two steps because an edge may need the tokenizer (the prompt's length) to choose the context.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "draft/draft_model_proposer.h"
#include "draft/proposer.h"
#include "draft/sdsat_proposer.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_options.h"
#include "engine/speculation_config.h"
#include "grammar/grammar.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "policy/draft_length.h"
#include "tensor/dtype.h"
#include "threading/thread_pool.h"
#include "tokenizer/tokenizer.h"

namespace specd {

struct EngineConfig {
  std::string model_path;
  WeightOptions weights;
  int threads = 2;
  SpeculationConfig speculation;  // resolved by BuildEngine (ResolveSpeculation)

  int n_slots = 1;  // sequences decoded at once
  int n_ctx = 0;    // positions per sequence (0: the model's training context, at most 4096)
  DType kv_type = DType::kF16;
  AttentionMode attention = AttentionMode::kSplit;
  int max_prefill_rows = 2048;  // prompt rows per step
};

// The models of a run and what they run on. Owns the thread pool the context points to.
struct LoadedModels {
  explicit LoadedModels(const EngineConfig& config);
  LoadedModels(const LoadedModels&) = delete;
  LoadedModels& operator=(const LoadedModels&) = delete;

  ThreadPool pool;
  KernelContext ctx;
  std::unique_ptr<Model> target;
  std::unique_ptr<Model> draft;          // with a draft-model proposer
  std::unique_ptr<Tokenizer> tokenizer;  // null for a model without tokenizer metadata

  // Structured output's compiler over the target's vocabulary, built on first use (a pass over
  // the vocabulary); throws an Error for a model without a tokenizer. Safe from several threads.
  GrammarCompiler& grammar();

 private:
  std::once_flag grammar_once_;
  std::unique_ptr<GrammarCompiler> grammar_;
};

// Loads (and warms up) what `config` names; throws an Error for a missing or mismatched file.
std::unique_ptr<LoadedModels> LoadModels(const EngineConfig& config);

// An engine and what it runs on: KV caches, proposer, policy. Owned together, destroyed in order.
class EngineStack {
 public:
  ~EngineStack();
  Engine& engine() { return *engine_; }
  KvCache& kv() { return *kv_; }
  int n_ctx() const { return n_ctx_; }
  bool speculative() const { return policy_ != nullptr; }
  const DraftLengthPolicy* policy() const { return policy_.get(); }
  // The resolved speculation settings (every default filled in).
  const SpeculationConfig& speculation() const { return speculation_; }

 private:
  friend std::unique_ptr<EngineStack> BuildEngine(LoadedModels& models, const EngineConfig& config);
  EngineStack() = default;

  int n_ctx_ = 0;
  SpeculationConfig speculation_;
  std::unique_ptr<KvCache> kv_;
  std::unique_ptr<KvCache> draft_kv_;
  std::unique_ptr<Proposer> lookup_;  // prompt lookup (alone or first)
  std::unique_ptr<Proposer> model_proposer_;
  std::unique_ptr<Proposer> combined_;  // lookup, then the model
  std::unique_ptr<DraftLengthPolicy> policy_;
  std::unique_ptr<Engine> engine_;
};

// The last step of every engine's construction, shared by BuildEngine and the Generate* helpers
// of engine/generate.h (the seam through which tests and benches run engines over models,
// caches and proposers of their own): the draft-length policy a resolved config asks for (none
// without a proposer) and the engine over them.
struct EngineCore {
  std::unique_ptr<DraftLengthPolicy> policy;
  std::unique_ptr<Engine> engine;
};
EngineCore StartEngine(Model& target, KvCache& kv, const KernelContext& ctx,
                       const SpeculationConfig& resolved, StepOptions step, Proposer* proposer);

// The context `config` gets on `model`: config.n_ctx, or the model's training context (at most
// max(4096, wanted) positions).
int ContextFor(const EngineConfig& config, const Model& model, int64_t wanted = 0);

// Builds the engine over `models` (which must outlive it), config.n_ctx positions per sequence
// (0: ContextFor(config, target)).
std::unique_ptr<EngineStack> BuildEngine(LoadedModels& models, const EngineConfig& config);

}  // namespace specd
