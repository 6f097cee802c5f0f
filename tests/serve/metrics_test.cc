#include "serve/metrics.h"

#include <gtest/gtest.h>

#include "serve/serve_test_util.h"

namespace fathom::serve {
namespace {

using fathom::testing::MetricValue;

TEST(Metrics, RendersPrometheusText) {
  MetricsSnapshot m;
  m.model = "tiny \"x\"";
  m.waiting = 2;
  m.running = 3;
  m.finished_stop = 4;
  m.cancelled = 1;
  m.rejected_overloaded = 5;
  m.queue_loop = 7;
  m.batch_core = 6.5;
  m.last_stage = "core";
  m.last_rows = 9;
  m.mean_exit_depth = 2.25;
  m.kv_blocks_used = 10;
  m.kv_blocks_free = 90;
  m.kv_block_bytes = 32768;
  m.kv_bytes_per_token = 6144;
  m.prompt_tokens = 100;
  m.output_tokens = 200;
  m.output_tokens_per_second = 12.5;
  m.timed_out = 3;
  m.connections_open = 11;
  m.connections_refused = 12;
  m.connections_read_timeout = 13;
  const std::string t = RenderPrometheus(m);
  EXPECT_NE(t.find("# HELP fathom_requests "), std::string::npos);
  EXPECT_NE(t.find("# TYPE fathom_requests gauge"), std::string::npos);
  EXPECT_NE(t.find("# TYPE fathom_output_tokens_total counter"), std::string::npos);
  EXPECT_NE(t.find("fathom_info{model=\"tiny \\\"x\\\"\"} 1"), std::string::npos) << t;
  EXPECT_EQ(MetricValue(t, "fathom_requests", "state=\"waiting\""), 2);
  EXPECT_EQ(MetricValue(t, "fathom_requests", "state=\"running\""), 3);
  EXPECT_EQ(MetricValue(t, "fathom_requests_finished_total", "reason=\"stop\""), 4);
  EXPECT_EQ(MetricValue(t, "fathom_requests_finished_total", "reason=\"cancelled\""), 1);
  EXPECT_EQ(MetricValue(t, "fathom_requests_rejected_total", "status=\"429\""), 5);
  EXPECT_EQ(MetricValue(t, "fathom_queue_length", "queue=\"loop\""), 7);
  EXPECT_EQ(MetricValue(t, "fathom_batch_size_mean", "stage=\"core\""), 6.5);
  EXPECT_EQ(MetricValue(t, "fathom_last_batch_size", "stage=\"core\""), 9);
  EXPECT_EQ(MetricValue(t, "fathom_mean_exit_depth"), 2.25);
  EXPECT_EQ(MetricValue(t, "fathom_kv_blocks", "state=\"used\""), 10);
  EXPECT_EQ(MetricValue(t, "fathom_kv_blocks", "state=\"free\""), 90);
  EXPECT_EQ(MetricValue(t, "fathom_kv_block_bytes", ""), 32768);
  EXPECT_EQ(MetricValue(t, "fathom_kv_bytes_per_token", ""), 6144);
  EXPECT_EQ(MetricValue(t, "fathom_prompt_tokens_total"), 100);
  EXPECT_EQ(MetricValue(t, "fathom_output_tokens_total"), 200);
  EXPECT_EQ(MetricValue(t, "fathom_output_tokens_per_second"), 12.5);
  EXPECT_EQ(MetricValue(t, "fathom_requests_timed_out_total"), 3);
  EXPECT_EQ(MetricValue(t, "fathom_connections_open"), 11);
  EXPECT_EQ(MetricValue(t, "fathom_connections_closed_total", "reason=\"refused\""), 12);
  EXPECT_EQ(MetricValue(t, "fathom_connections_closed_total", "reason=\"read_timeout\""), 13);
  // Every sample line belongs to a family declared with HELP and TYPE.
  size_t pos = 0;
  while ((pos = t.find("\nfathom_", pos)) != std::string::npos) {
    ++pos;
    const std::string name = t.substr(pos, t.find_first_of("{ ", pos) - pos);
    EXPECT_NE(t.find("# TYPE " + name + " "), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace fathom::serve
