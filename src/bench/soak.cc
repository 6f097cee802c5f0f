#include "bench/soak.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "bench/stats.h"
#include "serve/engine_loop.h"
#include "serve/http_server.h"
#include "serve/httplib_include.h"
#include "serve/openai_api.h"
#include "serve/sse_reader.h"

namespace fathom::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

// A request the clients may send, by the seeded draw in Client::Once.
enum class Kind { kWhole, kStream, kStreamCancel, kDisconnect, kStop, kLong, kBad };

// Shared by the phase's threads.
struct PhaseState {
  int port = 0;
  int32_t vocab = 0;
  int64_t long_prompt = 0;            // a long prompt's tokens (see LongPromptTokens)
  int64_t max_positions = 0;
  Clock::time_point end;              // no new request after this
  std::mutex mu;
  SoakCounts counts;
  std::vector<std::string> failures;
  struct Sample {
    std::string body, text, finish;
  };
  std::vector<Sample> samples;        // greedy requests that ran to the end, for the alone check
  int64_t greedy_done = 0;

  void Fail(const std::string& what) {
    std::lock_guard<std::mutex> l(mu);
    if (failures.size() < 20) failures.push_back(what);
    ++counts.errors;
  }
};

std::string Body(const std::vector<int32_t>& prompt, int max_tokens, bool stream, const json& extra = json::object()) {
  json j = {{"model", "soak"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}, {"stream", stream}};
  if (stream) j["stream_options"] = {{"include_usage", true}};
  for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = it.value();
  return j.dump();
}

// A whole response's exactly-one-end check: one choice with a finish_reason.
bool WholeEndsOnce(const std::string& body, std::string* text, std::string* finish) {
  json j = json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains("choices") || !j["choices"].is_array() || j["choices"].size() != 1) return false;
  const json& c = j["choices"][0];
  if (!c.contains("finish_reason") || !c["finish_reason"].is_string() || !c.contains("text")) return false;
  *finish = c["finish_reason"].get<std::string>();
  *text = c["text"].get<std::string>();
  return *finish == "length" || *finish == "stop";
}

// A stream's events as they arrive: text, how many chunks carried a finish_reason, [DONE]
// and anything after it.
struct StreamCheck {
  serve::SseReader sse;
  std::vector<serve::SseMessage> events;
  std::string text, finish, problem;
  int finishes = 0, chunks = 0;
  bool done = false;

  void Feed(std::string_view bytes) {
    events.clear();
    sse.Feed(bytes, &events);
    for (const serve::SseMessage& e : events) On(e.data);
  }
  void On(const std::string& data) {
    if (done) problem = "an event after [DONE]";
    if (data == "[DONE]") {
      done = true;
      return;
    }
    json j = json::parse(data, nullptr, false);
    if (j.is_discarded() || j.contains("error")) {
      problem = "error event: " + data.substr(0, 200);
      return;
    }
    ++chunks;
    if (!j.contains("choices") || j["choices"].empty()) return;  // the usage chunk
    const json& c = j["choices"][0];
    if (c.contains("text") && c["text"].is_string()) text += c["text"].get<std::string>();
    if (c.contains("finish_reason") && c["finish_reason"].is_string()) {
      ++finishes;
      finish = c["finish_reason"].get<std::string>();
    }
  }
};

