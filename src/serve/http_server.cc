#include "serve/http_server.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>

#include "serve/connection_loop.h"
#include "serve/httplib_include.h"
#include "serve/metrics.h"
#include "serve/text_generation.h"

namespace fathom::serve {
namespace {

using nlohmann::json;

ApiError Error(int status, std::string type, std::string message, std::string code = "") {
  ApiError e;
  e.status = status;
  e.type = std::move(type);
  e.message = std::move(message);
  e.code = std::move(code);
  return e;
}

// The engine's validation messages start with the field they name ("max_tokens: ...");
// report it as the OpenAI parameter it came from.
ApiError EngineRejection(Endpoint endpoint, const std::string& message) {
  const std::string prompt = endpoint == Endpoint::kCompletions ? "prompt" : "messages";
  std::string param;
  if (message.rfind("prompt", 0) == 0) param = prompt;
  else if (message.rfind("max_tokens", 0) == 0) param = "max_tokens";
  else if (message.rfind("loops", 0) == 0) param = "max_loops";
  else if (message.rfind("exit", 0) == 0) param = "exit_threshold";
  return InvalidRequest(param, message);
}

CompletionResult Summarize(const TextGeneration& gen, const RequestStream& stream) {
  CompletionResult r;
  r.text = gen.text();
  r.finish_reason = gen.finish_reason();
  r.prompt_tokens = stream.prompt_tokens();
  r.completion_tokens = gen.tokens();
  r.mean_exit_depth = gen.mean_depth();
  r.mean_budget = gen.mean_budget();
  return r;
}

// When a request's generation must have ended (request_timeout_ms; none for 0).
using Deadline = std::optional<std::chrono::steady_clock::time_point>;
Deadline DeadlineAfter(int64_t ms) {
  if (ms <= 0) return std::nullopt;
  return std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
}
bool Expired(const Deadline& d) { return d && std::chrono::steady_clock::now() >= *d; }

ApiError TimeoutError(int64_t ms) {
  return Error(408, "timeout_error",
               "the request did not finish within " + std::to_string(ms) +
                   " ms (--request-timeout-s) and was cancelled; ask for fewer tokens",
               "request_timeout");
}

// cpp-httplib's request handling without its accept loop: the ConnectionLoop accepts and
// reads, and runs each request through process_request (protected, hence this subclass).
class FrontServer : public httplib::Server {
 public:
  bool RunOne(httplib::Stream& stream, bool close_connection, bool* closed) {
    bool c = false;
    const bool ok = process_request(stream, close_connection, c, nullptr);
    *closed = c;
    return ok;
  }
  int listen_socket() const { return svr_sock_; }
  // cpp-httplib 0.11 listens with a backlog of 5: a burst of new connections (32 clients
  // connecting at once) overflows it and some clients see their first request fail. Linux
  // lets listen() be called again on a listening socket to raise the backlog.
  void RaiseBacklog(int n) {
    const socket_t s = svr_sock_;
    if (s != INVALID_SOCKET) ::listen(s, n);
  }
  // cpp-httplib ends chunked responses (open streams) once svr_sock_ is invalid, as its
  // own stop() makes it; the descriptor itself stays open until the ConnectionLoop, which
  // polls it, has returned (closing it earlier would let the number be reused under it).
  void MarkStopping() {
    const socket_t s = svr_sock_.exchange(INVALID_SOCKET);
    if (s != INVALID_SOCKET) stopped_sock_ = s;
  }
  // Server::stop() closes the socket only after its own accept loop ran, which ours replaces.
  void CloseListenSocket() {
    MarkStopping();
    const socket_t s = stopped_sock_.exchange(INVALID_SOCKET);
    if (s != INVALID_SOCKET) ::close(s);
  }

