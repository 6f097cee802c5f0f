// The requests of a scheduler benchmark, shared by `bench offline`, `online` and `k-sweep`:
// synthetic (seeded lengths and prompt ids, bench/workload.h) or, with --dataset FILE,
// the prompts and reference output lengths of a real data file tokenized with the model's
// tokenizer (bench/dataset.h). Exit depths are seeded random ones or, with --exit-trace
// FILE, a trace recorded by `fathom generate` replayed in order (bench/exit_trace.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/driver.h"
#include "core/status.h"
#include "engine/engine.h"
#include "flags.h"
#include "model/model_spec.h"

namespace fathom::cli {

struct BenchRequestSource {
  bench::WorkloadKind workload = bench::WorkloadKind::kAlpaca;
  std::string dataset;    // empty: synthetic
  std::string tokenizer;  // directory of tokenizer.json; empty: the model directory
  std::string model_dir;
  int64_t n = 32;
  uint64_t seed = 0;
  std::string exit_trace;  // --exit-trace FILE (bench/exit_trace.h); empty: seeded random depths
  int32_t r_max = 0;       // the loop count the trace's depths must fit
  bool lookahead = false;  // the engine's lookahead gate: a trace's depths must be >= MinExitDepth
};

struct BenchRequests {
  std::vector<RequestSpec> reqs;          // with the seeded exit trace
  std::vector<RequestSpec> control_reqs;  // the same requests, no exits
  int64_t prompt_tokens = 0, output_tokens = 0;
  std::string source;  // "synthetic alpaca" or "alpaca file PATH"
  std::string exits;   // "seeded random depths" or "recorded trace PATH (N depths, mean D)"
  double trace_mean = 0;  // the recorded trace's mean depth (0 without one)
};

Result<BenchRequests> MakeBenchRequests(const BenchRequestSource& src, const ModelSpec& spec,
                                        const bench::ExitTraceOptions& exits);

// The flags that choose a scheduler benchmark's requests and exit depths, declared once
// for `bench offline`, `online` and `k-sweep` (the engine's own come from EngineFlags).
struct BenchWorkloadFlags {
  std::string model_dir, workload = "alpaca", dataset, tokenizer_dir, exit_trace;
  int64_t n = 32, min_depth = 0, seed = 0;
  double mean_depth = 0;

  // --model (required), --workload, --requests, --dataset, --tokenizer, --mean-depth,
  // --min-depth, --exit-trace, --seed.
  void Declare(FlagSet& f);
  // After parsing, with r_max known: --min-depth's default follows --lookahead,
  // --mean-depth's is halfway from it to r_max, and a recorded trace excludes both.
  // Errors name the flag (usage errors).
  Status ResolveDepths(const FlagSet& flags, bool lookahead, int32_t r_max);
  // The requests, after ResolveDepths; with --exit-trace, mean_depth becomes the trace's.
  Result<BenchRequests> Make(const ModelSpec& spec, int32_t r_max, bool lookahead);
};

}  // namespace fathom::cli
