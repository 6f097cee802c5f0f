#include "bench_requests.h"

#include <cstdio>

#include "bench/dataset.h"
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

}  // namespace fathom::cli
