// `specd serve`: the OpenAI-compatible server (src/server/) over one engine with continuous
// batching; speculation as in generate, its draft length chosen per step by the cost-aware
// policy from measured acceptance and forward costs at the current batch size.
#include <pthread.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <thread>

#include "base/error.h"
#include "cli/cli_common.h"
#include "cli/commands.h"
#include "engine/engine_builder.h"
#include "model/model.h"
#include "server/http_server.h"
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
server::HttpOptions HttpOptionsFor(const ServeOptions& o) {
  server::HttpOptions h;
  h.host = o.host;
  h.port = o.port;
  h.api_key = o.api_key;
  h.max_body_bytes = o.max_body_bytes;
  h.read_timeout_s = o.read_timeout_s;
  h.write_timeout_s = o.write_timeout_s;
  h.keep_alive_timeout_s = o.keep_alive_timeout_s;
  h.n_http_threads = std::max(16, o.parallel + o.max_queue + 8);
  h.cors_origins = o.cors_origins;
  h.cache_reuse = o.cache_reuse;
  return h;
}

// What /props says of the loaded model and the server.
server::PropsInfo PropsFor(const ServeOptions& o, const Model& model, bool speculative) {
  server::PropsInfo props;
  props.model_path = o.model;
  props.total_slots = o.parallel;
  props.speculative = speculative;
  if (const GgufValue* t = model.gguf().Find("tokenizer.chat_template")) {
    props.chat_template = t->AsString("tokenizer.chat_template");
  }
  return props;
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

// The engine the server runs: cost-aware drafts of coupled sampling, f16 caches, one slot per
// parallel request.
EngineConfig EngineConfigFor(const ServeOptions& o) {
  EngineConfig c;
  c.model_path = o.model;
  c.weights = o.weight_flags;
  c.threads = o.threads;
  c.proposer = o.spec_type == "draft"         ? ProposerKind::kDraftModel
               : o.spec_type == "ngram"       ? ProposerKind::kNgram
               : o.spec_type == "draft+ngram" ? ProposerKind::kNgramOrDraft
               : o.spec_type == "sdsat"       ? ProposerKind::kSdsat
                                              : ProposerKind::kNone;
  SPECD_CHECK(!UsesDraftModel(c.proposer) || !o.draft_model.empty(), "--spec-type ", o.spec_type,
              " needs a draft model (-md DRAFT.gguf)");
  const bool sdsat = c.proposer == ProposerKind::kSdsat;
  SPECD_CHECK(sdsat || !o.sdsat.Given(),
              "--adaptive-k, --adaptive-token, --sdsat-loop and --sdsat-tree go with --spec-type "
              "sdsat");
  SPECD_CHECK(!sdsat || o.draft_model.empty(),
              "--spec-type sdsat drafts with the target itself: drop -md");
  SPECD_CHECK(!sdsat || o.draft_max == 0,
              "--spec-type sdsat drafts --adaptive-k tokens per step: drop --draft-max");
  c.sdsat = SdsatOptionsFor(o.sdsat);
  if (UsesDraftModel(c.proposer)) c.draft_path = o.draft_model;
  SPECD_CHECK(o.trace_steps.empty() || c.proposer != ProposerKind::kNone,
              "--trace-steps traces speculative steps: this server decodes without a draft");
  c.draft_flags = o.draft_flags;
  c.ngram_min = o.ngram_min;
  c.ngram_max = o.ngram_max;
  // SDSAT drafts a fixed --adaptive-k tokens (or a tree of its nodes) per step.
  c.speculation.cost_aware = o.draft_max <= 0 && !sdsat;
  c.speculation.draft_max = o.draft_max > 0 ? o.draft_max
                            : sdsat
                                ? (c.sdsat.tree_nodes > 0 ? c.sdsat.tree_nodes : c.sdsat.n_adaptive)
                                : 8;
  c.speculation.spec_sampling = SpecSampling::kCoupled;
  c.speculation.trace_steps_path = o.trace_steps;
  c.n_slots = o.parallel;
  c.n_ctx = o.ctx;
  c.max_prefill_rows = o.max_prefill_rows;
  return c;
}

// The server's chat template, or null (said on stderr) when the model has none.
std::unique_ptr<ChatTemplate> ChatTemplateOrNull(const Model& model, const Tokenizer& tokenizer) {
  try {
    auto chat = std::make_unique<ChatTemplate>(ChatTemplate::FromGguf(model.gguf(), tokenizer));
    if (chat->from_vocabulary()) {
      std::fprintf(stderr, "note: %s\n", chat->GuessNote(model.gguf().path()).c_str());
    }
    return chat;
  } catch (const Error& e) {
    std::fprintf(stderr, "note: no chat template (%s): /v1/chat/completions answers 400\n",
                 e.what());
    return nullptr;
  }
}

// Serve() on a thread of its own from construction; stopped and joined when it goes out of
// scope, also when loading the model throws.
class ServingThread {
 public:
  explicit ServingThread(server::HttpServer& http)
      : http_(http), thread_([&http] { http.Serve(); }) {}
  ~ServingThread() {
    if (!thread_.joinable()) return;
    http_.Stop();
    thread_.join();
  }
  // Waits until the server stops (a drain on SIGTERM / SIGINT).
  void Join() { thread_.join(); }

 private:
  server::HttpServer& http_;
  std::thread thread_;
};

}  // namespace

