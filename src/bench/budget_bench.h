// The budget benchmark behind `fathom bench budget` (issue 14): an open-loop load against
// the engine in this process, on the wall clock (no simulated time), that asks whether the
// budget controller turns a load spike into shallower tokens instead of missed deadlines.
//
//   calibrate  a warm-up, then `calib_requests` requests at full depth in a closed loop
//              (`width` in flight, the next added as one finishes): the rate the engine
//              sustains (requests per second) and the full-depth TPOT (the median of each
//              request's (finish - first token) / (tokens - 1)).
//   load       Poisson arrivals at load x that rate for warm_s, burst_factor x it for
//              burst_s, the base rate again for after_s; then the queue drains. Every
//              request has a deadline of deadline_factor x its output length x the TPOT.
//              The same arrivals and requests run under three policies:
//                full        no controller, every token at b = 1
//                low         no controller, every token at the fixed budget low_budget
//                controller  EngineOptions::budget_control, b clamped to the tier's range
//              Per policy: deadline misses (all requests and those arriving in the burst),
//              goodput (requests that met their deadline per second of the load window,
//              warm_s + burst_s + after_s, the same denominator for every policy; a run
//              ends once every request still running is past its deadline), p50 and
//              p99 latency (finish - scheduled arrival), mean exit depth and mean b of
//              decode tokens, and a timeline in bins of bin_s: the controller's b, the mean
//              b and depth of the tokens that ended in the bin, waiting and running
//              requests, arrivals, decode tokens, finished requests, and the Step time
//              (and its part outside the stages) of the bin's steps. b_recovery_s:
//              seconds from the burst's end to the first bin from which every later bin
//              of the run has mean b >= 0.99.
//   reclaim    the same arrivals, cut at reclaim_after_s, where NoticeReclaim(reclaim_s)
//              is given; later arrivals are refused (the server's 503); the run ends
//              reclaim_s later (the machine is gone). Per policy (full: the notice changes
//              nothing; controller): the requests in flight at the notice and how many of
//              them finished in time.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/workload.h"
#include "budget/budget.h"
#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"

namespace fathom::bench {

enum class BudgetPolicy { kFull, kLow, kController };
std::string_view BudgetPolicyName(BudgetPolicy p);  // "full", "low", "controller"

struct BudgetBenchOptions {
  EngineOptions engine;                     // budget_control is set per policy
  WorkloadKind workload = WorkloadKind::kAlpaca;
  int64_t max_output = 128;                 // output lengths are cut to this
  int64_t max_prompt = 0;                   // prompt lengths are cut to this; 0: not cut (a
                                            // model with few positions needs it)
  double exit_threshold = 1.0;              // each request's Ouro q / Huginn t at b = 1
  int32_t min_depth = 1;
  ServiceTier tier = ServiceTier::kDefault;
  double rate = 0;                          // base arrivals per s; 0: load x calibrated
  double load = 1.0;
  double burst_factor = 3, warm_s = 15, burst_s = 30, after_s = 30;
  double deadline_factor = 20;
  double tpot_s = 0;                        // the deadlines' TPOT; 0: calibrated
  double low_budget = -1;                   // < 0: the tier's b_min
  bool reclaim = true;
  double reclaim_s = 10, reclaim_after_s = -1;  // < 0: 0.75 x warm_s (at the base rate)
  int64_t calib_requests = 0;               // 0: 4 x width
  double bin_s = 1;
  uint64_t seed = 0;
  bool progress = true;
  Status Validate() const;                  // errors name the flag
};

struct Calibration {
  double rate = 0, tpot_s = 0, tokens_per_s = 0, wall_s = 0;
  int64_t requests = 0;
};
Result<Calibration> Calibrate(const Model& model, const BudgetBenchOptions& opt);

// One request of the load: its spec and schedule.
struct LoadRequest {
  RequestSpec spec;
  double arrival = 0, deadline = 0;  // seconds from the start; deadline relative to arrival
  bool burst = false;                // arrives in the burst window
};
// The arrivals (seeded Poisson per phase) and requests with their deadlines.
std::vector<LoadRequest> MakeLoad(const ModelSpec& spec, const BudgetBenchOptions& opt, double rate, double tpot_s);

struct BudgetBin {
  double b_sum = 0, token_b_sum = 0, depth_sum = 0, waiting_sum = 0, running_sum = 0;
  int64_t steps = 0, tokens = 0, arrivals = 0, finished = 0;
  // Time inside Engine::Step in this bin's steps, and the part of it outside the stages
  // (scheduling, the budget controller's update, bookkeeping).
  double engine_s = 0, schedule_s = 0;
  // L2A gate checkpoints: the layers' matmul flops run in this bin's steps, and the same
  // tokens' through the ungated blocks (prompts included).
  double gate_flops = 0, dense_flops = 0;
};

struct RequestOutcome {
  double arrival = 0, deadline = 0, finish = -1;  // finish < 0: not finished
  int64_t tokens = 0;
  bool burst = false, refused = false, in_flight_at_notice = false;
};

struct PolicyRun {
  BudgetPolicy policy = BudgetPolicy::kFull;
  double wall_s = 0, notice_at = -1;
  EngineStats stats;
  GateCounts gates;  // L2A: what the gates ran over the whole run
  std::vector<RequestOutcome> requests;
  std::vector<BudgetBin> bins;
};

// Runs the load under one policy. reclaim_after < 0: no notice, run to the last finish;
// else the notice at that time and the end reclaim_s after it.
Result<PolicyRun> RunBudgetPolicy(const Model& model, const BudgetBenchOptions& opt, BudgetPolicy policy,
                                  const std::vector<LoadRequest>& load, double reclaim_after);

// The report of one load run (its JSON keys are what scripts/render-budget-bench.py and
// the tests read) and of one reclaim run.
nlohmann::json LoadReport(const PolicyRun& run, const BudgetBenchOptions& opt);
nlohmann::json ReclaimReport(const PolicyRun& run);

// The whole benchmark: calibration, the three load runs, the reclaim runs, the targets.
Result<nlohmann::json> RunBudgetBench(const Model& model, const BudgetBenchOptions& opt);

}  // namespace fathom::bench
