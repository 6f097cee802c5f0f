#include "serve/http_server.h"

#include <chrono>
#include <ctime>

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
  return r;
}

// One streamed response: the state its content provider keeps between calls.
struct StreamJob {
  StreamJob(const Tokenizer& tok, std::vector<std::string> stop) : gen(tok, std::move(stop)) {}
  std::shared_ptr<RequestStream> stream;
  TextGeneration gen;
  ResponseMeta meta;
  Endpoint endpoint = Endpoint::kCompletions;
  bool include_usage = false;
  bool started = false, finished = false;
  std::vector<TokenEvent> events;
};

// cpp-httplib 0.11 listens with a backlog of 5: a burst of new connections (32 clients
// connecting at once) overflows it and some clients see their first request fail. Linux
// lets listen() be called again on a listening socket to raise the backlog.
class BacklogServer : public httplib::Server {
 public:
  void RaiseBacklog(int n) {
    const socket_t s = svr_sock_;
    if (s != INVALID_SOCKET) ::listen(s, n);
  }
};

}  // namespace

HttpServer::HttpServer(const Tokenizer& tok, EngineLoop& loop, ModelLimits limits, ServerOptions opt)
    : tok_(tok), loop_(loop), limits_(limits), opt_(std::move(opt)), http_(std::make_unique<BacklogServer>()),
      seed_rng_(std::random_device{}()) {
  created_ = static_cast<int64_t>(std::time(nullptr));
  Routes();
}

HttpServer::~HttpServer() { Stop(); }

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
  const std::string got = req.get_header_value("Authorization");
  const std::string want = "Bearer " + opt_.api_key;
  // Compare every byte so that the time taken does not reveal the matching prefix.
  if (got.size() != want.size()) return false;
  unsigned diff = 0;
  for (size_t i = 0; i < got.size(); ++i) diff |= static_cast<unsigned>(got[i] ^ want[i]);
  return diff == 0;
}

void HttpServer::SendError(httplib::Response& res, const ApiError& e) {
  res.status = e.status;
  res.set_content(Dump(ErrorBody(e)), "application/json");
}

void HttpServer::Routes() {
  httplib::Server& s = *http_;
  const int threads = opt_.threads;
  s.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  s.set_payload_max_length(opt_.max_body_bytes);

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
}