// Raw sockets for what httplib's client will not do: reset a connection mid-request,
// send malformed HTTP.
int Connect(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<const sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

bool SendAll(int fd, std::string_view s) {
  while (!s.empty()) {
    const ssize_t n = send(fd, s.data(), s.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    s.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

// Reads until the peer closes, `want` bytes arrived, or `timeout_ms` passes.
std::string ReadSome(int fd, size_t want, int timeout_ms) {
  std::string out;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  char buf[4096];
  while (out.size() < want && Clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (poll(&p, 1, static_cast<int>(std::max<int64_t>(left, 1))) <= 0) break;
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

void CloseWithReset(int fd) {
  linger l{1, 0};  // close sends RST: the client vanishes rather than closing politely
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
  close(fd);
}

std::string RawPost(const std::string& body) {
  return "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n" + body;
}

// One client thread of a phase.
class Client {
 public:
  Client(PhaseState& st, uint64_t seed, int sample_every) : st_(st), rng_(seed), sample_every_(sample_every) {}

  void Run() {
    while (Clock::now() < st_.end) Once();
  }

 private:
  int Uniform(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }

  std::vector<int32_t> Prompt(int64_t n) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    for (int32_t& id : p) id = Uniform(1, st_.vocab - 1);
    return p;
  }

  Kind Draw() {
    const int r = Uniform(0, 99);
    if (r < 24) return Kind::kWhole;
    if (r < 48) return Kind::kStream;
    if (r < 58) return Kind::kStreamCancel;
    if (r < 66) return Kind::kDisconnect;
    if (r < 78) return Kind::kStop;
    if (r < 88) return Kind::kLong;
    return Kind::kBad;
  }

  void Once() {
    {
      std::lock_guard<std::mutex> l(st_.mu);
      ++st_.counts.sent;
    }
    switch (Draw()) {
      case Kind::kWhole: return Whole(Body(Prompt(Uniform(2, 48)), Uniform(1, 24), false, Extra()), true);
      case Kind::kStream: return Stream(Body(Prompt(Uniform(2, 48)), Uniform(1, 24), true, Extra()), 0, true);
      case Kind::kStreamCancel: return Stream(Body(Prompt(Uniform(2, 48)), 32, true, {{"ignore_eos", true}}), Uniform(1, 4), false);
      case Kind::kDisconnect: return Disconnect();
      case Kind::kStop: return StopRequest();
      case Kind::kLong: {
        const bool stream = Uniform(0, 1) == 1;
        const std::string body = Body(Prompt(st_.long_prompt), 16, stream, {{"ignore_eos", true}});
        return stream ? Stream(body, 0, true) : Whole(body, true);
      }
      case Kind::kBad: return Bad();
    }
  }

  json Extra() { return Uniform(0, 1) ? json{{"ignore_eos", true}} : json::object(); }

  std::unique_ptr<httplib::Client> Http() {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", st_.port);
    c->set_connection_timeout(10, 0);
    c->set_read_timeout(120, 0);
    return c;
  }

  // A 4xx for a good request: the server refused it (overloaded, or the KV pool can never
  // hold it); counted, not a failure. Anything else not 200 is a failure.
  bool Accepted(int status, const std::string& what, const std::string& body) {
    if (status == 200) return true;
    std::lock_guard<std::mutex> l(st_.mu);
    if (status >= 400 && status < 500) {
      ++st_.counts.refused;
    } else {
      ++st_.counts.errors;
      if (st_.failures.size() < 20) st_.failures.push_back(what + ": HTTP " + std::to_string(status) + ": " + body.substr(0, 200));
    }
    return false;
  }

  void Whole(const std::string& body, bool sample) {
    auto r = Http()->Post("/v1/completions", body, "application/json");
    if (!r) return st_.Fail("whole request: transport: " + httplib::to_string(r.error()));
    if (!Accepted(r->status, "whole request", r->body)) return;
    std::string text, finish;
    if (!WholeEndsOnce(r->body, &text, &finish)) return st_.Fail("whole response without one end: " + r->body.substr(0, 200));
    Done(body, text, finish, false, sample);
  }

  // cancel_after > 0: the client closes the stream after that many chunks.
  void Stream(const std::string& body, int cancel_after, bool sample) {
    StreamCheck sc;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body;
    req.set_header("Content-Type", "application/json");
    bool cancelled = false;
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      sc.Feed(std::string_view(data, n));
      if (cancel_after > 0 && sc.chunks >= cancel_after && !sc.done) cancelled = true;
      return !cancelled;
    };
    auto r = Http()->send(req);
    if (cancelled) {
      std::lock_guard<std::mutex> l(st_.mu);
      ++st_.counts.stream_cancels;
      return;
    }
    if (!r) return st_.Fail("stream: transport: " + httplib::to_string(r.error()));
    if (!Accepted(r->status, "stream", sc.text)) return;
    if (!sc.problem.empty()) return st_.Fail("stream: " + sc.problem);
    if (sc.finishes != 1 || !sc.done)
      return st_.Fail("stream ended " + std::to_string(sc.finishes) + " times, [DONE] " + (sc.done ? "seen" : "missing"));
    if (cancel_after > 0) {  // it ended before the client could cancel: an ordinary stream
      Done(body, sc.text, sc.finish, true, false);
      return;
    }
    Done(body, sc.text, sc.finish, true, sample);
  }

  void Done(const std::string& body, const std::string& text, const std::string& finish, bool stream, bool sample) {
    std::lock_guard<std::mutex> l(st_.mu);
    ++(stream ? st_.counts.streamed : st_.counts.whole);
    if (finish == "stop" && body.find("\"stop\"") != std::string::npos) ++st_.counts.stopped;
    if (sample && ++st_.greedy_done % sample_every_ == 0) st_.samples.push_back({body, text, finish});
  }

  // A whole request whose client resets the connection while it runs.
  void Disconnect() {
    const int fd = Connect(st_.port);
    if (fd < 0) return st_.Fail("connect failed");
    const bool sent = SendAll(fd, RawPost(Body(Prompt(Uniform(8, 48)), 48, false, {{"ignore_eos", true}})));
    std::this_thread::sleep_for(std::chrono::milliseconds(Uniform(5, 80)));
    CloseWithReset(fd);
    if (!sent) return st_.Fail("send failed");
    std::lock_guard<std::mutex> l(st_.mu);
    ++st_.counts.disconnects;
  }

  void StopRequest() {
    static const char* kStops[] = {"e", "a", " t", "\n", "s"};
    json extra = {{"stop", {kStops[Uniform(0, 4)], kStops[Uniform(0, 4)]}}, {"ignore_eos", true}};
    const std::string body = Body(Prompt(Uniform(2, 32)), 32, Uniform(0, 1) == 1, extra);
    if (body.find("\"stream\":true") != std::string::npos) Stream(body, 0, false);
    else Whole(body, false);
  }

  // Requests that must be answered 4xx: never a 5xx, a hang or a crash.
  void Bad() {
    const std::string deep = std::string(100, '[') + "1" + std::string(100, ']');
    const std::vector<std::string> bodies = {
        "{not json",
        R"({"prompt": 5})",
        R"({"prompt": [1, 2], "n": 2})",
        R"({"prompt": [1, 2], "max_tokens": 100000000})",
        R"({"prompt": [2147483647], "max_tokens": 2})",
        R"({"prompt": [], "max_tokens": 2})",
        R"({"prompt": )" + deep + "}",
        Body(Prompt(st_.max_positions + 8), 4, false),
        R"({"prompt": [1], "temperature": -3})",
    };
    const int pick = Uniform(0, static_cast<int>(bodies.size()));
    int status = 0;
    if (pick == static_cast<int>(bodies.size())) {
      status = RawGarbage();
    } else {
      auto r = Http()->Post("/v1/completions", bodies[static_cast<size_t>(pick)], "application/json");
      if (!r) return st_.Fail("bad request " + std::to_string(pick) + ": transport: " + httplib::to_string(r.error()));
      status = r->status;
    }
    // Malformed HTTP may also be answered by closing the connection (status -1).
    if ((status >= 400 && status < 500) || status == -1) {
      std::lock_guard<std::mutex> l(st_.mu);
      ++st_.counts.bad;
      return;
    }
    st_.Fail("bad request " + std::to_string(pick) + " answered " + std::to_string(status));
  }

  // Malformed HTTP: the status of the reply; -1: the server closed without one; 0: neither
  // within 5 s (a hang).
  int RawGarbage() {
    const int fd = Connect(st_.port);
    if (fd < 0) return 0;
    static const char* kGarbage[] = {"GARBAGE\r\n\r\n", "POST /v1/completions HTTP/1.1\r\nContent-Length: -5\r\n\r\n",
                                     "GET /\x01\x02 HTTP/1.1\r\n\r\n"};
    SendAll(fd, kGarbage[Uniform(0, 2)]);
    const auto start = Clock::now();
    const std::string reply = ReadSome(fd, 12, 5000);
    close(fd);
    if (reply.size() >= 12 && reply.compare(0, 5, "HTTP/") == 0) return std::atoi(reply.substr(9, 3).c_str());
    return Seconds(start, Clock::now()) < 4.5 ? -1 : 0;
  }

  PhaseState& st_;
  std::mt19937_64 rng_;
  const int sample_every_;
};

// GET /health on a new connection every interval (and VmRSS), until `stop`. The records
// are allocated and touched up front (for twice the planned run), so that the soak's own
// bookkeeping does not show as resident-memory growth (a 1-hour run's latencies and RSS
// samples, grown as they came, were 1.7 MB of the process's 80 MB). RSS is read at every
// probe: sampled once a second, the warm-up window's peak (2.5 s of a 10 s run) was missed.
struct Probe {
  Probe(double duration_s, int interval_ms) {
    ms.resize(static_cast<size_t>(2 * duration_s * 1000 / std::max(interval_ms, 1)) + 1024);
    ms.clear();  // keeps the touched capacity
    rss.resize(ms.capacity());
    rss.clear();
  }
  std::vector<double> ms;
  int64_t failures = 0;
  std::vector<std::pair<double, int64_t>> rss;  // (seconds since the run's start, KiB)
};

void RunProbe(int port, int interval_ms, Clock::time_point t0, const std::atomic<bool>& stop, Probe* out) {
  while (!stop.load()) {
    httplib::Client c("127.0.0.1", port);
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(2, 0);
    const auto a = Clock::now();
    auto r = c.Get("/health");
    const auto b = Clock::now();
    if (r && r->status == 200) out->ms.push_back(1e3 * Seconds(a, b));
    else ++out->failures;
    out->rss.emplace_back(Seconds(t0, b), ResidentKb());
    std::this_thread::sleep_for(std::chrono::milliseconds(interval_ms));
  }
}

// The longest prompt (with 16 output tokens) that fits in 60% of the pool: one runs, two
// or three together overrun it, and every client's short requests compete for what is left.
int64_t LongPromptTokens(const Engine& e, int64_t max_positions) {
  const int64_t blocks = e.kv().pool().num_blocks();
  int64_t best = 8;
  for (int64_t p = 8; p + 16 < max_positions; p += 8)
    if (e.kv().BlocksFor(p, p + 16) * 10 <= blocks * 6) best = p;
  return best;
}

// The sampled requests run alone on a fresh engine: same parse, same spec, same options.
void CheckSamples(const Model& model, const Tokenizer& tok, const EngineOptions& eo, PhaseState& st, SoakPhase* ph,
                  int max_samples) {
  for (const PhaseState::Sample& s : st.samples) {
    if (ph->samples >= max_samples) break;
    ++ph->samples;
    serve::ApiRequest ar;
    auto e = Engine::Create(model, eo);
    if (!e.ok()) return st.Fail("sample engine: " + e.status().message());
    RequestSpec spec;
    if (serve::ParseApiRequest(serve::Endpoint::kCompletions, s.body, &ar) ||
        serve::BuildRequestSpec(ar, ar.prompt_ids, serve::LimitsOf(model, **e), tok.stop_ids(), 0, &spec))
      return st.Fail("sample: the server accepted a body its own parser refuses: " + s.body.substr(0, 100));
    auto id = (*e)->AddRequest(spec);
    if (!id.ok() || !(*e)->RunToCompletion().ok()) return st.Fail("sample: the engine alone failed");
    const SchedRequestState& rs = (*e)->request(*id);
    auto text = tok.Decode(rs.tokens, true);
    const std::string finish(FinishReasonName(rs.finish));
    if (!text.ok() || *text != s.text || finish != s.finish) {
      ++ph->sample_mismatches;
      st.Fail("sample differs from the request run alone (" + s.finish + " vs " + finish + "): " + s.body.substr(0, 120));
    }
  }
}

// Waits (bounded) for the loop to have nothing pending; false if it never did.
bool Drain(serve::EngineLoop& loop) {
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (loop.pending() > 0 && Clock::now() < deadline) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return loop.pending() == 0;
}

int64_t Ends(const serve::MetricsSnapshot& m) { return m.finished_length + m.finished_stop + m.cancelled + m.failed; }

// The phase's end-of-run checks: nothing pending, KV all free, ends accounted for.
void CheckIdle(serve::EngineLoop& loop, PhaseState& st, SoakPhase* ph, SoakResult* res) {
  if (!Drain(loop)) {
    res->lost += loop.pending();
    st.Fail(std::to_string(loop.pending()) + " requests still pending 60 s after the phase");
  }
  // The loop's snapshot is refreshed after its steps: wait for the one after the last end.
  serve::MetricsSnapshot m = loop.Metrics();
  for (int i = 0; i < 100 && (m.kv_blocks_used != 0 || m.running != 0 || m.waiting != 0); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    m = loop.Metrics();
  }
  ph->server_ends = Ends(m);
  ph->preemptions = m.preemptions;
  ph->steps = m.steps;
  ph->output_tokens = m.output_tokens;
  ph->kv_blocks_used_at_idle = m.kv_blocks_used;
  res->leaked_blocks += m.kv_blocks_used;
  if (m.kv_blocks_used != 0 || m.running != 0 || m.waiting != 0)
    st.Fail("at idle: " + std::to_string(m.kv_blocks_used) + " KV blocks used, " + std::to_string(m.running) +
            " running, " + std::to_string(m.waiting) + " waiting");
  const SoakCounts& c = st.counts;
  const int64_t accepted = c.whole + c.streamed + c.stream_cancels;
  if (ph->server_ends < accepted || ph->server_ends > accepted + c.disconnects)
    st.Fail("the server ended " + std::to_string(ph->server_ends) + " requests; its clients saw " +
            std::to_string(accepted) + " accepted and left " + std::to_string(c.disconnects) + " unanswered");
}

Result<SoakPhase> RunPhase(const Model& model, const Tokenizer& tok, const SoakOptions& opt, SchedMode mode,
                           double seconds, uint64_t seed, Clock::time_point t0, Probe* probe, SoakResult* res) {
  EngineOptions eo = opt.engine;
  eo.mode = mode;
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, eo));
  PhaseState st;
  st.vocab = static_cast<int32_t>(std::min<int64_t>(tok.vocab_size(), model.spec().vocab));
  const serve::ModelLimits limits = serve::LimitsOf(model, *engine);
  st.max_positions = limits.max_positions;
  st.long_prompt = LongPromptTokens(*engine, limits.max_positions);
  SoakPhase ph;
  ph.scheduler = std::string(SchedModeName(mode));
  ph.kv_blocks_total = engine->kv().pool().num_blocks();
  serve::EngineLoopOptions lo;
  lo.max_pending = 4 * opt.clients + 16;
  serve::EngineLoop loop(std::move(engine), lo);
  serve::ServerOptions so;
  so.port = 0;
  so.model_name = "soak";
  so.threads = opt.http_threads;
  so.heartbeat_ms = 50;
  serve::HttpServer server(tok, loop, limits, so);
  FATHOM_RETURN_IF_ERROR(server.Start());
  st.port = server.port();
  const auto start = Clock::now();
  st.end = start + std::chrono::milliseconds(static_cast<int64_t>(seconds * 1e3));
  std::atomic<bool> stop_probe{false};
  std::thread prober(RunProbe, st.port, opt.probe_interval_ms, t0, std::cref(stop_probe), probe);
  std::vector<std::thread> clients;
  for (int i = 0; i < opt.clients; ++i)
    clients.emplace_back([&st, &opt, seed, i] { Client(st, seed * 1000 + static_cast<uint64_t>(i), opt.sample_every).Run(); });
  for (std::thread& t : clients) t.join();
  CheckIdle(loop, st, &ph, res);
  ph.seconds = Seconds(start, Clock::now());
  stop_probe = true;
  prober.join();
  server.Stop();
  loop.Stop();
  CheckSamples(model, tok, eo, st, &ph, opt.max_samples_per_phase);
  ph.counts = st.counts;
  for (const std::string& f : st.failures)
    if (res->failures.size() < 20) res->failures.push_back(ph.scheduler + ": " + f);
  return ph;
}

// The largest sample of `rss` in [from, to) seconds (0 if none).
int64_t MaxRss(const std::vector<std::pair<double, int64_t>>& rss, double from, double to) {
  int64_t m = 0;
  for (const auto& [t, kb] : rss)
    if (t >= from && t < to) m = std::max(m, kb);
  return m;
}

void Summarize(const SoakOptions& opt, const Probe& probe, SoakResult* r) {
  for (const SoakPhase& p : r->phases) {
    r->counts.Add(p.counts);
    r->preemptions += p.preemptions;
    r->output_tokens += p.output_tokens;
    r->samples += p.samples;
    r->sample_mismatches += p.sample_mismatches;
  }
  const double w = opt.warmup_fraction * r->seconds;
  r->rss_warm_kb = MaxRss(probe.rss, 0, w);
  r->rss_last_kb = MaxRss(probe.rss, r->seconds - w, 1e300);
  r->rss_growth = r->rss_warm_kb > 0 ? static_cast<double>(r->rss_last_kb) / static_cast<double>(r->rss_warm_kb) - 1 : 0;
  r->health_probes = static_cast<int64_t>(probe.ms.size()) + probe.failures;
  r->health_failures = probe.failures;
  r->health_p50_ms = Percentile(probe.ms, 0.5);
  r->health_p99_ms = Percentile(probe.ms, 0.99);
  r->health_max_ms = probe.ms.empty() ? 0 : *std::max_element(probe.ms.begin(), probe.ms.end());
  auto fail = [&](const std::string& f) {
    if (r->failures.size() < 20) r->failures.push_back(f);
  };
  char buf[200];
  if (r->rss_growth > opt.max_rss_growth) {
    std::snprintf(buf, sizeof buf, "resident memory grew %.1f%% after warm-up (%lld -> %lld KiB; limit %.1f%%)",
                  100 * r->rss_growth, static_cast<long long>(r->rss_warm_kb), static_cast<long long>(r->rss_last_kb),
                  100 * opt.max_rss_growth);
    fail(buf);
  }
  if (probe.failures > 0) fail(std::to_string(probe.failures) + " /health probes failed or took over 2 s");
  if (probe.ms.empty() || r->health_p99_ms > opt.health_p99_ms) {
    std::snprintf(buf, sizeof buf, "/health p99 %.1f ms over %zu probes (limit %.0f ms)", r->health_p99_ms,
                  probe.ms.size(), opt.health_p99_ms);
    fail(buf);
  }
  if (r->samples == 0) fail("no sampled request to compare with a run alone");
}

}  // namespace

void SoakCounts::Add(const SoakCounts& o) {
  sent += o.sent, whole += o.whole, streamed += o.streamed, stopped += o.stopped;
  stream_cancels += o.stream_cancels, disconnects += o.disconnects, bad += o.bad;
  refused += o.refused, errors += o.errors;
}

int64_t ResidentKb() {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  return 0;
}

Result<SoakResult> RunSoak(const Model& model, const Tokenizer& tok, const SoakOptions& opt) {
  if (opt.schedulers.empty()) return Status::Error("soak: no scheduler");
  SoakOptions o = opt;
  if (o.engine.kv_bytes == 0) {  // kv_blocks of this model's blocks
    FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, Engine::Create(model, o.engine));
    o.engine.kv_bytes = static_cast<size_t>(o.kv_blocks) * e->kv().pool().bytes_per_block();
  }
  SoakResult res;
  res.rss_start_kb = ResidentKb();
  // Every scheduler gets at least one phase, however short the run.
  const int64_t n_sched = static_cast<int64_t>(opt.schedulers.size());
  const int64_t phases = std::max<int64_t>(n_sched, static_cast<int64_t>(opt.duration_s / opt.phase_s + 0.5));
  const double phase_s = opt.duration_s / static_cast<double>(phases);
  const auto t0 = Clock::now();
  Probe probe(opt.duration_s, opt.probe_interval_ms);
  for (int64_t i = 0; i < phases; ++i) {
    const SchedMode mode = opt.schedulers[static_cast<size_t>(i % n_sched)];
    FATHOM_ASSIGN_OR_RETURN(SoakPhase ph, RunPhase(model, tok, o, mode, phase_s, opt.seed + static_cast<uint64_t>(i),
                                                   t0, &probe, &res));
    if (opt.progress)
      std::fprintf(stderr, "soak: phase %lld/%lld %s: %lld sent, %lld ends, %lld preemptions, %lld KV used at idle\n",
                   static_cast<long long>(i + 1), static_cast<long long>(phases), ph.scheduler.c_str(),
                   static_cast<long long>(ph.counts.sent), static_cast<long long>(ph.server_ends),
                   static_cast<long long>(ph.preemptions), static_cast<long long>(ph.kv_blocks_used_at_idle));
    res.phases.push_back(std::move(ph));
  }
  res.seconds = Seconds(t0, Clock::now());
  res.rss_end_kb = ResidentKb();
  Summarize(opt, probe, &res);
  return res;
}

}  // namespace fathom::bench
