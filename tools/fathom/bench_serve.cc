// `fathom bench serve`: the serving benchmark (issue 6; bench/serve_bench.h runs it). The
// same requests run twice in one process: offline (the engine alone, all queued at t = 0)
// and through the HTTP server (EngineLoop + HttpServer on 127.0.0.1, clients sending
// /v1/completions bodies with token-id prompts at seeded Poisson times, or all at t = 0).
// Reports the server's output tokens/s against the offline engine's, TTFT / TPOT
// percentiles (with --stream), and checks that the deltas of /metrics' counters match what
// the clients received.
#include <signal.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "bench/serve_bench.h"
#include "bench/stats.h"
#include "bench_commands.h"
#include "commands.h"
#include "engine_flags.h"
#include "flags.h"
#include "model/model.h"
#include "serve/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {
namespace {

using nlohmann::json;
using bench::Percentile;

constexpr const char* kUsage =
    "fathom bench serve --model DIR [--workload alpaca|sharegpt] [--requests N] [--rate R]\n"
    "                   [--scheduler cdb-refill] [--width W] [--k K] [--threads 1] [--stream]\n"
    "                   [--exit-threshold X] [--lookahead] [--seed S] [--timeout S] [--json] [--quiet]";
constexpr const char* kDescription =
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
    "in DIR.";

// The command's flags; the engine's own come from EngineFlags.
struct ServeBenchArgs {
  std::string model_dir, workload = "alpaca";
  int64_t n = 64, threads = 1, seed = 0, timeout_s = 1800;
  double rate = 0, exit_threshold = -1;
  bool stream = false, json = false, quiet = false;
  EngineFlags engine{kServeEngineFlags};

