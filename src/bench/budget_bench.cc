#include "bench/budget_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <thread>

#include "bench/driver.h"
#include "bench/stats.h"

namespace fathom::bench {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double LowBudget(const BudgetBenchOptions& opt) {
  return opt.low_budget >= 0 ? opt.low_budget : opt.engine.budget.tiers[TierRank(opt.tier)].b_min;
}

double LoadWindow(const BudgetBenchOptions& opt) { return opt.warm_s + opt.burst_s + opt.after_s; }

double ReclaimAfter(const BudgetBenchOptions& opt) {
  return opt.reclaim_after_s >= 0 ? opt.reclaim_after_s : 0.75 * opt.warm_s;
}

// Requests of the workload's shapes (outputs cut to max_output, prompts to max_prompt) with
// the bench's exit rule.
std::vector<RequestSpec> Specs(const ModelSpec& spec, const BudgetBenchOptions& opt, int64_t n, uint64_t seed) {
  std::vector<RequestShape> shapes = GenerateWorkload(opt.workload, n, seed);
  for (RequestShape& s : shapes) {
    s.output = std::min(s.output, opt.max_output);
    if (opt.max_prompt > 0) s.prompt = std::min(s.prompt, opt.max_prompt);
  }
  std::vector<RequestSpec> out = MakeRequests(shapes, spec, ExitTraceOptions{}, seed);
  for (RequestSpec& r : out) {
    if (spec.loop.looped) {
      r.exit.kind = ExitSpec::Kind::kThreshold;
      r.exit.threshold = opt.exit_threshold;
      r.exit.min_depth = opt.min_depth;
    }
    r.tier = opt.tier;
  }
  return out;
}

// The per-run state of RunBudgetPolicy's loop.
struct LoadLoop {
  LoadLoop(const BudgetBenchOptions& o, BudgetPolicy p, Engine& e, PolicyRun& r)
      : opt(o), policy(p), engine(e), run(r) {}
  const BudgetBenchOptions& opt;
  BudgetPolicy policy;
  Engine& engine;
  PolicyRun& run;
  Clock::time_point t0 = Clock::now();
  std::vector<size_t> index_of;  // engine RequestId -> load index
  double last_print = 0;

