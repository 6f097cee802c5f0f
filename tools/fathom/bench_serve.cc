// `fathom bench serve`: the serving benchmark (issue 6). The same requests run twice in one
// process: offline (the engine alone, all queued at t = 0) and through the HTTP server
// (EngineLoop + HttpServer on 127.0.0.1, clients sending /v1/completions bodies with token-id
// prompts at seeded Poisson times, or all at t = 0). Reports the server's output tokens/s
// against the offline engine's, TTFT / TPOT percentiles (with --stream), and checks that the
// deltas of /metrics' counters match what the clients received.
#include <omp.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "bench/driver.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "bench_commands.h"
#include "commands.h"
#include "engine/engine.h"
#include "flags.h"
#include "lookahead_flag.h"
#include "model/model.h"
#include "serve/engine_loop.h"
#include "serve/http_server.h"
#include "serve/httplib_include.h"
#include "serve/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

// What one client saw of its request. Times in seconds from the start of the load.
struct ClientResult {
  bool ok = false;
  std::string error;  // why not ok
  double send = -1, first_token = -1, finish = -1;
  int64_t prompt_tokens = 0, completion_tokens = 0;
  std::string finish_reason;
};

// The counters of a Prometheus text exposition, keyed "name{labels}" (or "name").
std::map<std::string, double> ParsePrometheus(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    char* end = nullptr;
    const double v = std::strtod(line.c_str() + sp + 1, &end);
    if (end == line.c_str() + sp + 1) continue;
    out[line.substr(0, sp)] = v;
  }
  return out;
}

// CPU seconds (user + system) of this whole process so far.
double ProcessCpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  auto tv = [](const timeval& t) {
    return static_cast<double>(t.tv_sec) + 1e-6 * static_cast<double>(t.tv_usec);
  };
  return tv(u.ru_utime) + tv(u.ru_stime);
}

double Get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

const char* kFinishedLength = "fathom_requests_finished_total{reason=\"length\"}";
const char* kOutputTokens = "fathom_output_tokens_total";
const char* kPromptTokens = "fathom_prompt_tokens_total";

Result<std::map<std::string, double>> Scrape(int port) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(10, 0);
  cli.set_read_timeout(10, 0);
  auto r = cli.Get("/metrics");
  if (!r) return Status::Error("GET /metrics: " + httplib::to_string(r.error()));
  if (r->status != 200) return Status::Error("GET /metrics: HTTP " + std::to_string(r->status));
  return ParsePrometheus(r->body);
}

