#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <utility>

#include "base/error.h"
#include "base/timer.h"
#include "server/choice_collector.h"
#include "server/embedded_file.h"
#include "server/request_fields.h"

namespace specd::server {
namespace {
constexpr int kListenBacklog = 1024;

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string NewId(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%s-%llx%06llx", prefix, static_cast<long long>(UnixSeconds()),
                static_cast<unsigned long long>(counter++ & 0xffffff));
  return buf;
}

// "ADDRESS METHOD PATH" of a request, for the log.
std::string RequestLine(const httplib::Request& req) {
  return req.remote_addr + " " + req.method + " " + req.path;
}

void ReplyError(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(Dump(ErrorBody(e)), "application/json");
}

}  // namespace

HttpServer::HttpServer(const HttpOptions& options, Metrics& metrics)
    : options_(options),
      metrics_(metrics),
      http_(std::make_unique<httplib::Server>()),
      created_(UnixSeconds()) {
  Routes();
}

HttpServer::HttpServer(const HttpOptions& options, Scheduler& scheduler, Metrics& metrics,
                       const Tokenizer& tokenizer, const ChatTemplate* chat_template,
                       const ApiLimits& limits)
    : HttpServer(options, metrics) {
  Attach({scheduler, tokenizer, chat_template, limits, options.props});
}

void HttpServer::Attach(const Backend& backend) {
  SPECD_CHECK(!ready_.load(), "the server has its engine already");
  scheduler_ = &backend.scheduler;
  tokenizer_ = &backend.tokenizer;
  chat_template_ = backend.chat_template;
  grammar_ = backend.grammar;
  limits_ = backend.limits;
  options_.props = backend.props;
  fim_ = FindFimTokens(backend.tokenizer);
  ready_.store(true, std::memory_order_release);  // the handlers read the above after this
}

HttpServer::~HttpServer() = default;

void HttpServer::Bind() {
  if (options_.port == 0) {
    port_ = http_->bind_to_any_port(options_.host);
    SPECD_CHECK(port_ > 0, "cannot listen on ", options_.host, " (any port)");
  } else {
    SPECD_CHECK(http_->bind_to_port(options_.host, options_.port), "cannot listen on ",
                options_.host, ":", options_.port, " (in use, or not an address of this machine)");
    port_ = options_.port;
  }
  // Debian's cpp-httplib is a compiled library whose listen backlog is 5: a burst of clients
  // connecting at once (64 in bench/serve_load.py) overflowed it, and the kernel dropped SYNs,
  // which clients resend only after a second (time to first token > 1 s, or a reset). listen()
  // again on the listening socket sets a larger backlog (capped by net.core.somaxconn).
  SPECD_CHECK(listen_socket_ >= 0 && ::listen(listen_socket_, kListenBacklog) == 0,
              "cannot set the listen backlog of ", options_.host, ":", port_);
}

void HttpServer::Serve() { http_->listen_after_bind(); }

void HttpServer::Stop() { http_->stop(); }

bool HttpServer::Drain(double timeout_ms) {
  draining_ = true;
  if (!ready_.load(std::memory_order_acquire)) {  // still loading: nothing runs
    Stop();
    return true;
  }
  const bool finished = scheduler_->WaitIdle(timeout_ms);
  if (!finished) {
    std::fprintf(stderr, "specd serve: requests still running after %.0f ms: cancelling them\n",
                 timeout_ms);
    scheduler_->CancelAll();
    scheduler_->WaitIdle(60000.0);
  }
  Stop();  // waits for the handlers, which are writing the last responses
  return finished;
}

