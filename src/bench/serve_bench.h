// The serving benchmark (issue 6) behind `fathom bench serve`: the same requests run in one
// process offline (the engine alone, all queued at t = 0, and with a rate also at the
// server run's Poisson arrival times) and through the HTTP server (EngineLoop + HttpServer
// on 127.0.0.1, any free port), one client thread per request sending /v1/completions
// bodies with token-id prompts. The offline RequestSpecs are built from the same bodies by
// the server's own ParseApiRequest + BuildRequestSpec, so both runs do identical work.
// /metrics is scraped before and after the server run; its deltas must equal what the
// clients received.
//
// fathom_bench links fathom_serve for this (bench -> serve -> engine; serve knows nothing
// of the benchmarks).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/driver.h"
#include "bench/workload.h"
#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "serve/api_client.h"
#include "serve/prometheus_text.h"
#include "tokenizer/tokenizer.h"

namespace fathom::bench {

struct ServeBenchOptions {
  EngineOptions engine;               // for every run, offline and served
  WorkloadKind workload = WorkloadKind::kAlpaca;
  int64_t requests = 64;
  double rate = 0;                    // Poisson arrivals in requests/s; 0: all at t = 0
  bool stream = false;                // SSE with usage: TTFT and TPOT measured
  double exit_threshold = -1;         // the request extension "exit_threshold"; < 0: none
  uint64_t seed = 0;                  // workload and arrivals
  int64_t timeout_s = 1800;           // deadline of the server run
  bool progress = true;               // progress lines on stderr
  std::string model_name;             // the served model's name
};

// The clients' outcomes checked against their requests, and the latencies (seconds) of
// the completed ones.
struct ClientSummary {
  int64_t completed = 0, failed = 0, prompt_tokens = 0, output_tokens = 0;
  double first_send = 1e300, last_response = 0;  // over every request sent / completed
  std::vector<double> e2e, normalized, ttft, tpot;  // normalized: e2e / output tokens
  std::vector<std::string> errors;                  // "request i: why", the first five
  double seconds() const { return completed > 0 ? last_response - first_send : 0; }
  double output_tok_s() const { return seconds() > 0 ? static_cast<double>(output_tokens) / seconds() : 0; }
  double mean_normalized() const;
};

// An outcome counts as failed unless ok with exactly the request's max_tokens completion
// tokens, finish_reason "length" and the request's prompt length (outcomes that fail a
// check become not ok, with the reason in error). outcomes[i] answers specs[i].
ClientSummary SummarizeClients(std::vector<serve::CompletionOutcome>& outcomes,
                               const std::vector<RequestSpec>& specs);

// /metrics counters after minus before.
struct MetricsDeltas {
  int64_t finished_length = 0, output_tokens = 0, prompt_tokens = 0, steps = 0;
  bool Agree(const ClientSummary& c) const {
    return finished_length == c.completed && output_tokens == c.output_tokens && prompt_tokens == c.prompt_tokens;
  }
};
MetricsDeltas DeltasOf(const serve::PrometheusText& before, const serve::PrometheusText& after);

struct ServeBenchResult {
  int64_t prompt_tokens = 0, output_tokens = 0;  // what the requests ask for
  RunResult offline;                  // all at t = 0
  double offline_cpu_s = 0;
  double offline_arrivals_tok_s = 0;  // with a rate: offline at the same arrival times
  int64_t offline_arrivals_steps = 0;
  ClientSummary clients;
  double server_cpu_s = 0;            // process CPU over the server run (handlers, clients)
  int port = 0;
  MetricsDeltas metrics;
  bool metrics_agree = false;
  double ratio() const {
    return offline.output_tok_s() > 0 ? clients.output_tok_s() / offline.output_tok_s() : 0;
  }
  double ratio_same_arrivals() const {
    return offline_arrivals_tok_s > 0 ? clients.output_tok_s() / offline_arrivals_tok_s : 0;
  }
};

// Errors: a request the server's API would refuse (naming it), the engine, the server's
// start, a failed warm-up request, /metrics. Failed benchmark requests are not errors:
// they are counted in clients.failed.
Result<ServeBenchResult> RunServeBench(const Model& model, const Tokenizer& tok, const ServeBenchOptions& opt);

}  // namespace fathom::bench
