// `fathom bench budget`: the budget benchmark of issue 14 (bench/budget_bench.h runs it and
// makes its report); this file holds the flags, their checks and the printing.
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "bench/budget_bench.h"
#include "bench_commands.h"
#include "commands.h"
#include "engine_flags.h"
#include "flags.h"

namespace fathom::cli {
namespace {

using nlohmann::json;

constexpr const char* kUsage =
    "fathom bench budget --model DIR [--workload alpaca] [--max-output 128] [--max-prompt N] [--exit-threshold 1]\n"
    "                    [--tier default] [--rate R | --load 1] [--burst-factor 3] [--warm 15 --burst 30 --after 30]\n"
    "                    [--deadline-factor 20] [--tpot-ms T] [--low-budget B] [--reclaim-at S --reclaim-s 10]\n"
    "                    [--no-reclaim] [--out FILE] [--json] [--quiet]";
constexpr const char* kDescription =
    "Open-loop load against the engine in this process, on the wall clock: Poisson arrivals at\n"
    "--load x the rate the engine sustains at full depth (measured first: a closed loop of\n"
    "--width requests in flight), --burst-factor x that rate for --burst seconds, then the base rate again; every\n"
    "request's deadline is --deadline-factor x its output length x the full-depth TPOT. The\n"
    "same load runs with every token at b = 1 (full), at the fixed --low-budget (low; default\n"
    "the tier's b_min) and under the budget controller: deadline misses, goodput, p50/p99\n"
    "latency, mean depth and b, and b and depth over time. Then a reclaim notice with\n"
    "--reclaim-s left at --reclaim-at seconds into the same load (full and controller): the\n"
    "fraction of the requests in flight that finish in time. Exits: each request's signal exit\n"
    "at --exit-threshold, moved by b (q.b, t/b); a gate checkpoint's routers read each token's b\n"
    "(its prompt runs at b = 1 except under low). With --budget-prompts a looped request's\n"
    "prompt runs ceil(b x loops) loop steps and gates read that b, b being its first decode\n"
    "token's. Progress on stderr; --out writes the JSON (timelines included) that\n"
    "scripts/render-budget-bench.py plots.";

struct BudgetArgs {
  std::string model_dir, workload = "alpaca", tier = "default", out;
  bench::BudgetBenchOptions o;
  EngineFlags engine{(kEngineFlagsAll | kFlagKvMib) & ~kFlagScheduler};
  int64_t threads = 1, seed = 0, min_depth = 1;
  double tpot_ms = 0;
  bool json = false, quiet = false, no_reclaim = false;

  void Declare(FlagSet& f) {
    f.String("--model", &model_dir, "Hugging Face model directory of a looped model or an L2A gate checkpoint");
    f.String("--workload", &workload, "request shapes: alpaca (default), sharegpt, arxiv");
    f.Int("--max-output", &o.max_output, "output lengths cut to this (default 128)", 1, 1 << 20);
    f.Int("--max-prompt", &o.max_prompt, "prompt lengths cut to this (default: not cut)", 1, 1 << 20);
    f.Double("--exit-threshold", &o.exit_threshold, "each request's exit threshold at b = 1 (default 1: full depth)", 0,
             1e9);
    f.Int("--min-depth", &min_depth, "no exit before this loop step (default 1)", 1, 4096);
    f.String("--tier", &tier, "every request's service tier: priority, default (default), flex");
    f.Double("--rate", &o.rate, "base arrivals per s (default: --load x the calibrated rate)", 0, 1e6);
    f.Double("--load", &o.load, "base rate as a fraction of the calibrated one (default 1)", 1e-3, 100);
    f.Double("--burst-factor", &o.burst_factor, "arrival rate in the burst / base rate (default 3)", 1, 100);
    f.Double("--warm", &o.warm_s, "seconds at the base rate before the burst (default 15)", 0, 86400);
    f.Double("--burst", &o.burst_s, "seconds of burst (default 30)", 0, 86400);
    f.Double("--after", &o.after_s, "seconds at the base rate after the burst (default 30)", 0, 86400);
    f.Double("--deadline-factor", &o.deadline_factor, "deadline = F x output tokens x TPOT (default 20)", 1e-3, 1e6);
    f.Double("--tpot-ms", &tpot_ms, "the deadlines' TPOT in ms (default: calibrated)", 0, 1e6);
    f.Double("--low-budget", &o.low_budget, "the low policy's fixed b (default: the tier's b_min)", 0, 1);
    f.Double("--reclaim-at", &o.reclaim_after_s, "seconds into the load of the reclaim notice (default 0.75 x warm)",
             0, 86400);
    f.Double("--reclaim-s", &o.reclaim_s, "seconds the notice gives (default 10)", 1e-3, 86400);
    f.Bool("--no-reclaim", &no_reclaim, "skip the reclaim runs");
    f.Int("--calib-requests", &o.calib_requests, "requests of the calibration (default 4 x width)", 0, 1 << 20);
    f.Double("--bin", &o.bin_s, "timeline bin in seconds (default 1)", 1e-3, 3600);
    f.Int("--seed", &seed, "seed of arrivals and requests (default 0)", 0, INT64_MAX);
    engine.Declare(f);
    DeclareThreads(f, &threads);
    f.String("--out", &out, "write the whole JSON report to FILE");
    f.Bool("--json", &json, "print the whole JSON report");
    f.Bool("--quiet", &quiet, "no progress on stderr");
    f.Require("--model");
  }