void HttpServer::ConfigureTransport() {
  const int n_threads = options_.n_http_threads;
  http_->new_task_queue = [n_threads] { return new httplib::ThreadPool(n_threads); };
  http_->set_payload_max_length(options_.max_body_bytes);
  // SO_REUSEADDR only: cpp-httplib's default adds SO_REUSEPORT, with which a second server on a
  // busy port starts without a word and the kernel splits connections between the two.
  http_->set_socket_options([this](socket_t sock) {
    listen_socket_ = sock;
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  const auto seconds_and_us = [](double s) {
    const auto whole = static_cast<time_t>(s);
    return std::pair{whole, static_cast<time_t>((s - static_cast<double>(whole)) * 1e6)};
  };
  const auto [read_s, read_us] = seconds_and_us(options_.read_timeout_s);
  const auto [write_s, write_us] = seconds_and_us(options_.write_timeout_s);
  http_->set_read_timeout(read_s, read_us);
  http_->set_write_timeout(write_s, write_us);
  http_->set_keep_alive_timeout(options_.keep_alive_timeout_s);
  http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) {
      ReplyError(res, ApiError(413, "invalid_request_error",
                               "the request body is larger than " +
                                   std::to_string(options_.max_body_bytes) + " bytes"));
    } else if (res.status == 404) {
      ReplyError(res,
                 ApiError(404, "invalid_request_error", "no route " + req.method + " " + req.path));
    } else {
      ReplyError(res, ApiError(res.status, "invalid_request_error",
                               "HTTP error " + std::to_string(res.status)));
    }
    Record(req, res.status);  // refused before any handler ran
  });
  http_->set_exception_handler(
      [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
        std::string what = "internal error";
        try {
          std::rethrow_exception(ep);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        ReplyError(res, ApiError(500, "server_error", what));
        Record(req, 500);  // counted in /metrics: an exception escaped a handler
      });
}

void HttpServer::ConfigureCors() {
  if (options_.cors_origins.empty()) return;
  // The Access-Control-Allow-Origin a request gets: "*", or its own Origin when listed.
  const auto allowed = [this](const httplib::Request& req) -> std::string {
    if (options_.cors_origins == "*") return "*";
    const std::string origin = req.get_header_value("Origin");
    std::string list = "," + options_.cors_origins + ",";
    return !origin.empty() && list.find("," + origin + ",") != std::string::npos ? origin : "";
  };
  http_->set_post_routing_handler([allowed](const httplib::Request& req, httplib::Response& res) {
    const std::string origin = allowed(req);
    if (origin.empty()) return;
    res.set_header("Access-Control-Allow-Origin", origin);
    if (origin != "*") res.set_header("Vary", "Origin");
  });
  // Preflight: any route, the methods and headers specd's API uses.
  http_->Options(".*", [](const httplib::Request& req, httplib::Response& res) {
    res.status = 204;
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    const std::string asked = req.get_header_value("Access-Control-Request-Headers");
    res.set_header("Access-Control-Allow-Headers",
                   asked.empty() ? "Content-Type, Authorization" : asked);
    res.set_header("Access-Control-Max-Age", "86400");
  });
}

void HttpServer::Routes() {
  ConfigureTransport();
  ConfigureCors();
  // Until the engine is attached every request but a CORS preflight gets llama-server's answer
  // while it loads: 503 "Loading model" (clients poll /health for it to turn 200).
  // The chat page loads meanwhile, and waits for /health itself.
  http_->set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    const bool page = options_.webui && (req.path == "/" || req.path.starts_with("/webui/"));
    if (ready_.load(std::memory_order_acquire) || req.method == "OPTIONS" || page) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    res.status = 503;
    res.set_content(
        "{\"error\":{\"code\":503,\"message\":\"Loading model\",\"type\":\"unavailable_error\"}}",
        "application/json");
    return httplib::Server::HandlerResponse::Handled;
  });
  for (const Route& route : RouteTable()) {
    if (route.get) {
      http_->Get(route.path, route.get);
    } else {
      PostWithBody(route.path, route.post);
    }
    GuardOtherMethods(route);
  }
  if (options_.webui) WebUiRoutes();
}

void HttpServer::WebUiRoutes() {
  for (const EmbeddedFile& file : WebUiFiles()) {
    http_->Get(std::string(file.url), [file](const httplib::Request&, httplib::Response& res) {
      res.set_content(file.body.data(), file.body.size(), std::string(file.content_type).c_str());
      // The page runs its own files only: model output it renders can never become script.
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; img-src 'self' data:; object-src 'none'; "
                     "base-uri 'none'; frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
    });
  }
}

