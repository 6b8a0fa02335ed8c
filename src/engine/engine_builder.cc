#include "engine/engine_builder.h"

#include <algorithm>

#include "base/error.h"
#include "draft/combined_proposer.h"
#include "draft/eagle_proposer.h"
#include "draft/ngram_proposer.h"
#include "engine/draft_vocab.h"
#include "engine/model_options.h"

namespace specd {

LoadedModels::LoadedModels(const EngineConfig& config) : pool(config.threads) {
  ctx.pool = &pool;
  ctx.cpu = CpuFeatures::Detect();
  ctx.int8_backend = Int8BackendFor(config.weights, ctx.cpu);
  ctx.packed_chooser = std::make_shared<PackedKernelChooser>();
}

GrammarCompiler& LoadedModels::grammar() {
  SPECD_CHECK(tokenizer != nullptr, "structured output needs the model's tokenizer, and ",
              "this model has no tokenizer metadata");
  std::call_once(grammar_once_, [this] {
    grammar_ = std::make_unique<GrammarCompiler>(*tokenizer, target->config().n_vocab,
                                                 target->config().end_of_generation, pool.size());
  });
  return *grammar_;
}

std::unique_ptr<LoadedModels> LoadModels(const EngineConfig& config) {
  auto m = std::make_unique<LoadedModels>(config);
  m->target = Model::Load(config.model_path, &m->ctx,
                          LoadOptionsForModel(config.weights, config.model_path));
  const DraftModelConfig& draft = config.speculation.draft;
  if (UsesDraftModel(config.speculation.proposer)) {
    SPECD_CHECK(!draft.path.empty(), "speculation with a draft model needs its file");
    ModelLoadOptions options = LoadOptionsForModel(config.weights, draft.path, ModelRole::kDraft);
    const DraftVocab vocab = DraftVocabFor(draft);
    options.head_tokens = vocab.head_tokens;
    options.head_context_tokens = SpeculationDefaults::kDraftContextTokens;
    m->draft = Model::Load(draft.path, &m->ctx, options);
    SPECD_CHECK(vocab.head_tokens.empty() || vocab.n_vocab == m->draft->config().n_vocab,
                draft.vocab_ranking, " ranks a vocabulary of ", vocab.n_vocab, " tokens, ",
                draft.path, " has ", m->draft->config().n_vocab);
    CheckDraftCompatible(*m->target, *m->draft);
  }
  if (m->target->gguf().Find("tokenizer.ggml.model") != nullptr) {
    m->tokenizer = Tokenizer::FromGguf(m->target->gguf());
    SPECD_CHECK(m->tokenizer->n_vocab() == m->target->config().n_vocab, config.model_path,
                ": the tokenizer has ", m->tokenizer->n_vocab(), " tokens but the model ",
                m->target->config().n_vocab);
  }
  // Cold first forwards would be timed by the cost-aware draft length (and by the user).
  m->target->WarmUp(m->ctx);
  if (m->draft != nullptr) m->draft->WarmUp(m->ctx);
  return m;
}

int ContextFor(const EngineConfig& config, const Model& model, int64_t wanted) {
  if (config.n_ctx > 0) return config.n_ctx;
  constexpr int64_t kDefaultCtx = 4096;
  return static_cast<int>(
      std::min<int64_t>(model.config().n_ctx_train, std::max(kDefaultCtx, wanted)));
}

EngineStack::~EngineStack() = default;

namespace {

// The proposer `config` asks for: prompt lookup, a model proposer (a draft model, an EAGLE head or
// SDSAT's), or both combined.
void MakeProposers(LoadedModels& models, const SpeculationConfig& config, AttentionMode attention,
                   KvCache* draft_kv, std::unique_ptr<Proposer>* lookup,
                   std::unique_ptr<Proposer>* model_proposer, std::unique_ptr<Proposer>* combined) {
  const Model& target = *models.target;
  switch (config.proposer) {
    case ProposerKind::kNone:
      return;
    case ProposerKind::kSdsat: {
      SdsatOptions sdsat =
          SdsatOptionsForModel(target, config.sdsat.n_adaptive, config.sdsat.adaptive_token);
      sdsat.merge = config.sdsat.merge;
      sdsat.tree_nodes = config.sdsat.tree_nodes;
      sdsat.tree_width = config.sdsat.tree_width;
      *model_proposer = std::make_unique<SdsatProposer>(sdsat);
      return;
    }
    case ProposerKind::kNgram:
    case ProposerKind::kDraftModel:
    case ProposerKind::kNgramOrDraft:
      break;
  }
  if (config.proposer != ProposerKind::kDraftModel) {
    *lookup = std::make_unique<NgramProposer>(config.ngram_min, config.ngram_max,
                                              target.config().n_vocab);
  }
  if (UsesDraftModel(config.proposer)) {
    *model_proposer = MakeModelProposer(target, *models.draft, *draft_kv, models.ctx, attention,
                                        DraftModelOptionsFor(config.draft, *models.draft));
  }
  if (*lookup && *model_proposer) {
    *combined = std::make_unique<CombinedProposer>(**lookup, **model_proposer);
  }
}

}  // namespace

std::unique_ptr<EngineStack> BuildEngine(LoadedModels& models, const EngineConfig& config) {
  std::unique_ptr<EngineStack> s(new EngineStack());
  Model& target = *models.target;
  s->n_ctx_ = ContextFor(config, target);
  s->speculation_ = ResolveSpeculation(config.speculation);
  const bool speculative = s->speculation_.speculative();
  const int longest_draft = speculative ? LongestDraft(s->speculation_) : 0;
  if (models.draft != nullptr) {
    s->draft_kv_ =
        models.draft->NewKvCache({config.n_slots, s->n_ctx_ + longest_draft + 1, config.kv_type});
  }
  MakeProposers(models, s->speculation_, config.attention, s->draft_kv_.get(), &s->lookup_,
                &s->model_proposer_, &s->combined_);
  Proposer* proposer = s->combined_ ? s->combined_.get()
                       : s->lookup_ ? s->lookup_.get()
                                    : s->model_proposer_.get();
  // Room past the context for a step's drafts, the proposer's rider rows and the bonus token.
  const RiderRows* riders = speculative ? proposer->rider_rows() : nullptr;
  const int room =
      speculative ? longest_draft + (riders != nullptr ? riders->max_rider_tokens() : 0) + 1 : 0;
  s->kv_ = target.NewKvCache({config.n_slots, s->n_ctx_ + room, config.kv_type});
  StepOptions step;
  step.attention = config.attention;
  step.max_prefill_rows = config.max_prefill_rows;
  EngineCore core = StartEngine(target, *s->kv_, models.ctx, s->speculation_, step, proposer);
  s->policy_ = std::move(core.policy);
  s->engine_ = std::move(core.engine);
  return s;
}

EngineCore StartEngine(Model& target, KvCache& kv, const KernelContext& ctx,
                       const SpeculationConfig& resolved, StepOptions step, Proposer* proposer) {
  EngineCore core;
  step.spec_sampling = resolved.sampling;
  if (proposer != nullptr) core.policy = MakeDraftLengthPolicy(resolved);
  core.engine = std::make_unique<Engine>(target, kv, ctx, step, proposer, core.policy.get());
  return core;
}

}  // namespace specd