// Scrapes until the finished-by-length counter reaches `finished` and no request is waiting
// or running (at most ~5 s; then the last scrape, which the caller's comparison will flag).
Result<std::map<std::string, double>> ScrapeSettled(int port, int64_t finished) {
  for (int tries = 0;; ++tries) {
    FATHOM_ASSIGN_OR_RETURN(auto m, Scrape(port));
    const bool settled = Get(m, kFinishedLength) >= static_cast<double>(finished) &&
                         Get(m, "fathom_requests{state=\"running\"}") == 0 &&
                         Get(m, "fathom_requests{state=\"waiting\"}") == 0;
    if (settled || tries >= 100) return m;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

// Applies one SSE data payload of a completions stream to `cr`.
void OnSseData(const std::string& data, double now, ClientResult& cr, bool& done) {
  if (data == "[DONE]") {
    done = true;
    return;
  }
  json j = json::parse(data, nullptr, false);
  if (j.is_discarded()) {
    cr.error = "unparsable SSE data: " + data.substr(0, 200);
    return;
  }
  if (j.contains("error")) {
    cr.error = "stream error: " + j["error"].dump();
    return;
  }
  if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
    const json& c = j["choices"][0];
    if (c.contains("text") && c["text"].is_string() && !c["text"].get<std::string>().empty() &&
        cr.first_token < 0)
      cr.first_token = now;
    if (c.contains("finish_reason") && c["finish_reason"].is_string())
      cr.finish_reason = c["finish_reason"].get<std::string>();
  }
  if (j.contains("usage") && j["usage"].is_object()) {
    cr.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
    cr.completion_tokens = j["usage"].value("completion_tokens", int64_t{0});
  }
}

// Sends one request (blocking) and fills `cr`. `t0`: the load's start; `deadline`: the
// overall end, after which the request is abandoned.
void RunClient(int port, const std::string& body, bool stream, Clock::time_point t0,
               Clock::time_point deadline, ClientResult& cr) {
  auto secs = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  httplib::Client cli("127.0.0.1", port);
  cli.set_connection_timeout(30, 0);
  cli.set_write_timeout(30, 0);
  const auto left =
      std::chrono::duration_cast<std::chrono::seconds>(deadline - Clock::now()).count();
  // Streams get a heartbeat every second; a whole response arrives at the end.
  cli.set_read_timeout(std::max<time_t>(1, stream ? std::min<time_t>(left, 60) : left), 0);
  cr.send = secs();
  if (!stream) {
    auto r = cli.Post("/v1/completions", body, "application/json");
    cr.finish = secs();
    if (!r) {
      cr.error = "transport: " + httplib::to_string(r.error());
      return;
    }
    if (r->status != 200) {
      cr.error = "HTTP " + std::to_string(r->status) + ": " + r->body.substr(0, 300);
      return;
    }
    json j = json::parse(r->body, nullptr, false);
    if (j.is_discarded() || !j.contains("usage") || !j.contains("choices") ||
        j["choices"].empty()) {
      cr.error = "malformed response: " + r->body.substr(0, 300);
      return;
    }
    cr.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
    cr.completion_tokens = j["usage"].value("completion_tokens", int64_t{0});
    const json& fr = j["choices"][0]["finish_reason"];
    if (fr.is_string()) cr.finish_reason = fr.get<std::string>();
    cr.ok = true;
    return;
  }
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string buf;
  bool done = false, timed_out = false;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    const double now = secs();
    buf.append(data, n);
    size_t end;
    while ((end = buf.find("\n\n")) != std::string::npos) {
      const std::string event = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (event.rfind("data: ", 0) == 0) OnSseData(event.substr(6), now, cr, done);
      // ": keep-alive" comments are ignored.
    }
    if (Clock::now() > deadline) timed_out = true;
    return !timed_out && cr.error.empty();
  };
  auto r = cli.send(req);
  cr.finish = secs();
  if (!cr.error.empty()) return;
  if (timed_out) {
    cr.error = "the overall deadline passed";
    return;
  }
  if (!r) {
    cr.error = "transport: " + httplib::to_string(r.error());
    return;
  }
  if (r->status != 200) {
    cr.error = "HTTP " + std::to_string(r->status) + ": " + buf.substr(0, 300);
    return;
  }
  if (!done) {
    cr.error = "the stream ended without [DONE]";
    return;
  }
  cr.ok = true;
}

}  // namespace