 private:
  std::atomic<socket_t> stopped_sock_{INVALID_SOCKET};
};

ModelLimits WithServerLimits(ModelLimits l, const ServerOptions& o, const Tokenizer& tok) {
  l.think_start_id = tok.TokenToId("<think>").value_or(-1);
  l.think_end_id = tok.TokenToId("</think>").value_or(-1);
  l.max_prompt_tokens = o.max_prompt_tokens;
  l.max_output_tokens = o.max_output_tokens;
  l.default_deadline_ms = o.default_deadline_ms;
  l.default_thinking_budget = o.default_thinking_budget;
  return l;
}

}  // namespace

// One streamed response: the state its content provider keeps between calls.
struct HttpServer::StreamJob {
  StreamJob(const Tokenizer& tok, std::vector<std::string> stop) : gen(tok, std::move(stop)) {}
  std::shared_ptr<RequestStream> stream;
  TextGeneration gen;
  ResponseMeta meta;
  Endpoint endpoint = Endpoint::kCompletions;
  Deadline deadline;
  bool include_usage = false;
  bool started = false, finished = false;
  std::vector<TokenEvent> events;
};

bool ConstantTimeEquals(std::string_view got, std::string_view want) {
  // Every byte of `want` is compared whatever `got` holds; a length difference is folded
  // into the same accumulator instead of returning early.
  unsigned diff = got.size() == want.size() ? 0u : 1u;
  for (size_t i = 0; i < want.size(); ++i) {
    const unsigned char g = i < got.size() ? static_cast<unsigned char>(got[i]) : 0;
    diff |= static_cast<unsigned>(g ^ static_cast<unsigned char>(want[i]));
  }
  return diff == 0;
}

Result<std::string> ReadApiKeyFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Error("--api-key-file: cannot read '" + path + "'");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) return Status::Error("--api-key-file: cannot read '" + path + "'");
  std::string key = ss.str();
  while (!key.empty() && (key.back() == '\n' || key.back() == '\r')) key.pop_back();
  if (key.empty()) return Status::Error("--api-key-file: '" + path + "' is empty");
  for (size_t i = 0; i < key.size(); ++i) {
    const auto c = static_cast<unsigned char>(key[i]);
    if (c <= ' ' || c == 0x7f)
      return Status::Error("--api-key-file: '" + path + "' holds a space or control character at byte " +
                           std::to_string(i) + " (the key must be one line of visible characters)");
  }
  return key;
}

HttpServer::HttpServer(const Tokenizer& tok, EngineLoop& loop, ModelLimits limits, ServerOptions opt)
    : tok_(tok), loop_(loop), limits_(WithServerLimits(limits, opt, tok)), opt_(std::move(opt)),
      http_(std::make_unique<FrontServer>()), seed_rng_(std::random_device{}()) {
  created_ = static_cast<int64_t>(std::time(nullptr));
  Routes();
}

HttpServer::~HttpServer() {
  Stop();
  static_cast<FrontServer&>(*http_).CloseListenSocket();
}

ConnectionStats HttpServer::connection_stats() const { return conns_ ? conns_->stats() : ConnectionStats{}; }

uint64_t HttpServer::NextSeed() {
  std::lock_guard<std::mutex> lk(mu_);
  return seed_rng_();
}

void HttpServer::HandlerDone() {
  std::lock_guard<std::mutex> lk(mu_);
  if (--active_ == 0) idle_cv_.notify_all();
}

bool HttpServer::Authorized(const httplib::Request& req) const {
  if (opt_.api_key.empty()) return true;
  return ConstantTimeEquals(req.get_header_value("Authorization"), "Bearer " + opt_.api_key);
}

void HttpServer::SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(Dump(ErrorBody(e)), "application/json");
}

