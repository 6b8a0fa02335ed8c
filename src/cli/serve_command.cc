// `specd serve`: the OpenAI-compatible server (src/server/) over one engine with continuous
// batching; speculation as in generate, its draft length chosen per step by the cost-aware
// policy from measured acceptance and forward costs at the current batch size.
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
#include "cli/commands.h"
#include "cli/signals.h"
#include "engine/engine_builder.h"
#include "flags/common_flags.h"
#include "model/model.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"

namespace specd::cli {
namespace {

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
  h.webui = o.webui;
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

// The engine the server runs: one slot per parallel request, the speculation the flags ask for
// (coupled sampling and the cost-aware draft length unless told otherwise).
EngineConfig EngineConfigFor(const ServeOptions& o, bool draft_given) {
  EngineConfig c;
  c.model_path = o.model;
  c.weights = o.weights;
  c.threads = o.threads;
  c.speculation = flags::SpeculationFromFlags(o.speculation, draft_given);
  c.n_slots = o.parallel;
  c.n_ctx = o.ctx;
  c.kv_type = o.cache_type;
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

// --chat-template's format by name, else the model's own template or null.
std::unique_ptr<ChatTemplate> ServedChatTemplate(const std::string& name, const Model& model,
                                                 const Tokenizer& tokenizer) {
  if (name.empty()) return ChatTemplateOrNull(model, tokenizer);
  return std::make_unique<ChatTemplate>(ChatTemplate::Named(name, tokenizer));
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
  flags::PrintIgnoredFlagNotes(o.ignored_flags);
  flags::SpeculationFlags& spec = o.speculation;
  flags::ChooseModels(&o.model, &spec.config.draft.path, flags::WantsDraftModel(spec),
                      &spec.config.draft);
  const EngineConfig config = EngineConfigFor(o, !options.speculation.config.draft.path.empty());
  if (!config.speculation.speculative() && !spec.spec_type &&
      spec.strategy == flags::Strategy::kUnset) {
    std::fprintf(stderr,
                 "specd: %s has no known draft: serving without speculation (-md DRAFT.gguf or "
                 "--spec-type ngram to speculate)\n",
                 o.model.c_str());
  }
  SignalWatcher signals;  // before any thread starts, so that all inherit the mask
  // Bound and answering (503 "Loading model", as llama-server) before the models load.
  server::Metrics metrics;
  server::HttpServer http(HttpOptionsFor(o), metrics);
  http.Bind();
  std::atomic<bool> draining{false};
  signals.Start([&http, &draining, timeout_ms = o.shutdown_timeout_s * 1000](int) {
    if (draining.exchange(true)) return;  // the first signal drains; the drain ends by itself
    std::fprintf(stderr, "specd serve: draining (at most %.0f s)\n", timeout_ms / 1000);
    http.Drain(timeout_ms);
  });
  ServingThread serving(http);
  std::fprintf(stderr, "listening on http://%s:%d; %s\n", o.host.c_str(), http.port(),
               flags::DescribeLoading(config).c_str());
  std::fflush(stderr);
  const auto models = LoadModels(config);
  SPECD_CHECK(models->tokenizer != nullptr, o.model,
              " has no tokenizer metadata: the server needs one");
  const Tokenizer& tokenizer = *models->tokenizer;
  const std::unique_ptr<ChatTemplate> chat =
      ServedChatTemplate(o.chat_template, *models->target, tokenizer);
  const auto stack = BuildEngine(*models, config);
  const bool speculative = stack->speculative();

  server::Scheduler scheduler(stack->engine(), o.parallel, o.max_queue, &metrics);
  server::ApiLimits limits;
  limits.model_id = o.alias.empty() ? ModelId(o.model) : o.alias;
  limits.n_ctx = stack->n_ctx();
  limits.max_n = o.parallel;
  LoadedModels& loaded = *models;
  http.Attach({scheduler, tokenizer, chat.get(), limits, PropsFor(o, *models->target, speculative),
               [&loaded]() -> GrammarCompiler& { return loaded.grammar(); }});
  const ModelConfig& mc = models->target->config();
  const SpeculationConfig& resolved = stack->speculation();
  const std::string speculation = speculative ? std::string(ProposerKindName(resolved.proposer)) +
                                                    ", " + DescribeDraftLength(resolved)
                                              : "off";
  std::fprintf(stderr, "model: %s (%s, vocab %lld)%s%s; %d slots x %d positions; speculation: %s\n",
               o.model.c_str(), mc.arch.c_str(), static_cast<long long>(mc.n_vocab),
               models->draft ? ", draft " : "", models->draft ? resolved.draft.path.c_str() : "",
               o.parallel, stack->n_ctx(), speculation.c_str());
  std::fprintf(stderr, "ready on http://%s:%d (model id '%s')%s\n", o.host.c_str(), http.port(),
               limits.model_id.c_str(), o.webui ? "; chat page at /" : "");
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
  flags::AddSpeculationFlags(s, &o->speculation);
  s->add_option("--host", o->host, "address to listen on");
  s->add_option("--port", o->port, "port (0: any free port)")->check(CLI::Range(0, 65535));
  s->add_option("--parallel", o->parallel, "sequences decoded at once (KV slots)")
      ->check(CLI::Range(1, 256));
  s->add_option("--max-queue", o->max_queue, "requests waiting beyond those (then 503)")
      ->check(CLI::Range(0, 100000));
  s->add_option("-c,--ctx,--ctx-size", o->ctx, "positions per slot (0: the model's, <= 4096)")
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
  s->add_option("--chat-template", o->chat_template,
                "chat format for a model whose file has none, as llama-server's: chatml or "
                "gemma (turn markers the vocabulary lacks are written as text)")
      ->check(CLI::IsMember({"chatml", "gemma"}));
  s->add_flag("!--no-webui", o->webui,
              "no chat page at / (as llama-server's --no-webui; the API is unchanged)");
  s->add_option("--cache-reuse", o->cache_reuse,
                "reuse prompt-cache chunks of at least N tokens that moved (text deleted above "
                "them, an editor's window of lines scrolled), their keys rotated to the new "
                "positions, as llama-server's --cache-reuse (0, the default: only a shared "
                "prefix; reused chunks make the output differ from a cold read's)")
      ->check(CLI::Range(0, 1 << 20));
  flags::AddThreadsFlag(s, &o->threads);
  flags::AddCacheTypeFlag(s, &o->cache_type);
  flags::AddWeightFlags(s, &o->weights);
  flags::AddLlamaCppNoOpFlags(s, &o->ignored_flags);
  return {s, [options] {
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
