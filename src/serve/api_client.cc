#include "serve/api_client.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "serve/httplib_include.h"
#include "serve/openai_api.h"

namespace fathom::serve {
namespace {

using nlohmann::json;

double Since(ClientClock::time_point t0) {
  return std::chrono::duration<double>(ClientClock::now() - t0).count();
}

void ReadUsage(const json& j, CompletionOutcome* out) {
  if (!j.contains("usage") || !j["usage"].is_object()) return;
  out->prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
  out->completion_tokens = j["usage"].value("completion_tokens", int64_t{0});
}

CompletionOutcome PostWhole(httplib::Client& cli, const std::string& body, ClientClock::time_point t0) {
  CompletionOutcome cr;
  cr.send = Since(t0);
  auto r = cli.Post("/v1/completions", body, "application/json");
  cr.finish = Since(t0);
  if (!r) {
    cr.error = "transport: " + httplib::to_string(r.error());
  } else if (r->status != 200) {
    cr.error = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 300);
  } else {
    ReadCompletionResponse(r->body, &cr);
  }
  return cr;
}

CompletionOutcome PostStreamed(httplib::Client& cli, const std::string& body, ClientClock::time_point t0,
                               ClientClock::time_point deadline) {
  CompletionOutcome cr;
  CompletionStream stream(&cr);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  bool timed_out = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    stream.Feed(std::string_view(data, n), Since(t0));
    if (ClientClock::now() > deadline) timed_out = true;
    return !timed_out && cr.error.empty();
  };
  cr.send = Since(t0);
  auto r = cli.send(req);
  cr.finish = Since(t0);
  if (!cr.error.empty()) return cr;
  if (timed_out) cr.error = "the overall deadline passed";
  else if (!r) cr.error = "transport: " + httplib::to_string(r.error());
  else if (r->status != 200) cr.error = "HTTP " + std::to_string(r->status) + ": " + stream.raw().substr(0, 300);
  else if (!stream.done()) cr.error = "the stream ended without [DONE]";
  else cr.ok = true;
  return cr;
}

}  // namespace

void CompletionStream::Feed(std::string_view bytes, double now) {
  raw_.append(bytes);
  events_.clear();
  sse_.Feed(bytes, &events_);
  for (const SseMessage& e : events_)
    if (!done_ && out_->error.empty()) OnData(e.data, now);
}

void CompletionStream::OnData(const std::string& data, double now) {
  if (data == "[DONE]") {
    done_ = true;
    return;
  }
  // A server's reply is outside input too: no tree deeper than the depth limit is built.
  if (auto deep = JsonDepthError(data)) {
    out_->error = "SSE data " + *deep;
    return;
  }
  const json j = json::parse(data, nullptr, false);
  if (j.is_discarded()) {
    out_->error = "unparsable SSE data: " + data.substr(0, 200);
    return;
  }
  if (j.contains("error")) {
    out_->error = "stream error: " + j["error"].dump();
    return;
  }
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const json& c = j["choices"][0];
    if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty() &&
        out_->first_token < 0)
      out_->first_token = now;
    if (c.contains("finish_reason") && c["finish_reason"].is_string())
      out_->finish_reason = c["finish_reason"].get<std::string>();
  }
  ReadUsage(j, out_);
}

void ReadCompletionResponse(const std::string& body, CompletionOutcome* out) {
  if (auto deep = JsonDepthError(body)) {
    out->error = "the response " + *deep;
    return;
  }
  const json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("usage") || !j.contains("choices") ||
      !j["choices"].is_array() || j["choices"].empty() || !j["choices"][0].is_object()) {
    out->error = "malformed response: " + body.substr(0, 300);
    return;
  }
  ReadUsage(j, out);
  const json& fr = j["choices"][0].value("finish_reason", json());
  if (fr.is_string()) out->finish_reason = fr.get<std::string>();
  out->ok = true;
}

CompletionOutcome PostCompletion(const std::string& host, int port, const std::string& body, bool stream,
                                 ClientClock::time_point t0, ClientClock::time_point deadline) {
  httplib::Client cli(host, port);
  cli.set_connection_timeout(30, 0);
  cli.set_write_timeout(30, 0);
  const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - ClientClock::now()).count();
  // Streams get a heartbeat every second; a whole response arrives at the end.
  cli.set_read_timeout(std::max<time_t>(1, stream ? std::min<time_t>(left, 60) : left), 0);
  return stream ? PostStreamed(cli, body, t0, deadline) : PostWhole(cli, body, t0);
}

Result<PrometheusText> ScrapeMetrics(const std::string& host, int port) {
  httplib::Client cli(host, port);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(10, 0);
  auto r = cli.Get("/metrics");
  if (!r) return Status::Error("GET /metrics: " + httplib::to_string(r.error()));
  if (r->status != 200) return Status::Error("GET /metrics: HTTP " + std::to_string(r->status));
  auto parsed = ParsePrometheusText(r->body);
  if (!parsed.ok()) return parsed.status().WithContext("GET /metrics");
  return parsed;
}

}  // namespace fathom::serve