void HttpServer::Routes() {
  httplib::Server& s = *http_;
  s.set_payload_max_length(opt_.max_body_bytes);
  // Only for the Keep-Alive header it writes: the ConnectionLoop enforces both.
  s.set_keep_alive_timeout(std::max(1, opt_.idle_timeout_ms / 1000));
  s.set_keep_alive_max_count(static_cast<size_t>(ConnectionOptions{}.max_requests_per_connection));

  s.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    if (req.path.rfind("/v1/", 0) != 0 || Authorized(req)) return httplib::Server::HandlerResponse::Unhandled;
    ++rejected_unauthorized_;
    SendError(res, Error(401, "invalid_request_error",
                         "Incorrect API key provided: pass it as 'Authorization: Bearer <key>'", "invalid_api_key"));
    return httplib::Server::HandlerResponse::Handled;
  });
  // Errors httplib raises itself (no route, body too large, a malformed request line)
  // get OpenAI's error body too; responses that already have a body keep it.
  s.set_error_handler(httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string msg;
    switch (res.status) {
      case 404: msg = "no route for " + req.method + " " + req.path; break;
      case 413: msg = "the request body exceeds " + std::to_string(opt_.max_body_bytes) + " bytes"; break;
      default: msg = "HTTP " + std::to_string(res.status); break;
    }
    SendError(res, Error(res.status, res.status == 404 ? "not_found_error" : "invalid_request_error", msg));
    return httplib::Server::HandlerResponse::Handled;
  }));
  s.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    std::string what = "internal error";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = std::string("internal error: ") + e.what();
    } catch (...) {
    }
    SendError(res, Error(500, "internal_error", what));
  });

  s.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(Endpoint::kCompletions, req, res);
  });
  s.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleGenerate(Endpoint::kChatCompletions, req, res);
  });
  for (const char* path : {"/v1/completions", "/v1/chat/completions"})
    s.Get(path, [this](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", "POST");
      SendError(res, Error(405, "invalid_request_error", req.path + " takes POST"));
    });
  s.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(Dump(ModelList(opt_.model_name, created_)), "application/json");
  });
  s.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    const bool draining = loop_.draining();
    res.status = draining ? 503 : 200;
    res.set_content(draining ? "{\"status\":\"draining\"}" : "{\"status\":\"ok\"}", "application/json");
  });
  s.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) { HandleMetrics(res); });
  s.Post("/v1/admin/reclaim_notice",
         [this](const httplib::Request& req, httplib::Response& res) { HandleReclaim(req, res); });
}

void HttpServer::HandleReclaim(const httplib::Request& req, httplib::Response& res) {
  // The pre-routing handler has checked the key when there is one; an admin endpoint must
  // not be open on a server that has none.
  if (opt_.api_key.empty())
    return SendError(res, Error(403, "permission_error",
                                "admin endpoints need the server to run with --api-key or --api-key-file"));
  json j;
  try {
    j = json::parse(req.body);
  } catch (const json::exception&) {
    return SendError(res, InvalidRequest("", "the request body is not valid JSON"));
  }
  const auto it = j.is_object() ? j.find("seconds") : j.end();
  if (it == j.end() || !it->is_number())
    return SendError(res, InvalidRequest("seconds", "'seconds' must be a number of seconds left"));
  const double seconds = it->get<double>();
  if (!(seconds >= 0 && seconds <= 1e9))
    return SendError(res, InvalidRequest("seconds", "'seconds' must be in [0, 1e9], found " + Dump(*it)));
  reclaim_retry_after_s_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(seconds)));
  loop_.NoticeReclaim(seconds);
  res.set_content(Dump(json{{"status", "reclaiming"}, {"seconds", seconds}}), "application/json");
}

void HttpServer::HandleMetrics(httplib::Response& res) {
  MetricsSnapshot m = loop_.Metrics();
  m.model = opt_.model_name;
  m.rejected_invalid += rejected_invalid_.load();
  m.rejected_unauthorized = rejected_unauthorized_.load();
  m.timed_out = timed_out_.load();
  const ConnectionStats c = connection_stats();
  m.connections_open = c.open;
  m.connections_accepted = c.accepted;
  m.connections_refused = c.refused;
  m.connections_idle_closed = c.idle_closed;
  m.connections_read_timeout = c.read_timeouts;
  m.connections_headers_too_large = c.headers_too_large;
  res.set_content(RenderPrometheus(m), "text/plain; version=0.0.4; charset=utf-8");
}

