// `specd serve`: the OpenAI-compatible server (src/server/) over one engine with continuous
// batching; speculation as in generate, its draft length chosen per step by the cost-aware
// policy from measured acceptance and forward costs at the current batch size.
#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "base/error.h"
#include "cli/commands.h"
#include "draft/combined_proposer.h"
#include "draft/draft_model_proposer.h"
#include "draft/eagle_proposer.h"
#include "draft/ngram_proposer.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/model_options.h"
#include "model/model.h"
#include "server/http_server.h"
#include "threading/thread_pool.h"
#include "tokenizer/chat_template.h"

namespace specd::cli {
namespace {

// SIGINT / SIGTERM stop the server: blocked in every thread, taken by one waiting thread (no
// global state for a signal handler).
class SignalStopper {
 public:
  SignalStopper() {
    sigemptyset(&signals_);
    sigaddset(&signals_, SIGINT);
    sigaddset(&signals_, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &signals_, nullptr);
  }
  // Calls stop() on the first signal.
  void Start(std::function<void()> stop) {
    thread_ = std::thread([this, stop] {
      int signal = 0;
      sigwait(&signals_, &signal);
      if (armed_) stop();
    });
  }
  ~SignalStopper() {
    armed_ = false;  // what stop() would act on may be gone already
    if (thread_.joinable()) {
      pthread_kill(thread_.native_handle(), SIGTERM);  // wakes sigwait if no signal came
      thread_.join();
    }
  }