  double Now() const { return std::chrono::duration<double>(Clock::now() - t0).count(); }
  BudgetBin& Bin(double t) {
    const auto i = static_cast<size_t>(std::max(0.0, t) / opt.bin_s);
    if (i >= run.bins.size()) run.bins.resize(i + 1);
    return run.bins[i];
  }
  Status Admit(const LoadRequest& lr, size_t i, double t) {
    RequestSpec s = lr.spec;
    if (policy == BudgetPolicy::kLow) s.budget = LowBudget(opt);
    if (policy == BudgetPolicy::kFull) s.budget = 1.0;
    // The engine's deadline runs from AddRequest; the request's from its scheduled arrival.
    s.deadline_s = std::max(1e-3, lr.deadline - (t - lr.arrival));
    FATHOM_ASSIGN_OR_RETURN(RequestId id, engine.AddRequest(std::move(s)));
    if (static_cast<size_t>(id) >= index_of.size()) index_of.resize(static_cast<size_t>(id) + 1);
    index_of[static_cast<size_t>(id)] = i;
    ++Bin(lr.arrival).arrivals;
    return Status::Ok();
  }
  void Record(double t) {
    BudgetBin& bin = Bin(t);
    const Scheduler& s = engine.scheduler();
    ++bin.steps;
    const GateCounts& g = engine.gate_counts();
    bin.gate_flops += g.matmul_flops - last_gates.matmul_flops;
    bin.dense_flops += g.dense_matmul_flops - last_gates.dense_matmul_flops;
    last_gates = g;
    const EngineStats& st = engine.stats();
    bin.engine_s += st.seconds - last_seconds;
    bin.schedule_s += st.schedule_seconds - last_schedule_seconds;
    last_seconds = st.seconds, last_schedule_seconds = st.schedule_seconds;
    bin.b_sum += PolicyB();
    bin.waiting_sum += static_cast<double>(s.waiting().size());
    bin.running_sum += static_cast<double>(s.ready().size() + s.looping().size() + s.exited().size());
    const bool decode = engine.last_plan().stage == Stage::kCoda;
    for (const TokenEvent& e : engine.events()) {
      RequestOutcome& o = run.requests[index_of[static_cast<size_t>(e.req)]];
      if (e.token >= 0) {
        ++o.tokens;
        if (decode) ++bin.tokens, bin.token_b_sum += e.budget, bin.depth_sum += e.depth;
      }
      if (e.finish != FinishReason::kNone) o.finish = t, ++bin.finished;
    }
  }
  // Every request still running is past its deadline: the rest of the run changes no
  // result (they count as misses), so it ends there. Checked once a second.
  bool AllLost(double t) {
    if (t - last_lost_check < 1) return false;
    last_lost_check = t;
    for (const RequestOutcome& o : run.requests)
      if (o.finish < 0 && t <= o.arrival + o.deadline) return false;
    return true;
  }
  double last_lost_check = 0;
  GateCounts last_gates;  // the engine's gate counts at the last Record
  double last_seconds = 0, last_schedule_seconds = 0;  // and its step times
  double PolicyB() const {
    return policy == BudgetPolicy::kController ? engine.budget().b
           : policy == BudgetPolicy::kLow      ? LowBudget(opt)
                                               : 1.0;
  }
  void Progress(double t, size_t admitted) {
    if (!opt.progress || t - last_print < 5) return;
    last_print = t;
    int64_t done = 0;
    for (const RequestOutcome& o : run.requests) done += o.finish >= 0 ? 1 : 0;
    std::fprintf(stderr, "  %s: %.0f s, %zu arrived, %lld finished, %zu waiting, b %.2f\n",
                 BudgetPolicyName(policy).data(), t, admitted, static_cast<long long>(done),
                 engine.scheduler().waiting().size(), PolicyB());
  }
};

// "Every bin with steps from here to the run's end at mean b >= 0.99" from this many
// seconds after the burst (-1: the last such bin is low).
double Recovery(const PolicyRun& run, const BudgetBenchOptions& opt) {
  const double end_burst = opt.warm_s + opt.burst_s;
  double from = -1;
  for (size_t i = 0; i < run.bins.size(); ++i) {
    const double t = static_cast<double>(i) * opt.bin_s;
    if (t < end_burst) continue;
    const BudgetBin& b = run.bins[i];
    const bool low = b.steps > 0 && b.b_sum / static_cast<double>(b.steps) < 0.99;
    if (low) from = -1;
    else if (from < 0) from = t;
  }
  return from < 0 ? -1 : from - end_burst;
}

json Timeline(const PolicyRun& run, const BudgetBenchOptions& opt) {
  json t = json::array(), b = json::array(), tb = json::array(), d = json::array(), w = json::array(),
       r = json::array(), a = json::array(), gc = json::array(), tk = json::array(), fin = json::array(),
       es = json::array(), ss = json::array();
  for (size_t i = 0; i < run.bins.size(); ++i) {
    const BudgetBin& x = run.bins[i];
    const double steps = std::max<double>(1, static_cast<double>(x.steps));
    const double toks = std::max<double>(1, static_cast<double>(x.tokens));
    t.push_back(static_cast<double>(i) * opt.bin_s);
    b.push_back(x.steps ? json(x.b_sum / steps) : json(nullptr));
    tb.push_back(x.tokens ? json(x.token_b_sum / toks) : json(nullptr));
    d.push_back(x.tokens ? json(x.depth_sum / toks) : json(nullptr));
    w.push_back(x.waiting_sum / steps);
    r.push_back(x.running_sum / steps);
    a.push_back(x.arrivals);
    gc.push_back(x.dense_flops > 0 ? json(x.gate_flops / x.dense_flops) : json(nullptr));
    tk.push_back(x.tokens);
    fin.push_back(x.finished);
    es.push_back(x.engine_s);
    ss.push_back(x.schedule_s);
  }
  return {{"t", t},          {"b", b},         {"token_b", tb},   {"depth", d},          {"waiting", w},
          {"running", r},    {"arrivals", a},  {"gate_compute", gc}, {"decode_tokens", tk}, {"finished", fin},
          {"engine_s", es}, {"schedule_s", ss}};
}

// L2A: the fractions of (token, layer) pairs that ran attention / MLP
// and of the layers' matmul flops run against the ungated model (null: no gates).
json GateCompute(const GateCounts& g) {
  if (g.token_layers == 0) return nullptr;
  const auto tl = static_cast<double>(g.token_layers);
  return {{"attention", static_cast<double>(g.attention) / tl},
          {"mlp", static_cast<double>(g.mlp) / tl},
          {"matmul_flops", g.dense_matmul_flops > 0 ? g.matmul_flops / g.dense_matmul_flops : 0.0}};
}

bool Met(const RequestOutcome& o) { return o.finish >= 0 && o.finish - o.arrival <= o.deadline; }

}  // namespace