  void Declare(FlagSet& f) {
    f.String("--model", &model_dir, "Hugging Face model directory with tokenizer.json");
    f.String("--workload", &workload, "alpaca (default) or sharegpt (synthetic shapes, bench/workload.h)");
    f.Int("--requests", &n, "number of requests (default 64; at most 512)", 1, 512);
    f.Double("--rate", &rate, "Poisson arrival rate in requests/s (default 0: all at t = 0)", 0, 1e9);
    engine.Declare(f);
    DeclareThreads(f, &threads);
    f.Bool("--stream", &stream, "stream (SSE, stream_options.include_usage): measures TTFT and TPOT");
    f.Double("--exit-threshold", &exit_threshold,
             "the extension 'exit_threshold' on every request, offline too (default: no exits)", 0, 1e9);
    f.Int("--seed", &seed, "workload and arrival seed (default 0)", 0, INT64_MAX);
    f.Int("--timeout", &timeout_s, "overall deadline of the server run in seconds (default 1800)", 1, 1 << 24);
    f.Bool("--json", &json, "print one JSON object");
    f.Bool("--quiet", &quiet, "no progress on stderr");
    f.Require("--model");
  }
};

void PrintJson(const ServeBenchArgs& a, const bench::ServeBenchOptions& o, const bench::ServeBenchResult& r) {
  const bench::ClientSummary& c = r.clients;
  json j = {{"model", a.model_dir}, {"workload", a.workload},
            {"scheduler", std::string(SchedModeName(o.engine.mode))}, {"width", o.engine.width},
            {"k", o.engine.min_coda}, {"threads", a.threads}, {"stream", a.stream}, {"rate", a.rate},
            {"seed", a.seed}, {"requests", a.n}, {"completed", c.completed}, {"failed", c.failed},
            {"prompt_tokens", r.prompt_tokens}, {"output_tokens", r.output_tokens},
            {"output_tok_s_server", c.output_tok_s()}, {"output_tok_s_offline", r.offline.output_tok_s()},
            {"ratio", r.ratio()}, {"server_seconds", c.seconds()}, {"offline_seconds", r.offline.wall_seconds},
            {"offline_output_tokens", r.offline.stats.output_tokens}, {"steps_offline", r.offline.stats.steps},
            {"steps_server", r.metrics.steps}, {"cpu_s_offline", r.offline_cpu_s},
            {"cpu_s_server", r.server_cpu_s}, {"metrics_agree", r.metrics_agree},
            {"metrics", {{"finished_length", r.metrics.finished_length}, {"output_tokens", r.metrics.output_tokens},
                         {"prompt_tokens", r.metrics.prompt_tokens}}},
            {"client", {{"completed", c.completed}, {"output_tokens", c.output_tokens},
                        {"prompt_tokens", c.prompt_tokens}}},
            {"normalized_latency_s", c.mean_normalized()}, {"latency_p50_s", Percentile(c.e2e, 0.5)},
            {"latency_p90_s", Percentile(c.e2e, 0.9)}, {"ttft_p50_s", Percentile(c.ttft, 0.5)},
            {"ttft_p90_s", Percentile(c.ttft, 0.9)}, {"ttft_p99_s", Percentile(c.ttft, 0.99)},
            {"tpot_p50_s", Percentile(c.tpot, 0.5)}, {"tpot_p90_s", Percentile(c.tpot, 0.9)},
            {"tpot_p99_s", Percentile(c.tpot, 0.99)}, {"errors", c.errors}};
  if (a.exit_threshold >= 0) j["exit_threshold"] = a.exit_threshold;
  if (a.rate > 0) {
    j["output_tok_s_offline_same_arrivals"] = r.offline_arrivals_tok_s;
    j["steps_offline_same_arrivals"] = r.offline_arrivals_steps;
    j["ratio_same_arrivals"] = r.ratio_same_arrivals();
  }
  std::printf("%s\n", j.dump().c_str());
}

void PrintText(const ServeBenchArgs& a, const bench::ServeBenchOptions& o, const bench::ServeBenchResult& r) {
  const bench::ClientSummary& c = r.clients;
  const auto ll = [](int64_t v) { return static_cast<long long>(v); };
  std::printf("workload %s, %lld requests (%lld prompt, %lld output tokens), %s, scheduler %s W %lld K %lld, "
              "%lld threads, %s\n",
              a.workload.c_str(), ll(a.n), ll(r.prompt_tokens), ll(r.output_tokens),
              a.rate > 0 ? ("Poisson " + std::to_string(a.rate) + " req/s").c_str() : "all sent at t = 0",
              std::string(SchedModeName(o.engine.mode)).c_str(), ll(o.engine.width), ll(o.engine.min_coda),
              ll(a.threads), a.stream ? "streamed" : "not streamed");
  std::printf("offline  %8lld tokens in %7.2f s = %8.1f tok/s\n", ll(r.offline.stats.output_tokens),
              r.offline.wall_seconds, r.offline.output_tok_s());
  std::printf("server   %8lld tokens in %7.2f s = %8.1f tok/s   (127.0.0.1:%d)\n", ll(c.output_tokens), c.seconds(),
              c.output_tok_s(), r.port);
  if (a.rate > 0)
    std::printf("offline at the same Poisson arrivals: %8.1f tok/s in %lld steps; server / that %.3f\n",
                r.offline_arrivals_tok_s, ll(r.offline_arrivals_steps), r.ratio_same_arrivals());
  std::printf("ratio server/offline %.3f\n", r.ratio());
  std::printf("engine steps: offline %lld, server %lld; process CPU: offline %.1f s in %.1f s, server run %.1f s "
              "in %.1f s (HTTP handlers and clients included)\n",
              ll(r.offline.stats.steps), ll(r.metrics.steps), r.offline_cpu_s, r.offline.wall_seconds,
              r.server_cpu_s, c.seconds());
  std::printf("requests: %lld completed, %lld failed\n", ll(c.completed), ll(c.failed));
  for (const std::string& e : c.errors) std::printf("  %s\n", e.c_str());
  std::printf("latency p50 %.3f s, p90 %.3f s; normalized %.2f ms/token\n", Percentile(c.e2e, 0.5),
              Percentile(c.e2e, 0.9), 1e3 * c.mean_normalized());
  if (a.stream)
    std::printf("TTFT p50 %.3f s, p90 %.3f s, p99 %.3f s; TPOT p50 %.1f ms, p90 %.1f ms, p99 %.1f ms\n",
                Percentile(c.ttft, 0.5), Percentile(c.ttft, 0.9), Percentile(c.ttft, 0.99),
                1e3 * Percentile(c.tpot, 0.5), 1e3 * Percentile(c.tpot, 0.9), 1e3 * Percentile(c.tpot, 0.99));
  std::printf("/metrics deltas vs clients: finished(length) %lld vs %lld, output tokens %lld vs %lld, "
              "prompt tokens %lld vs %lld: %s\n",
              ll(r.metrics.finished_length), ll(c.completed), ll(r.metrics.output_tokens), ll(c.output_tokens),
              ll(r.metrics.prompt_tokens), ll(c.prompt_tokens), r.metrics_agree ? "agree" : "MISMATCH");
}

// The benchmark's options from the parsed flags; a usage error (exit 2) as a message.
Result<bench::ServeBenchOptions> OptionsOf(const ServeBenchArgs& a) {
  bench::ServeBenchOptions o;
  auto kind = bench::ParseWorkload(a.workload);
  if (!kind.ok()) return kind.status().WithContext("--workload");
  FATHOM_ASSIGN_OR_RETURN(o.engine, a.engine.Options());
  if (!std::filesystem::exists(std::filesystem::path(a.model_dir) / "tokenizer.json"))
    return Status::Error("--model: no tokenizer.json in '" + a.model_dir +
                         "' (write one with `fathom make-model FAMILY DIR --tokenizer TOKDIR`)");
  o.workload = *kind;
  o.requests = a.n;
  o.rate = a.rate;
  o.stream = a.stream;
  o.exit_threshold = a.exit_threshold;
  o.seed = static_cast<uint64_t>(a.seed);
  o.timeout_s = a.timeout_s;
  o.progress = !a.quiet;
  o.model_name = std::filesystem::path(a.model_dir).filename().string();
  return o;
}

}  // namespace

