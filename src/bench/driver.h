// Drives the Engine over a benchmark workload: builds the requests (synthetic prompts,
// replayed output lengths, seeded exit depths), runs them offline (all queued at t = 0) or
// online (arrivals at given times), with progress and an ETA on stderr, and records per
// request timings.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/dataset.h"
#include "bench/exit_trace.h"
#include "bench/workload.h"
#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"

namespace fathom::bench {

// Exit depths of generated tokens: RandomDepthExit with mean `mean_depth` (>= min_depth),
// at least `min_depth`; mean_depth <= 0 means no exits (every token at r_max). A non-empty
// `recorded` trace replaces the random depths: the requests replay it in order
// (SliceExitTrace), and mean_depth, min_depth and seed are not used.
struct ExitTraceOptions {
  double mean_depth = 0;
  int32_t min_depth = 2;
  uint64_t seed = 0;
  RecordedExitTrace recorded;
};

// One RequestSpec per shape: prompt = SyntheticPrompt, max_tokens = output, no EOS stop,
// greedy sampling, per-request seeds derived from `seed`.
std::vector<RequestSpec> MakeRequests(const std::vector<RequestShape>& shapes, const ModelSpec& spec,
                                      const ExitTraceOptions& exits, uint64_t seed);
// The same with the prompts and output lengths of a data file (dataset.h).
std::vector<RequestSpec> MakeRequests(const std::vector<DatasetRequest>& data, const ModelSpec& spec,
                                      const ExitTraceOptions& exits, uint64_t seed);

struct RequestTiming {
  double arrival = 0, first_token = -1, finish = -1;  // seconds from the start of the run
  int64_t output_tokens = 0;
};

struct RunResult {
  std::string label;
  EngineStats stats;
  double wall_seconds = 0;
  // CPU time of the whole process over the run (every thread). On a shared host another
  // process's time slices lengthen the wall time but not this, so throughput ratios taken
  // over CPU time spread less from run to run (caches and memory bandwidth still shared).
  double cpu_seconds = 0;
  int64_t minor_faults = 0;  // page faults of the process over the run (first touch of memory)
  double mean_depth = 0;     // of decode tokens (coda-emitted)
  double prefill_share = 0;  // prefill stage time / engine time
  double output_tok_s() const {
    return wall_seconds > 0 ? static_cast<double>(stats.output_tokens) / wall_seconds : 0;
  }
  double output_tok_cpu_s() const {
    return cpu_seconds > 0 ? static_cast<double>(stats.output_tokens) / cpu_seconds : 0;
  }
  std::vector<RequestTiming> requests;
};

// Progress lines on stderr ("label: tokens done/total, elapsed, ETA"), at most every
// `every_s` seconds; `prior_s`/`total_work` let a caller show an ETA over several runs.
struct ProgressOptions {
  bool enabled = true;
  double every_s = 2.0;
  std::string prefix;  // e.g. "[2/6]"
};

// arrivals: empty = every request at t = 0; else one time (s) per request, ascending.
Result<RunResult> RunWorkload(const Model& model, const EngineOptions& opt,
                              const std::vector<RequestSpec>& requests,
                              const std::vector<double>& arrivals, const std::string& label,
                              const ProgressOptions& progress);

// Poisson arrival times: cumulative sums of exponential gaps with mean 1/rate, seeded.
std::vector<double> PoissonArrivals(int64_t n, double rate, uint64_t seed);
// The same sequence up to time `duration` (s): every arrival at or before it.
std::vector<double> PoissonArrivalsWithin(double duration, double rate, uint64_t seed);

}  // namespace fathom::bench