std::string_view BudgetPolicyName(BudgetPolicy p) {
  switch (p) {
    case BudgetPolicy::kFull: return "full";
    case BudgetPolicy::kLow: return "low";
    case BudgetPolicy::kController: return "controller";
  }
  return "?";
}

Status BudgetBenchOptions::Validate() const {
  if (!(load > 0)) return Status::Error("--load: must be > 0");
  if (!(rate >= 0)) return Status::Error("--rate: must be >= 0");
  if (!(burst_factor >= 1)) return Status::Error("--burst-factor: must be >= 1");
  if (!(warm_s >= 0 && burst_s >= 0 && after_s >= 0 && LoadWindow(*this) > 0))
    return Status::Error("--warm/--burst/--after: durations must be >= 0 and not all 0");
  if (!(deadline_factor > 0)) return Status::Error("--deadline-factor: must be > 0");
  if (!(low_budget <= 1)) return Status::Error("--low-budget: must be in [0, 1]");
  if (!(reclaim_s > 0)) return Status::Error("--reclaim-s: must be > 0");
  if (!(bin_s > 0)) return Status::Error("--bin: must be > 0");
  if (max_output < 1) return Status::Error("--max-output: must be at least 1");
  if (max_prompt < 0) return Status::Error("--max-prompt: must be at least 1 (or 0: not cut)");
  return engine.budget.Validate();
}

Result<Calibration> Calibrate(const Model& model, const BudgetBenchOptions& opt) {
  EngineOptions eo = opt.engine;
  eo.budget_control = false;
  const int64_t n = opt.calib_requests > 0 ? opt.calib_requests : 4 * static_cast<int64_t>(eo.width);
  std::vector<RequestSpec> reqs = Specs(model.spec(), opt, n, opt.seed * 31 + 7);
  for (RequestSpec& r : reqs) r.budget = 1.0;
  std::vector<RequestSpec> warm(reqs.begin(), reqs.begin() + std::min<int64_t>(n, eo.width));
  for (RequestSpec& r : warm) r.max_tokens = std::min(r.max_tokens, 8);
  ProgressOptions quiet;
  quiet.enabled = false;
  FATHOM_RETURN_IF_ERROR(RunWorkload(model, eo, warm, {}, "warm-up", quiet).status());
  // Closed loop: `width` requests in flight, the next added as one finishes, so that every
  // prompt is prefilled among running decodes as it is under arrivals (a workload queued
  // at t = 0 prefills its prompts in a few large steps, and with more requests than slots
  // its per-token times count the wait for a slot).
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, eo));
  std::vector<double> first(reqs.size(), -1), finish(reqs.size(), -1);
  std::vector<int64_t> tokens(reqs.size(), 0);
  std::vector<size_t> index_of;
  const auto t0 = Clock::now();
  auto now = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  size_t next = 0;
  int64_t in_flight = 0, done = 0;
  while (done < n) {
    for (; in_flight < eo.width && next < reqs.size(); ++next, ++in_flight) {
      FATHOM_ASSIGN_OR_RETURN(RequestId id, engine->AddRequest(reqs[next]));
      if (static_cast<size_t>(id) >= index_of.size()) index_of.resize(static_cast<size_t>(id) + 1);
      index_of[static_cast<size_t>(id)] = next;
    }
    FATHOM_RETURN_IF_ERROR(engine->Step());
    const double t = now();
    for (const TokenEvent& e : engine->events()) {
      const size_t i = index_of[static_cast<size_t>(e.req)];
      if (e.token >= 0 && tokens[i]++ == 0) first[i] = t;
      if (e.finish != FinishReason::kNone) finish[i] = t, --in_flight, ++done;
    }
  }
  Calibration c;
  c.requests = n;
  c.wall_s = now();
  c.rate = static_cast<double>(n) / c.wall_s;
  int64_t all = 0;
  std::vector<double> tpot;
  for (size_t i = 0; i < reqs.size(); ++i) {
    all += tokens[i];
    if (tokens[i] > 1) tpot.push_back((finish[i] - first[i]) / static_cast<double>(tokens[i] - 1));
  }
  c.tokens_per_s = static_cast<double>(all) / c.wall_s;
  c.tpot_s = Median(tpot);
  if (!(c.tpot_s > 0)) return Status::Error("calibration: no request produced two tokens");
  return c;
}

