// The offline scheduler benchmark behind `fathom bench offline`: a whole workload queued at
// t = 0, run under each scheduler in rounds, and its report: throughput against CB, the
// FLOP bounds of DESIGN.md §5 and the measured-cost bound (speedup.h), medians over the
// rounds with their min and max.
//
// Two halves, so that the analysis is tested on hand-made runs without an engine:
// RunOfflineRounds executes (warm-up, then every round's runs in a rotated order) and
// OfflineReport turns the runs into the JSON objects the command prints, one per
// scheduler, whose keys are what scripts/report.py and the CLI tests read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/driver.h"
#include "bench/model_flops.h"
#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"

namespace fathom::bench {

struct OfflineBenchOptions {
  EngineOptions engine;          // every run's; `mode` is set per run; max_depth must be r_max
  std::vector<SchedMode> modes;  // modes[0] must be kCb: the baseline every ratio is taken to
  int64_t repeat = 1;            // rounds
  bool control = true;           // also a no-exit control round per round
  bool progress = true;          // progress lines with a whole-benchmark ETA on stderr
};

// runs[round][i] is modes[i]'s run in that round (not the order they ran in).
struct OfflineRuns {
  std::vector<std::vector<RunResult>> main;
  std::vector<std::vector<RunResult>> control;  // empty without control runs
};

// A warm-up run (a few of `reqs`, cut to 8 tokens, discarded: page faults, primitive
// caches, thread start-up), then `repeat` rounds. Each round runs every scheduler once on
// `reqs` and, with `control`, once on `control_reqs` (the same requests without exits);
// round r starts at scheduler r mod n and goes round, so slow drift of the host's load
// does not always fall on the same scheduler. Errors: the engine's (e.g. a KV pool too
// small), or modes not starting with kCb.
Result<OfflineRuns> RunOfflineRounds(const Model& model, const OfflineBenchOptions& opt,
                                     const std::vector<RequestSpec>& reqs,
                                     const std::vector<RequestSpec>& control_reqs);

// What the report states about the benchmark besides its runs (copied into every row).
struct OfflineReportInfo {
  std::string model_dir, model_type, workload, exits;  // exits: how the depths were made
  int64_t requests = 0, prompt_tokens = 0, output_tokens = 0;  // output: every max_tokens
  int32_t r_max = 0;
  double mean_depth_target = 0;  // the seeded depths' mean (the trace's with a recorded one)
  StageFlops flops;              // of the model (CountFlops)
  std::string weights = "checkpoint";  // the layers' format (WeightFormatName)
};

// One JSON object per scheduler, in modes' order. Ratios to CB are taken within a round
// (runs close in time see similar load) and reported as the median over the rounds with
// min and max; the same over the process's CPU time (`_cpu`). alpha is the median of CB's
// prefill shares; d, the mean exit depth of the S_dec bound, is what the CDB runs measured
// (seeded, so the same in every round; CB runs every token to r_max); the measured-cost
// bound of round r comes from CB's run of round r, and each round's fraction of it from
// that round's ratio. `breakdown`: per stage, seconds averaged over the rounds, runs and
// rows of round 0 (the schedule is the same every round). `rounds`: the per-round values
// the medians are taken over. Errors: no rounds, a round without every scheduler, modes[0]
// not CB, or a CB run the measured bound cannot use (no decode rows or no time).
Result<std::vector<nlohmann::json>> OfflineReport(const OfflineRuns& runs, const OfflineBenchOptions& opt,
                                                  const OfflineReportInfo& info);

}  // namespace fathom::bench
