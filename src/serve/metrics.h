// The server's metrics as plain data and their Prometheus text exposition (format 0.0.4).
// The engine loop fills the engine-side fields after every step under its own mutex (the
// engine itself is never read from another thread); the HTTP layer adds its counters.
#pragma once

#include <cstdint>
#include <string>

namespace fathom::serve {

struct MetricsSnapshot {
  std::string model;  // the served model name (a label on fathom_info)
  // Requests.
  int64_t waiting = 0;     // submitted, not yet admitted to a state slot
  int64_t running = 0;     // admitted, not finished
  int64_t finished_length = 0, finished_stop = 0, cancelled = 0, failed = 0;
  int64_t rejected_invalid = 0;     // 400: the API or the engine refused the request
  int64_t rejected_overloaded = 0;  // 429: more than max_pending requests
  int64_t rejected_draining = 0;    // 503: the server is shutting down
  int64_t rejected_unauthorized = 0;  // 401
  int64_t timed_out = 0;            // 408: cancelled by the request timeout
  // Connections (the HTTP layer's ConnectionLoop).
  int64_t connections_open = 0, connections_accepted = 0;
  int64_t connections_refused = 0;       // 503: --max-connections were open
  int64_t connections_idle_closed = 0;   // idle past the idle timeout
  int64_t connections_read_timeout = 0;  // 408: the request did not arrive in time
  int64_t connections_headers_too_large = 0;  // 431
  // The scheduler's queues (DESIGN.md §2).
  int64_t queue_waiting = 0, queue_ready = 0, queue_loop = 0, queue_coda = 0;
  // Mean rows per run of each stage since start, and the last plan's stage and rows.
  double batch_prefill = 0, batch_prelude = 0, batch_core = 0, batch_coda = 0;
  std::string last_stage = "idle";
  int64_t last_rows = 0;
  int64_t steps = 0, preemptions = 0;
  int64_t fewer_thread_steps = 0;  // steps the ThreadGovernor ran on fewer than --threads
  int64_t contended_thread_steps = 0;  // the governor's steps on > 1 thread that waited for cores
  double mean_exit_depth = 0;  // depth_sum / decode_tokens
  int64_t kv_blocks_used = 0, kv_blocks_free = 0;
  // One block's bytes, and the KV bytes one decode token holds: its physical KV layers
  // (only producing layers under LCKV) x 2 x kv_dim x 4.
  int64_t kv_block_bytes = 0, kv_bytes_per_token = 0;
  int64_t prompt_tokens = 0, output_tokens = 0;
  // Output tokens per second over the last `window_seconds` (or since start if shorter).
  double output_tokens_per_second = 0;
  double window_seconds = 10;
  // The budget (issue 14): the controller's b after the last step, and per service tier
  // (priority, default, flex) requests added, output tokens, mean exit depth and budget of
  // their decode tokens, deadline misses.
  double budget = 1;
  int64_t tier_requests[3] = {}, tier_tokens[3] = {}, tier_deadline_misses[3] = {};
  double tier_mean_exit_depth[3] = {}, tier_mean_budget[3] = {};
  int64_t deadline_misses = 0, deadline_hopeless = 0;
  int64_t forced_think_ends = 0;  // end-of-thinking tokens forced by a thinking budget
  bool reclaim_noticed = false;
};

std::string RenderPrometheus(const MetricsSnapshot& m);

}  // namespace fathom::serve