std::vector<HttpServer::Route> HttpServer::RouteTable() {
  const auto completion = [this](Api api) {
    return BodyHandler(
        [this, api](const httplib::Request& req, const std::string& body, httplib::Response& res) {
          HandleCompletion(req, body, api, &res);
        });
  };
  // The answer of a small function of the body, as JSON (tokenize, detokenize).
  const auto json_route = [this](std::function<nlohmann::json(const std::string&)> answer) {
    return BodyHandler([this, answer](const httplib::Request& req, const std::string& body,
                                      httplib::Response& res) {
      try {
        res.set_content(Dump(answer(body)), "application/json");
        Record(req, 200);
      } catch (const ApiError& e) {
        ReplyError(res, e);
        Record(req, e.status);
      }
    });
  };
  return {
      {"/health", [this](const httplib::Request&, httplib::Response& res) { Health(res); }, {}},
      // Scrapers read /metrics without the API key, as from llama-server and vLLM.
      {"/metrics",
       [this](const httplib::Request&, httplib::Response& res) {
         res.set_content(metrics_.Render(), "text/plain; version=0.0.4");
       },
       {}},
      {"/v1/models",
       [this](const httplib::Request& req, httplib::Response& res) { Models(req, res); },
       {}},
      {"/props",
       [this](const httplib::Request& req, httplib::Response& res) {
         if (RefusedKey(req, &res)) return;
         res.set_content(Dump(PropsResponse(options_.props, limits_)), "application/json");
         Record(req, 200);
       },
       {}},
      {"/v1/completions", {}, completion(Api::kOpenAi)},
      {"/v1/chat/completions", {}, completion(Api::kOpenAiChat)},
      {"/completion", {}, completion(Api::kLlamaCompletion)},
      {"/completions", {}, completion(Api::kLlamaCompletion)},
      {"/infill", {}, completion(Api::kLlamaInfill)},
      {"/tokenize", {}, json_route([this](const std::string& body) {
         return TokenizeResponse(body, *tokenizer_, limits_);
       })},
      {"/detokenize", {}, json_route([this](const std::string& body) {
         return DetokenizeResponse(body, *tokenizer_, limits_);
       })},
  };
}

void HttpServer::Health(httplib::Response& res) const {
  if (draining_) {
    res.status = 503;
    res.set_content("{\"status\":\"shutting down\"}", "application/json");
    return;
  }
  res.set_content("{\"status\":\"ok\"}", "application/json");
}

void HttpServer::Models(const httplib::Request& req, httplib::Response& res) {
  if (RefusedKey(req, &res)) return;
  Record(req, 200);
  const nlohmann::json models = {{"object", "list"},
                                 {"data", nlohmann::json::array({{{"id", limits_.model_id},
                                                                  {"object", "model"},
                                                                  {"created", created_},
                                                                  {"owned_by", "specd"}}})}};
  res.set_content(Dump(models), "application/json");
}

void HttpServer::GuardOtherMethods(const Route& route) {
  const char* allowed = route.get ? "GET" : "POST";
  const auto wrong_method = [this, allowed](const httplib::Request& req, httplib::Response& res) {
    res.set_header("Allow", allowed);
    ReplyError(res,
               ApiError(405, "invalid_request_error",
                        req.method + " " + req.path + " is not allowed (use " + allowed + ")"));
    Record(req, 405);
  };
  if (route.get) {
    http_->Post(route.path, wrong_method);
  } else {
    http_->Get(route.path, wrong_method);
  }
  http_->Put(route.path, wrong_method);
  http_->Delete(route.path, wrong_method);
}

// POST bodies are read through a content reader: cpp-httplib's own reading refuses a body over
// 8 KiB sent as application/x-www-form-urlencoded (curl -d's default) with a 413. The API key is
// checked after the body is read: a body left unread would be parsed as the next request.
void HttpServer::PostWithBody(const char* path, BodyHandler f) {
  http_->Post(path, [this, f](const httplib::Request& req, httplib::Response& res,
                              const httplib::ContentReader& reader) {
    std::string body;
    const size_t max_bytes = options_.max_body_bytes;
    bool too_large = false;
    // cpp-httplib itself refuses a Content-Length over max_bytes (the reader fails then).
    const bool read = reader([&](const char* data, size_t n) {
      too_large = too_large || body.size() + n > max_bytes;
      if (!too_large) body.append(data, n);
      return true;  // read on to the end, so the connection stays in step
    });
    if (!read && !too_large && req.get_header_value<uint64_t>("Content-Length") <= max_bytes) {
      ReplyError(res, ApiError(400, "invalid_request_error", "the request body was cut short"));
      Record(req, 400);
      return;
    }
    if (too_large || !read) {
      ReplyError(
          res, ApiError(413, "invalid_request_error",
                        "the request body is larger than " + std::to_string(max_bytes) + " bytes"));
      Record(req, 413);
      return;
    }
    if (RefusedKey(req, &res)) return;
    f(req, body, res);
  });
}

