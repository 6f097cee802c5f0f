// `fathom bench offline`: a whole synthetic workload queued at t = 0, run under each
// scheduler; throughput against CB and against the bounds of DESIGN.md §5.
#include <omp.h>

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "bench/driver.h"
#include "bench/model_flops.h"
#include "bench/speedup.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "bench_requests.h"
#include "bench_commands.h"
#include "commands.h"
#include "exec/generate.h"
#include "flags.h"
#include "lookahead_flag.h"

namespace fathom::cli {
namespace {

// Stage-by-stage engine time of scheduler i: seconds averaged over the rounds; runs and
// rows (the schedule is the same every round: all requests are queued at t = 0).
nlohmann::json Breakdown(const std::vector<std::vector<bench::RunResult>>& rounds, size_t i) {
  nlohmann::json out = nlohmann::json::object();
  const auto n = static_cast<double>(rounds.size());
  for (Stage stage : {Stage::kPrefill, Stage::kPrelude, Stage::kCore, Stage::kCoda}) {
    double seconds = 0;
    for (const auto& round : rounds) seconds += round[i].stats.stage[static_cast<int>(stage)].seconds;
    const StageStats& st = rounds[0][i].stats.stage[static_cast<int>(stage)];
    out[std::string(StageName(stage))] = {{"seconds", seconds / n}, {"runs", st.runs}, {"rows", st.rows}};
  }
  double schedule = 0;
  for (const auto& round : rounds) schedule += round[i].stats.schedule_seconds;
  out["schedule_seconds"] = schedule / n;
  out["steps"] = rounds[0][i].stats.steps;
  return out;
}

// CB's stage seconds and rows in one run: the inputs of the measured-cost bound.
bench::StageCosts CostsOf(const bench::RunResult& r) {
  const auto& st = r.stats.stage;
  const auto at = [&](Stage s) -> const StageStats& { return st[static_cast<int>(s)]; };
  bench::StageCosts c;
  c.prefill_s = at(Stage::kPrefill).seconds;
  c.prelude_s = at(Stage::kPrelude).seconds;
  c.core_s = at(Stage::kCore).seconds;
  c.coda_s = at(Stage::kCoda).seconds;
  c.prefill_rows = at(Stage::kPrefill).rows;
  c.prelude_rows = at(Stage::kPrelude).rows;
  c.core_rows = at(Stage::kCore).rows;
  c.coda_rows = at(Stage::kCoda).rows;
  c.total_s = r.stats.seconds;
  return c;
}

double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double Max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

}  // namespace

int RunBenchOffline(const std::vector<std::string>& args) {
  const std::string cmd = "bench offline";
  std::string model_dir, workload_name = "alpaca", sched_text = "cb,cdb-norefill,cdb-refill",
                         layout_name = "last-exited", dataset, tokenizer_dir, exit_trace;
  int64_t n = 32, k = 1, width = 8, min_depth = 0, max_depth = 0, seed = 0, threads = 1, budget = 256,
          kv_mb = 0, flush = 4, repeat = 1;
  double mean_depth = 0;
  bool json = false, no_control = false, quiet = false, lookahead = false;
  FlagSet flags(
      "fathom " + cmd,
      "fathom bench offline --model DIR [--workload alpaca|sharegpt|arxiv] [--requests N] [--dataset FILE]\n"
      "                     [--schedulers cb,cdb-norefill,cdb-refill] [--k K] [--width W]\n"
      "                     [--layout L] [--mean-depth D] [--min-depth D] [--exit-trace FILE] [--repeat R]\n"
      "                     [--lookahead] [--no-control] [--json]",
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
      "the median over the rounds is reported with its min and max. Progress on stderr.");
  flags.String("--model", &model_dir, "Hugging Face model directory of a looped model");
  flags.String("--workload", &workload_name, "alpaca (default), sharegpt or arxiv");
  flags.Int("--requests", &n, "number of requests (default 32)", 1, 1 << 24);
  flags.String("--dataset", &dataset, "the workload's real data file (Alpaca JSON, ShareGPT JSON or arXiv JSONL)\n"
               "instead of synthetic requests; tokenized with the model's tokenizer");
  flags.String("--tokenizer", &tokenizer_dir, "directory of the tokenizer.json for --dataset (default: --model)");
  flags.String("--schedulers", &sched_text, "comma-separated: cb, cdb-norefill, cdb-refill (default all)");
  flags.Int("--k", &k, "minimum coda batch K (cdb-refill; default 1)", 1, 1 << 20);
  flags.Int("--width", &width, "decode width W (default 8)", 1, 1 << 16);
  flags.String("--layout", &layout_name, "KV layout (default last-exited)");
  flags.Double("--mean-depth", &mean_depth, "mean exit depth d (default (min-depth + r_max) / 2)", 1, 4096);
  flags.Int("--min-depth", &min_depth, MinDepthHelp(), 1, 4096);
  DeclareLookahead(flags, &lookahead);
  flags.String("--exit-trace", &exit_trace, "replay the exit depths `fathom generate --json` recorded on a real\n"
               "checkpoint (instead of seeded random depths; see bench/exit_trace.h)");
  flags.Int("--max-depth", &max_depth, "r_max (default: the model's loop count)", 1, 4096);
  flags.Int("--seed", &seed, "workload and exit-trace seed (default 0)", 0, INT64_MAX);
  flags.Int("--prefill-budget", &budget, "prompt tokens per prefill step (default 256)", 1, 1 << 24);
  flags.Int("--flush-steps", &flush, "cdb-refill coda flush age (default 4)", 1, 1 << 20);
  flags.Int("--kv-mb", &kv_mb, "KV pool MiB (default: the engine's 4096 blocks)", 1, 1 << 24);
  flags.Int("--threads", &threads, "worker threads (default 1: on a shared 2-core machine OpenMP barriers\n"
            "under contention cost far more than the second core gains)", 1, 1024);
  flags.Int("--repeat", &repeat, "rounds of runs; medians of the per-round ratios (default 1)", 1, 1000);
  flags.Bool("--no-control", &no_control, "skip the no-exit control runs");
  flags.Bool("--quiet", &quiet, "no progress on stderr");
  flags.Bool("--json", &json, "print one JSON object per scheduler, one per line");
  flags.Require("--model");
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto workload = bench::ParseWorkload(workload_name);
  if (!workload.ok()) return Fail(cmd, "--workload: " + workload.status().message(), 2);
  auto layout = ParseKvLayout(layout_name);
  if (!layout.ok()) return Fail(cmd, "--layout: " + layout.status().message(), 2);
  std::vector<SchedMode> modes = {SchedMode::kCb};
  for (const std::string& name : SplitComma(sched_text)) {
    auto m = ParseSchedMode(name);
    if (!m.ok()) return Fail(cmd, "--schedulers: " + m.status().message(), 2);
    if (std::find(modes.begin(), modes.end(), *m) == modes.end()) modes.push_back(*m);
  }
  omp_set_num_threads(static_cast<int>(threads));
  auto model = Model::Load(model_dir);
  if (!model.ok()) return Fail(cmd, model.status().message(), 1);
  const Model& m = **model;
  const ModelSpec& spec = m.spec();
  if (!spec.loop.looped) return Fail(cmd, "--model: '" + model_dir + "' is not a looped model", 2);
  auto r_max = ResolveLoops(spec, static_cast<int32_t>(max_depth));
  if (!r_max.ok()) return Fail(cmd, "--max-depth: " + r_max.status().message(), 2);
  if (std::string e = ResolveMinDepth(flags, lookahead, &min_depth); !e.empty()) return Fail(cmd, e, 2);
  if (min_depth > *r_max) return Fail(cmd, "--min-depth: above r_max " + std::to_string(*r_max), 2);
  if (!flags.Seen("--mean-depth")) mean_depth = 0.5 * static_cast<double>(min_depth + *r_max);
  if (mean_depth < static_cast<double>(min_depth) || mean_depth > *r_max)
    return Fail(cmd, "--mean-depth: outside [--min-depth, r_max]", 2);
  if (!exit_trace.empty() && (flags.Seen("--mean-depth") || flags.Seen("--min-depth")))
    return Fail(cmd, "--exit-trace replays recorded depths: it cannot be combined with --mean-depth or --min-depth", 2);

  auto built = MakeBenchRequests({*workload, dataset, tokenizer_dir, model_dir, n, static_cast<uint64_t>(seed),
                                  exit_trace, *r_max, lookahead},
                                 spec, {mean_depth, static_cast<int32_t>(min_depth), static_cast<uint64_t>(seed), {}});
  if (!built.ok()) return Fail(cmd, built.status().message(), 1);
  if (!exit_trace.empty()) mean_depth = built->trace_mean;
  const auto& reqs = built->reqs;
  const auto& control_reqs = built->control_reqs;
  const int64_t prompt_tokens = built->prompt_tokens, output_tokens = built->output_tokens;

  EngineOptions opt;
  opt.width = static_cast<int32_t>(width);
  opt.min_coda = static_cast<int32_t>(k);
  opt.flush_steps = static_cast<int32_t>(flush);
  opt.prefill_budget = budget;
  opt.max_depth = *r_max;
  opt.layout = *layout;
  opt.kv_bytes = static_cast<size_t>(kv_mb) << 20;
  opt.lookahead = lookahead;

  const size_t runs = modes.size() * (no_control ? 1 : 2) * static_cast<size_t>(repeat);
  size_t run_i = 0;
  double elapsed = 0;
  auto run = [&](SchedMode mode, const std::vector<RequestSpec>& rs, const std::string& what) -> Result<bench::RunResult> {
    EngineOptions o = opt;
    o.mode = mode;
    bench::ProgressOptions p;
    p.enabled = !quiet;
    p.prefix = "[";
    p.prefix.append(std::to_string(++run_i)).append("/").append(std::to_string(runs)).append("]");
    const std::string label = std::string(SchedModeName(mode)) + what;
    if (!quiet) {
      std::fprintf(stderr, "%s %s: %zu requests, %lld output tokens", p.prefix.c_str(), label.c_str(), rs.size(),
                   static_cast<long long>(output_tokens));
      // Whole-benchmark ETA from the runs so far (the no-exit controls run a little longer).
      if (run_i > 1)
        std::fprintf(stderr, "; ETA for the remaining runs %.0f s", elapsed / static_cast<double>(run_i - 1) *
                                                                   static_cast<double>(runs - run_i + 1));
      std::fprintf(stderr, "\n");
    }
    auto res = bench::RunWorkload(m, o, rs, {}, label, p);
    if (res.ok()) elapsed += res->wall_seconds;
    return res;
  };
  auto fail_run = [&](const Status& st) {
    std::string msg = st.message();
    if (msg.find("KV blocks") != std::string::npos) msg.append(" (raise --kv-mb)");
    return Fail(cmd, msg, 1);
  };
  {  // Warm-up (page faults, primitive caches, thread start-up): a few requests, discarded.
    std::vector<RequestSpec> warm(reqs.begin(), reqs.begin() + std::min<int64_t>(n, std::max<int64_t>(2, width / 2)));
    for (RequestSpec& r : warm) r.max_tokens = std::min(r.max_tokens, 8);
    EngineOptions o = opt;
    o.mode = SchedMode::kCdbRefill;
    auto w = bench::RunWorkload(m, o, warm, {}, "warm-up", {false, 1e9, ""});
    if (!w.ok()) return fail_run(w.status());
  }
  // [round][mode]: every round runs each scheduler once, starting from a rotated position,
  // so slow drift of the host's load does not always fall on the same scheduler.
  const size_t n_modes = modes.size();
  std::vector<std::vector<bench::RunResult>> main_runs(static_cast<size_t>(repeat)),
      control_runs(static_cast<size_t>(repeat));
  // One round over every scheduler, into `out` indexed by mode.
  auto run_round = [&](size_t round, const std::vector<RequestSpec>& rs, const std::string& what,
                       std::vector<bench::RunResult>* out) -> Status {
    out->resize(n_modes);
    for (size_t o = 0; o < n_modes; ++o) {
      const size_t i = (o + round) % n_modes;
      auto r = run(modes[i], rs, what);
      if (!r.ok()) return r.status();
      (*out)[i] = std::move(*r);
    }
    return Status::Ok();
  };
  for (size_t round = 0; round < static_cast<size_t>(repeat); ++round) {
    if (Status st = run_round(round, reqs, "", &main_runs[round]); !st.ok()) return fail_run(st);
    if (no_control) continue;
    if (Status st = run_round(round, control_reqs, " (no exits)", &control_runs[round]); !st.ok())
      return fail_run(st);
  }
  // Per-mode series over the rounds: tok/s, ratio to CB within the round (over wall time,
  // and over the process's CPU time), CB's prefill share.
  struct Series {
    std::vector<double> tok_s, ratio, control_ratio, ratio_cpu, control_ratio_cpu;
  };
  std::vector<Series> series(n_modes);
  std::vector<double> alphas;
  for (size_t round = 0; round < static_cast<size_t>(repeat); ++round) {
    alphas.push_back(main_runs[round][0].prefill_share);
    for (size_t i = 0; i < n_modes; ++i) {
      series[i].tok_s.push_back(main_runs[round][i].output_tok_s());
      series[i].ratio.push_back(main_runs[round][i].output_tok_s() / main_runs[round][0].output_tok_s());
      series[i].ratio_cpu.push_back(main_runs[round][i].output_tok_cpu_s() / main_runs[round][0].output_tok_cpu_s());
      if (!no_control) {
        series[i].control_ratio.push_back(control_runs[round][i].output_tok_s() /
                                          control_runs[round][0].output_tok_s());
        series[i].control_ratio_cpu.push_back(control_runs[round][i].output_tok_cpu_s() /
                                              control_runs[round][0].output_tok_cpu_s());
      }
    }
  }

  const bench::StageFlops flops = bench::CountFlops(spec);
  const double alpha = bench::Median(alphas);
  // Prefill emits each request's first token; the rest come out of the coda.
  const double f1 = static_cast<double>(n) / static_cast<double>(std::max<int64_t>(output_tokens, 1));
  // d: the mean exit depth the CDB runs measured (CB runs every token to r_max); seeded, so
  // the same in every run and round.
  double d = mean_depth;
  for (size_t j = 1; j < n_modes; ++j) d = main_runs[0][j].mean_depth;
  // The measured-cost bound of each round, from that round's CB run (bench/speedup.h).
  std::vector<bench::MeasuredBound> measured;
  for (size_t round = 0; round < static_cast<size_t>(repeat); ++round) {
    // Useful work: every prompt token once; every output token but each request's first
    // (prefill emits those) through the decode stages once.
    auto b = bench::MeasuredCostBound(CostsOf(main_runs[round][0]), prompt_tokens, output_tokens - n, *r_max, d);
    if (!b.ok()) return Fail(cmd, b.status().message(), 1);
    measured.push_back(*b);
  }
  const auto median_of = [&](double bench::MeasuredBound::*field) {
    std::vector<double> v;
    for (const bench::MeasuredBound& b : measured) v.push_back(b.*field);
    return bench::Median(v);
  };
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < n_modes; ++i) {
    const bench::RunResult& r = main_runs[0][i];  // seeded: tokens and depths are the same every round
    const double s_dec = bench::DecodeSpeedupBound(flops.f0(), flops.fr(), *r_max, d);
    const double s_e2e = bench::EndToEndBound(alpha, s_dec);
    const double ratio = bench::Median(series[i].ratio);
    std::vector<double> seconds, cpu_seconds, prefill_shares, fractions, fractions_cpu;
    nlohmann::json per_round = nlohmann::json::array();  // what the medians are taken over
    for (size_t round = 0; round < main_runs.size(); ++round) {
      const bench::RunResult& rr = main_runs[round][i];
      seconds.push_back(rr.wall_seconds);
      cpu_seconds.push_back(rr.cpu_seconds);
      prefill_shares.push_back(rr.prefill_share);
      fractions.push_back(series[i].ratio[round] / measured[round].s_e2e);
      fractions_cpu.push_back(series[i].ratio_cpu[round] / measured[round].s_e2e);
      nlohmann::json pr = {{"output_tok_s", series[i].tok_s[round]},
                           {"ratio_to_cb", series[i].ratio[round]},
                           {"seconds", rr.wall_seconds},
                           {"cpu_seconds", rr.cpu_seconds},
                           {"ratio_to_cb_cpu", series[i].ratio_cpu[round]},
                           {"output_tokens", rr.stats.output_tokens},
                           {"preemptions", rr.stats.preemptions},
                           {"minor_faults", rr.minor_faults},
                           {"prefill_share", rr.prefill_share},
                           {"alpha", alphas[round]},
                           {"cp_measured_s", measured[round].cp},
                           {"c0_measured_s", measured[round].c0},
                           {"cr_measured_s", measured[round].cr},
                           {"s_dec_measured", measured[round].s_dec},
                           {"s_e2e_measured", measured[round].s_e2e},
                           {"cb_recompute_share", measured[round].recompute_share},
                           {"fraction_of_s_e2e_measured", fractions.back()},
                           {"fraction_of_s_e2e_measured_cpu", fractions_cpu.back()}};
      if (!no_control) {
        pr["control_ratio_to_cb"] = series[i].control_ratio[round];
        pr["control_ratio_to_cb_cpu"] = series[i].control_ratio_cpu[round];
      }
      per_round.push_back(pr);
    }
    nlohmann::json j = {{"scheduler", std::string(SchedModeName(modes[i]))},
                        {"model", model_dir},
                        {"model_type", spec.model_type},
                        {"workload", std::string(bench::WorkloadName(*workload))},
                        {"requests", n},
                        {"prompt_tokens", prompt_tokens},
                        {"output_tokens", r.stats.output_tokens},
                        {"width", width},
                        {"k", k},
                        {"layout", std::string(KvLayoutName(*layout))},
                        {"r_max", *r_max},
                        {"mean_depth_target", mean_depth},
                        {"exits", built->exits},
                        {"mean_depth", modes[i] == SchedMode::kCb ? static_cast<double>(*r_max) : r.mean_depth},
                        {"repeats", repeat},
                        {"seconds", bench::Median(seconds)},
                        {"output_tok_s", bench::Median(series[i].tok_s)},
                        {"ratio_to_cb", ratio},
                        {"ratio_to_cb_min", Min(series[i].ratio)},
                        {"ratio_to_cb_max", Max(series[i].ratio)},
                        {"alpha", alpha},
                        {"prefill_share", bench::Median(prefill_shares)},
                        {"f0", flops.f0()},
                        {"fr", flops.fr()},
                        {"s_dec", s_dec},
                        {"s_e2e", s_e2e},
                        {"s_e2e_refined", bench::EndToEndBoundRefined(alpha, s_dec, f1)},
                        {"fraction_of_s_e2e", ratio / s_e2e},
                        {"cp_measured_s", median_of(&bench::MeasuredBound::cp)},
                        {"c0_measured_s", median_of(&bench::MeasuredBound::c0)},
                        {"cr_measured_s", median_of(&bench::MeasuredBound::cr)},
                        {"s_dec_measured", median_of(&bench::MeasuredBound::s_dec)},
                        {"s_e2e_measured", median_of(&bench::MeasuredBound::s_e2e)},
                        {"cb_recompute_share", median_of(&bench::MeasuredBound::recompute_share)},
                        {"fraction_of_s_e2e_measured", bench::Median(fractions)},
                        {"fraction_of_s_e2e_measured_min", Min(fractions)},
                        {"fraction_of_s_e2e_measured_max", Max(fractions)},
                        {"cpu_seconds", bench::Median(cpu_seconds)},
                        {"ratio_to_cb_cpu", bench::Median(series[i].ratio_cpu)},
                        {"ratio_to_cb_cpu_min", Min(series[i].ratio_cpu)},
                        {"ratio_to_cb_cpu_max", Max(series[i].ratio_cpu)},
                        {"fraction_of_s_e2e_measured_cpu", bench::Median(fractions_cpu)},
                        {"fraction_of_s_e2e_measured_cpu_min", Min(fractions_cpu)},
                        {"fraction_of_s_e2e_measured_cpu_max", Max(fractions_cpu)},
                        {"preemptions", r.stats.preemptions},
                        {"breakdown", Breakdown(main_runs, i)},
                        {"rounds", per_round}};
    if (!no_control) {
      const auto& c = series[i].control_ratio;
      std::vector<double> control_tok_s;
      for (const auto& round : control_runs) control_tok_s.push_back(round[i].output_tok_s());
      j["control_output_tok_s"] = bench::Median(control_tok_s);
      j["control_ratio_to_cb"] = bench::Median(c);
      j["control_ratio_to_cb_min"] = Min(c);
      j["control_ratio_to_cb_max"] = Max(c);
      const auto& cc = series[i].control_ratio_cpu;
      j["control_ratio_to_cb_cpu"] = bench::Median(cc);
      j["control_ratio_to_cb_cpu_min"] = Min(cc);
      j["control_ratio_to_cb_cpu_max"] = Max(cc);
      j["control_breakdown"] = Breakdown(control_runs, i);
    }
    rows.push_back(j);
  }
  if (json) {
    for (const auto& j : rows) std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("model %s (%s), workload %s: %lld requests, %lld prompt + %lld output tokens\n", model_dir.c_str(),
              spec.model_type.c_str(), built->source.c_str(), static_cast<long long>(n),
              static_cast<long long>(prompt_tokens), static_cast<long long>(output_tokens));
  std::printf("W %lld, K %lld, layout %s, r_max %d; exits: ", static_cast<long long>(width),
              static_cast<long long>(k), layout_name.c_str(), *r_max);
  if (exit_trace.empty())
    std::printf("%s, mean %.2f, min %lld\n", built->exits.c_str(), mean_depth, static_cast<long long>(min_depth));
  else
    std::printf("%s\n", built->exits.c_str());
  std::printf("F_0 %.3g, F_r %.3g FLOPs/token (F_0/F_r %.3f); CB prefill share alpha %.3f\n", flops.f0(), flops.fr(),
              flops.f0() / flops.fr(), alpha);
  const double c0 = median_of(&bench::MeasuredBound::c0), cr = median_of(&bench::MeasuredBound::cr);
  std::printf("measured on CB: c_0 %.4f ms per decode token outside the core, c_r %.4f ms per core row "
              "(c_0/c_r %.3f); %.1f%% of CB's time recomputed after preemption\n",
              1e3 * c0, 1e3 * cr, c0 / cr, 100 * median_of(&bench::MeasuredBound::recompute_share));
  std::printf("bounds: S_dec/S_e2e from FLOPs; S_dec*/S_e2e* from CB's measured costs (of S_e2e*: the headline)\n");
  std::printf("%-13s %10s %8s %7s %7s %7s %9s %7s %7s %9s %7s", "scheduler", "tok/s", "vs CB", "depth", "S_dec",
              "S_e2e", "of S_e2e", "S_dec*", "S_e2e*", "of S_e2e*", "prefill");
  if (!no_control) std::printf(" %14s", "no-exit vs CB");
  std::printf("\n");
  for (const auto& j : rows) {
    const bool is_cb = j["scheduler"] == "cb";  // the baseline: its fraction of S_e2e is not a result
    std::printf("%-13s %10.1f %7.3fx %7.2f %7.3f %7.3f ", j["scheduler"].get<std::string>().c_str(),
                j["output_tok_s"].get<double>(), j["ratio_to_cb"].get<double>(), j["mean_depth"].get<double>(),
                j["s_dec"].get<double>(), j["s_e2e"].get<double>());
    if (is_cb) std::printf("%9s", "-");
    else std::printf("%8.1f%%", 100 * j["fraction_of_s_e2e"].get<double>());
    std::printf(" %7.3f %7.3f ", j["s_dec_measured"].get<double>(), j["s_e2e_measured"].get<double>());
    if (is_cb) std::printf("%9s", "-");
    else std::printf("%8.1f%%", 100 * j["fraction_of_s_e2e_measured"].get<double>());
    std::printf(" %6.1f%%", 100 * j["prefill_share"].get<double>());
    if (!no_control) std::printf(" %13.3fx", j["control_ratio_to_cb"].get<double>());
    std::printf("\n");
  }
  if (repeat > 1) {
    std::printf("over %lld rounds, vs CB min-max:", static_cast<long long>(repeat));
    for (const auto& j : rows)
      if (j["scheduler"] != "cb")
        std::printf(" %s %.3f-%.3fx", j["scheduler"].get<std::string>().c_str(), j["ratio_to_cb_min"].get<double>(),
                    j["ratio_to_cb_max"].get<double>());
    std::printf("; of S_e2e*:");
    for (const auto& j : rows)
      if (j["scheduler"] != "cb")
        std::printf(" %s %.1f-%.1f%%", j["scheduler"].get<std::string>().c_str(),
                    100 * j["fraction_of_s_e2e_measured_min"].get<double>(),
                    100 * j["fraction_of_s_e2e_measured_max"].get<double>());
    if (!no_control) {
      std::printf("; no-exit:");
      for (const auto& j : rows)
        if (j["scheduler"] != "cb")
          std::printf(" %s %.3f-%.3fx", j["scheduler"].get<std::string>().c_str(),
                      j["control_ratio_to_cb_min"].get<double>(), j["control_ratio_to_cb_max"].get<double>());
    }
    std::printf("\n");
  }
  // The same ratios over the process's CPU time (less affected by other processes' load).
  std::printf("over CPU time (median [min-max] of rounds):");
  for (const auto& j : rows) {
    if (j["scheduler"] == "cb") continue;
    std::printf(" %s %.3fx [%.3f-%.3f], %.1f%% of S_e2e* [%.1f-%.1f%%]", j["scheduler"].get<std::string>().c_str(),
                j["ratio_to_cb_cpu"].get<double>(), j["ratio_to_cb_cpu_min"].get<double>(),
                j["ratio_to_cb_cpu_max"].get<double>(), 100 * j["fraction_of_s_e2e_measured_cpu"].get<double>(),
                100 * j["fraction_of_s_e2e_measured_cpu_min"].get<double>(),
                100 * j["fraction_of_s_e2e_measured_cpu_max"].get<double>());
    if (!no_control) std::printf(", no-exit %.3fx", j["control_ratio_to_cb_cpu"].get<double>());
    std::printf(";");
  }
  std::printf("\n");
  // Where the time went: per stage, seconds (mean over rounds), executions and mean rows.
  std::printf("step-time breakdown (s, runs x mean rows):\n%-13s", "scheduler");
  for (const char* stage : {"prefill", "prelude", "core", "coda"}) std::printf(" %22s", stage);
  std::printf(" %9s %7s\n", "schedule", "steps");
  for (const auto& j : rows) {
    const nlohmann::json& b = j["breakdown"];
    std::printf("%-13s", j["scheduler"].get<std::string>().c_str());
    for (const char* stage : {"prefill", "prelude", "core", "coda"}) {
      const nlohmann::json& st = b[stage];
      const auto n_runs = st["runs"].get<int64_t>();
      char cell[64];
      std::snprintf(cell, sizeof cell, "%.2fs %lldx%.1f", st["seconds"].get<double>(), static_cast<long long>(n_runs),
                    n_runs ? static_cast<double>(st["rows"].get<int64_t>()) / static_cast<double>(n_runs) : 0.0);
      std::printf(" %22s", cell);
    }
    std::printf(" %8.3fs %7lld\n", b["schedule_seconds"].get<double>(),
                static_cast<long long>(b["steps"].get<int64_t>()));
  }
  return 0;
}

}  // namespace fathom::cli