  Status Finish() {
    auto w = bench::ParseWorkload(workload);
    if (!w.ok()) return w.status().WithContext("--workload");
    o.workload = *w;
    auto t = ParseServiceTier(tier);
    if (!t.ok()) return t.status().WithContext("--tier");
    o.tier = *t;
    FATHOM_ASSIGN_OR_RETURN(o.engine, engine.Options());
    o.min_depth = static_cast<int32_t>(min_depth);
    o.tpot_s = tpot_ms / 1e3;
    o.seed = static_cast<uint64_t>(seed);
    o.reclaim = !no_reclaim;
    o.progress = !quiet;
    return o.Validate();
  }
};

void PrintSummary(const json& j) {
  const json& l = j["load"];
  std::printf("load: %zu requests, base %.2f/s, burst %.2f/s, TPOT %.1f ms\n", l["requests"].get<size_t>(),
              l["base_rate"].get<double>(), l["burst_rate"].get<double>(), 1e3 * l["tpot_s"].get<double>());
  std::printf("%-11s %7s %7s %7s %9s %8s %8s %6s %6s %9s\n", "policy", "misses", "miss%", "burst", "goodput/s",
              "p50 s", "p99 s", "depth", "b", "recovery");
  for (const json& r : j["runs"])
    std::printf("%-11s %7lld %6.1f%% %7lld %9.3f %8.2f %8.2f %6.2f %6.2f %9.1f\n",
                r["policy"].get<std::string>().c_str(), r["deadline_misses"].get<long long>(),
                100 * r["miss_rate"].get<double>(), r["burst_misses"].get<long long>(),
                r["goodput_per_s"].get<double>(), r["latency_p50_s"].get<double>(),
                r["latency_p99_s"].get<double>(), r["mean_depth"].get<double>(), r["mean_b"].get<double>(),
                r["b_recovery_s"].get<double>());
  if (j.contains("reclaim"))
    for (const json& r : j["reclaim"])
      std::printf("reclaim %-11s at %.1f s: %lld of %lld in flight finished in time (%.1f%%), %lld refused\n",
                  r["policy"].get<std::string>().c_str(), r["notice_at_s"].get<double>(),
                  r["finished_in_time"].get<long long>(), r["in_flight"].get<long long>(),
                  100 * r["fraction"].get<double>(), r["refused"].get<long long>());
  std::printf("targets: %s\n", j["targets"].dump().c_str());
}

}  // namespace

int RunBenchBudget(const std::vector<std::string>& args) {
  const std::string cmd = "bench budget";
  BudgetArgs a;
  FlagSet flags("fathom " + cmd, kUsage, kDescription);
  a.Declare(flags);
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  if (Status s = a.Finish(); !s.ok()) return Fail(cmd, s.message(), 2);
  ApplyThreads(a.threads);
  auto model = Model::Load(a.model_dir);
  if (!model.ok()) return Fail(cmd, model.status().message(), 1);
  // b drives a looped model's exits and a gate checkpoint's routers; nothing else.
  if (!(*model)->spec().loop.looped && !(*model)->spec().l2a.enabled)
    return Fail(cmd, "--model: '" + a.model_dir + "' is neither a looped model nor an L2A gate checkpoint", 2);
  auto report = bench::RunBudgetBench(**model, a.o);
  if (!report.ok()) return Fail(cmd, report.status().message(), 1);
  (*report)["model"] = a.model_dir;
  (*report)["threads"] = a.threads;
  if (!a.out.empty()) std::ofstream(a.out) << report->dump() << "\n";
  if (a.json) std::printf("%s\n", report->dump().c_str());
  else PrintSummary(*report);
  return 0;
}

}  // namespace fathom::cli