int RunBenchServe(const std::vector<std::string>& args) {
  const std::string cmd = "bench serve";
  std::string model_dir, workload = "alpaca", sched = "cdb-refill", layout_name = "last-exited";
  int64_t n = 64, width = 8, k = 1, threads = 1, seed = 0, budget = 256, timeout_s = 1800,
          max_depth = 0;
  double rate = 0, exit_threshold = -1;
  bool stream = false, json_out = false, quiet = false, lookahead = false;
  FlagSet flags(
      "fathom " + cmd,
      "fathom bench serve --model DIR [--workload alpaca|sharegpt] [--requests N] [--rate R]\n"
      "                   [--scheduler cdb-refill] [--width W] [--k K] [--threads 1] [--stream]\n"
      "                   [--exit-threshold X] [--lookahead] [--seed S] [--timeout S] [--json] [--quiet]",
      "The serving benchmark: N synthetic requests (token-id prompts, replayed output lengths)\n"
      "run offline (the engine alone, all queued at t = 0) and then through the HTTP server\n"
      "(in this process, on 127.0.0.1, any free port), sent by one client thread per request as\n"
      "/v1/completions bodies with max_tokens = the reference length, ignore_eos, temperature 0.\n"
      "Both runs use the same EngineOptions, and the offline requests are built from the same\n"
      "bodies by the server's own ParseApiRequest + BuildRequestSpec, so both do identical work.\n"
      "Server tokens/s = completion tokens / (first send .. last response); ratio = server /\n"
      "offline. --rate 0 (default) sends every request at t = 0, which keeps the server's queue\n"
      "full: the ratio then measures the serving layer's overhead. --rate R > 0: seeded Poisson\n"
      "arrivals at R requests/s, and a third run, offline at the same arrival times: the\n"
      "schedule (steps, batch sizes) then depends on when requests arrive, so compare the server\n"
      "with that run (ratio_same_arrivals), not with the all-at-t = 0 one. Process CPU time and\n"
      "engine steps of each run are printed. /metrics is scraped before and after: the deltas\n"
      "of finished requests, output tokens and prompt tokens must equal the clients' counts.\n"
      "Exit 1 if any request fails (not exactly max_tokens tokens, finish_reason not 'length',\n"
      "an HTTP or transport error, the deadline) or the metrics disagree. Needs tokenizer.json\n"
      "in DIR.");
  flags.String("--model", &model_dir, "Hugging Face model directory with tokenizer.json");
  flags.String("--workload", &workload,
               "alpaca (default) or sharegpt (synthetic shapes, bench/workload.h)");
  flags.Int("--requests", &n, "number of requests (default 64; at most 512)", 1, 512);
  flags.Double("--rate", &rate, "Poisson arrival rate in requests/s (default 0: all at t = 0)", 0,
               1e9);
  flags.String("--scheduler", &sched, "cb, cdb-norefill or cdb-refill (default)");
  flags.String("--layout", &layout_name, "KV layout (default last-exited)");
  flags.Int("--width", &width, "decode width W (default 8)", 1, 1 << 16);
  flags.Int("--k", &k, "minimum coda batch K (cdb-refill; default 1)", 1, 1 << 20);
  flags.Int("--prefill-budget", &budget, "prompt tokens per prefill step (default 256)", 1,
            1 << 24);
  flags.Int("--max-depth", &max_depth, "KV depth r_max (default: the model's loop count)", 1, 4096);
  flags.Int("--threads", &threads, "compute threads (default 1)", 1, 1024);
  flags.Bool("--stream", &stream,
             "stream (SSE, stream_options.include_usage): measures TTFT and TPOT");
  flags.Double("--exit-threshold", &exit_threshold,
               "the extension 'exit_threshold' on every request, offline too (default: no exits)",
               0, 1e9);
  DeclareLookahead(flags, &lookahead);
  flags.Int("--seed", &seed, "workload and arrival seed (default 0)", 0, INT64_MAX);
  flags.Int("--timeout", &timeout_s, "overall deadline of the server run in seconds (default 1800)",
            1, 1 << 24);
  flags.Bool("--json", &json_out, "print one JSON object");
  flags.Bool("--quiet", &quiet, "no progress on stderr");
  flags.Require("--model");
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto kind = bench::ParseWorkload(workload);
  if (!kind.ok()) return Fail(cmd, "--workload: " + kind.status().message(), 2);
  auto mode = ParseSchedMode(sched);
  if (!mode.ok()) return Fail(cmd, "--scheduler: " + mode.status().message(), 2);
  auto layout = ParseKvLayout(layout_name);
  if (!layout.ok()) return Fail(cmd, "--layout: " + layout.status().message(), 2);
  namespace fs = std::filesystem;
  if (!fs::exists(fs::path(model_dir) / "tokenizer.json"))
    return Fail(cmd,
                "--model: no tokenizer.json in '" + model_dir +
                    "' (write one with `fathom make-model FAMILY DIR " + "--tokenizer TOKDIR`)",
                2);
  signal(SIGPIPE, SIG_IGN);
  omp_set_num_threads(static_cast<int>(threads));

  auto model = Model::Load(model_dir);
  if (!model.ok()) return Fail(cmd, model.status().message(), 1);
  auto tok = Tokenizer::Load(model_dir);
  if (!tok.ok()) return Fail(cmd, tok.status().message(), 1);
  const ModelSpec& spec = (*model)->spec();
  if (Status s = serve::CheckVocabulary(**tok, spec); !s.ok()) return Fail(cmd, s.message(), 1);
  if (exit_threshold >= 0 && !spec.loop.looped)
    return Fail(cmd, "--exit-threshold: not a looped model", 2);

  EngineOptions opt;
  opt.mode = *mode;
  opt.width = static_cast<int32_t>(width);
  opt.min_coda = static_cast<int32_t>(k);
  opt.prefill_budget = budget;
  opt.layout = *layout;
  opt.max_depth = static_cast<int32_t>(max_depth);
  opt.lookahead = lookahead;
  // The server's limits, as `fathom serve` computes them (the engine resolves max_depth).
  serve::ModelLimits limits;
  {
    auto probe = Engine::Create(**model, opt);
    if (!probe.ok()) return Fail(cmd, probe.status().message(), 1);
    limits = serve::LimitsOf(**model, **probe);
  }

  // The requests: one /v1/completions body each, and the engine RequestSpec the server
  // builds from it (the same parse and build functions as HttpServer::HandleGenerate).
  const auto wseed = static_cast<uint64_t>(seed);
  const auto shapes = bench::GenerateWorkload(*kind, n, wseed);
  const auto base = bench::MakeRequests(shapes, spec, bench::ExitTraceOptions{}, wseed);
  std::vector<std::string> bodies;
  std::vector<RequestSpec> specs;
  int64_t want_prompt = 0, want_output = 0;
  for (size_t i = 0; i < base.size(); ++i) {
    json body = {{"prompt", base[i].prompt},
                 {"max_tokens", base[i].max_tokens},
                 {"temperature", 0},
                 {"ignore_eos", true},
                 {"stream", stream}};
    if (stream) body["stream_options"] = {{"include_usage", true}};
    if (exit_threshold >= 0) body["exit_threshold"] = exit_threshold;
    bodies.push_back(body.dump());
    serve::ApiRequest ar;
    if (auto e = serve::ParseApiRequest(serve::Endpoint::kCompletions, bodies.back(), &ar))
      return Fail(cmd, "request " + std::to_string(i) + ": " + e->message, 1);
    RequestSpec rs;
    if (auto e = serve::BuildRequestSpec(ar, ar.prompt_ids, limits, (*tok)->stop_ids(),
                                         wseed * 1000003ull + i, &rs))
      return Fail(cmd,
                  "request " + std::to_string(i) + " (prompt " +
                      std::to_string(ar.prompt_ids.size()) + ", max_tokens " +
                      std::to_string(base[i].max_tokens) + "): " + e->message,
                  1);
    rs.name = "r" + std::to_string(i);
    want_prompt += static_cast<int64_t>(rs.prompt.size());
    want_output += rs.max_tokens;
    specs.push_back(std::move(rs));
  }

  // Warm-up (discarded): primitive caches, page faults, thread start-up.
  {
    std::vector<RequestSpec> warm(specs.begin(), specs.begin() + std::min<int64_t>(n, 4));
    for (RequestSpec& r : warm) r.max_tokens = std::min(r.max_tokens, 8);
    if (auto w = bench::RunWorkload(**model, opt, warm, {}, "warm-up", {false, 1e9, ""}); !w.ok())
      return Fail(cmd, w.status().message(), 1);
  }

  // Offline: the engine alone, every request queued at t = 0; with --rate, also at the
  // server run's arrival times (what the arrival pattern alone costs, without HTTP).
  const std::vector<double> arrivals = rate > 0 ? bench::PoissonArrivals(n, rate, wseed)
                                                : std::vector<double>(static_cast<size_t>(n), 0.0);
  const int phases = rate > 0 ? 3 : 2;
  const std::string of = "/" + std::to_string(phases) + "]";
  double cpu0 = ProcessCpuSeconds();
  auto offline = bench::RunWorkload(**model, opt, specs, {}, "offline", {!quiet, 2.0, "[1" + of});
  if (!offline.ok()) return Fail(cmd, offline.status().message(), 1);
  const double offline_tok_s = offline->output_tok_s();
  const double offline_cpu_s = ProcessCpuSeconds() - cpu0;
  double offline_arrivals_tok_s = 0;
  int64_t offline_arrivals_steps = 0;
  if (rate > 0) {
    auto r = bench::RunWorkload(**model, opt, specs, arrivals, "offline, Poisson arrivals",
                                {!quiet, 2.0, "[2" + of});
    if (!r.ok()) return Fail(cmd, r.status().message(), 1);
    offline_arrivals_tok_s = r->output_tok_s();
    offline_arrivals_steps = r->stats.steps;
  }

  // Server: EngineLoop + HttpServer in this process with the same EngineOptions.
  auto engine = Engine::Create(**model, opt);
  if (!engine.ok()) return Fail(cmd, engine.status().message(), 1);
  serve::EngineLoopOptions lopt;
  lopt.max_pending = std::max<int64_t>(256, n + 16);
  serve::EngineLoop loop(std::move(*engine), lopt);
  serve::ServerOptions sopt;
  sopt.host = "127.0.0.1";
  sopt.port = 0;
  sopt.model_name = fs::path(model_dir).filename().string();
  sopt.threads = static_cast<int>(n + 8);  // every request holds a handler thread to its end
  serve::HttpServer server(**tok, loop, limits, sopt);
  if (Status s = server.Start(); !s.ok()) return Fail(cmd, s.message(), 1);
  const int port = server.port();
  auto shutdown = [&] {
    loop.Stop();  // fails whatever still runs, so that every handler returns
    server.Stop();
  };

  // Server warm-up: two short requests through HTTP (also before the first scrape).
  for (int i = 0; i < std::min<int>(2, static_cast<int>(n)); ++i) {
    json body = json::parse(bodies[static_cast<size_t>(i)]);
    body["max_tokens"] = std::min(4, body["max_tokens"].get<int>());
    ClientResult cr;
    RunClient(port, body.dump(), stream, Clock::now(), Clock::now() + std::chrono::seconds(120),
              cr);
    if (!cr.ok) {
      shutdown();
      return Fail(cmd, "the warm-up request failed: " + cr.error, 1);
    }
  }
  // The loop refreshes its metrics snapshot just after it hands a request's last tokens to
  // the handler, so a scrape right after a response may lag by that one update: wait
  // (bounded) until the snapshot counts what the clients saw before comparing.
  const int64_t warm_n = std::min<int64_t>(2, n);
  auto before = ScrapeSettled(port, warm_n);
  if (!before.ok()) {
    shutdown();
    return Fail(cmd, before.status().message(), 1);
  }

  std::vector<ClientResult> results(static_cast<size_t>(n));
  std::atomic<int64_t> finished{0}, finished_tokens{0};
  cpu0 = ProcessCpuSeconds();
  const auto t0 = Clock::now();
  const auto deadline = t0 + std::chrono::seconds(timeout_s);
  {
    std::vector<std::thread> clients;
    clients.reserve(static_cast<size_t>(n));
    for (size_t i = 0; i < static_cast<size_t>(n); ++i)
      clients.emplace_back([&, i] {
        std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(arrivals[i])));
        RunClient(port, bodies[i], stream, t0, deadline, results[i]);
        finished_tokens += results[i].completion_tokens;
        ++finished;
      });
    // Progress while the clients run.
    double last = 0;
    while (finished.load() < n) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      const double t = std::chrono::duration<double>(Clock::now() - t0).count();
      if (!quiet && t - last >= 2.0) {
        last = t;
        std::fprintf(stderr,
                     "[%d/%d] server: %lld/%lld requests, %lld tokens received, %.0f s elapsed\n",
                     phases, phases, static_cast<long long>(finished.load()),
                     static_cast<long long>(n), static_cast<long long>(finished_tokens.load()), t);
      }
    }
    for (std::thread& t : clients) t.join();
  }
  const double server_cpu_s = ProcessCpuSeconds() - cpu0;

  // Per-request checks.
  int64_t completed = 0, failed = 0, got_prompt = 0, got_output = 0;
  double first_send = 1e300, last_response = 0;
  std::vector<double> ttft, tpot, norm, e2e;
  std::vector<std::string> errors;
  for (size_t i = 0; i < results.size(); ++i) {
    ClientResult& cr = results[i];
    if (cr.ok && cr.completion_tokens != specs[i].max_tokens)
      cr.ok = false, cr.error = "completion_tokens " + std::to_string(cr.completion_tokens) +
                                " != max_tokens " + std::to_string(specs[i].max_tokens);
    if (cr.ok && cr.finish_reason != "length")
      cr.ok = false, cr.error = "finish_reason '" + cr.finish_reason + "'";
    if (cr.ok && cr.prompt_tokens != static_cast<int64_t>(specs[i].prompt.size()))
      cr.ok = false, cr.error = "prompt_tokens " + std::to_string(cr.prompt_tokens) +
                                " != " + std::to_string(specs[i].prompt.size());
    if (cr.send >= 0) first_send = std::min(first_send, cr.send);
    if (!cr.ok) {
      ++failed;
      if (errors.size() < 5) errors.push_back("request " + std::to_string(i) + ": " + cr.error);
      continue;
    }
    ++completed;
    got_prompt += cr.prompt_tokens;
    got_output += cr.completion_tokens;
    last_response = std::max(last_response, cr.finish);
    const double out = static_cast<double>(std::max<int64_t>(cr.completion_tokens, 1));
    e2e.push_back(cr.finish - cr.send);
    norm.push_back((cr.finish - cr.send) / out);
    if (cr.first_token >= 0) {
      ttft.push_back(cr.first_token - cr.send);
      if (cr.completion_tokens > 1) tpot.push_back((cr.finish - cr.first_token) / (out - 1));
    }
  }
  const double server_s = completed > 0 ? last_response - first_send : 0;
  const double server_tok_s = server_s > 0 ? static_cast<double>(got_output) / server_s : 0;
  double mean_norm = 0;
  for (double v : norm) mean_norm += v;
  mean_norm /= static_cast<double>(std::max<size_t>(norm.size(), 1));

  // /metrics after (waiting for the snapshot to count every finished request, as above).
  auto after_r =
      ScrapeSettled(port, static_cast<int64_t>(Get(*before, kFinishedLength)) + completed);
  if (!after_r.ok()) {
    shutdown();
    return Fail(cmd, after_r.status().message(), 1);
  }
  const std::map<std::string, double>& after = *after_r;
  shutdown();
  const auto delta = [&](const char* key) {
    return static_cast<int64_t>(Get(after, key) - Get(*before, key));
  };
  const int64_t server_steps = delta("fathom_steps_total");
  const int64_t m_finished = delta(kFinishedLength), m_output = delta(kOutputTokens),
                m_prompt = delta(kPromptTokens);
  const bool metrics_agree =
      m_finished == completed && m_output == got_output && m_prompt == got_prompt;
  const int64_t offline_tokens = offline->stats.output_tokens;
  const double ratio = offline_tok_s > 0 ? server_tok_s / offline_tok_s : 0;

  if (json_out) {
    json j = {
        {"model", model_dir},
        {"workload", workload},
        {"scheduler", sched},
        {"width", width},
        {"k", k},
        {"threads", threads},
        {"stream", stream},
        {"rate", rate},
        {"seed", seed},
        {"requests", n},
        {"completed", completed},
        {"failed", failed},
        {"prompt_tokens", want_prompt},
        {"output_tokens", want_output},
        {"output_tok_s_server", server_tok_s},
        {"output_tok_s_offline", offline_tok_s},
        {"ratio", ratio},
        {"server_seconds", server_s},
        {"offline_seconds", offline->wall_seconds},
        {"offline_output_tokens", offline_tokens},
        {"steps_offline", offline->stats.steps},
        {"steps_server", server_steps},
        {"cpu_s_offline", offline_cpu_s},
        {"cpu_s_server", server_cpu_s},
        {"metrics_agree", metrics_agree},
        {"metrics",
         {{"finished_length", m_finished},
          {"output_tokens", m_output},
          {"prompt_tokens", m_prompt}}},
        {"client",
         {{"completed", completed}, {"output_tokens", got_output}, {"prompt_tokens", got_prompt}}},
        {"normalized_latency_s", mean_norm},
        {"latency_p50_s", bench::Percentile(e2e, 0.5)},
        {"latency_p90_s", bench::Percentile(e2e, 0.9)},
        {"ttft_p50_s", bench::Percentile(ttft, 0.5)},
        {"ttft_p90_s", bench::Percentile(ttft, 0.9)},
        {"ttft_p99_s", bench::Percentile(ttft, 0.99)},
        {"tpot_p50_s", bench::Percentile(tpot, 0.5)},
        {"tpot_p90_s", bench::Percentile(tpot, 0.9)},
        {"tpot_p99_s", bench::Percentile(tpot, 0.99)},
        {"errors", errors}};
    if (exit_threshold >= 0) j["exit_threshold"] = exit_threshold;
    if (rate > 0) {
      j["output_tok_s_offline_same_arrivals"] = offline_arrivals_tok_s;
      j["steps_offline_same_arrivals"] = offline_arrivals_steps;
      j["ratio_same_arrivals"] =
          offline_arrivals_tok_s > 0 ? server_tok_s / offline_arrivals_tok_s : 0;
    }
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf(
        "workload %s, %lld requests (%lld prompt, %lld output tokens), %s, scheduler %s W %lld K "
        "%lld, "
        "%lld threads, %s\n",
        workload.c_str(), static_cast<long long>(n), static_cast<long long>(want_prompt),
        static_cast<long long>(want_output),
        rate > 0 ? ("Poisson " + std::to_string(rate) + " req/s").c_str() : "all sent at t = 0",
        sched.c_str(), static_cast<long long>(width), static_cast<long long>(k),
        static_cast<long long>(threads), stream ? "streamed" : "not streamed");
    std::printf("offline  %8lld tokens in %7.2f s = %8.1f tok/s\n",
                static_cast<long long>(offline_tokens), offline->wall_seconds, offline_tok_s);
    std::printf("server   %8lld tokens in %7.2f s = %8.1f tok/s   (127.0.0.1:%d)\n",
                static_cast<long long>(got_output), server_s, server_tok_s, port);
    if (rate > 0)
      std::printf(
          "offline at the same Poisson arrivals: %8.1f tok/s in %lld steps; server / that %.3f\n",
          offline_arrivals_tok_s, static_cast<long long>(offline_arrivals_steps),
          offline_arrivals_tok_s > 0 ? server_tok_s / offline_arrivals_tok_s : 0);
    std::printf("ratio server/offline %.3f\n", ratio);
    std::printf(
        "engine steps: offline %lld, server %lld; process CPU: offline %.1f s in %.1f s, server "
        "run %.1f s "
        "in %.1f s (HTTP handlers and clients included)\n",
        static_cast<long long>(offline->stats.steps), static_cast<long long>(server_steps),
        offline_cpu_s, offline->wall_seconds, server_cpu_s, server_s);
    std::printf("requests: %lld completed, %lld failed\n", static_cast<long long>(completed),
                static_cast<long long>(failed));
    for (const std::string& e : errors) std::printf("  %s\n", e.c_str());
    std::printf("latency p50 %.3f s, p90 %.3f s; normalized %.2f ms/token\n", bench::Percentile(e2e, 0.5),
                bench::Percentile(e2e, 0.9), 1e3 * mean_norm);
    if (stream)
      std::printf(
          "TTFT p50 %.3f s, p90 %.3f s, p99 %.3f s; TPOT p50 %.1f ms, p90 %.1f ms, p99 %.1f ms\n",
          bench::Percentile(ttft, 0.5), bench::Percentile(ttft, 0.9), bench::Percentile(ttft, 0.99),
          1e3 * bench::Percentile(tpot, 0.5), 1e3 * bench::Percentile(tpot, 0.9), 1e3 * bench::Percentile(tpot, 0.99));
    std::printf(
        "/metrics deltas vs clients: finished(length) %lld vs %lld, output tokens %lld vs %lld, "
        "prompt tokens %lld vs %lld: %s\n",
        static_cast<long long>(m_finished), static_cast<long long>(completed),
        static_cast<long long>(m_output), static_cast<long long>(got_output),
        static_cast<long long>(m_prompt), static_cast<long long>(got_prompt),
        metrics_agree ? "agree" : "MISMATCH");
  }
  if (failed > 0)
    return Fail(cmd, std::to_string(failed) + " of " + std::to_string(n) + " requests failed", 1);
  if (!metrics_agree) return Fail(cmd, "/metrics disagrees with the clients' counts", 1);
  return 0;
}

}  // namespace fathom::cli
