#include "bench/serve_bench.h"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "serve/engine_loop.h"
#include "serve/http_server.h"
#include "serve/openai_api.h"

namespace fathom::bench {
namespace {

using nlohmann::json;
using serve::ClientClock;
using serve::CompletionOutcome;

const char* const kHost = "127.0.0.1";
const char* const kFinishedLength = "fathom_requests_finished_total{reason=\"length\"}";

// CPU seconds (user + system) of this whole process so far.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec); };
  return tv(u.ru_utime) + tv(u.ru_stime);
}

// One /v1/completions body per request, and the RequestSpec the server builds from it.
struct Requests {
  std::vector<std::string> bodies;
  std::vector<RequestSpec> specs;
};

Result<Requests> BuildRequests(const Model& model, const Tokenizer& tok, const serve::ModelLimits& limits,
                               const ServeBenchOptions& opt, ServeBenchResult* res) {
  const auto shapes = GenerateWorkload(opt.workload, opt.requests, opt.seed);
  const auto base = MakeRequests(shapes, model.spec(), ExitTraceOptions{}, opt.seed);
  Requests out;
  for (size_t i = 0; i < base.size(); ++i) {
    json body = {{"prompt", base[i].prompt}, {"max_tokens", base[i].max_tokens}, {"temperature", 0},
                 {"ignore_eos", true}, {"stream", opt.stream}};
    if (opt.stream) body["stream_options"] = {{"include_usage", true}};
    if (opt.exit_threshold >= 0) body["exit_threshold"] = opt.exit_threshold;
    out.bodies.push_back(body.dump());
    serve::ApiRequest ar;
    if (auto e = serve::ParseApiRequest(serve::Endpoint::kCompletions, out.bodies.back(), &ar))
      return Status::Error("request " + std::to_string(i) + ": " + e->message);
    RequestSpec rs;
    if (auto e = serve::BuildRequestSpec(ar, ar.prompt_ids, limits, tok.stop_ids(), opt.seed * 1000003ull + i, &rs))
      return Status::Error("request " + std::to_string(i) + " (prompt " + std::to_string(ar.prompt_ids.size()) +
                           ", max_tokens " + std::to_string(base[i].max_tokens) + "): " + e->message);
    rs.name = "r" + std::to_string(i);
    res->prompt_tokens += static_cast<int64_t>(rs.prompt.size());
    res->output_tokens += rs.max_tokens;
    out.specs.push_back(std::move(rs));
  }
  return out;
}

// A warm-up run (discarded: primitive caches, page faults, thread start-up), the offline
// run with every request at t = 0 and, with a rate, the offline run at the server's
// arrival times (what the arrival pattern alone costs, without HTTP).
Status RunOffline(const Model& model, const ServeBenchOptions& opt, const std::vector<RequestSpec>& specs,
                  const std::vector<double>& arrivals, ServeBenchResult* res) {
  std::vector<RequestSpec> warm(specs.begin(), specs.begin() + std::min<int64_t>(opt.requests, 4));
  for (RequestSpec& r : warm) r.max_tokens = std::min(r.max_tokens, 8);
  FATHOM_RETURN_IF_ERROR(RunWorkload(model, opt.engine, warm, {}, "warm-up", {false, 1e9, ""}).status());
  const std::string of = "/" + std::to_string(opt.rate > 0 ? 3 : 2) + "]";
  const double cpu0 = ProcessCpuSeconds();
  FATHOM_ASSIGN_OR_RETURN(res->offline,
                          RunWorkload(model, opt.engine, specs, {}, "offline", {opt.progress, 2.0, "[1" + of}));
  res->offline_cpu_s = ProcessCpuSeconds() - cpu0;
  if (opt.rate <= 0) return Status::Ok();
  FATHOM_ASSIGN_OR_RETURN(RunResult r, RunWorkload(model, opt.engine, specs, arrivals, "offline, Poisson arrivals",
                                                   {opt.progress, 2.0, "[2" + of}));
  res->offline_arrivals_tok_s = r.output_tok_s();
  res->offline_arrivals_steps = r.stats.steps;
  return Status::Ok();
}

// The loop refreshes its metrics snapshot just after it hands a request's last tokens to
// the handler, so a scrape right after a response may lag by that one update: scrape until
// the finished-by-length counter reaches `finished` and no request is waiting or running
// (at most ~5 s; then the last scrape, which the caller's comparison will flag).
Result<serve::PrometheusText> ScrapeSettled(int port, int64_t finished) {
  for (int tries = 0;; ++tries) {
    FATHOM_ASSIGN_OR_RETURN(serve::PrometheusText m, serve::ScrapeMetrics(kHost, port));
    const bool settled = m.ValueOr0(kFinishedLength) >= static_cast<double>(finished) &&
                         m.ValueOr0("fathom_requests{state=\"running\"}") == 0 &&
                         m.ValueOr0("fathom_requests{state=\"waiting\"}") == 0;
    if (settled || tries >= 100) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Two short requests through HTTP before the measured run (and before the first scrape).
Status WarmUpServer(int port, const std::vector<std::string>& bodies, bool stream) {
  for (size_t i = 0; i < std::min<size_t>(2, bodies.size()); ++i) {
    json body = json::parse(bodies[i]);
    body["max_tokens"] = std::min(4, body["max_tokens"].get<int>());
    const auto now = ClientClock::now();
    const CompletionOutcome cr =
        serve::PostCompletion(kHost, port, body.dump(), stream, now, now + std::chrono::seconds(120));
    if (!cr.ok) return Status::Error("the warm-up request failed: " + cr.error);
  }
  return Status::Ok();
}

// One client thread per request, each sleeping until its arrival time; progress on stderr
// every 2 s while they run.
std::vector<CompletionOutcome> RunClients(int port, const std::vector<std::string>& bodies,
                                          const std::vector<double>& arrivals, const ServeBenchOptions& opt) {
  const auto n = static_cast<int64_t>(bodies.size());
  const int phases = opt.rate > 0 ? 3 : 2;
  std::vector<CompletionOutcome> results(bodies.size());
  std::atomic<int64_t> finished{0}, finished_tokens{0};
  const auto t0 = ClientClock::now();
  const auto deadline = t0 + std::chrono::seconds(opt.timeout_s);
  std::vector<std::thread> clients;
  clients.reserve(bodies.size());
  for (size_t i = 0; i < bodies.size(); ++i)
    clients.emplace_back([&, i] {
      std::this_thread::sleep_until(t0 + std::chrono::duration_cast<ClientClock::duration>(
                                             std::chrono::duration<double>(arrivals[i])));
      results[i] = serve::PostCompletion(kHost, port, bodies[i], opt.stream, t0, deadline);
      finished_tokens += results[i].completion_tokens;
      ++finished;
    });
  double last = 0;
  while (finished.load() < n) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const double t = std::chrono::duration<double>(ClientClock::now() - t0).count();
    if (!opt.progress || t - last < 2.0) continue;
    last = t;
    std::fprintf(stderr, "[%d/%d] server: %lld/%lld requests, %lld tokens received, %.0f s elapsed\n", phases,
                 phases, static_cast<long long>(finished.load()), static_cast<long long>(n),
                 static_cast<long long>(finished_tokens.load()), t);
  }
  for (std::thread& t : clients) t.join();
  return results;
}

// Warm-up, /metrics before, the clients, /metrics after, on a started server.
Status MeasureServer(int port, const Requests& reqs, const std::vector<double>& arrivals,
                     const ServeBenchOptions& opt, ServeBenchResult* res) {
  FATHOM_RETURN_IF_ERROR(WarmUpServer(port, reqs.bodies, opt.stream));
  FATHOM_ASSIGN_OR_RETURN(serve::PrometheusText before, ScrapeSettled(port, std::min<int64_t>(2, opt.requests)));
  const double cpu0 = ProcessCpuSeconds();
  std::vector<CompletionOutcome> outcomes = RunClients(port, reqs.bodies, arrivals, opt);
  res->server_cpu_s = ProcessCpuSeconds() - cpu0;
  res->clients = SummarizeClients(outcomes, reqs.specs);
  const auto finished = static_cast<int64_t>(before.ValueOr0(kFinishedLength)) + res->clients.completed;
  FATHOM_ASSIGN_OR_RETURN(serve::PrometheusText after, ScrapeSettled(port, finished));
  res->metrics = DeltasOf(before, after);
  res->metrics_agree = res->metrics.Agree(res->clients);
  return Status::Ok();
}

// EngineLoop + HttpServer in this process with the same EngineOptions as offline.
Status RunServer(const Model& model, const Tokenizer& tok, const serve::ModelLimits& limits, const Requests& reqs,
                 const std::vector<double>& arrivals, const ServeBenchOptions& opt, ServeBenchResult* res) {
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, opt.engine));
  serve::EngineLoopOptions lopt;
  lopt.max_pending = std::max<int64_t>(256, opt.requests + 16);
  serve::EngineLoop loop(std::move(engine), lopt);
  serve::ServerOptions sopt;
  sopt.host = kHost;
  sopt.port = 0;
  sopt.model_name = opt.model_name;
  sopt.threads = static_cast<int>(opt.requests + 8);  // every request holds a handler thread to its end
  serve::HttpServer server(tok, loop, limits, sopt);
  FATHOM_RETURN_IF_ERROR(server.Start());
  res->port = server.port();
  const Status s = MeasureServer(server.port(), reqs, arrivals, opt, res);
  loop.Stop();  // fails whatever still runs, so that every handler returns
  server.Stop();
  return s;
}

}  // namespace

