// A small client of fathom's own OpenAI-compatible server (or any server of that API), for
// benchmarks and tests: one POST /v1/completions, whole or streamed (SSE, with
// stream_options.include_usage), timed from a caller's start time, and GET /metrics read
// back with ParsePrometheusText. Transport, HTTP and protocol failures are reported in
// CompletionOutcome::error, never thrown.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serve/prometheus_text.h"
#include "serve/sse_reader.h"

namespace fathom::serve {

using ClientClock = std::chrono::steady_clock;

// What a client saw of one request. Times in seconds from the caller's t0; -1: not reached.
struct CompletionOutcome {
  bool ok = false;
  std::string error;  // why not ok
  double send = -1, first_token = -1, finish = -1;
  int64_t prompt_tokens = 0, completion_tokens = 0;  // the response's "usage"
  std::string finish_reason;
};

// The chunks of one streamed completion, fed as the bytes arrive: the first chunk with
// non-empty text sets first_token, the last finish_reason and usage win, an "error" chunk
// or unparsable data sets error (and the rest of the stream should be abandoned).
class CompletionStream {
 public:
  explicit CompletionStream(CompletionOutcome* out) : out_(out) {}
  // `now`: when these bytes arrived (seconds from t0).
  void Feed(std::string_view bytes, double now);
  bool done() const { return done_; }  // "data: [DONE]" seen
  const std::string& raw() const { return raw_; }  // every byte fed (for error messages)

 private:
  void OnData(const std::string& data, double now);

  CompletionOutcome* out_;
  SseReader sse_;
  std::vector<SseMessage> events_;
  std::string raw_;
  bool done_ = false;
};

// A whole (not streamed) /v1/completions response body: usage and finish_reason, or an
// error "malformed response: <body>".
void ReadCompletionResponse(const std::string& body, CompletionOutcome* out);

// Sends one /v1/completions `body` (JSON; "stream" in it must match `stream`) to
// host:port and blocks until it completes, fails, or `deadline` passes (then error says
// so). t0: the time origin of the outcome's send / first_token / finish.
CompletionOutcome PostCompletion(const std::string& host, int port, const std::string& body, bool stream,
                                 ClientClock::time_point t0, ClientClock::time_point deadline);

// GET /metrics, parsed. Errors name the endpoint: transport, HTTP status or the parse.
Result<PrometheusText> ScrapeMetrics(const std::string& host, int port);

}  // namespace fathom::serve
