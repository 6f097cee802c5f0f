#include "bench/offline_bench.h"

#include <algorithm>
#include <cstdio>

#include "bench/speedup.h"
#include "bench/stats.h"

namespace fathom::bench {
namespace {

using nlohmann::json;

Status CheckModes(const std::vector<SchedMode>& modes) {
  if (modes.empty() || modes[0] != SchedMode::kCb)
    return Status::Error("offline benchmark: the first scheduler must be cb, the baseline");
  return Status::Ok();
}

// Runs one workload after another with "[i/N]" progress prefixes and, from the second run
// on, an ETA for the whole benchmark from the mean time of the runs so far.
class Runner {
 public:
  Runner(const Model& model, const OfflineBenchOptions& opt, size_t runs, int64_t output_tokens)
      : model_(model), opt_(opt), runs_(runs), output_tokens_(output_tokens) {}

  Result<RunResult> Run(SchedMode mode, const std::vector<RequestSpec>& rs, const std::string& what) {
    EngineOptions o = opt_.engine;
    o.mode = mode;
    ProgressOptions p;
    p.enabled = opt_.progress;
    p.prefix = "[";
    p.prefix.append(std::to_string(++done_)).append("/").append(std::to_string(runs_)).append("]");
    const std::string label = std::string(SchedModeName(mode)) + what;
    if (opt_.progress) {
      std::fprintf(stderr, "%s %s: %zu requests, %lld output tokens", p.prefix.c_str(), label.c_str(), rs.size(),
                   static_cast<long long>(output_tokens_));
      // The no-exit controls run a little longer than the rest, so this is a low estimate.
      if (done_ > 1)
        std::fprintf(stderr, "; ETA for the remaining runs %.0f s",
                     elapsed_ / static_cast<double>(done_ - 1) * static_cast<double>(runs_ - done_ + 1));
      std::fprintf(stderr, "\n");
    }
    auto res = RunWorkload(model_, o, rs, {}, label, p);
    if (res.ok()) elapsed_ += res->wall_seconds;
    return res;
  }

  // One round over every scheduler, starting at `round` mod n; out[i] is modes[i]'s run.
  Status Round(size_t round, const std::vector<RequestSpec>& rs, const std::string& what,
               std::vector<RunResult>* out) {
    const size_t n = opt_.modes.size();
    out->resize(n);
    for (size_t o = 0; o < n; ++o) {
      const size_t i = (o + round) % n;
      FATHOM_ASSIGN_OR_RETURN((*out)[i], Run(opt_.modes[i], rs, what));
    }
    return Status::Ok();
  }