 private:
  sigset_t signals_;
  std::atomic<bool> armed_{true};
  std::thread thread_;
};

std::string ModelId(const std::string& path) {
  std::string name = std::filesystem::path(path).filename().string();
  if (name.size() > 5 && name.ends_with(".gguf")) name.resize(name.size() - 5);
  return name;
}

}  // namespace

namespace {

// The HTTP side's settings: address, key, limits, CORS, and what /props reports.
server::HttpOptions HttpOptionsFor(const ServeOptions& o, const Model& model, bool speculative) {
  server::HttpOptions h;
  h.host = o.host;
  h.port = o.port;
  h.api_key = o.api_key;
  h.max_body_bytes = o.max_body_bytes;
  h.n_http_threads = std::max(16, o.parallel + o.max_queue + 8);
  h.cors_origins = o.cors_origins;
  h.props.model_path = o.model;
  h.props.total_slots = o.parallel;
  h.props.speculative = speculative;
  if (const GgufValue* t = model.gguf().Find("tokenizer.chat_template")) {
    h.props.chat_template = t->AsString("tokenizer.chat_template");
  }
  return h;
}

// `-m MODEL` alone, or a default model without a draft: served without speculation, said so.
void DropDraftSpeculationWithoutDraft(ServeOptions* o) {
  if (o->spec_type != "draft" || !o->draft_model.empty() || o->spec_type_given) return;
  std::fprintf(stderr,
               "specd: %s has no shipped draft: serving without speculation "
               "(-md DRAFT.gguf or --spec-type ngram to speculate)\n",
               o->model.c_str());
  o->spec_type = "none";
}

}  // namespace

int RunServe(const ServeOptions& options) {
  ServeOptions o = options;
  ChooseModels(&o.model, &o.draft_model, o.spec_type != "none" && o.spec_type != "ngram");
  DropDraftSpeculationWithoutDraft(&o);
  const bool use_draft = o.spec_type == "draft" || o.spec_type == "draft+ngram";
  const bool use_ngram = o.spec_type == "ngram" || o.spec_type == "draft+ngram";
  SPECD_CHECK(!use_draft || !o.draft_model.empty(), "--spec-type ", o.spec_type,
              " needs a draft model (-md DRAFT.gguf)");
  SignalStopper signals;  // before any thread starts, so that all inherit the mask
  ThreadPool pool(o.threads);
  const CpuFeatures cpu = CpuFeatures::Detect();
  const KernelContext ctx{&pool, cpu, Int8BackendFromFlags(o.weight_flags, cpu)};
  auto model = Model::Load(o.model, &ctx, LoadOptionsForModel(o.weight_flags, o.model));
  std::unique_ptr<Model> draft;
  if (use_draft) {
    draft = Model::Load(o.draft_model, &ctx,
                        LoadOptionsForModel(o.weight_flags, o.draft_model, ModelRole::kDraft));
    CheckDraftCompatible(*model, *draft);
  }
  const auto tokenizer = Tokenizer::FromGguf(model->gguf());
  std::unique_ptr<ChatTemplate> chat;
  try {
    chat = std::make_unique<ChatTemplate>(ChatTemplate::FromGguf(model->gguf(), *tokenizer));
  } catch (const Error& e) {
    std::fprintf(stderr, "note: no chat template (%s): /v1/chat/completions answers 400\n",
                 e.what());
  }
  const ModelConfig& config = model->config();
  const int n_ctx =
      o.ctx > 0 ? o.ctx : static_cast<int>(std::min<int64_t>(config.n_ctx_train, 4096));
  SpeculativeOptions spec;
  spec.cost_aware = o.draft_max <= 0;
  spec.draft_max = o.draft_max > 0 ? o.draft_max : 8;
  spec.spec_sampling = SpecSampling::kCoupled;
  const bool speculative = use_draft || use_ngram;
  SPECD_CHECK(o.trace_steps.empty() || speculative,
              "--trace-steps traces speculative steps: this server decodes without a draft");
  spec.trace_steps_path = o.trace_steps;
  auto kv =
      model->NewKvCache({o.parallel, n_ctx + (speculative ? spec.draft_max + 1 : 0), DType::kF16});
  std::unique_ptr<KvCache> draft_kv;
  if (draft) draft_kv = draft->NewKvCache({o.parallel, n_ctx + spec.draft_max + 1, DType::kF16});
  model->WarmUp(ctx);
  if (draft) draft->WarmUp(ctx);
  NgramProposer lookup(o.ngram_min, o.ngram_max, config.n_vocab);
  std::unique_ptr<Proposer> draft_proposer;
  const DraftModelOptions draft_options =
      DraftOptionsFromFlags(o.draft_flags, draft.get(), use_ngram);
  if (draft) {
    draft_proposer =
        MakeModelProposer(*model, *draft, *draft_kv, ctx, AttentionMode::kSplit, draft_options);
  }
  std::unique_ptr<CombinedProposer> both;
  Proposer* proposer = nullptr;
  if (use_draft && use_ngram) {
    both = std::make_unique<CombinedProposer>(lookup, *draft_proposer);
    proposer = both.get();
  } else if (use_draft) {
    proposer = draft_proposer.get();
  } else if (use_ngram) {
    proposer = &lookup;
  }
  const auto policy = speculative ? MakeDraftLengthPolicy(spec) : nullptr;
  StepOptions step;
  step.spec_sampling = SpecSampling::kCoupled;
  step.max_prefill_rows = o.max_prefill_rows;
  Engine engine(*model, *kv, ctx, step, proposer, policy.get());

  server::Metrics metrics;
  server::Scheduler scheduler(engine, o.parallel, o.max_queue, &metrics);
  server::ApiLimits limits;
  limits.model_id = o.alias.empty() ? ModelId(o.model) : o.alias;
  limits.n_ctx = n_ctx;
  limits.max_n = o.parallel;
  const server::HttpOptions http_options = HttpOptionsFor(o, *model, speculative);
  server::HttpServer http(http_options, scheduler, metrics, *tokenizer, chat.get(), limits);
  http.Bind();
  signals.Start([&http, timeout_ms = o.shutdown_timeout_s * 1000] {
    std::fprintf(stderr, "specd serve: draining (at most %.0f s)\n", timeout_ms / 1000);
    http.Drain(timeout_ms);
  });
  std::fprintf(stderr, "model: %s (%s, vocab %lld)%s%s; %d slots x %d positions; speculation: %s\n",
               o.model.c_str(), config.arch.c_str(), static_cast<long long>(config.n_vocab),
               draft ? ", draft " : "", draft ? o.draft_model.c_str() : "", o.parallel, n_ctx,
               speculative ? (o.spec_type +
                              (spec.cost_aware ? ", cost-aware length 0.." : ", fixed length ") +
                              std::to_string(spec.draft_max))
                                 .c_str()
                           : "off");
  std::fprintf(stderr, "listening on http://%s:%d (model id '%s')\n", o.host.c_str(), http.port(),
               limits.model_id.c_str());
  std::fflush(stderr);
  http.Serve();
  std::fprintf(stderr, "stopped\n");
  return 0;
}

}  // namespace specd::cli