bool HttpServer::RefusedKey(const httplib::Request& req, httplib::Response* res) {
  if (options_.api_key.empty() ||
      req.get_header_value("Authorization") == "Bearer " + options_.api_key) {
    return false;
  }
  ReplyError(*res, ApiError(401, "authentication_error",
                            "Incorrect API key provided (send 'Authorization: Bearer KEY')", "",
                            "invalid_api_key"));
  Record(req, 401);
  return true;
}

void HttpServer::Record(const httplib::Request& req, int status, int64_t prompt_tokens,
                        int64_t completion_tokens, double ms) {
  Record(RequestLine(req), status, prompt_tokens, completion_tokens, ms);
}

void HttpServer::Record(const std::string& request_line, int status, int64_t prompt_tokens,
                        int64_t completion_tokens, double ms) {
  metrics_.OnRequest(status, prompt_tokens, completion_tokens, ms);
  std::fprintf(stderr, "specd serve: %s %d, %lld + %lld tokens, %.0f ms\n", request_line.c_str(),
               status, static_cast<long long>(prompt_tokens),
               static_cast<long long>(completion_tokens), ms);
}

void HttpServer::HandleCompletion(const httplib::Request& req, const std::string& body, Api api,
                                  void* response) {
  httplib::Response& res = *static_cast<httplib::Response*>(response);
  if (draining_) {
    res.set_header("Retry-After", "5");
    ReplyError(res, ApiError(503, "server_shutting_down",
                             "the server is shutting down: retry on another replica"));
    Record(req, 503);
    return;
  }
  const bool llama = api == Api::kLlamaCompletion || api == Api::kLlamaInfill;
  LlamaRequest r;
  try {
    if (llama) {
      r = ParseLlamaCompletion(body, api == Api::kLlamaInfill, *tokenizer_, fim_, limits_);
    } else {
      r.completion = ParseCompletionRequest(body, api == Api::kOpenAiChat, *tokenizer_,
                                            chat_template_, fim_, limits_);
    }
    CompileConstraint(&r.completion);
  } catch (const ApiError& e) {
    ReplyError(res, e);
    Record(req, e.status);
    return;
  }
  // n_predict 0 reads the prompt into the cache (llama.vim's warm-up of its ring of chunks),
  // unless nothing would keep it.
  if (r.completion.max_tokens == 0 && !r.completion.cache_prompt) {
    LlamaOutcome outcome;
    outcome.stop_type = "limit";
    outcome.prompt_tokens = static_cast<int64_t>(r.completion.prompt.size());
    res.set_content(Dump(LlamaCompletionResponse(r, outcome, limits_.model_id, *tokenizer_)),
                    "application/json");
    Record(req, 200, outcome.prompt_tokens, 0, 0);
    return;
  }
  std::shared_ptr<Job> job = Submit(r.completion, req, res);
  if (job == nullptr) return;
  if (llama) {
    ServeLlama(req, r, job, res);
  } else {
    ServeOpenAi(req, r.completion, api == Api::kOpenAiChat, job, res);
  }
}

void HttpServer::CompileConstraint(CompletionRequest* r) const {
  const StructuredRequest& s = r->structured;
  if (!s.grammar) return;
  if (!grammar_) {
    throw BadRequest("'" + s.grammar_field + "': this server has no grammar library attached",
                     s.grammar_field);
  }
  try {
    r->constraint = grammar_().Compile(*s.grammar);
  } catch (const Error& e) {
    throw BadRequest("'" + s.grammar_field + "' cannot be compiled: " + e.what(), s.grammar_field);
  }
}