double ClientSummary::mean_normalized() const {
  double sum = 0;
  for (double v : normalized) sum += v;
  return sum / static_cast<double>(std::max<size_t>(normalized.size(), 1));
}

ClientSummary SummarizeClients(std::vector<CompletionOutcome>& outcomes, const std::vector<RequestSpec>& specs) {
  ClientSummary s;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    CompletionOutcome& cr = outcomes[i];
    const auto fail = [&](std::string why) { cr.ok = false, cr.error = std::move(why); };
    if (cr.ok && cr.completion_tokens != specs[i].max_tokens)
      fail("completion_tokens " + std::to_string(cr.completion_tokens) + " != max_tokens " +
           std::to_string(specs[i].max_tokens));
    if (cr.ok && cr.finish_reason != "length") fail("finish_reason '" + cr.finish_reason + "'");
    if (cr.ok && cr.prompt_tokens != static_cast<int64_t>(specs[i].prompt.size()))
      fail("prompt_tokens " + std::to_string(cr.prompt_tokens) + " != " + std::to_string(specs[i].prompt.size()));
    if (cr.send >= 0) s.first_send = std::min(s.first_send, cr.send);
    if (!cr.ok) {
      ++s.failed;
      if (s.errors.size() < 5) s.errors.push_back("request " + std::to_string(i) + ": " + cr.error);
      continue;
    }
    ++s.completed;
    s.prompt_tokens += cr.prompt_tokens;
    s.output_tokens += cr.completion_tokens;
    s.last_response = std::max(s.last_response, cr.finish);
    const double out = static_cast<double>(std::max<int64_t>(cr.completion_tokens, 1));
    s.e2e.push_back(cr.finish - cr.send);
    s.normalized.push_back((cr.finish - cr.send) / out);
    if (cr.first_token >= 0) {
      s.ttft.push_back(cr.first_token - cr.send);
      if (cr.completion_tokens > 1) s.tpot.push_back((cr.finish - cr.first_token) / (out - 1));
    }
  }
  return s;
}

