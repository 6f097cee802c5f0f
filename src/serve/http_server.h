// HttpServer: the OpenAI-compatible HTTP front end (cpp-httplib) over an EngineLoop.
//
//   POST /v1/completions, POST /v1/chat/completions   whole responses, or SSE streams
//                                                     ("data: {...}\n\n" ... "data: [DONE]")
//   GET  /v1/models, GET /health, GET /metrics        (Prometheus text)
//
// Each generation request is parsed (openai_api.h), tokenized, submitted to the loop and
// answered from its RequestStream. A streamed request whose client goes away (a write
// fails) is cancelled so that its KV blocks are freed; while a stream waits for tokens it
// sends an SSE comment every `heartbeat_ms`, which both keeps proxies from timing out and
// finds dead clients of requests still queued. Errors use OpenAI's error body; no input
// may crash the server.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/status.h"
#include "serve/engine_loop.h"
#include "serve/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
class Request;
class Response;
class DataSink;
}  // namespace httplib

namespace fathom::serve {

class ConnectionLoop;
struct ConnectionStats;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                  // 0: any free port (see port())
  std::string api_key;              // non-empty: /v1/* need "Authorization: Bearer <key>"
  std::string model_name;           // the served model's name ("model" in requests/responses)
  size_t max_body_bytes = size_t{8} << 20;  // larger bodies: 413
  int threads = 64;                 // HTTP worker threads (each open stream holds one)
  int heartbeat_ms = 1000;          // SSE keep-alive comment interval while waiting
  int retry_after_s = 1;            // Retry-After of a 429
  // Connections (connection_loop.h): open sockets beyond max_connections get a 503; a
  // keep-alive connection idle for idle_timeout_ms is closed; a request whose headers and
  // body do not arrive within read_timeout_ms of its first byte gets a 408.
  int max_connections = 512;
  int idle_timeout_ms = 5000;
  int read_timeout_ms = 10000;
  // A generation still running this long after its request arrived is cancelled and
  // answered 408 (a stream ends with an error event); 0: no limit.
  int64_t request_timeout_ms = 600000;
  // Longest prompt and largest max_tokens accepted (400 naming the field); 0: the model's
  // context is the only limit.
  int64_t max_prompt_tokens = 0;
  int64_t max_output_tokens = 0;
  // The deadline of a request that names none (deadline_ms); 0: none.
  int64_t default_deadline_ms = 0;
  // The thinking allowance of a request that names none (thinking_token_budget), scaled by
  // the budget b; -1: none. Needs <think> / </think> in the tokenizer.
  int64_t default_thinking_budget = -1;
};

// Whether `got` equals `want`, in a time that depends only on want's length: an API key
// must not be guessable a byte at a time from response times.
bool ConstantTimeEquals(std::string_view got, std::string_view want);

// The API key in `path` (`--api-key-file`, which keeps the key out of `ps`): the file's
// content without its trailing newline. Errors name the path: unreadable, empty, or a key
// with control characters or spaces (it travels in an HTTP header).
Result<std::string> ReadApiKeyFile(const std::string& path);

class HttpServer {
 public:
  // The tokenizer and loop must outlive the server.
  HttpServer(const Tokenizer& tok, EngineLoop& loop, ModelLimits limits, ServerOptions opt);
  ~HttpServer();  // Stop()

  // Binds the socket (errors name host and port, or the file-descriptor limit that
  // max_connections needs); port() is then known.
  Status Bind();
  int port() const { return port_; }
  // Serves on the calling thread until Stop() or Drain() (Bind first).
  Status Listen();
  // Bind + Listen on a thread of the server's own (tests); returns once accepting.
  Status Start();
  // Graceful shutdown: new generation requests get 503, the ones in flight run to their
  // end and their responses are written, then the server stops listening.
  void Drain();
  // Stops listening now (open streams are cut).
  void Stop();
  // The connection loop's counters (all zero before Bind).
  ConnectionStats connection_stats() const;

 private:
  void Routes();
  struct StreamJob;
  using Deadline = std::optional<std::chrono::steady_clock::time_point>;  // none: no timeout
  void HandleGenerate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res);
  // The request's prompt as token ids (the chat template rendered and tokenized).
  std::optional<ApiError> PromptIds(Endpoint endpoint, const ApiRequest& ar, std::vector<int32_t>* out) const;
  // Waits for a whole response (cancelling it at the deadline or when the client leaves).
  void AnswerWhole(Endpoint endpoint, const ApiRequest& ar, const std::shared_ptr<RequestStream>& stream,
                   const ResponseMeta& meta, const Deadline& deadline, httplib::Response& res);
  // One call of a stream's content provider: what arrived, a heartbeat, or the end.
  bool StreamStep(StreamJob& job, httplib::DataSink& sink);
  void HandleMetrics(httplib::Response& res);
  // POST /v1/admin/reclaim_notice {"seconds": T}: needs the API key (403 when the server
  // has none); new requests get 503 with Retry-After afterwards.
  void HandleReclaim(const httplib::Request& req, httplib::Response& res);
  bool Authorized(const httplib::Request& req) const;
  void SendError(httplib::Response& res, const ApiError& e);
  void HandlerDone();
  uint64_t NextSeed();

  const Tokenizer& tok_;
  EngineLoop& loop_;
  const ModelLimits limits_;
  const ServerOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  std::unique_ptr<ConnectionLoop> conns_;  // created by Bind
  int port_ = 0;
  int64_t created_ = 0;
  std::thread listen_thread_;
  std::atomic<bool> stop_requested_{false};
  std::atomic<int64_t> next_id_{1};
  std::atomic<int64_t> rejected_invalid_{0}, rejected_unauthorized_{0}, timed_out_{0};
  std::atomic<int64_t> reclaim_retry_after_s_{1};  // Retry-After of a 503 after a reclaim notice

  // Generation requests being answered (a stream counts until its response is released).
  std::mutex mu_;
  std::condition_variable idle_cv_;
  int64_t active_ = 0;
  std::mt19937_64 seed_rng_;
};

}  // namespace fathom::serve