std::shared_ptr<Job> HttpServer::Submit(const CompletionRequest& r, const httplib::Request& req,
                                        httplib::Response& res) {
  SequenceRequest s;
  s.prompt = r.prompt;
  s.n_predict = r.max_tokens;
  s.sampling = r.sampling;  // drawn as the engine's verification says (coupled by default)
  s.stop_tokens = r.stop_tokens;
  s.stop_at_eos = !r.ignore_eos;
  s.logprobs = r.logprobs;
  s.sum_logprob = false;  // nothing in a response reports it
  s.cache_prompt = r.cache_prompt;
  s.cache_reuse_chunk = options_.cache_reuse;
  s.constraint = r.constraint;
  std::shared_ptr<Job> job = scheduler_->Submit(s, r.n, r.time_budget_ms);
  if (job == nullptr) {
    res.set_header("Retry-After", "1");
    ReplyError(res, ApiError(503, "server_overloaded",
                             "every slot is busy and the queue is full: retry shortly"));
    Record(req, 503);
  }
  return job;
}

namespace {

// One server-sent event: "data: JSON" and a blank line; false when the client is gone.
bool SendEvent(httplib::DataSink& sink, const nlohmann::json& chunk) {
  const std::string line = "data: " + Dump(chunk) + "\n\n";
  return sink.write(line.data(), line.size());
}

// One OpenAI stream's choices as their events arrive: which have had their first chunk, and,
// for chat with tools, each one's calls cut out of its text as they complete.
class OpenAiStream {
 public:
  OpenAiStream(const ResponseInfo& info, ChoiceCollector& collector, const Tokenizer& tokenizer)
      : info_(info),
        collector_(collector),
        tokenizer_(tokenizer),
        first_(collector.outputs().size(), true),
        calls_(collector.outputs().size(), ToolCallStream(info.parallel_tool_calls)) {}

  // Sends the chunks a batch of events makes; false when the client went away.
  bool Send(httplib::DataSink& sink, const std::vector<ChoiceEvent>& events) {
    for (auto& [c, d] : TakeDeltas(collector_, events)) {
      const bool finished = collector_.done(c);
      d.text = collector_.text(c).TakeDelta(finished, info_.token_sources ? &d.sources : nullptr);
      if (info_.parse_tool_calls) {
        d.first_call_index = calls_[c].n_calls();
        d.text = calls_[c].Push(d.text, finished, &d.tool_calls);
      }
      if (finished) d.finish_reason = collector_.outputs()[c].finish_reason;
      // A chunk says something: text, calls, the end, or the tokens' logprobs.
      const bool says_nothing =
          d.text.empty() && d.tool_calls.empty() && (d.tokens.empty() || info_.logprobs < 0);
      if (says_nothing && !finished) continue;
      if (!SendEvent(sink, StreamChunk(info_, d, first_[c], tokenizer_))) return false;
      first_[c] = false;
    }
    return sink.is_writable();
  }

 private:
  const ResponseInfo& info_;
  ChoiceCollector& collector_;
  const Tokenizer& tokenizer_;
  std::vector<bool> first_;
  std::vector<ToolCallStream> calls_;
};

}  // namespace

