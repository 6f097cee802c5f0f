// The soak run (issue 16) behind `fathom bench soak`: a mixed load against the in-process
// server (EngineLoop + HttpServer on 127.0.0.1, any free port) for a fixed time, checking
// that nothing is lost or leaked:
//
//   - the run is split into phases of `phase_s`, each with a fresh engine and server on the
//     next scheduler of `schedulers` (cb, cdb-norefill, cdb-refill, round robin);
//   - `clients` threads send, by a seeded draw per request: whole and streamed greedy
//     completions (token-id prompts), streams the client cancels after a few chunks,
//     whole requests whose client resets the connection mid-generation, requests with stop
//     strings, long prompts that together overrun a small KV pool (preemption, waiting for
//     blocks), and bad requests (malformed JSON and HTTP, refused fields, prompts past the
//     context, token ids past the vocabulary, deep nesting) that must be answered 4xx;
//   - one more thread probes GET /health on a new connection every `probe_interval_ms`
//     and samples VmRSS from /proc/self/status.
//
// Checks (each failure is a line in SoakResult::failures):
//   - every accepted request ends exactly once: a whole response has one choice with a
//     finish_reason; a stream that the client keeps has exactly one chunk with a
//     finish_reason, then one "data: [DONE]" and nothing after; at the end of a phase the
//     loop has nothing pending, and the server's ends (finished + cancelled + failed)
//     are at least the requests its clients saw accepted and at most that plus the ones
//     whose client left before an answer;
//   - every phase ends with all KV blocks free and no request running or waiting;
//   - a seeded sample of the greedy requests that ran to the end (every `sample_every`-th)
//     gives the same text as the same request run alone on a fresh engine (the server's
//     own ParseApiRequest + BuildRequestSpec, as tests/serve does);
//   - resident memory: the largest VmRSS in the last `warmup_fraction` of the run is at
//     most (1 + max_rss_growth) times the largest in the first `warmup_fraction`;
//   - /health answers, each within the probe's timeout, with p99 <= health_p99_ms.
//
// Loopback only; every wait is bounded (client read timeouts, the phase's drain wait).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace fathom::bench {

struct SoakOptions {
  double duration_s = 60;
  double phase_s = 20;                 // shortened so that each scheduler gets a phase
  std::vector<SchedMode> schedulers = {SchedMode::kCb, SchedMode::kCdbNoRefill, SchedMode::kCdbRefill};
  EngineOptions engine;                // mode set per phase
  // The KV pool when engine.kv_bytes is 0: this many of the model's blocks (48 x 16 tokens:
  // a long prompt fills 60% of it, so that long and short requests together exhaust it).
  int64_t kv_blocks = 48;
  int clients = 8;
  int http_threads = 16;
  uint64_t seed = 0;
  int sample_every = 8;                // of the greedy requests that completed
  int max_samples_per_phase = 6;
  double warmup_fraction = 0.25;
  double max_rss_growth = 0.05;
  double health_p99_ms = 100;
  int probe_interval_ms = 50;
  bool progress = false;               // a line per phase on stderr
};

// Requests by what the client did and saw.
struct SoakCounts {
  int64_t sent = 0;
  int64_t whole = 0, streamed = 0;          // accepted and kept to the end
  int64_t stopped = 0;                      // of those, ended by a stop string
  int64_t stream_cancels = 0;               // streams the client closed after a few chunks
  int64_t disconnects = 0;                  // whole requests whose client reset the connection
  int64_t bad = 0;                          // bad requests answered 4xx, as they must be
  int64_t refused = 0;                      // good requests refused 4xx (a prompt the pool can never hold, 429)
  int64_t errors = 0;                       // anything else: wrong status, transport, protocol
  void Add(const SoakCounts& o);
};

struct SoakPhase {
  std::string scheduler;
  double seconds = 0;
  SoakCounts counts;
  int64_t server_ends = 0;                  // finished (length, stop) + cancelled + failed
  int64_t preemptions = 0, steps = 0, output_tokens = 0;
  int64_t kv_blocks_total = 0, kv_blocks_used_at_idle = 0;
  int64_t samples = 0, sample_mismatches = 0;
};

struct SoakResult {
  std::vector<SoakPhase> phases;
  SoakCounts counts;                        // over every phase
  int64_t preemptions = 0, output_tokens = 0, samples = 0, sample_mismatches = 0;
  int64_t leaked_blocks = 0;                // summed over the phases' idle checks
  int64_t lost = 0;                         // requests still pending after a phase's drain
  // VmRSS in KiB: before the first phase, the largest in the warm-up window and in the
  // last window, and after the last phase.
  int64_t rss_start_kb = 0, rss_warm_kb = 0, rss_last_kb = 0, rss_end_kb = 0;
  double rss_growth = 0;                    // rss_last_kb / rss_warm_kb - 1
  int64_t health_probes = 0, health_failures = 0;
  double health_p50_ms = 0, health_p99_ms = 0, health_max_ms = 0;
  double seconds = 0;
  std::vector<std::string> failures;        // the checks that failed (the first 20)
  bool ok() const { return failures.empty(); }
};

// Errors: the engine or server could not start. Failed checks are not errors: they are in
// SoakResult::failures.
Result<SoakResult> RunSoak(const Model& model, const Tokenizer& tok, const SoakOptions& opt);

// VmRSS of this process in KiB (0 if /proc/self/status cannot be read).
int64_t ResidentKb();

}  // namespace fathom::bench