std::vector<LoadRequest> MakeLoad(const ModelSpec& spec, const BudgetBenchOptions& opt, double rate, double tpot_s) {
  struct Phase {
    double start, len, rate;
  };
  const Phase phases[3] = {{0, opt.warm_s, rate},
                           {opt.warm_s, opt.burst_s, rate * opt.burst_factor},
                           {opt.warm_s + opt.burst_s, opt.after_s, rate}};
  std::vector<double> times;
  for (int p = 0; p < 3; ++p)
    if (phases[p].len > 0)
      for (double t : PoissonArrivalsWithin(phases[p].len, phases[p].rate, opt.seed * 3 + static_cast<uint64_t>(p)))
        times.push_back(phases[p].start + t);
  std::vector<RequestSpec> specs = Specs(spec, opt, static_cast<int64_t>(times.size()), opt.seed);
  std::vector<LoadRequest> out(times.size());
  for (size_t i = 0; i < times.size(); ++i) {
    out[i].spec = std::move(specs[i]);
    out[i].arrival = times[i];
    out[i].deadline = opt.deadline_factor * out[i].spec.max_tokens * tpot_s;
    out[i].burst = times[i] >= opt.warm_s && times[i] < opt.warm_s + opt.burst_s;
  }
  return out;
}

Result<PolicyRun> RunBudgetPolicy(const Model& model, const BudgetBenchOptions& opt, BudgetPolicy policy,
                                  const std::vector<LoadRequest>& load, double reclaim_after) {
  EngineOptions eo = opt.engine;
  eo.budget_control = policy == BudgetPolicy::kController;
  FATHOM_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::Create(model, eo));
  PolicyRun run;
  run.policy = policy;
  run.requests.resize(load.size());
  for (size_t i = 0; i < load.size(); ++i)
    run.requests[i].arrival = load[i].arrival, run.requests[i].deadline = load[i].deadline,
    run.requests[i].burst = load[i].burst;
  LoadLoop loop(opt, policy, *engine, run);
  const double end = reclaim_after >= 0 ? reclaim_after + opt.reclaim_s : std::numeric_limits<double>::infinity();
  size_t next = 0;
  for (double t = loop.Now(); t < end; t = loop.Now()) {
    if (reclaim_after >= 0 && run.notice_at < 0 && t >= reclaim_after) {
      engine->NoticeReclaim(end - t);
      run.notice_at = t;
      for (size_t i = 0; i < next; ++i) run.requests[i].in_flight_at_notice = run.requests[i].finish < 0;
    }
    for (; next < load.size() && load[next].arrival <= t; ++next) {
      if (run.notice_at >= 0) run.requests[next].refused = true;  // the server's 503
      else FATHOM_RETURN_IF_ERROR(loop.Admit(load[next], next, t));
    }
    if (!engine->HasWork()) {
      if (next >= load.size()) break;
      double until = load[next].arrival;
      if (reclaim_after >= 0 && run.notice_at < 0) until = std::min(until, reclaim_after);
      std::this_thread::sleep_for(std::chrono::duration<double>(std::max(0.0, std::min(until, end) - t)));
      continue;
    }
    if (next >= load.size() && reclaim_after < 0 && loop.AllLost(t)) break;
    FATHOM_RETURN_IF_ERROR(engine->Step());
    const double te = loop.Now();
    loop.Record(te);
    loop.Progress(te, next);
  }
  run.wall_s = loop.Now();
  run.stats = engine->stats();
  run.gates = engine->gate_counts();
  return run;
}