std::optional<ApiError> HttpServer::PromptIds(Endpoint endpoint, const ApiRequest& ar,
                                              std::vector<int32_t>* out) const {
  if (endpoint == Endpoint::kCompletions) {
    if (ar.prompt_is_ids) {
      *out = ar.prompt_ids;
      return std::nullopt;
    }
    auto ids = tok_.Encode(ar.prompt, /*add_special_tokens=*/true);
    if (!ids.ok()) return InvalidRequest("prompt", ids.status().message());
    *out = std::move(*ids);
    return std::nullopt;
  }
  const ChatTemplate* tmpl = tok_.chat_template();
  if (!tmpl) return InvalidRequest("messages", "this model's tokenizer has no chat template");
  auto text = tmpl->Render(ar.messages, /*add_generation_prompt=*/true, ar.enable_thinking);
  if (!text.ok()) return InvalidRequest("messages", text.status().message());
  // The rendered prompt holds its special tokens as text already.
  auto ids = tok_.Encode(*text, /*add_special_tokens=*/false);
  if (!ids.ok()) return InvalidRequest("messages", ids.status().message());
  *out = std::move(*ids);
  return std::nullopt;
}

void HttpServer::HandleGenerate(Endpoint endpoint, const httplib::Request& req, httplib::Response& res) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    ++active_;
  }
  // Streams hand their count to the response's releaser; every other path ends here.
  bool handed_off = false;
  struct Guard {
    HttpServer* self;
    bool* handed_off;
    ~Guard() {
      if (!*handed_off) self->HandlerDone();
    }
  } guard{this, &handed_off};

  auto reject = [&](const ApiError& e) {
    if (e.status == 400) ++rejected_invalid_;
    SendError(res, e);
  };
  // The request timeout counts from here: the request has arrived (reading it has its own
  // limit, ServerOptions::read_timeout_ms).
  const Deadline deadline = DeadlineAfter(opt_.request_timeout_ms);
  ApiRequest ar;
  if (auto e = ParseApiRequest(endpoint, req.body, &ar)) return reject(*e);
  if (!ar.model.empty() && ar.model != opt_.model_name) {
    ApiError e = Error(404, "invalid_request_error", "The model `" + ar.model + "` does not exist.", "model_not_found");
    e.param = "model";
    return reject(e);
  }
  std::vector<int32_t> prompt;
  if (auto e = PromptIds(endpoint, ar, &prompt)) return reject(*e);
  RequestSpec spec;
  if (auto e = BuildRequestSpec(ar, std::move(prompt), limits_, tok_.stop_ids(), NextSeed(), &spec))
    return reject(*e);
  ResponseMeta meta;
  const int64_t n = next_id_++;
  meta.id = (endpoint == Endpoint::kCompletions ? "cmpl-" : "chatcmpl-") + std::to_string(n);
  meta.created = static_cast<int64_t>(std::time(nullptr));
  meta.model = opt_.model_name;
  spec.name = meta.id;

  Submission sub = loop_.Submit(std::move(spec));
  if (sub.code == SubmitCode::kOverloaded) {
    res.set_header("Retry-After", std::to_string(opt_.retry_after_s));
    return SendError(res, Error(429, "rate_limit_error", sub.message));
  }
  if (sub.code == SubmitCode::kDraining) return SendError(res, Error(503, "service_unavailable", sub.message));
  if (sub.code == SubmitCode::kReclaimed) {
    res.set_header("Retry-After", std::to_string(reclaim_retry_after_s_.load()));
    return SendError(res, Error(503, "service_unavailable", sub.message));
  }
  if (Status st = sub.stream->WaitAdmitted(); !st.ok()) {
    // Failed before admission: the loop stopped; otherwise the engine refused it.
    if (!sub.stream->error().empty()) return SendError(res, Error(503, "service_unavailable", st.message()));
    return SendError(res, EngineRejection(endpoint, st.message()));
  }
  if (!ar.stream) return AnswerWhole(endpoint, ar, sub.stream, meta, deadline, res);

  auto job = std::make_shared<StreamJob>(tok_, ar.stop);
  job->deadline = deadline;
  job->stream = sub.stream;
  job->meta = meta;
  job->endpoint = endpoint;
  job->include_usage = ar.include_usage;
  res.set_header("Cache-Control", "no-cache");
  handed_off = true;
  res.set_chunked_content_provider(
      "text/event-stream", [this, job](size_t, httplib::DataSink& sink) { return StreamStep(*job, sink); },
      [this, job](bool) {
        // Runs when the response is destroyed: finished, cut by a failed write, or the
        // server stopping. A request still running is cancelled (a no-op once finished).
        loop_.Cancel(job->stream, /*stop_string=*/false);
        HandlerDone();
      });
}

