#include "serve/metrics.h"

#include <cstdio>

namespace fathom::serve {
namespace {

class Writer {
 public:
  void Family(const char* name, const char* type, const std::string& help) {
    out_ += std::string("# HELP fathom_") + name + " " + help + "\n# TYPE fathom_" + name + " " + type + "\n";
  }
  void Sample(const char* name, const std::string& labels, double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    out_ += std::string("fathom_") + name + (labels.empty() ? "" : "{" + labels + "}") + " " + buf + "\n";
  }
  void Sample(const char* name, const std::string& labels, int64_t v) {
    out_ += std::string("fathom_") + name + (labels.empty() ? "" : "{" + labels + "}") + " " + std::to_string(v) + "\n";
  }
  std::string& out() { return out_; }

 private:
  std::string out_;
};

// Label values escape backslash, quote and newline.
std::string Escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

}  // namespace

std::string RenderPrometheus(const MetricsSnapshot& m) {
  Writer w;
  w.Family("info", "gauge", "The served model.");
  w.Sample("info", "model=\"" + Escape(m.model) + "\"", int64_t{1});

  w.Family("requests", "gauge", "Requests in the server by state (waiting: not yet in a state slot).");
  w.Sample("requests", "state=\"waiting\"", m.waiting);
  w.Sample("requests", "state=\"running\"", m.running);

  w.Family("requests_finished_total", "counter", "Finished requests by finish reason.");
  w.Sample("requests_finished_total", "reason=\"length\"", m.finished_length);
  w.Sample("requests_finished_total", "reason=\"stop\"", m.finished_stop);
  w.Sample("requests_finished_total", "reason=\"cancelled\"", m.cancelled);
  w.Sample("requests_finished_total", "reason=\"error\"", m.failed);

  w.Family("requests_rejected_total", "counter", "Requests refused before running, by HTTP status.");
  w.Sample("requests_rejected_total", "status=\"400\"", m.rejected_invalid);
  w.Sample("requests_rejected_total", "status=\"401\"", m.rejected_unauthorized);
  w.Sample("requests_rejected_total", "status=\"429\"", m.rejected_overloaded);
  w.Sample("requests_rejected_total", "status=\"503\"", m.rejected_draining);
  w.Family("requests_timed_out_total", "counter", "Requests cancelled by the request timeout (408).");
  w.Sample("requests_timed_out_total", "", m.timed_out);

  w.Family("connections_open", "gauge", "TCP connections open: idle, being read or in a request.");
  w.Sample("connections_open", "", m.connections_open);
  w.Family("connections_accepted_total", "counter", "TCP connections accepted.");
  w.Sample("connections_accepted_total", "", m.connections_accepted);
  w.Family("connections_closed_total", "counter",
           "Connections the server closed on its own, by reason (refused: over --max-connections, 503; "
           "read_timeout: 408; headers_too_large: 431; idle: past the idle timeout).");
  w.Sample("connections_closed_total", "reason=\"refused\"", m.connections_refused);
  w.Sample("connections_closed_total", "reason=\"idle\"", m.connections_idle_closed);
  w.Sample("connections_closed_total", "reason=\"read_timeout\"", m.connections_read_timeout);
  w.Sample("connections_closed_total", "reason=\"headers_too_large\"", m.connections_headers_too_large);

  w.Family("queue_length", "gauge",
           "Scheduler queue lengths: waiting (prefill), ready (prelude), loop (core steps), coda.");
  w.Sample("queue_length", "queue=\"waiting\"", m.queue_waiting);
  w.Sample("queue_length", "queue=\"ready\"", m.queue_ready);
  w.Sample("queue_length", "queue=\"loop\"", m.queue_loop);
  w.Sample("queue_length", "queue=\"coda\"", m.queue_coda);

  w.Family("batch_size_mean", "gauge", "Mean rows per run of each stage since start (prefill: prompt tokens).");
  w.Sample("batch_size_mean", "stage=\"prefill\"", m.batch_prefill);
  w.Sample("batch_size_mean", "stage=\"prelude\"", m.batch_prelude);
  w.Sample("batch_size_mean", "stage=\"core\"", m.batch_core);
  w.Sample("batch_size_mean", "stage=\"coda\"", m.batch_coda);

  w.Family("last_batch_size", "gauge", "Rows of the last executed plan, labelled with its stage.");
  w.Sample("last_batch_size", "stage=\"" + Escape(m.last_stage) + "\"", m.last_rows);

  w.Family("steps_total", "counter", "Engine steps.");
  w.Sample("steps_total", "", m.steps);
  w.Family("steps_fewer_threads_total", "counter",
           "Engine steps run on fewer threads than --threads (they measured faster: other work holds cores).");
  w.Sample("steps_fewer_threads_total", "", m.fewer_thread_steps);
  w.Family(
      "steps_contended_total", "counter",
      "Engine steps on more than one thread whose threads waited for cores over 5% of their time.");
  w.Sample("steps_contended_total", "", m.contended_thread_steps);
  w.Family("preemptions_total", "counter", "Requests preempted by recompute.");
  w.Sample("preemptions_total", "", m.preemptions);

  w.Family("mean_exit_depth", "gauge", "Mean loop steps per decoded token since start.");
  w.Sample("mean_exit_depth", "", m.mean_exit_depth);

  w.Family("kv_blocks", "gauge", "KV cache blocks by state.");
  w.Sample("kv_blocks", "state=\"used\"", m.kv_blocks_used);
  w.Sample("kv_blocks", "state=\"free\"", m.kv_blocks_free);
  w.Family("kv_block_bytes", "gauge", "Bytes of one KV block (K and V of block_size positions of one KV layer).");
  w.Sample("kv_block_bytes", "", m.kv_block_bytes);
  w.Family("kv_bytes_per_token", "gauge",
           "KV bytes one decode token holds: its KV layers (LCKV: only layers whose KV is read) x 2 x kv_dim x 4.");
  w.Sample("kv_bytes_per_token", "", m.kv_bytes_per_token);

  w.Family("prompt_tokens_total", "counter", "Prompt tokens of admitted requests.");
  w.Sample("prompt_tokens_total", "", m.prompt_tokens);
  w.Family("output_tokens_total", "counter", "Generated tokens.");
  w.Sample("output_tokens_total", "", m.output_tokens);

  char help[128];
  std::snprintf(help, sizeof help, "Generated tokens per second over the last %g s (or since start if shorter).",
                m.window_seconds);
  w.Family("output_tokens_per_second", "gauge", help);
  w.Sample("output_tokens_per_second", "", m.output_tokens_per_second);

  w.Family("budget", "gauge", "The budget controller's b in [0, 1] after the last step (1: full compute).");
  w.Sample("budget", "", m.budget);
  w.Family("reclaim_noticed", "gauge", "1 once a reclaim notice arrived (new requests get 503).");
  w.Sample("reclaim_noticed", "", static_cast<int64_t>(m.reclaim_noticed));
  static const char* const kTiers[3] = {"priority", "default", "flex"};
  const struct {
    const char* name;
    const char* type;
    const char* help;
    const int64_t* counts;
    const double* means;
  } per_tier[] = {
      {"tier_requests_total", "counter", "Requests added, by service tier.", m.tier_requests, nullptr},
      {"tier_output_tokens_total", "counter", "Generated tokens, by service tier.", m.tier_tokens, nullptr},
      {"tier_deadline_misses_total", "counter", "Requests finished after their deadline, by service tier.",
       m.tier_deadline_misses, nullptr},
      {"tier_mean_exit_depth", "gauge", "Mean loop steps per decoded token since start, by service tier.", nullptr,
       m.tier_mean_exit_depth},
      {"tier_mean_budget", "gauge", "Mean budget b of decoded tokens since start, by service tier.", nullptr,
       m.tier_mean_budget},
  };
  for (const auto& f : per_tier) {
    w.Family(f.name, f.type, f.help);
    for (int t = 0; t < 3; ++t) {
      const std::string label = std::string("tier=\"") + kTiers[t] + "\"";
      if (f.counts) w.Sample(f.name, label, f.counts[t]);
      else w.Sample(f.name, label, f.means[t]);
    }
  }
  w.Family("deadline_misses_total", "counter", "Requests finished after their deadline (all tiers).");
  w.Sample("deadline_misses_total", "", m.deadline_misses);
  w.Family("deadline_hopeless_total", "counter",
           "Requests with a deadline found unmeetable even at b = 0 (still served; kept out of b).");
  w.Sample("deadline_hopeless_total", "", m.deadline_hopeless);
  w.Family("forced_thinking_ends_total", "counter",
           "End-of-thinking tokens forced by a thinking budget (thinking_token_budget or the server's default).");
  w.Sample("forced_thinking_ends_total", "", m.forced_think_ends);
  return std::move(w.out());
}

}  // namespace fathom::serve
