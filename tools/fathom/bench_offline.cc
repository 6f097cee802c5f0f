// `fathom bench offline`: a whole synthetic workload queued at t = 0, run under each
// scheduler; throughput against CB and against the bounds of DESIGN.md §5. The rounds and
// their analysis are bench::RunOfflineRounds and bench::OfflineReport (bench/offline_bench.h);
// this file holds the flags, their checks and the printing.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <optional>

#include <nlohmann/json.hpp>

#include "bench/model_flops.h"
#include "bench/offline_bench.h"
#include "bench_commands.h"
#include "bench_requests.h"
#include "commands.h"
#include "engine_flags.h"
#include "exec/generate.h"
#include "flags.h"

namespace fathom::cli {
namespace {

using nlohmann::json;

constexpr const char* kUsage =
    "fathom bench offline --model DIR [--workload alpaca|sharegpt|arxiv] [--requests N] [--dataset FILE]\n"
    "                     [--schedulers cb,cdb-norefill,cdb-refill] [--k K] [--width W]\n"
    "                     [--layout L] [--mean-depth D] [--min-depth D] [--exit-trace FILE] [--repeat R]\n"
    "                     [--weights checkpoint|int8|w8a8|int4]\n"
    "                     [--lookahead] [--no-control] [--json]";
constexpr const char* kDescription =
    "Queues N synthetic requests of the workload (seeded prompt and output lengths; output\n"
    "lengths replayed: max_tokens = reference length, no EOS stop) at t = 0 and runs them\n"
    "under each scheduler (CB always runs: it is the baseline). Every generated token exits\n"
    "at a seeded random depth with mean --mean-depth (RandomDepthExit). Reports output\n"
    "tokens/s and the ratio to CB; the prefill share alpha of CB's time; F_0 and F_r counted\n"
    "from the model; S_dec = (F_0 + r_max F_r)/(F_0 + d F_r) at the measured mean depth d;\n"
    "S_e2e = (alpha + (1 - alpha)/S_dec)^-1 and the fraction of it reached; the same bound\n"
    "from CB's measured stage costs (S_dec* with seconds per decode token outside the core and\n"
    "per core row in place of F_0 and F_r, bench/speedup.h), whose fraction is the headline;\n"
    "and a no-exit control (every token at r_max: each CDB scheduler against CB). With\n"
    "--repeat R, every\n"
    "run is made R times in rounds (one run per scheduler per round, the order rotated each\n"
    "round); ratios are taken within a round (runs close in time see similar host load) and\n"
    "the median over the rounds is reported with its min and max. Progress on stderr.";

// The scheduler list is the command's own; every engine option but --scheduler is
// EngineFlags'.
constexpr uint32_t kOfflineEngineFlags = (kEngineFlagsAll | kFlagKvMib) & ~kFlagScheduler & ~kFlagBudgetPrompts;

struct OfflineArgs {
  BenchWorkloadFlags work;
  EngineFlags engine{kOfflineEngineFlags};
  LoadFlags load;
  std::string schedulers = "cb,cdb-norefill,cdb-refill";
  int64_t threads = 1, repeat = 1;
  bool json = false, no_control = false, quiet = false;