json LoadReport(const PolicyRun& run, const BudgetBenchOptions& opt) {
  int64_t n = 0, misses = 0, burst = 0, burst_misses = 0, finished = 0;
  std::vector<double> latency;
  for (const RequestOutcome& o : run.requests) {
    ++n;
    const bool miss = !Met(o);
    misses += miss ? 1 : 0;
    if (o.burst) ++burst, burst_misses += miss ? 1 : 0;
    if (o.finish >= 0) ++finished, latency.push_back(o.finish - o.arrival);
  }
  const EngineStats& st = run.stats;
  const double decode = std::max<double>(1, static_cast<double>(st.decode_tokens));
  double b_sum = 0;
  for (const TierStats& t : st.tier) b_sum += t.budget_sum;
  return {{"policy", std::string(BudgetPolicyName(run.policy))},
          {"requests", n},
          {"finished", finished},
          {"deadline_misses", misses},
          {"miss_rate", n ? static_cast<double>(misses) / static_cast<double>(n) : 0},
          {"burst_requests", burst},
          {"burst_misses", burst_misses},
          {"goodput_per_s", static_cast<double>(n - misses) / LoadWindow(opt)},
          {"latency_p50_s", Percentile(latency, 0.5)},
          {"latency_p99_s", Percentile(latency, 0.99)},
          {"mean_depth", static_cast<double>(st.depth_sum) / decode},
          {"mean_b", b_sum / decode},
          {"gate_compute", GateCompute(run.gates)},
          {"deadline_hopeless", st.deadline_hopeless},
          {"wall_s", run.wall_s},
          {"steps", st.steps},
          {"preemptions", st.preemptions},
          {"engine_seconds", st.seconds},
          {"schedule_seconds", st.schedule_seconds},
          {"stage_seconds", {{"prefill", st.stage[static_cast<int>(Stage::kPrefill)].seconds},
                             {"prelude", st.stage[static_cast<int>(Stage::kPrelude)].seconds},
                             {"core", st.stage[static_cast<int>(Stage::kCore)].seconds},
                             {"coda", st.stage[static_cast<int>(Stage::kCoda)].seconds}}},
          {"stage_runs", {{"prefill", st.stage[static_cast<int>(Stage::kPrefill)].runs},
                          {"prelude", st.stage[static_cast<int>(Stage::kPrelude)].runs},
                          {"core", st.stage[static_cast<int>(Stage::kCore)].runs},
                          {"coda", st.stage[static_cast<int>(Stage::kCoda)].runs}}},
          {"b_recovery_s", Recovery(run, opt)},
          {"timeline", Timeline(run, opt)}};
}

json ReclaimReport(const PolicyRun& run) {
  int64_t in_flight = 0, in_time = 0, refused = 0;
  for (const RequestOutcome& o : run.requests) {
    refused += o.refused ? 1 : 0;
    if (!o.in_flight_at_notice) continue;
    ++in_flight;
    in_time += o.finish >= 0 ? 1 : 0;  // the run ends when the time is up
  }
  return {{"policy", std::string(BudgetPolicyName(run.policy))},
          {"notice_at_s", run.notice_at},
          {"in_flight", in_flight},
          {"finished_in_time", in_time},
          {"fraction", in_flight ? static_cast<double>(in_time) / static_cast<double>(in_flight) : 1.0},
          {"refused", refused},
          {"mean_depth", static_cast<double>(run.stats.depth_sum) /
                             std::max<double>(1, static_cast<double>(run.stats.decode_tokens))}};
}