void HttpServer::AnswerWhole(Endpoint endpoint, const ApiRequest& ar, const std::shared_ptr<RequestStream>& stream,
                             const ResponseMeta& meta, const Deadline& deadline, httplib::Response& res) {
  TextGeneration gen(tok_, ar.stop);
  std::vector<TokenEvent> events;
  while (!gen.done()) {
    if (Expired(deadline)) {
      loop_.Cancel(stream, /*stop_string=*/false);
      ++timed_out_;
      return SendError(res, TimeoutError(opt_.request_timeout_ms));
    }
    if (CurrentClientGone()) {
      // Nobody will read the response: free the request's KV and slot now. (Streams
      // find this out from a failed write.)
      loop_.Cancel(stream, /*stop_string=*/false);
      res.status = 499;  // nginx's "client closed request"; it reaches no one
      return;
    }
    events.clear();
    // Short waits: each one ends with the checks above.
    if (!stream->Wait(&events, std::chrono::milliseconds(100))) {
      if (stream->over()) break;
      continue;
    }
    for (const TokenEvent& e : events) gen.Push(e);
  }
  if (gen.stopped_by_string()) loop_.Cancel(stream, /*stop_string=*/true);
  if (std::string err = stream->error(); !err.empty()) return SendError(res, Error(500, "internal_error", err));
  res.set_content(Dump(CompletionResponse(endpoint, meta, Summarize(gen, *stream))), "application/json");
}

bool HttpServer::StreamStep(StreamJob& job, httplib::DataSink& sink) {
  if (job.finished) {
    sink.done();
    return true;
  }
  std::string out;
  if (!job.started) {
    job.started = true;
    // Chat streams open with the assistant's role, as OpenAI's do.
    if (job.endpoint == Endpoint::kChatCompletions)
      out += SseEvent(StreamChunk(job.endpoint, job.meta, "", true, "", job.include_usage));
  }
  if (Expired(job.deadline)) {
    // Cancelled by the request timeout: the status line went out already, so the stream
    // ends with an error event (as OpenAI's do) and [DONE].
    loop_.Cancel(job.stream, /*stop_string=*/false);
    ++timed_out_;
    out += SseEvent(ErrorBody(TimeoutError(opt_.request_timeout_ms)));
    out += kSseDone;
    job.finished = true;
    if (!sink.write(out.data(), out.size())) return false;
    sink.done();
    return true;
  }
  job.events.clear();
  const bool got = job.stream->Wait(&job.events, std::chrono::milliseconds(opt_.heartbeat_ms));
  if (!got && !job.stream->over()) {
    // Nothing yet: an SSE comment, which clients ignore; a failed write means the client
    // is gone (the releaser then cancels the request).
    out += ": keep-alive\n\n";
    return sink.write(out.data(), out.size());
  }
  std::string text;
  for (const TokenEvent& e : job.events) text += job.gen.Push(e);
  if (!text.empty()) out += SseEvent(StreamChunk(job.endpoint, job.meta, text, false, "", job.include_usage));
  const std::string err = job.stream->error();
  if (!err.empty()) {
    out += SseEvent(ErrorBody(Error(500, "internal_error", err)));
    out += kSseDone;
    job.finished = true;
  } else if (job.gen.done() || job.stream->over()) {
    if (job.gen.stopped_by_string()) loop_.Cancel(job.stream, /*stop_string=*/true);
    const CompletionResult r = Summarize(job.gen, *job.stream);
    out += SseEvent(StreamChunk(job.endpoint, job.meta, "", false, r.finish_reason.empty() ? "stop" : r.finish_reason,
                                job.include_usage));
    if (job.include_usage) out += SseEvent(UsageChunk(job.endpoint, job.meta, r));
    out += kSseDone;
    job.finished = true;
  }
  if (!out.empty() && !sink.write(out.data(), out.size())) return false;
  if (job.finished) sink.done();
  return true;
}