int RunServe(const ServeOptions& options) {
  ServeOptions o = options;
  ChooseModels(&o.model, &o.draft_model,
               o.spec_type != "none" && o.spec_type != "ngram" && o.spec_type != "sdsat",
               &o.draft_flags);
  DropDraftSpeculationWithoutDraft(&o);
  const EngineConfig config = EngineConfigFor(o);
  SignalStopper signals;  // before any thread starts, so that all inherit the mask
  // Bound and answering (503 "Loading model", as llama-server) before the models load.
  server::Metrics metrics;
  server::HttpServer http(HttpOptionsFor(o), metrics);
  http.Bind();
  signals.Start([&http, timeout_ms = o.shutdown_timeout_s * 1000] {
    std::fprintf(stderr, "specd serve: draining (at most %.0f s)\n", timeout_ms / 1000);
    http.Drain(timeout_ms);
  });
  ServingThread serving(http);
  std::fprintf(stderr, "listening on http://%s:%d; %s\n", o.host.c_str(), http.port(),
               DescribeLoading(config).c_str());
  std::fflush(stderr);
  const auto models = LoadModels(config);
  SPECD_CHECK(models->tokenizer != nullptr, o.model,
              " has no tokenizer metadata: the server needs one");
  const Tokenizer& tokenizer = *models->tokenizer;
  const std::unique_ptr<ChatTemplate> chat = ChatTemplateOrNull(*models->target, tokenizer);
  const auto stack = BuildEngine(*models, config);
  const bool speculative = stack->speculative();

  server::Scheduler scheduler(stack->engine(), o.parallel, o.max_queue, &metrics);
  server::ApiLimits limits;
  limits.model_id = o.alias.empty() ? ModelId(o.model) : o.alias;
  limits.n_ctx = stack->n_ctx();
  limits.max_n = o.parallel;
  http.Attach(
      {scheduler, tokenizer, chat.get(), limits, PropsFor(o, *models->target, speculative)});
  const ModelConfig& mc = models->target->config();
  const std::string speculation =
      speculative ? o.spec_type + ", " + DescribeDraftLength(stack->speculation()) : "off";
  std::fprintf(stderr, "model: %s (%s, vocab %lld)%s%s; %d slots x %d positions; speculation: %s\n",
               o.model.c_str(), mc.arch.c_str(), static_cast<long long>(mc.n_vocab),
               models->draft ? ", draft " : "", models->draft ? o.draft_model.c_str() : "",
               o.parallel, stack->n_ctx(), speculation.c_str());
  std::fprintf(stderr, "ready on http://%s:%d (model id '%s')\n", o.host.c_str(), http.port(),
               limits.model_id.c_str());
  std::fflush(stderr);
  serving.Join();
  std::fprintf(stderr, "stopped\n");
  return 0;
}

