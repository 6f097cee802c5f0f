#include "bench_requests.h"

#include <cstdio>

#include "bench/dataset.h"
#include "engine_flags.h"
#include "serve/openai_api.h"
#include "tokenizer/tokenizer.h"

namespace fathom::cli {

Result<BenchRequests> MakeBenchRequests(const BenchRequestSource& src, const ModelSpec& spec,
                                        const bench::ExitTraceOptions& random_exits) {
  BenchRequests out;
  bench::ExitTraceOptions exits = random_exits;
  out.exits = "seeded random depths";
  if (!src.exit_trace.empty()) {
    // The engine's minimum exit depth: a depth it cannot replay is an error, not clamped.
    auto trace = bench::LoadExitTrace(src.exit_trace, MinExitDepth(src.lookahead), src.r_max);
    if (!trace.ok()) return trace.status().WithContext("--exit-trace");
    exits.recorded = std::move(*trace);
    out.trace_mean = exits.recorded.mean();
    char text[96];
    std::snprintf(text, sizeof text, " (%zu depths from %lld records, mean %.2f)", exits.recorded.depths.size(),
                  static_cast<long long>(exits.recorded.records), out.trace_mean);
    out.exits = "recorded trace " + src.exit_trace + text;
  }
  const std::string kind(bench::WorkloadName(src.workload));
  if (src.dataset.empty()) {
    const auto shapes = bench::GenerateWorkload(src.workload, src.n, src.seed);
    out.reqs = bench::MakeRequests(shapes, spec, exits, src.seed);
    out.control_reqs = bench::MakeRequests(shapes, spec, bench::ExitTraceOptions{}, src.seed);
    out.source = "synthetic " + kind;
  } else {
    const std::string tok_dir = src.tokenizer.empty() ? src.model_dir : src.tokenizer;
    auto tok = Tokenizer::Load(tok_dir);
    if (!tok.ok()) return tok.status().WithContext("--dataset needs a tokenizer (--tokenizer DIR)");
    FATHOM_RETURN_IF_ERROR(serve::CheckVocabulary(**tok, spec).WithContext("--tokenizer"));
    FATHOM_ASSIGN_OR_RETURN(auto data, bench::LoadDataset(src.workload, src.dataset, **tok, src.n, src.seed));
    out.reqs = bench::MakeRequests(data, spec, exits, src.seed);
    out.control_reqs = bench::MakeRequests(data, spec, bench::ExitTraceOptions{}, src.seed);
    out.source = kind + " file " + src.dataset;
  }
  for (const RequestSpec& r : out.reqs) {
    out.prompt_tokens += static_cast<int64_t>(r.prompt.size());
    out.output_tokens += r.max_tokens;
  }
  return out;
}

void BenchWorkloadFlags::Declare(FlagSet& f) {
  f.String("--model", &model_dir, "Hugging Face model directory of a looped model");
  f.String("--workload", &workload, "alpaca (default), sharegpt or arxiv");
  f.Int("--requests", &n, "number of requests (default 32)", 1, 1 << 24);
  f.String("--dataset", &dataset, "the workload's real data file (Alpaca JSON, ShareGPT JSON or arXiv JSONL)\n"
           "instead of synthetic requests; tokenized with the model's tokenizer");
  f.String("--tokenizer", &tokenizer_dir, "directory of the tokenizer.json for --dataset (default: --model)");
  f.Double("--mean-depth", &mean_depth, "mean exit depth d (default (min-depth + r_max) / 2)", 1, 4096);
  f.Int("--min-depth", &min_depth, MinDepthHelp(), 1, 4096);
  f.String("--exit-trace", &exit_trace, "replay the exit depths `fathom generate --json` recorded on a real\n"
           "checkpoint (instead of seeded random depths; src/bench/exit_trace.h)");
  f.Int("--seed", &seed, "seed of the workload, the exit depths and bench online's arrivals (default 0)", 0,
        INT64_MAX);
  f.Require("--model");
}

Status BenchWorkloadFlags::ResolveDepths(const FlagSet& flags, bool lookahead, int32_t r_max) {
  if (std::string e = ResolveMinDepth(flags, lookahead, &min_depth); !e.empty()) return Status::Error(e);
  if (min_depth > r_max) return Status::Error("--min-depth: above r_max " + std::to_string(r_max));
  if (!flags.Seen("--mean-depth")) mean_depth = 0.5 * static_cast<double>(min_depth + r_max);
  if (mean_depth < static_cast<double>(min_depth) || mean_depth > r_max)
    return Status::Error("--mean-depth: outside [--min-depth, r_max]");
  if (!exit_trace.empty() && (flags.Seen("--mean-depth") || flags.Seen("--min-depth")))
    return Status::Error("--exit-trace replays recorded depths: it cannot be combined with --mean-depth or --min-depth");
  return Status::Ok();
}

Result<BenchRequests> BenchWorkloadFlags::Make(const ModelSpec& spec, int32_t r_max, bool lookahead) {
  FATHOM_ASSIGN_OR_RETURN(bench::WorkloadKind kind, bench::ParseWorkload(workload));
  const auto s = static_cast<uint64_t>(seed);
  FATHOM_ASSIGN_OR_RETURN(BenchRequests built,
                          MakeBenchRequests({kind, dataset, tokenizer_dir, model_dir, n, s, exit_trace, r_max, lookahead},
                                            spec, {mean_depth, static_cast<int32_t>(min_depth), s, {}}));
  if (!exit_trace.empty()) mean_depth = built.trace_mean;
  return built;
}

}  // namespace fathom::cli