void HttpServer::ServeLlama(const httplib::Request& req, const LlamaRequest& r,
                            std::shared_ptr<Job> job, httplib::Response& res) {
  const int64_t prompt_tokens = static_cast<int64_t>(r.completion.prompt.size());
  auto collector = std::make_shared<ChoiceCollector>(r.completion, *tokenizer_, *job);
  if (!r.completion.stream) {
    std::vector<ChoiceEvent> events;
    while (job->Wait(&events, 100)) {
      for (const auto& e : events) collector->Take(e);
      events.clear();
    }
    collector->outputs()[0].text = collector->text(0).TakeDelta(true);
    const LlamaOutcome outcome = OutcomeOf(*collector, *job, prompt_tokens);
    res.set_content(Dump(LlamaCompletionResponse(r, outcome, limits_.model_id, *tokenizer_)),
                    "application/json");
    Record(req, 200, prompt_tokens, collector->completion_tokens(), collector->elapsed_ms());
    return;
  }
  Stream(
      res, job,
      [this, job, collector, r, prompt_tokens,
       request_line = RequestLine(req)](httplib::DataSink& sink) {
        const auto send = [&](const nlohmann::json& chunk) { return SendEvent(sink, chunk); };
        std::vector<ChoiceEvent> events;
        std::string text;  // everything sent, for the final response
        while (job->Wait(&events, 50)) {
          auto deltas = TakeDeltas(*collector, events);
          events.clear();
          if (deltas.empty()) continue;
          ChoiceOutput& d = deltas.begin()->second;
          const bool finished = collector->done(0);
          d.text = collector->text(0).TakeDelta(finished);
          text += d.text;
          if ((!d.text.empty() || !d.tokens.empty()) &&
              !send(LlamaStreamChunk(d.text, d.tokens, d.logprobs, r.n_probs,
                                     collector->completion_tokens(), prompt_tokens, *tokenizer_))) {
            job->CancelAll("cancelled");  // the client went away: free its slot now
            return false;
          }
        }
        LlamaOutcome outcome = OutcomeOf(*collector, *job, prompt_tokens);
        outcome.choice.text = "";  // the last chunk carries no content, as llama-server's
        send(LlamaCompletionResponse(r, outcome, limits_.model_id, *tokenizer_));
        sink.done();
        Record(request_line, 200, prompt_tokens, collector->completion_tokens(),
               collector->elapsed_ms());
        return true;
      });
}

void HttpServer::ServeOpenAi(const httplib::Request& req, const CompletionRequest& r, bool chat,
                             std::shared_ptr<Job> job, httplib::Response& res) {
  const ResponseInfo info{NewId(chat ? "chatcmpl" : "cmpl"), UnixSeconds(), limits_.model_id, chat,
                          r.logprobs, r.structured.parse_tool_calls,
                          r.structured.parallel_tool_calls,
                          // Tool-call streams rewrite the text, so their runs would not match.
                          r.token_sources && !r.structured.parse_tool_calls};
  const int64_t prompt_tokens = static_cast<int64_t>(r.prompt.size());
  auto collector = std::make_shared<ChoiceCollector>(r, *tokenizer_, *job);
  if (!r.stream) {
    std::vector<ChoiceEvent> events;
    while (job->Wait(&events, 100)) {
      for (const auto& e : events) collector->Take(e);
      events.clear();
    }
    for (auto& out : collector->outputs()) out.text = collector->text(out.index).TakeDelta(true);
    res.set_content(
        Dump(CompletionResponse(info, collector->outputs(), {prompt_tokens, job->n_cached()},
                                *tokenizer_, job->n_drafted(), job->n_accepted())),
        "application/json");
    Record(req, 200, prompt_tokens, collector->completion_tokens(), collector->elapsed_ms());
    return;
  }
  const bool include_usage = r.include_usage;
  Stream(res, job,
         [this, job, collector, info, include_usage, prompt_tokens,
          request_line = RequestLine(req)](httplib::DataSink& sink) {
           OpenAiStream stream(info, *collector, *tokenizer_);
           std::vector<ChoiceEvent> events;
           while (job->Wait(&events, 50)) {
             if (!stream.Send(sink, events)) {
               job->CancelAll("cancelled");  // the client went away: free its slots now
               return false;
             }
             events.clear();
           }
           if (include_usage) {
             SendEvent(sink, UsageChunk(info, {prompt_tokens, job->n_cached()},
                                        collector->completion_tokens(),
                                        {job->n_drafted(), job->n_accepted(),
                                         collector->first_token_ms(), collector->last_token_ms()}));
           }
           const std::string done = "data: [DONE]\n\n";
           sink.write(done.data(), done.size());
           sink.done();
           Record(request_line, 200, prompt_tokens, collector->completion_tokens(),
                  collector->elapsed_ms());
           return true;
         });
}

void HttpServer::Stream(httplib::Response& res, std::shared_ptr<Job> job,
                        std::function<bool(httplib::DataSink&)> produce) {
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [produce = std::move(produce)](size_t, httplib::DataSink& sink) { return produce(sink); },
      // A stream that ended early (the client went away) frees its slots.
      [job](bool success) {
        if (!success) job->CancelAll("cancelled");
      });
}

}  // namespace specd::server