Command AddServeCommand(CLI::App& app) {
  auto options = std::make_shared<ServeOptions>();
  ServeOptions* o = options.get();
  CLI::App* s = app.add_subcommand(
      "serve", "an OpenAI-compatible HTTP server with continuous batching and speculation");
  s->add_option("-m,--model", o->model, "target model (GGUF; default: generate's)");
  s->add_option("--model-draft", o->draft_model, "draft model (also -md)");
  s->add_option("--spec-type", o->spec_type,
                "proposer: draft (the default), ngram, draft+ngram, sdsat (a model fine-tuned "
                "for SDSAT drafts for itself with adaptive tokens, as generate --strategy "
                "sdsat), none (no speculation)")
      ->check(CLI::IsMember({"none", "draft", "ngram", "draft+ngram", "sdsat"}));
  AddSdsatFlags(s, &o->sdsat);
  s->add_option("--draft-max", o->draft_max,
                "fixed draft length (default: cost-aware, 0..8 per step from measured costs)")
      ->check(CLI::Range(1, 32));
  s->add_option("--host", o->host, "address to listen on");
  s->add_option("--port", o->port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  s->add_option("--parallel", o->parallel, "sequences decoded at once (KV slots)")
      ->check(CLI::Range(1, 256));
  s->add_option("--max-queue", o->max_queue, "requests waiting beyond those (then 503)")
      ->check(CLI::Range(0, 100000));
  s->add_option("-c,--ctx-size", o->ctx, "positions per slot (0: the model's, <= 4096)")
      ->check(CLI::Range(0, 1 << 20));
  s->add_option("--api-key", o->api_key, "require 'Authorization: Bearer KEY'");
  s->add_option("-a,--alias", o->alias, "model id (default: the file name)");
  s->add_option("--max-body-bytes", o->max_body_bytes, "largest request body")
      ->check(CLI::Range(size_t{1024}, size_t{1} << 30));
  s->add_option("--read-timeout", o->read_timeout_s,
                "seconds a client may stay silent while sending a request (then closed)")
      ->check(CLI::Range(0.01, 86400.0));
  s->add_option("--write-timeout", o->write_timeout_s,
                "seconds a client may take nothing of an answer (then dropped)")
      ->check(CLI::Range(0.01, 86400.0));
  s->add_option("--keep-alive-timeout", o->keep_alive_timeout_s,
                "seconds an idle kept-alive connection stays open")
      ->check(CLI::Range(0, 86400));
  s->add_option("--shutdown-timeout", o->shutdown_timeout_s,
                "seconds that requests in flight get to finish on SIGTERM / SIGINT (new ones "
                "get 503 meanwhile); those still running then end")
      ->check(CLI::Range(0.0, 86400.0));
  s->add_option("--cors-origins", o->cors_origins,
                "origins browsers may call from: * (the default, as llama-server), a list "
                "separated by commas, or '' (no CORS headers)");
  s->add_option("--cache-reuse", o->cache_reuse,
                "reuse prompt-cache chunks of at least N tokens that moved (text deleted above "
                "them, an editor's window of lines scrolled), their keys rotated to the new "
                "positions, as llama-server's --cache-reuse (0, the default: only a shared "
                "prefix; reused chunks make the output differ from a cold read's)")
      ->check(CLI::Range(0, 1 << 20));
  AddDraftFlags(s, &o->draft_flags);
  AddTraceStepsFlag(s, &o->trace_steps);
  AddThreadsFlag(s, &o->threads);
  AddWeightFlags(s, &o->weight_flags);
  return {s, [s, options] {
            options->spec_type_given = s->count("--spec-type") > 0;
            try {
              return RunServe(*options);
            } catch (const Error& e) {
              // The server's sequences at once are --parallel, not generate's --batch.
              throw Error(RenderFieldNames(e.what(), [](std::string_view field) {
                return field == "n_sequences" ? std::string("--parallel")
                                              : "{" + std::string(field) + "}";
              }));
            }
          }};
}

}  // namespace specd::cli