void HttpServer::HandleMetrics(httplib::Response& res) {
  MetricsSnapshot m = loop_.Metrics();
  m.model = opt_.model_name;
  m.rejected_invalid += rejected_invalid_.load();
  m.rejected_unauthorized = rejected_unauthorized_.load();
  res.set_content(RenderPrometheus(m), "text/plain; version=0.0.4; charset=utf-8");
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
  ApiRequest ar;
  if (auto e = ParseApiRequest(endpoint, req.body, &ar)) return reject(*e);
  if (!ar.model.empty() && ar.model != opt_.model_name) {
    ApiError e = Error(404, "invalid_request_error", "The model `" + ar.model + "` does not exist.", "model_not_found");
    e.param = "model";
    return reject(e);
  }
  std::vector<int32_t> prompt;
  if (endpoint == Endpoint::kCompletions) {
    if (ar.prompt_is_ids) {
      prompt = ar.prompt_ids;
    } else {
      auto ids = tok_.Encode(ar.prompt, /*add_special_tokens=*/true);
      if (!ids.ok()) return reject(InvalidRequest("prompt", ids.status().message()));
      prompt = std::move(*ids);
    }
  } else {
    const ChatTemplate* tmpl = tok_.chat_template();
    if (!tmpl) return reject(InvalidRequest("messages", "this model's tokenizer has no chat template"));
    auto text = tmpl->Render(ar.messages, /*add_generation_prompt=*/true);
    if (!text.ok()) return reject(InvalidRequest("messages", text.status().message()));
    // The rendered prompt holds its special tokens as text already.
    auto ids = tok_.Encode(*text, /*add_special_tokens=*/false);
    if (!ids.ok()) return reject(InvalidRequest("messages", ids.status().message()));
    prompt = std::move(*ids);
  }
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
  if (Status st = sub.stream->WaitAdmitted(); !st.ok()) {
    // Failed before admission: the loop stopped; otherwise the engine refused it.
    if (!sub.stream->error().empty()) return SendError(res, Error(503, "service_unavailable", st.message()));
    return SendError(res, EngineRejection(endpoint, st.message()));
  }

  if (!ar.stream) {
    TextGeneration gen(tok_, ar.stop);
    std::vector<TokenEvent> events;
    while (!gen.done()) {
      events.clear();
      if (!sub.stream->Wait(&events, std::chrono::milliseconds(1000))) {
        if (sub.stream->over()) break;
        continue;
      }
      for (const TokenEvent& e : events) gen.Push(e);
    }
    if (gen.stopped_by_string()) loop_.Cancel(sub.stream, /*stop_string=*/true);
    if (std::string err = sub.stream->error(); !err.empty())
      return SendError(res, Error(500, "internal_error", err));
    res.set_content(Dump(CompletionResponse(endpoint, meta, Summarize(gen, *sub.stream))), "application/json");
    return;
  }

  auto job = std::make_shared<StreamJob>(tok_, ar.stop);
  job->stream = sub.stream;
  job->meta = meta;
  job->endpoint = endpoint;
  job->include_usage = ar.include_usage;
  res.set_header("Cache-Control", "no-cache");
  handed_off = true;
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, job](size_t, httplib::DataSink& sink) {
        if (job->finished) {
          sink.done();
          return true;
        }
        std::string out;
        if (!job->started) {
          job->started = true;
          // Chat streams open with the assistant's role, as OpenAI's do.
          if (job->endpoint == Endpoint::kChatCompletions)
            out += SseEvent(StreamChunk(job->endpoint, job->meta, "", true, "", job->include_usage));
        }
        job->events.clear();
        const bool got = job->stream->Wait(&job->events, std::chrono::milliseconds(opt_.heartbeat_ms));
        if (!got && !job->stream->over()) {
          // Nothing yet: an SSE comment, which clients ignore; a failed write means the
          // client is gone (the releaser then cancels the request).
          out += ": keep-alive\n\n";
          return sink.write(out.data(), out.size());
        }
        std::string text;
        for (const TokenEvent& e : job->events) text += job->gen.Push(e);
        if (!text.empty())
          out += SseEvent(StreamChunk(job->endpoint, job->meta, text, false, "", job->include_usage));
        const std::string err = job->stream->error();
        if (!err.empty()) {
          out += SseEvent(ErrorBody(Error(500, "internal_error", err)));
          out += kSseDone;
          job->finished = true;
        } else if (job->gen.done() || job->stream->over()) {
          if (job->gen.stopped_by_string()) loop_.Cancel(job->stream, /*stop_string=*/true);
          const CompletionResult r = Summarize(job->gen, *job->stream);
          out += SseEvent(StreamChunk(job->endpoint, job->meta, "", false,
                                      r.finish_reason.empty() ? "stop" : r.finish_reason, job->include_usage));
          if (job->include_usage) out += SseEvent(UsageChunk(job->endpoint, job->meta, r));
          out += kSseDone;
          job->finished = true;
        }
        if (!out.empty() && !sink.write(out.data(), out.size())) return false;
        if (job->finished) sink.done();
        return true;
      },
      [this, job](bool) {
        // Runs when the response is destroyed: finished, cut by a failed write, or the
        // server stopping. A request still running is cancelled (a no-op once finished).
        loop_.Cancel(job->stream, /*stop_string=*/false);
        HandlerDone();
      });
}

Status HttpServer::Bind() {
  if (opt_.port == 0) {
    port_ = http_->bind_to_any_port(opt_.host);
    if (port_ <= 0) return Status::Error("--host: cannot bind to any port on '" + opt_.host + "'");
  } else {
    if (!http_->bind_to_port(opt_.host, opt_.port))
      return Status::Error("--port: cannot bind to " + opt_.host + ":" + std::to_string(opt_.port) +
                           " (in use, or not an address of this machine)");
    port_ = opt_.port;
  }
  static_cast<BacklogServer&>(*http_).RaiseBacklog(1024);
  return Status::Ok();
}

Status HttpServer::Listen() {
  listening_ = true;
  const bool ok = stop_requested_ || http_->listen_after_bind();
  listening_ = false;
  if (!ok) return Status::Error("listening on " + opt_.host + " failed");
  return Status::Ok();
}

Status HttpServer::Start() {
  FATHOM_RETURN_IF_ERROR(Bind());
  listen_thread_ = std::thread([this] { (void)Listen(); });
  // stop() is a no-op until the accept loop runs; wait for it (bounded) so that Stop works.
  for (int i = 0; i < 10000 && !http_->is_running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (!http_->is_running()) return Status::Error("the HTTP server did not start");
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
  // stop() is a no-op until the accept loop runs: if Listen is starting, wait for it.
  for (int i = 0; i < 10000 && listening_ && !http_->is_running(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  if (http_->is_running()) http_->stop();
  if (listen_thread_.joinable()) listen_thread_.join();
}

}  // namespace fathom::serve