namespace {

// Each connection is a descriptor: make sure max_connections of them fit under the
// process's limit (raising the soft limit up to the hard one), or say which flag to lower.
Status CheckDescriptorLimit(int max_connections) {
  constexpr rlim_t kSpare = 256;  // the model's files, logs, the engine's own
  const rlim_t need = static_cast<rlim_t>(max_connections) + kSpare;
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= need) return Status::Ok();
  if (lim.rlim_max == RLIM_INFINITY || lim.rlim_max >= need) {
    lim.rlim_cur = need;
    if (setrlimit(RLIMIT_NOFILE, &lim) == 0) return Status::Ok();
  }
  return Status::Error("--max-connections " + std::to_string(max_connections) + " needs " + std::to_string(need) +
                       " file descriptors but the limit (ulimit -n) is " + std::to_string(lim.rlim_max) +
                       ": lower --max-connections or raise the limit");
}

}  // namespace

Status HttpServer::Bind() {
  FATHOM_RETURN_IF_ERROR(CheckDescriptorLimit(opt_.max_connections));
  if (opt_.port == 0) {
    port_ = http_->bind_to_any_port(opt_.host);
    if (port_ <= 0) return Status::Error("--host: cannot bind to any port on '" + opt_.host + "'");
  } else {
    if (!http_->bind_to_port(opt_.host, opt_.port))
      return Status::Error("--port: cannot bind to " + opt_.host + ":" + std::to_string(opt_.port) +
                           " (in use, or not an address of this machine)");
    port_ = opt_.port;
  }
  auto& front = static_cast<FrontServer&>(*http_);
  front.RaiseBacklog(1024);
  ConnectionOptions copt;
  copt.max_connections = opt_.max_connections;
  copt.workers = opt_.threads;
  copt.idle_timeout_ms = opt_.idle_timeout_ms;
  copt.read_timeout_ms = opt_.read_timeout_ms;
  copt.max_body_bytes = opt_.max_body_bytes;
  conns_ = std::make_unique<ConnectionLoop>(
      front.listen_socket(), copt,
      [&front](httplib::Stream& strm, bool close_connection, bool* closed) {
        return front.RunOne(strm, close_connection, closed);
      });
  if (stop_requested_) conns_->Stop();
  return Status::Ok();
}

Status HttpServer::Listen() {
  if (!conns_) return Status::Error("Listen before Bind");
  Status s = conns_->Run();
  static_cast<FrontServer&>(*http_).CloseListenSocket();
  if (!s.ok()) return Status::Error("listening on " + opt_.host + " failed: " + s.message());
  return Status::Ok();
}

Status HttpServer::Start() {
  FATHOM_RETURN_IF_ERROR(Bind());
  listen_thread_ = std::thread([this] { (void)Listen(); });
  for (int i = 0; i < 10000 && !conns_->running() && !stop_requested_; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!conns_->running()) return Status::Error("the HTTP server did not start");
  return Status::Ok();
}

void HttpServer::Drain() {
  loop_.BeginDrain();
  {
    std::unique_lock<std::mutex> lk(mu_);
    idle_cv_.wait(lk, [&] { return active_ == 0; });
  }
  Stop();
}

void HttpServer::Stop() {
  stop_requested_ = true;
  static_cast<FrontServer&>(*http_).MarkStopping();
  if (conns_) conns_->Stop();
  if (listen_thread_.joinable()) listen_thread_.join();
}

}  // namespace fathom::serve
