// libFuzzer target: arbitrary bytes sent as one connection's HTTP traffic to a whole `specd
// serve` stack in this process (cpp-httplib's parser, the routes, the request parsers, the
// scheduler and a speculative engine on the shipped 16.5M pair), with the server's limits in
// force (body size, JSON depth, a 64-position context, two slots). A finding is: a crash or
// sanitizer report anywhere in the server, a 500 (an exception that escaped a handler), a JSON
// response that does not parse, or a server that stops accepting connections.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <thread>

#include "engine/engine_builder.h"
#include "server/http_server.h"
#include "server/metrics.h"
#include "server/scheduler.h"
#include "tokenizer/chat_template.h"

namespace {

// Everything the server needs, built once and never destroyed (its threads run until exit).
struct ServerUnderTest {
  std::unique_ptr<specd::LoadedModels> models;
  std::unique_ptr<specd::ChatTemplate> chat;
  std::unique_ptr<specd::EngineStack> stack;
  std::unique_ptr<specd::server::Metrics> metrics;
  std::unique_ptr<specd::server::Scheduler> scheduler;
  std::unique_ptr<specd::server::HttpServer> http;
  int port = 0;
};

ServerUnderTest* Start() {
  auto* s = new ServerUnderTest;
  specd::EngineConfig config;
  config.model_path = SPECD_FUZZ_MODELS "/specd-target-q8_0.gguf";
  config.speculation.draft.path = SPECD_FUZZ_MODELS "/specd-draft-q8_0.gguf";
  config.speculation.proposer = specd::ProposerKind::kNgramOrDraft;
  config.threads = 1;
  config.n_slots = 2;
  config.n_ctx = 64;  // bounds the work one request can ask for
  config.speculation.policy = specd::DraftLengthPolicyKind::kFixed;
  config.speculation.draft_max = 4;
  s->models = specd::LoadModels(config);
  try {
    s->chat = std::make_unique<specd::ChatTemplate>(
        specd::ChatTemplate::FromGguf(s->models->target->gguf(), *s->models->tokenizer));
  } catch (const specd::Error&) {
  }
  s->stack = specd::BuildEngine(*s->models, config);
  s->metrics = std::make_unique<specd::server::Metrics>();
  s->scheduler = std::make_unique<specd::server::Scheduler>(s->stack->engine(), config.n_slots,
                                                            /*max_queue=*/2, s->metrics.get());
  specd::server::ApiLimits limits;
  limits.model_id = "specd-fuzz";
  limits.n_ctx = s->stack->n_ctx();
  limits.max_n = config.n_slots;
  specd::server::HttpOptions options;
  options.port = 0;
  options.max_body_bytes = 64 << 10;
  options.n_http_threads = 4;
  options.cache_reuse = 4;
  // The connection stays open for writing (cpp-httplib drops answers to a client that has
  // half-closed); an unfinished request ends by the read timeout, kept-alive ones at once.
  options.read_timeout_s = 0.05;
  options.keep_alive_timeout_s = 0;
  s->http = std::make_unique<specd::server::HttpServer>(
      options, *s->scheduler, *s->metrics, *s->models->tokenizer, s->chat.get(), limits);
  s->http->Bind();
  s->port = s->http->port();
  std::thread([http = s->http.get()] { http->Serve(); }).detach();
  std::fprintf(stderr, "fuzzing specd serve on 127.0.0.1:%d\n", s->port);
  return s;
}

[[noreturn]] void Finding(const char* what, std::string_view response) {
  std::fprintf(stderr, "FINDING: %s\n--- response (first 2 KB) ---\n%.*s\n", what,
               static_cast<int>(std::min<size_t>(response.size(), 2048)), response.data());
  std::abort();
}

int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) {
    Finding("the server no longer accepts connections", "");
  }
  return fd;
}

// Writes the input and reads until the server closes (after the read timeout when the input
// ends mid-request). Returns what it answered.
std::string Exchange(int port, const uint8_t* data, size_t size) {
  const int fd = Connect(port);
  size_t sent = 0;
  while (sent < size) {
    const ssize_t n = send(fd, data + sent, size - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may close early (a 400 on a bad request line)
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buffer[16384];
  pollfd p{fd, POLLIN, 0};
  // The server's own read timeout is 10 s; a minute of silence is a hang.
  for (;;) {
    const int ready = poll(&p, 1, 60000);
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) Finding("the server neither answered nor closed within 60 s", response);
    const ssize_t n = recv(fd, buffer, sizeof(buffer), 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      std::fprintf(stderr, "recv: %s after %zu bytes\n", std::strerror(errno), response.size());
      Finding("the connection failed", response);
    }
    if (n == 0) break;
    response.append(buffer, static_cast<size_t>(n));
  }
  close(fd);
  return response;
}

std::string_view Header(std::string_view head, std::string_view name) {
  for (size_t at = head.find("\r\n"); at != std::string_view::npos;) {
    const size_t end = head.find("\r\n", at + 2);
    std::string_view line = head.substr(at + 2, end - at - 2);
    if (line.size() > name.size() && line[name.size()] == ':' &&
        strncasecmp(line.data(), name.data(), name.size()) == 0) {
      line.remove_prefix(name.size() + 1);
      while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
      return line;
    }
    at = end;
  }
  return {};
}

// Checks each response with a Content-Length in order (pipelined requests); stops at the first
// streamed one. After a HEAD request (whose answer has a Content-Length and no body) the
// responses cannot be told apart: only the first status line is checked.
void CheckResponses(std::string_view request, std::string_view response) {
  const bool after_head_request = request.find("HEAD") != std::string_view::npos;
  while (!response.empty()) {
    if (response.substr(0, 9) != "HTTP/1.1 ") Finding("not an HTTP/1.1 status line", response);
    if (response.substr(9, 3) == "500") Finding("a 500: an exception escaped", response);
    const size_t head_end = response.find("\r\n\r\n");
    if (head_end == std::string_view::npos) Finding("headers without an end", response);
    const std::string_view head_lines = response.substr(0, head_end);
    const std::string_view length = Header(head_lines, "Content-Length");
    if (length.empty() || after_head_request) return;
    const size_t body_bytes = std::strtoull(std::string(length).c_str(), nullptr, 10);
    if (head_end + 4 + body_bytes > response.size()) Finding("a body cut short", response);
    const std::string_view body = response.substr(head_end + 4, body_bytes);
    if (Header(head_lines, "Content-Type").substr(0, 16) == "application/json" &&
        !nlohmann::json::accept(body)) {
      Finding("a JSON response that does not parse", response);
    }
    response.remove_prefix(head_end + 4 + body_bytes);
  }
}

// How many answers were 500s so far (an exception escaped a handler), from /metrics' counters:
// also those whose answer did not reach the client.
int64_t InternalErrors(const specd::server::Metrics& metrics) {
  const std::string text = metrics.Render();
  const std::string key = "specd:request_success_total{status=\"500\"} ";
  const size_t at = text.find(key);
  return at == std::string::npos ? 0 : std::strtoll(text.c_str() + at + key.size(), nullptr, 10);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ServerUnderTest* server = Start();
  const std::string response = Exchange(server->port, data, size);
  CheckResponses(std::string_view(reinterpret_cast<const char*>(data), size), response);
  if (InternalErrors(*server->metrics) > 0) Finding("a 500 counted in /metrics", response);
  return 0;
}