 private:
  const Model& model_;
  const OfflineBenchOptions& opt_;
  const size_t runs_;
  const int64_t output_tokens_;
  size_t done_ = 0;
  double elapsed_ = 0;
};

double Min(const std::vector<double>& v) { return *std::min_element(v.begin(), v.end()); }
double Max(const std::vector<double>& v) { return *std::max_element(v.begin(), v.end()); }

// Stage-by-stage engine time of scheduler i: seconds averaged over the rounds; runs and
// rows of round 0 (the schedule is the same every round: all requests are queued at t = 0).
json Breakdown(const std::vector<std::vector<RunResult>>& rounds, size_t i) {
  json out = json::object();
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
  int64_t fewer = 0;  // summed: the governor's choices differ between rounds
  for (const auto& round : rounds) fewer += round[i].stats.fewer_thread_steps;
  out["fewer_thread_steps"] = fewer;
  int64_t contended = 0;
  for (const auto& round : rounds) contended += round[i].stats.contended_thread_steps;
  out["contended_thread_steps"] = contended;
  return out;
}

// CB's stage seconds and rows in one run: the inputs of the measured-cost bound.
StageCosts CostsOf(const RunResult& r) {
  const auto at = [&](Stage s) -> const StageStats& { return r.stats.stage[static_cast<int>(s)]; };
  StageCosts c;
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

// Per scheduler, the series over the rounds: tok/s and the ratios to CB within each round
// (over wall time and over the process's CPU time), with and without exits.
struct Series {
  std::vector<double> tok_s, ratio, ratio_cpu, control_tok_s, control_ratio, control_ratio_cpu;
};

Series SeriesOf(const OfflineRuns& runs, size_t i) {
  Series s;
  for (size_t round = 0; round < runs.main.size(); ++round) {
    const std::vector<RunResult>& m = runs.main[round];
    s.tok_s.push_back(m[i].output_tok_s());
    s.ratio.push_back(m[i].output_tok_s() / m[0].output_tok_s());
    s.ratio_cpu.push_back(m[i].output_tok_cpu_s() / m[0].output_tok_cpu_s());
    if (runs.control.empty()) continue;
    const std::vector<RunResult>& c = runs.control[round];
    s.control_tok_s.push_back(c[i].output_tok_s());
    s.control_ratio.push_back(c[i].output_tok_s() / c[0].output_tok_s());
    s.control_ratio_cpu.push_back(c[i].output_tok_cpu_s() / c[0].output_tok_cpu_s());
  }
  return s;
}

// What every scheduler's row shares: CB's prefill shares and measured bounds per round,
// and the FLOP bounds' inputs.
struct Shared {
  std::vector<double> alphas;
  std::vector<MeasuredBound> measured;  // per round, from that round's CB run
  double alpha = 0, d = 0, f1 = 0, s_dec = 0, s_e2e = 0;
  double MedianOf(double MeasuredBound::*field) const {
    std::vector<double> v;
    for (const MeasuredBound& b : measured) v.push_back(b.*field);
    return Median(v);
  }
};

Result<Shared> SharedOf(const OfflineRuns& runs, const OfflineReportInfo& info) {
  Shared s;
  for (const auto& round : runs.main) s.alphas.push_back(round[0].prefill_share);
  s.alpha = Median(s.alphas);
  // Prefill emits each request's first token; the rest come out of the coda.
  s.f1 = static_cast<double>(info.requests) / static_cast<double>(std::max<int64_t>(info.output_tokens, 1));
  // d: the mean exit depth the CDB runs measured (seeded: the same in every run and round).
  s.d = info.mean_depth_target;
  for (size_t j = 1; j < runs.main[0].size(); ++j) s.d = runs.main[0][j].mean_depth;
  s.s_dec = DecodeSpeedupBound(info.flops.f0(), info.flops.fr(), info.r_max, s.d);
  s.s_e2e = EndToEndBound(s.alpha, s.s_dec);
  for (const auto& round : runs.main) {
    // Useful work: every prompt token once; every output token but each request's first
    // (prefill emits those) through the decode stages once.
    FATHOM_ASSIGN_OR_RETURN(MeasuredBound b, MeasuredCostBound(CostsOf(round[0]), info.prompt_tokens,
                                                               info.output_tokens - info.requests, info.r_max, s.d));
    s.measured.push_back(b);
  }
  return s;
}

// The per-round values of scheduler i that its medians are taken over.
json Rounds(const OfflineRuns& runs, const Series& s, const Shared& sh, size_t i) {
  json out = json::array();
  for (size_t round = 0; round < runs.main.size(); ++round) {
    const RunResult& rr = runs.main[round][i];
    const MeasuredBound& mb = sh.measured[round];
    json pr = {{"output_tok_s", s.tok_s[round]},
               {"ratio_to_cb", s.ratio[round]},
               {"seconds", rr.wall_seconds},
               {"cpu_seconds", rr.cpu_seconds},
               {"ratio_to_cb_cpu", s.ratio_cpu[round]},
               {"output_tokens", rr.stats.output_tokens},
               {"preemptions", rr.stats.preemptions},
               {"minor_faults", rr.minor_faults},
               {"prefill_share", rr.prefill_share},
               {"alpha", sh.alphas[round]},
               {"cp_measured_s", mb.cp},
               {"c0_measured_s", mb.c0},
               {"cr_measured_s", mb.cr},
               {"s_dec_measured", mb.s_dec},
               {"s_e2e_measured", mb.s_e2e},
               {"cb_recompute_share", mb.recompute_share},
               {"fraction_of_s_e2e_measured", s.ratio[round] / mb.s_e2e},
               {"fraction_of_s_e2e_measured_cpu", s.ratio_cpu[round] / mb.s_e2e}};
    if (!runs.control.empty()) {
      pr["control_ratio_to_cb"] = s.control_ratio[round];
      pr["control_ratio_to_cb_cpu"] = s.control_ratio_cpu[round];
    }
    out.push_back(pr);
  }
  return out;
}

// Scheduler i's medians (with min and max) over the rounds.
json Medians(const OfflineRuns& runs, const Series& s, const Shared& sh, size_t i) {
  std::vector<double> seconds, cpu_seconds, prefill_shares, fractions, fractions_cpu;
  for (size_t round = 0; round < runs.main.size(); ++round) {
    const RunResult& rr = runs.main[round][i];
    seconds.push_back(rr.wall_seconds);
    cpu_seconds.push_back(rr.cpu_seconds);
    prefill_shares.push_back(rr.prefill_share);
    fractions.push_back(s.ratio[round] / sh.measured[round].s_e2e);
    fractions_cpu.push_back(s.ratio_cpu[round] / sh.measured[round].s_e2e);
  }
  const double ratio = Median(s.ratio);
  return {{"seconds", Median(seconds)},
          {"output_tok_s", Median(s.tok_s)},
          {"ratio_to_cb", ratio},
          {"ratio_to_cb_min", Min(s.ratio)},
          {"ratio_to_cb_max", Max(s.ratio)},
          {"prefill_share", Median(prefill_shares)},
          {"fraction_of_s_e2e", ratio / sh.s_e2e},
          {"fraction_of_s_e2e_measured", Median(fractions)},
          {"fraction_of_s_e2e_measured_min", Min(fractions)},
          {"fraction_of_s_e2e_measured_max", Max(fractions)},
          {"cpu_seconds", Median(cpu_seconds)},
          {"ratio_to_cb_cpu", Median(s.ratio_cpu)},
          {"ratio_to_cb_cpu_min", Min(s.ratio_cpu)},
          {"ratio_to_cb_cpu_max", Max(s.ratio_cpu)},
          {"fraction_of_s_e2e_measured_cpu", Median(fractions_cpu)},
          {"fraction_of_s_e2e_measured_cpu_min", Min(fractions_cpu)},
          {"fraction_of_s_e2e_measured_cpu_max", Max(fractions_cpu)}};
}

json Row(const OfflineRuns& runs, const OfflineBenchOptions& opt, const OfflineReportInfo& info, const Shared& sh,
         size_t i) {
  const RunResult& r = runs.main[0][i];  // seeded: tokens and depths are the same every round
  const SchedMode mode = opt.modes[i];
  const Series s = SeriesOf(runs, i);
  json j = {{"scheduler", std::string(SchedModeName(mode))},
            {"model", info.model_dir},
            {"model_type", info.model_type},
            {"weights", info.weights},
            {"workload", info.workload},
            {"requests", info.requests},
            {"prompt_tokens", info.prompt_tokens},
            {"output_tokens", r.stats.output_tokens},
            {"width", opt.engine.width},
            {"k", opt.engine.min_coda},
            {"layout", std::string(KvLayoutName(opt.engine.layout))},
            {"r_max", info.r_max},
            {"mean_depth_target", info.mean_depth_target},
            {"exits", info.exits},
            {"mean_depth", mode == SchedMode::kCb ? static_cast<double>(info.r_max) : r.mean_depth},
            {"repeats", static_cast<int64_t>(runs.main.size())},
            {"alpha", sh.alpha},
            {"f0", info.flops.f0()},
            {"fr", info.flops.fr()},
            {"s_dec", sh.s_dec},
            {"s_e2e", sh.s_e2e},
            {"s_e2e_refined", EndToEndBoundRefined(sh.alpha, sh.s_dec, sh.f1)},
            {"cp_measured_s", sh.MedianOf(&MeasuredBound::cp)},
            {"c0_measured_s", sh.MedianOf(&MeasuredBound::c0)},
            {"cr_measured_s", sh.MedianOf(&MeasuredBound::cr)},
            {"s_dec_measured", sh.MedianOf(&MeasuredBound::s_dec)},
            {"s_e2e_measured", sh.MedianOf(&MeasuredBound::s_e2e)},
            {"cb_recompute_share", sh.MedianOf(&MeasuredBound::recompute_share)},
            {"preemptions", r.stats.preemptions},
            {"breakdown", Breakdown(runs.main, i)},
            {"rounds", Rounds(runs, s, sh, i)}};
  j.update(Medians(runs, s, sh, i));
  if (!runs.control.empty()) {
    j["control_output_tok_s"] = Median(s.control_tok_s);
    j["control_ratio_to_cb"] = Median(s.control_ratio);
    j["control_ratio_to_cb_min"] = Min(s.control_ratio);
    j["control_ratio_to_cb_max"] = Max(s.control_ratio);
    j["control_ratio_to_cb_cpu"] = Median(s.control_ratio_cpu);
    j["control_ratio_to_cb_cpu_min"] = Min(s.control_ratio_cpu);
    j["control_ratio_to_cb_cpu_max"] = Max(s.control_ratio_cpu);
    j["control_breakdown"] = Breakdown(runs.control, i);
  }
  return j;
}

}  // namespace

Result<OfflineRuns> RunOfflineRounds(const Model& model, const OfflineBenchOptions& opt,
                                     const std::vector<RequestSpec>& reqs,
                                     const std::vector<RequestSpec>& control_reqs) {
  FATHOM_RETURN_IF_ERROR(CheckModes(opt.modes));
  if (reqs.empty()) return Status::Error("offline benchmark: no requests");
  int64_t output_tokens = 0;
  for (const RequestSpec& r : reqs) output_tokens += r.max_tokens;
  const auto repeat = static_cast<size_t>(std::max<int64_t>(opt.repeat, 1));
  Runner runner(model, opt, opt.modes.size() * (opt.control ? 2 : 1) * repeat, output_tokens);
  {  // Warm-up, discarded.
    const auto n = static_cast<int64_t>(reqs.size());
    std::vector<RequestSpec> warm(reqs.begin(), reqs.begin() + std::min<int64_t>(n, std::max(2, opt.engine.width / 2)));
    for (RequestSpec& r : warm) r.max_tokens = std::min(r.max_tokens, 8);
    EngineOptions o = opt.engine;
    o.mode = SchedMode::kCdbRefill;
    FATHOM_RETURN_IF_ERROR(RunWorkload(model, o, warm, {}, "warm-up", {false, 1e9, ""}).status());
  }
  OfflineRuns runs;
  runs.main.resize(repeat);
  if (opt.control) runs.control.resize(repeat);
  for (size_t round = 0; round < repeat; ++round) {
    FATHOM_RETURN_IF_ERROR(runner.Round(round, reqs, "", &runs.main[round]));
    if (opt.control) FATHOM_RETURN_IF_ERROR(runner.Round(round, control_reqs, " (no exits)", &runs.control[round]));
  }
  return runs;
}

Result<std::vector<json>> OfflineReport(const OfflineRuns& runs, const OfflineBenchOptions& opt,
                                        const OfflineReportInfo& info) {
  FATHOM_RETURN_IF_ERROR(CheckModes(opt.modes));
  if (runs.main.empty()) return Status::Error("offline report: no rounds");
  if (!runs.control.empty() && runs.control.size() != runs.main.size())
    return Status::Error("offline report: control rounds differ in number from the rounds");
  for (const auto* rounds : {&runs.main, &runs.control})
    for (const auto& round : *rounds)
      if (round.size() != opt.modes.size())
        return Status::Error("offline report: a round holds " + std::to_string(round.size()) + " runs for " +
                             std::to_string(opt.modes.size()) + " schedulers");
  FATHOM_ASSIGN_OR_RETURN(Shared shared, SharedOf(runs, info));
  std::vector<json> rows;
  for (size_t i = 0; i < opt.modes.size(); ++i) rows.push_back(Row(runs, opt, info, shared, i));
  return rows;
}

}  // namespace fathom::bench