int RunBenchServe(const std::vector<std::string>& args) {
  const std::string cmd = "bench serve";
  ServeBenchArgs a;
  FlagSet flags("fathom " + cmd, kUsage, kDescription);
  a.Declare(flags);
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto opt = OptionsOf(a);
  if (!opt.ok()) return Fail(cmd, opt.status().message(), 2);
  signal(SIGPIPE, SIG_IGN);
  ApplyThreads(a.threads);
  auto model = Model::Load(a.model_dir);
  if (!model.ok()) return Fail(cmd, model.status().message(), 1);
  auto tok = Tokenizer::Load(a.model_dir);
  if (!tok.ok()) return Fail(cmd, tok.status().message(), 1);
  if (Status s = serve::CheckVocabulary(**tok, (*model)->spec()); !s.ok()) return Fail(cmd, s.message(), 1);
  if (a.exit_threshold >= 0 && !(*model)->spec().loop.looped)
    return Fail(cmd, "--exit-threshold: not a looped model", 2);
  auto res = bench::RunServeBench(**model, **tok, *opt);
  if (!res.ok()) return Fail(cmd, res.status().message(), 1);
  if (a.json) PrintJson(a, *opt, *res);
  else PrintText(a, *opt, *res);
  if (res->clients.failed > 0)
    return Fail(cmd, std::to_string(res->clients.failed) + " of " + std::to_string(a.n) + " requests failed", 1);
  if (!res->metrics_agree) return Fail(cmd, "/metrics disagrees with the clients' counts", 1);
  return 0;
}

}  // namespace fathom::cli
