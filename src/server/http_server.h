// specd serve's HTTP side (cpp-httplib): OpenAI's /v1/completions, /v1/chat/completions (JSON or
// server-sent events), /v1/models; llama-server's /completion, /infill, /tokenize, /detokenize,
// /props; /health and /metrics; an optional API key; CORS; errors as OpenAI error objects with
// the right status.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>

#include "server/llama_api.h"
#include "server/metrics.h"
#include "server/openai_api.h"
#include "server/scheduler.h"

namespace httplib {
class Server;
struct Request;
struct Response;
class DataSink;
}  // namespace httplib

namespace specd::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 8080;                  // 0: any free port (see HttpServer::port)
  std::string api_key;              // "" : none
  size_t max_body_bytes = 1 << 20;  // larger request bodies get 413
  int n_http_threads = 64;          // concurrent connections served
  // A connection that sends nothing for read_timeout_s while a request is being read is
  // closed; one whose client reads nothing for write_timeout_s is dropped; an idle keep-alive
  // connection is closed after keep_alive_timeout_s (0: at once after its last request).
  double read_timeout_s = 10;
  double write_timeout_s = 60;
  int keep_alive_timeout_s = 5;
  // Access-Control-Allow-Origin for browsers' cross-origin requests: "*" (llama-server's
  // default), a list of origins separated by commas (the request's Origin echoed when listed),
  // or "" (no CORS headers).
  std::string cors_origins = "*";
  // Prompt-cache chunks of at least this many tokens reused at moved positions (llama-server's
  // --cache-reuse; 0: only a shared prefix is reused).
  int cache_reuse = 0;
  // The chat page at `/` (and its files under /webui/); off: `/` is a 404 (--no-webui).
  bool webui = true;
  PropsInfo props;  // what /props reports of the model and the server
};

class HttpServer {
 public:
  // What the routes serve: the engine's scheduler and the model's tokenizer and facts.
  struct Backend {
    Scheduler& scheduler;
    const Tokenizer& tokenizer;
    const ChatTemplate* chat_template;  // null: chat completions answer 400
    ApiLimits limits;
    PropsInfo props;
    // Structured output's compiler over the model's vocabulary (empty: requests that shape
    // their output are refused).
    std::function<GrammarCompiler&()> grammar = {};
  };
  // A server without its engine yet: it can Bind and Serve at once, answering every request
  // 503 "Loading model" (as llama-server) until Attach.
  HttpServer(const HttpOptions& options, Metrics& metrics);
  HttpServer(const HttpOptions& options, Scheduler& scheduler, Metrics& metrics,
             const Tokenizer& tokenizer, const ChatTemplate* chat_template,
             const ApiLimits& limits);
  // Gives the routes their engine (once, from any thread); requests are served from then on.
  void Attach(const Backend& backend);
  ~HttpServer();
  // Binds; throws Error if the address cannot be bound.
  void Bind();
  int port() const { return port_; }
  // Serves until Stop (from another thread or a signal handler's thread).
  void Serve();
  void Stop();
  // A graceful stop: new completions get 503 (and /health "shutting down") while the requests
  // in flight finish, for at most timeout_ms; those still running then end as cancelled; then
  // Stop. Returns whether every request in flight finished on its own.
  bool Drain(double timeout_ms);

 private:
  void Routes();
  using GetHandler = std::function<void(const httplib::Request&, httplib::Response&)>;
  using BodyHandler =
      std::function<void(const httplib::Request&, const std::string&, httplib::Response&)>;
  // One route: a GET with its handler, or a POST whose body handler reads the whole body.
  struct Route {
    const char* path;
    GetHandler get;    // set for a GET route
    BodyHandler post;  // set for a POST route
  };
  // Every route of the server, in one table from which the method guards (405) follow.
  std::vector<Route> RouteTable();
  // The chat page's files as GET routes (HttpOptions::webui).
  void WebUiRoutes();
  // A known route asked with another method: 405 naming the allowed one.
  void GuardOtherMethods(const Route& route);
  void Health(httplib::Response& res) const;                         // 200, or 503 while draining
  void Models(const httplib::Request& req, httplib::Response& res);  // /v1/models
  // A POST route whose body is read whole (at most max_body_bytes) and whose key is checked.
  void PostWithBody(const char* path, BodyHandler handler);
  // Threads, socket options, timeouts, and the error, exception and log handlers.
  void ConfigureTransport();
  enum class Api { kOpenAi, kOpenAiChat, kLlamaCompletion, kLlamaInfill };
  // A completion request of any API: parsed, queued, answered (JSON or a stream).
  void HandleCompletion(const httplib::Request& req, const std::string& body, Api api,
                        void* response);
  // Queues the request's sequences; nullptr when full (then *res is the 503).
  std::shared_ptr<Job> Submit(const CompletionRequest& r, const httplib::Request& req,
                              httplib::Response& res);
  void ServeOpenAi(const httplib::Request& req, const CompletionRequest& r, bool chat,
                   std::shared_ptr<Job> job, httplib::Response& res);
  void ServeLlama(const httplib::Request& req, const LlamaRequest& r, std::shared_ptr<Job> job,
                  httplib::Response& res);
  // A server-sent-event response: `produce` writes the events (false: the client went away).
  void Stream(httplib::Response& res, std::shared_ptr<Job> job,
              std::function<bool(httplib::DataSink&)> produce);
  // Access-Control-Allow-Origin on every response and the OPTIONS preflight (cors_origins).
  void ConfigureCors();
  // Counts a response in the metrics and logs it: one line per request (who, method, route,
  // status, prompt + completion tokens, ms).
  void Record(const httplib::Request& req, int status, int64_t prompt_tokens = 0,
              int64_t completion_tokens = 0, double ms = 0);
  void Record(const std::string& request_line, int status, int64_t prompt_tokens,
              int64_t completion_tokens, double ms);
  // The request's grammar compiled into its constraint; an ApiError naming the field when the
  // library cannot compile it.
  void CompileConstraint(CompletionRequest* r) const;
  // Whether the request lacks the API key (then *res is the 401, counted in the metrics).
  bool RefusedKey(const httplib::Request& req, httplib::Response* res);

  HttpOptions options_;
  // Set by Attach before ready_; read by the handlers only after they saw ready_.
  Metrics& metrics_;
  Scheduler* scheduler_ = nullptr;
  const Tokenizer* tokenizer_ = nullptr;
  const ChatTemplate* chat_template_ = nullptr;
  std::function<GrammarCompiler&()> grammar_;
  ApiLimits limits_;
  std::atomic<bool> ready_{false};
  FimTokens fim_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  int listen_socket_ = -1;  // the socket cpp-httplib listens on (seen as it sets its options)
  int64_t created_ = 0;
  std::atomic<bool> draining_{false};
};

}  // namespace specd::server