Result<json> RunBudgetBench(const Model& model, const BudgetBenchOptions& opt) {
  FATHOM_RETURN_IF_ERROR(opt.Validate());
  json out;
  double rate = opt.rate * opt.load, tpot = opt.tpot_s;
  if (opt.rate <= 0 || opt.tpot_s <= 0) {
    if (opt.progress) std::fprintf(stderr, "calibrating (full depth, a closed loop of width requests)\n");
    FATHOM_ASSIGN_OR_RETURN(Calibration c, Calibrate(model, opt));
    out["calibration"] = {{"requests", c.requests}, {"wall_s", c.wall_s}, {"rate", c.rate},
                          {"tpot_s", c.tpot_s}, {"tokens_per_s", c.tokens_per_s}};
    if (opt.rate <= 0) rate = c.rate * opt.load;
    if (opt.tpot_s <= 0) tpot = c.tpot_s;
  }
  const std::vector<LoadRequest> load = MakeLoad(model.spec(), opt, rate, tpot);
  out["load"] = {{"base_rate", rate}, {"burst_rate", rate * opt.burst_factor}, {"tpot_s", tpot},
                 {"requests", load.size()}, {"warm_s", opt.warm_s}, {"burst_s", opt.burst_s},
                 {"after_s", opt.after_s}, {"deadline_factor", opt.deadline_factor},
                 {"low_budget", LowBudget(opt)}, {"tier", std::string(ServiceTierName(opt.tier))},
                 {"exit_threshold", opt.exit_threshold}, {"budget_prompts", opt.engine.budget_prompts}};
  out["runs"] = json::array();
  json by_policy;
  for (BudgetPolicy p : {BudgetPolicy::kFull, BudgetPolicy::kLow, BudgetPolicy::kController}) {
    if (opt.progress) std::fprintf(stderr, "load run: %s\n", BudgetPolicyName(p).data());
    FATHOM_ASSIGN_OR_RETURN(PolicyRun run, RunBudgetPolicy(model, opt, p, load, -1));
    json r = LoadReport(run, opt);
    by_policy[std::string(BudgetPolicyName(p))] = r;
    out["runs"].push_back(std::move(r));
  }
  const json& full = by_policy["full"];
  const json& ctl = by_policy["controller"];
  const auto full_misses = full["deadline_misses"].get<double>(), ctl_misses = ctl["deadline_misses"].get<double>();
  const double miss_ratio = full_misses > 0 ? ctl_misses / full_misses : (ctl_misses > 0 ? 1e9 : 0);
  const double goodput_ratio = ctl["goodput_per_s"].get<double>() / std::max(1e-9, full["goodput_per_s"].get<double>());
  const double recovery = ctl["b_recovery_s"].get<double>();
  json targets = {{"miss_ratio", miss_ratio}, {"miss_ratio_met", full_misses > 0 && miss_ratio <= 0.25},
                  {"goodput_ratio", goodput_ratio}, {"goodput_ratio_met", goodput_ratio >= 1.5},
                  {"b_recovery_s", recovery}, {"b_recovery_met", recovery >= 0 && recovery <= 10}};
  if (opt.reclaim) {
    out["reclaim"] = json::array();
    for (BudgetPolicy p : {BudgetPolicy::kFull, BudgetPolicy::kController}) {
      if (opt.progress) std::fprintf(stderr, "reclaim run: %s\n", BudgetPolicyName(p).data());
      FATHOM_ASSIGN_OR_RETURN(PolicyRun run, RunBudgetPolicy(model, opt, p, load, ReclaimAfter(opt)));
      out["reclaim"].push_back(ReclaimReport(run));
    }
    const double f = out["reclaim"][1]["fraction"].get<double>();
    targets["reclaim_fraction"] = f;
    targets["reclaim_fraction_met"] = f >= 0.95;
  }
  out["targets"] = targets;
  return out;
}

}  // namespace fathom::bench