  void Declare(FlagSet& f) {
    work.Declare(f);
    f.String("--schedulers", &schedulers, "comma-separated: cb, cdb-norefill, cdb-refill (default all)");
    engine.Declare(f);
    load.Declare(f);
    DeclareThreads(f, &threads);
    f.Int("--repeat", &repeat, "rounds of runs; medians of the per-round ratios (default 1)", 1, 1000);
    f.Bool("--no-control", &no_control, "skip the no-exit control runs");
    f.Bool("--quiet", &quiet, "no progress on stderr");
    f.Bool("--json", &json, "print one JSON object per scheduler, one per line");
  }
};

// Everything the runs need, from the parsed flags.
struct Prepared {
  std::unique_ptr<Model> model;
  bench::OfflineBenchOptions opt;
  BenchRequests requests;
  bench::OfflineReportInfo info;
};

// A failed preparation's message and exit code (2: usage, 1: the model or the data files).
struct Failure {
  std::string message;
  int code = 1;
};

// --schedulers, with CB first (always: it is the baseline), each scheduler once.
Status ParseModes(const std::string& text, std::vector<SchedMode>* modes) {
  *modes = {SchedMode::kCb};
  for (const std::string& name : SplitComma(text)) {
    auto m = ParseSchedMode(name);
    if (!m.ok()) return m.status().WithContext("--schedulers");
    if (std::find(modes->begin(), modes->end(), *m) == modes->end()) modes->push_back(*m);
  }
  return Status::Ok();
}

// The checks of the flags alone, the model's load, then the checks against the model.
std::optional<Failure> Prepare(OfflineArgs& a, const FlagSet& flags, Prepared* p) {
  if (Status s = bench::ParseWorkload(a.work.workload).status(); !s.ok()) return Failure{"--workload: " + s.message(), 2};
  auto engine = a.engine.Options();
  if (!engine.ok()) return Failure{engine.status().message(), 2};
  p->opt.engine = *engine;
  if (Status s = ParseModes(a.schedulers, &p->opt.modes); !s.ok()) return Failure{s.message(), 2};
  p->opt.repeat = a.repeat;
  p->opt.control = !a.no_control;
  p->opt.progress = !a.quiet;
  auto load = a.load.Options();
  if (!load.ok()) return Failure{load.status().message(), 2};
  ApplyThreads(a.threads);
  auto model = Model::Load(a.work.model_dir, *load);
  if (!model.ok()) return Failure{model.status().message(), 1};
  p->model = std::move(*model);
  const ModelSpec& spec = p->model->spec();
  if (!spec.loop.looped) return Failure{"--model: '" + a.work.model_dir + "' is not a looped model", 2};
  auto r_max = ResolveLoops(spec, p->opt.engine.max_depth);
  if (!r_max.ok()) return Failure{"--max-depth: " + r_max.status().message(), 2};
  p->opt.engine.max_depth = *r_max;
  if (Status s = a.work.ResolveDepths(flags, p->opt.engine.lookahead, *r_max); !s.ok()) return Failure{s.message(), 2};
  auto built = a.work.Make(spec, *r_max, p->opt.engine.lookahead);
  if (!built.ok()) return Failure{built.status().message(), 1};
  p->requests = std::move(*built);
  p->info = {a.work.model_dir, spec.model_type, a.work.workload, p->requests.exits, a.work.n,
             p->requests.prompt_tokens, p->requests.output_tokens, *r_max, a.work.mean_depth,
             bench::CountFlops(spec), a.load.weights};
  return std::nullopt;
}

const char* Name(const json& row) { return row["scheduler"].get_ref<const std::string&>().c_str(); }
double Num(const json& row, const char* key) { return row[key].get<double>(); }

// The workload, the exits, the bounds' inputs, then one line per scheduler.
void PrintTable(const OfflineArgs& a, const Prepared& p, const std::vector<json>& rows) {
  const json& cb = rows[0];
  const auto ll = [](int64_t v) { return static_cast<long long>(v); };
  std::printf("model %s (%s), workload %s: %lld requests, %lld prompt + %lld output tokens\n",
              a.work.model_dir.c_str(), p.info.model_type.c_str(), p.requests.source.c_str(), ll(a.work.n),
              ll(p.info.prompt_tokens), ll(p.info.output_tokens));
  std::printf("W %lld, K %lld, layout %s, weights %s, r_max %d; exits: ", ll(p.opt.engine.width),
              ll(p.opt.engine.min_coda), std::string(KvLayoutName(p.opt.engine.layout)).c_str(),
              p.info.weights.c_str(), p.info.r_max);
  if (a.work.exit_trace.empty())
    std::printf("%s, mean %.2f, min %lld\n", p.info.exits.c_str(), a.work.mean_depth, ll(a.work.min_depth));
  else
    std::printf("%s\n", p.info.exits.c_str());
  const double f0 = Num(cb, "f0"), fr = Num(cb, "fr"), c0 = Num(cb, "c0_measured_s"), cr = Num(cb, "cr_measured_s");
  std::printf("F_0 %.3g, F_r %.3g FLOPs/token (F_0/F_r %.3f); CB prefill share alpha %.3f\n", f0, fr, f0 / fr,
              Num(cb, "alpha"));
  std::printf("measured on CB: c_0 %.4f ms per decode token outside the core, c_r %.4f ms per core row "
              "(c_0/c_r %.3f); %.1f%% of CB's time recomputed after preemption\n",
              1e3 * c0, 1e3 * cr, c0 / cr, 100 * Num(cb, "cb_recompute_share"));
  std::printf("bounds: S_dec/S_e2e from FLOPs; S_dec*/S_e2e* from CB's measured costs (of S_e2e*: the headline)\n");
  std::printf("%-13s %10s %8s %7s %7s %7s %9s %7s %7s %9s %7s", "scheduler", "tok/s", "vs CB", "depth", "S_dec",
              "S_e2e", "of S_e2e", "S_dec*", "S_e2e*", "of S_e2e*", "prefill");
  if (!a.no_control) std::printf(" %14s", "no-exit vs CB");
  std::printf("\n");
  for (const json& j : rows) {
    const bool is_cb = j["scheduler"] == "cb";  // the baseline: its fraction of S_e2e is not a result
    std::printf("%-13s %10.1f %7.3fx %7.2f %7.3f %7.3f ", Name(j), Num(j, "output_tok_s"), Num(j, "ratio_to_cb"),
                Num(j, "mean_depth"), Num(j, "s_dec"), Num(j, "s_e2e"));
    if (is_cb) std::printf("%9s", "-");
    else std::printf("%8.1f%%", 100 * Num(j, "fraction_of_s_e2e"));
    std::printf(" %7.3f %7.3f ", Num(j, "s_dec_measured"), Num(j, "s_e2e_measured"));
    if (is_cb) std::printf("%9s", "-");
    else std::printf("%8.1f%%", 100 * Num(j, "fraction_of_s_e2e_measured"));
    std::printf(" %6.1f%%", 100 * Num(j, "prefill_share"));
    if (!a.no_control) std::printf(" %13.3fx", Num(j, "control_ratio_to_cb"));
    std::printf("\n");
  }
}

// The spread over the rounds (with --repeat), and the ratios over the process's CPU time
// (less affected by other processes' load).
void PrintSpread(const OfflineArgs& a, const std::vector<json>& rows) {
  if (a.repeat > 1) {
    std::printf("over %lld rounds, vs CB min-max:", static_cast<long long>(a.repeat));
    for (const json& j : rows)
      if (j["scheduler"] != "cb")
        std::printf(" %s %.3f-%.3fx", Name(j), Num(j, "ratio_to_cb_min"), Num(j, "ratio_to_cb_max"));
    std::printf("; of S_e2e*:");
    for (const json& j : rows)
      if (j["scheduler"] != "cb")
        std::printf(" %s %.1f-%.1f%%", Name(j), 100 * Num(j, "fraction_of_s_e2e_measured_min"),
                    100 * Num(j, "fraction_of_s_e2e_measured_max"));
    if (!a.no_control) {
      std::printf("; no-exit:");
      for (const json& j : rows)
        if (j["scheduler"] != "cb")
          std::printf(" %s %.3f-%.3fx", Name(j), Num(j, "control_ratio_to_cb_min"), Num(j, "control_ratio_to_cb_max"));
    }
    std::printf("\n");
  }
  std::printf("over CPU time (median [min-max] of rounds):");
  for (const json& j : rows) {
    if (j["scheduler"] == "cb") continue;
    std::printf(" %s %.3fx [%.3f-%.3f], %.1f%% of S_e2e* [%.1f-%.1f%%]", Name(j), Num(j, "ratio_to_cb_cpu"),
                Num(j, "ratio_to_cb_cpu_min"), Num(j, "ratio_to_cb_cpu_max"),
                100 * Num(j, "fraction_of_s_e2e_measured_cpu"), 100 * Num(j, "fraction_of_s_e2e_measured_cpu_min"),
                100 * Num(j, "fraction_of_s_e2e_measured_cpu_max"));
    if (!a.no_control) std::printf(", no-exit %.3fx", Num(j, "control_ratio_to_cb_cpu"));
    std::printf(";");
  }
  std::printf("\n");
}

// Where the time went: per stage, seconds (mean over rounds), executions and mean rows.
void PrintBreakdown(const std::vector<json>& rows) {
  std::printf("step-time breakdown (s, runs x mean rows):\n%-13s", "scheduler");
  for (const char* stage : {"prefill", "prelude", "core", "coda"}) std::printf(" %22s", stage);
  std::printf(" %9s %7s\n", "schedule", "steps");
  for (const json& j : rows) {
    const json& b = j["breakdown"];
    std::printf("%-13s", Name(j));
    for (const char* stage : {"prefill", "prelude", "core", "coda"}) {
      const json& st = b[stage];
      const auto n_runs = st["runs"].get<int64_t>();
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.2fs %lldx%.1f", st["seconds"].get<double>(), static_cast<long long>(n_runs),
                    n_runs ? static_cast<double>(st["rows"].get<int64_t>()) / static_cast<double>(n_runs) : 0.0);
      std::printf(" %22s", cell);
    }
    std::printf(" %8.3fs %7lld\n", Num(b, "schedule_seconds"), static_cast<long long>(b["steps"].get<int64_t>()));
  }
}

}  // namespace

int RunBenchOffline(const std::vector<std::string>& args) {
  const std::string cmd = "bench offline";
  OfflineArgs a;
  FlagSet flags("fathom " + cmd, kUsage, kDescription);
  a.Declare(flags);
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  Prepared p;
  if (auto failure = Prepare(a, flags, &p)) return Fail(cmd, failure->message, failure->code);
  auto runs = bench::RunOfflineRounds(*p.model, p.opt, p.requests.reqs, p.requests.control_reqs);
  if (!runs.ok()) {
    std::string msg = runs.status().message();
    if (msg.find("KV blocks") != std::string::npos) msg.append(" (raise --kv-mb)");
    return Fail(cmd, msg, 1);
  }
  auto rows = bench::OfflineReport(*runs, p.opt, p.info);
  if (!rows.ok()) return Fail(cmd, rows.status().message(), 1);
  if (a.json) {
    for (const json& j : *rows) std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  PrintTable(a, p, *rows);
  PrintSpread(a, *rows);
  PrintBreakdown(*rows);
  return 0;
}

}  // namespace fathom::cli