MetricsDeltas DeltasOf(const serve::PrometheusText& before, const serve::PrometheusText& after) {
  const auto delta = [&](const char* key) {
    return static_cast<int64_t>(after.ValueOr0(key) - before.ValueOr0(key));
  };
  MetricsDeltas d;
  d.finished_length = delta(kFinishedLength);
  d.output_tokens = delta("fathom_output_tokens_total");
  d.prompt_tokens = delta("fathom_prompt_tokens_total");
  d.steps = delta("fathom_steps_total");
  return d;
}

Result<ServeBenchResult> RunServeBench(const Model& model, const Tokenizer& tok, const ServeBenchOptions& opt) {
  // The server's limits, as `fathom serve` computes them (the engine resolves max_depth).
  serve::ModelLimits limits;
  {
    FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> probe, Engine::Create(model, opt.engine));
    limits = serve::LimitsOf(model, *probe);
  }
  ServeBenchResult res;
  FATHOM_ASSIGN_OR_RETURN(Requests reqs, BuildRequests(model, tok, limits, opt, &res));
  const std::vector<double> arrivals = opt.rate > 0 ? PoissonArrivals(opt.requests, opt.rate, opt.seed)
                                                    : std::vector<double>(static_cast<size_t>(opt.requests), 0.0);
  FATHOM_RETURN_IF_ERROR(RunOffline(model, opt, reqs.specs, arrivals, &res));
  FATHOM_RETURN_IF_ERROR(RunServer(model, tok, limits, reqs, arrivals, opt, &res));
  return res;
}

}  // namespace fathom::bench
