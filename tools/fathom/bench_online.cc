// `fathom bench online` (Poisson arrivals at several rates, each trace drained) and
// `fathom bench k-sweep` (cdb-refill's minimum coda batch K against CB, offline).
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "bench/driver.h"
#include "bench/stats.h"
#include "bench/workload.h"
#include "bench_requests.h"
#include "bench_commands.h"
#include "commands.h"
#include "engine_flags.h"
#include "exec/generate.h"
#include "flags.h"

namespace fathom::cli {
namespace {

// Flags shared by online and k-sweep: the requests' (BenchWorkloadFlags) and the engine's
// (EngineFlags, `engine_bits`).
struct Common : BenchWorkloadFlags {
  explicit Common(uint32_t engine_bits) : engine(engine_bits) {}
  int64_t threads = 1;
  bool json = false, quiet = false;
  EngineFlags engine;
  void Declare(FlagSet& f) {
    BenchWorkloadFlags::Declare(f);
    engine.Declare(f);
    DeclareThreads(f, &threads);
    f.Bool("--quiet", &quiet, "no progress on stderr");
    f.Bool("--json", &json, "print JSON, one object per line");
  }
};

struct Setup {
  std::unique_ptr<Model> model;
  EngineOptions opt;
  std::vector<RequestSpec> reqs;
  int32_t r_max = 0;
};

Result<Setup> Prepare(Common& c, const FlagSet& flags) {
  FATHOM_RETURN_IF_ERROR(bench::ParseWorkload(c.workload).status().WithContext("--workload"));
  Setup s;
  FATHOM_ASSIGN_OR_RETURN(s.opt, c.engine.Options());
  ApplyThreads(c.threads);
  FATHOM_ASSIGN_OR_RETURN(s.model, Model::Load(c.model_dir));
  const ModelSpec& spec = s.model->spec();
  if (!spec.loop.looped) return Status::Error("--model: not a looped model");
  FATHOM_ASSIGN_OR_RETURN(s.r_max, ResolveLoops(spec, s.opt.max_depth));
  s.opt.max_depth = s.r_max;
  FATHOM_RETURN_IF_ERROR(c.ResolveDepths(flags, s.opt.lookahead, s.r_max));
  FATHOM_ASSIGN_OR_RETURN(BenchRequests built, c.Make(spec, s.r_max, s.opt.lookahead));
  s.reqs = std::move(built.reqs);
  // Warm-up, discarded.
  std::vector<RequestSpec> warm(s.reqs.begin(), s.reqs.begin() + std::min<int64_t>(c.n, 4));
  for (RequestSpec& r : warm) r.max_tokens = std::min(r.max_tokens, 8);
  FATHOM_RETURN_IF_ERROR(bench::RunWorkload(*s.model, s.opt, warm, {}, "warm-up", {false, 1e9, ""}).status());
  return s;
}

std::string Prefix(size_t i, size_t n) {
  std::string p = "[";
  p.append(std::to_string(i)).append("/").append(std::to_string(n)).append("]");
  return p;
}

constexpr const char* kOnlineDescription =
    "For each arrival rate (requests/s): N requests arrive at Poisson times\n"
    "(exponential gaps with mean 1/rate, seeded) and the trace is drained under each\n"
    "scheduler. Reports normalized latency = mean over requests of (end-to-end latency /\n"
    "output tokens), TTFT and TPOT percentiles (p50, p90, p99), and per scheduler the\n"
    "saturation rate: where its normalized latency first exceeds --slo seconds per token\n"
    "(default: 3x CB's normalized latency at the lowest rate), interpolated linearly\n"
    "between the tested rates around the crossing, and the highest tested rate within it.\n"
    "--duration S makes each trace the arrivals of S seconds (as the CDB paper's 600 s\n"
    "traces) instead of a fixed --requests count, so higher rates get more requests.";

// --rates, ascending; --schedulers.
Status ParseRatesAndModes(const std::string& rates_text, const std::string& sched_text, std::vector<double>* rates,
                          std::vector<SchedMode>* modes) {
  for (const std::string& r : SplitComma(rates_text)) {
    char* end = nullptr;
    const double v = std::strtod(r.c_str(), &end);
    if (end == r.c_str() || *end != '\0' || !(v > 0)) return Status::Error("--rates: '" + r + "' is not a positive number");
    rates->push_back(v);
  }
  std::sort(rates->begin(), rates->end());
  for (const std::string& name : SplitComma(sched_text)) {
    auto m = ParseSchedMode(name);
    if (!m.ok()) return m.status().WithContext("--schedulers");
    modes->push_back(*m);
  }
  if (rates->empty() || modes->empty()) return Status::Error("--rates and --schedulers must not be empty");
  return Status::Ok();
}

// Arrival times per rate: the first n Poisson arrivals, or all before `duration` (> 0).
// With one seed the arrivals at rate r are one sequence scaled by 1/r, so a higher rate's
// trace holds more requests; the requests are prefixes of one seeded set.
Result<std::vector<std::vector<double>>> ArrivalsPerRate(const std::vector<double>& rates, int64_t n, double duration,
                                                         uint64_t seed) {
  std::vector<std::vector<double>> arrivals;
  for (double rate : rates) {
    if (duration <= 0) {
      arrivals.push_back(bench::PoissonArrivals(n, rate, seed));
      continue;
    }
    std::vector<double> a = bench::PoissonArrivalsWithin(duration, rate, seed);
    if (a.empty())
      return Status::Error("--duration: no request arrives within " + std::to_string(duration) + " s at " +
                           std::to_string(rate) + " req/s");
    arrivals.push_back(std::move(a));
  }
  return arrivals;
}

// One trace under one scheduler: a row of the report.
Result<nlohmann::json> RunTrace(const Setup& setup, SchedMode mode, double rate, const std::vector<double>& arrivals,
                                const bench::ProgressOptions& progress) {
  const std::vector<RequestSpec> reqs(setup.reqs.begin(),
                                      setup.reqs.begin() + static_cast<std::ptrdiff_t>(arrivals.size()));
  EngineOptions o = setup.opt;
  o.mode = mode;
  std::string label(SchedModeName(mode));
  char rate_text[32];
  std::snprintf(rate_text, sizeof rate_text, " @ %g req/s", rate);
  label.append(rate_text);
  FATHOM_ASSIGN_OR_RETURN(bench::RunResult r, bench::RunWorkload(*setup.model, o, reqs, arrivals, label, progress));
  std::vector<double> norm, ttft, tpot;
  for (const bench::RequestTiming& t : r.requests) {
    norm.push_back((t.finish - t.arrival) / static_cast<double>(std::max<int64_t>(t.output_tokens, 1)));
    ttft.push_back(t.first_token - t.arrival);
    if (t.output_tokens > 1) tpot.push_back((t.finish - t.first_token) / static_cast<double>(t.output_tokens - 1));
  }
  double mean_norm = 0;
  for (double v : norm) mean_norm += v;
  mean_norm /= static_cast<double>(std::max<size_t>(norm.size(), 1));
  return nlohmann::json{{"scheduler", std::string(SchedModeName(mode))}, {"rate", rate},
                        {"requests", static_cast<int64_t>(reqs.size())},
                        {"normalized_latency_s", mean_norm}, {"output_tok_s", r.output_tok_s()},
                        {"seconds", r.wall_seconds}, {"mean_depth", r.mean_depth},
                        {"ttft_p50_s", bench::Percentile(ttft, 0.5)}, {"ttft_p90_s", bench::Percentile(ttft, 0.9)},
                        {"ttft_p99_s", bench::Percentile(ttft, 0.99)}, {"tpot_p50_s", bench::Percentile(tpot, 0.5)},
                        {"tpot_p90_s", bench::Percentile(tpot, 0.9)}, {"tpot_p99_s", bench::Percentile(tpot, 0.99)}};
}

// The saturation bound: --slo, or 3x CB's normalized latency at the lowest rate (the
// first row's when CB did not run); and each scheduler's saturation rate under it.
std::map<std::string, bench::Saturation> Saturations(const nlohmann::json& rows, const std::vector<double>& rates,
                                                     const std::vector<SchedMode>& modes, bool slo_given,
                                                     double* slo) {
  if (!slo_given) {
    *slo = std::numeric_limits<double>::infinity();
    for (const auto& row : rows)
      if (row["rate"].get<double>() == rates[0] && row["scheduler"] == "cb") *slo = 3 * row["normalized_latency_s"].get<double>();
    if (*slo == std::numeric_limits<double>::infinity()) *slo = 3 * rows[0]["normalized_latency_s"].get<double>();
  }
  std::map<std::string, bench::Saturation> sat;
  for (SchedMode mode : modes) {
    const std::string name(SchedModeName(mode));
    std::vector<double> rs, lat;
    for (const auto& row : rows)
      if (row["scheduler"] == name) {
        rs.push_back(row["rate"].get<double>());
        lat.push_back(row["normalized_latency_s"].get<double>());
      }
    sat[name] = bench::FindSaturation(rs, lat, *slo);
  }
  return sat;
}

void PrintOnline(const Common& c, const Setup& setup, double duration, double slo, const nlohmann::json& rows,
                 const std::vector<SchedMode>& modes, const std::map<std::string, bench::Saturation>& sat) {
  const auto width = static_cast<long long>(setup.opt.width), k = static_cast<long long>(setup.opt.min_coda);
  if (duration > 0)
    std::printf("workload %s, %g s traces, W %lld, K %lld, mean exit depth %.2f of r_max %d\n", c.workload.c_str(),
                duration, width, k, c.mean_depth, setup.r_max);
  else
    std::printf("workload %s, %lld requests per trace, W %lld, K %lld, mean exit depth %.2f of r_max %d\n",
                c.workload.c_str(), static_cast<long long>(c.n), width, k, c.mean_depth, setup.r_max);
  std::printf("%-13s %7s %8s %11s %9s %9s %9s %9s %9s\n", "scheduler", "req/s", "requests", "norm ms/tok", "tok/s",
              "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99");
  for (const auto& row : rows)
    std::printf("%-13s %7.2f %8lld %11.2f %9.1f %8.3fs %8.3fs %7.1fms %7.1fms\n",
                row["scheduler"].get<std::string>().c_str(), row["rate"].get<double>(),
                static_cast<long long>(row["requests"].get<int64_t>()), 1e3 * row["normalized_latency_s"].get<double>(),
                row["output_tok_s"].get<double>(), row["ttft_p50_s"].get<double>(), row["ttft_p99_s"].get<double>(),
                1e3 * row["tpot_p50_s"].get<double>(), 1e3 * row["tpot_p99_s"].get<double>());
  std::printf("saturation (normalized latency > %.2f ms/token), crossing interpolated / highest tested rate within:\n",
              1e3 * slo);
  for (SchedMode mode : modes) {
    const bench::Saturation& st = sat.at(std::string(SchedModeName(mode)));
    std::printf("  %-13s %7.2f / %.2f req/s%s\n", std::string(SchedModeName(mode)).c_str(), st.crossing,
                st.highest_within, st.exceeded ? "" : " (not exceeded: a lower bound)");
  }
}

}  // namespace

int RunBenchOnline(const std::vector<std::string>& args) {
  const std::string cmd = "bench online";
  Common c(kSweepEngineFlags | kFlagK);
  std::string rates_text = "1,2,4", sched_text = "cb,cdb-norefill,cdb-refill";
  double slo = 0, duration = 0;
  FlagSet flags("fathom " + cmd,
                "fathom bench online --model DIR [--rates 1,2,4] [--schedulers cb,cdb-norefill,cdb-refill]\n"
                "                    [--workload alpaca] [--requests N | --duration S] [--slo S] [common flags]\n"
                "                    [--json]",
                kOnlineDescription);
  c.Declare(flags);
  flags.String("--rates", &rates_text, "comma-separated arrival rates in requests/s (default 1,2,4)");
  flags.String("--schedulers", &sched_text, "comma-separated schedulers (default all three)");
  flags.Double("--slo", &slo, "normalized-latency bound in s/token for the saturation rate", 0, 1e9);
  flags.Double("--duration", &duration, "trace length in seconds: every Poisson arrival before it (instead of\n"
               "--requests)", 0, 1e7);
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  std::vector<double> rates;
  std::vector<SchedMode> modes;
  if (Status s = ParseRatesAndModes(rates_text, sched_text, &rates, &modes); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.Seen("--duration") && flags.Seen("--requests"))
    return Fail(cmd, "--duration and --requests: give one (a trace is a duration or a request count)", 2);
  auto arrivals = ArrivalsPerRate(rates, c.n, duration, static_cast<uint64_t>(c.seed));
  if (!arrivals.ok()) return Fail(cmd, arrivals.status().message(), 2);
  if (duration > 0) c.n = static_cast<int64_t>(arrivals->back().size());
  auto setup = Prepare(c, flags);
  if (!setup.ok()) return Fail(cmd, setup.status().message(), 1);
  nlohmann::json rows = nlohmann::json::array();
  for (size_t ri = 0; ri < rates.size(); ++ri)
    for (SchedMode mode : modes) {
      const bench::ProgressOptions progress{!c.quiet, 2.0, Prefix(rows.size() + 1, rates.size() * modes.size())};
      auto row = RunTrace(*setup, mode, rates[ri], (*arrivals)[ri], progress);
      if (!row.ok()) return Fail(cmd, row.status().message(), 1);
      rows.push_back(std::move(*row));
    }
  const auto sat = Saturations(rows, rates, modes, flags.Seen("--slo"), &slo);
  if (!c.json) {
    PrintOnline(c, *setup, duration, slo, rows, modes, sat);
    return 0;
  }
  for (auto& row : rows) {
    const bench::Saturation& st = sat.at(row["scheduler"].get<std::string>());
    row["saturation_rate"] = st.highest_within;
    row["saturation_crossing"] = st.crossing;
    row["saturation_exceeded"] = st.exceeded;
    row["slo_s_per_token"] = slo;
    row["workload"] = c.workload;
    if (duration > 0) row["duration_s"] = duration;
    std::printf("%s\n", row.dump().c_str());
  }
  return 0;
}

int RunBenchKSweep(const std::vector<std::string>& args) {
  const std::string cmd = "bench k-sweep";
  Common c(kSweepEngineFlags);
  std::string ks_text = "1,2,4,8";
  FlagSet flags("fathom " + cmd,
                "fathom bench k-sweep --model DIR [--ks 1,2,4,8] [--workload alpaca] [--requests N]\n"
                "                     [common flags] [--json]",
                "Offline throughput of cdb-refill for each minimum coda batch K, against one CB run.");
  c.Declare(flags);
  flags.String("--ks", &ks_text, "comma-separated K values (default 1,2,4,8)");
  if (Status s = flags.Parse(args); !s.ok()) return Fail(cmd, s.message(), 2);
  if (flags.help_requested()) {
    std::fputs(flags.Help().c_str(), stdout);
    return 0;
  }
  auto ks = ParseIntList("--ks", ks_text);
  if (!ks.ok()) return Fail(cmd, ks.status().message(), 2);
  for (int64_t k : *ks)
    if (k < 1) return Fail(cmd, "--ks: K must be >= 1", 2);
  auto setup = Prepare(c, flags);
  if (!setup.ok()) return Fail(cmd, setup.status().message(), 1);
  const size_t runs = ks->size() + 1;
  EngineOptions o = setup->opt;
  o.mode = SchedMode::kCb;
  auto cb = bench::RunWorkload(*setup->model, o, setup->reqs, {}, "cb", {!c.quiet, 2.0, Prefix(1, runs)});
  if (!cb.ok()) return Fail(cmd, cb.status().message(), 1);
  nlohmann::json rows = nlohmann::json::array();
  for (size_t i = 0; i < ks->size(); ++i) {
    o.mode = SchedMode::kCdbRefill;
    o.min_coda = static_cast<int32_t>((*ks)[i]);
    std::string label = "cdb-refill K=";
    label.append(std::to_string((*ks)[i]));
    auto r = bench::RunWorkload(*setup->model, o, setup->reqs, {}, label, {!c.quiet, 2.0, Prefix(i + 2, runs)});
    if (!r.ok()) return Fail(cmd, r.status().message(), 1);
    rows.push_back({{"scheduler", "cdb-refill"}, {"k", (*ks)[i]}, {"output_tok_s", r->output_tok_s()},
                    {"cb_output_tok_s", cb->output_tok_s()}, {"ratio_to_cb", r->output_tok_s() / cb->output_tok_s()},
                    {"mean_depth", r->mean_depth}, {"workload", c.workload}, {"width", o.width}});
  }
  if (c.json) {
    for (const auto& row : rows) std::printf("%s\n", row.dump().c_str());
    return 0;
  }
  std::printf("workload %s, %lld requests, W %lld; CB %.1f tok/s\n%6s %10s %8s\n", c.workload.c_str(),
              static_cast<long long>(c.n), static_cast<long long>(o.width), cb->output_tok_s(), "K", "tok/s", "vs CB");
  for (const auto& row : rows)
    std::printf("%6lld %10.1f %7.3fx\n", static_cast<long long>(row["k"].get<int64_t>()), row["output_tok_s"].get<double>(),
                row["ratio_to_cb"].get<double>());
  return 0;
}

}  // namespace fathom::cli
