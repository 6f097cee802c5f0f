// The serving benchmark's accounting on hand-written client outcomes and /metrics texts:
// which requests count as failed and why, the latencies and throughput of the completed
// ones (computed here by hand), and the metric deltas compared with the clients.
#include "bench/serve_bench.h"

#include <gtest/gtest.h>

namespace fathom::bench {
namespace {

using serve::CompletionOutcome;

RequestSpec Spec(int32_t prompt, int32_t max_tokens) {
  RequestSpec r;
  r.prompt.assign(static_cast<size_t>(prompt), 1);
  r.max_tokens = max_tokens;
  return r;
}

CompletionOutcome Done(double send, double first, double finish, int64_t prompt, int64_t tokens,
                       std::string reason = "length") {
  CompletionOutcome c;
  c.ok = true;
  c.send = send, c.first_token = first, c.finish = finish;
  c.prompt_tokens = prompt, c.completion_tokens = tokens;
  c.finish_reason = std::move(reason);
  return c;
}

TEST(ServeBench, SummarizeClientsChecksEveryRequest) {
  const std::vector<RequestSpec> specs = {Spec(3, 4), Spec(2, 5), Spec(3, 4), Spec(3, 4), Spec(3, 4), Spec(1, 1)};
  CompletionOutcome transport;
  transport.send = 0.05;
  transport.finish = 0.06;
  transport.error = "transport: Connection";
  std::vector<CompletionOutcome> out = {
      Done(0.5, 1.0, 2.5, 3, 4),          // 0: fine; TTFT 0.5, TPOT (2.5 - 1) / 3
      Done(0.25, -1, 1.25, 2, 5),         // 1: fine, not streamed (no first token)
      Done(0.1, 0.2, 0.3, 3, 3),          // 2: one token short
      Done(0.1, 0.2, 0.3, 3, 4, "stop"),  // 3: stopped
      Done(0.1, 0.2, 0.3, 2, 4),          // 4: prompt length differs
      transport,                          // 5: never answered
  };
  const ClientSummary s = SummarizeClients(out, specs);
  EXPECT_EQ(s.completed, 2);
  EXPECT_EQ(s.failed, 4);
  EXPECT_EQ(s.prompt_tokens, 5);
  EXPECT_EQ(s.output_tokens, 9);
  EXPECT_EQ(s.first_send, 0.05);     // over every request sent, failed ones too
  EXPECT_EQ(s.last_response, 2.5);   // over the completed ones
  EXPECT_DOUBLE_EQ(s.seconds(), 2.45);
  EXPECT_DOUBLE_EQ(s.output_tok_s(), 9 / 2.45);
  ASSERT_EQ(s.errors.size(), 4u);
  EXPECT_EQ(s.errors[0], "request 2: completion_tokens 3 != max_tokens 4");
  EXPECT_EQ(s.errors[1], "request 3: finish_reason 'stop'");
  EXPECT_EQ(s.errors[2], "request 4: prompt_tokens 2 != 3");
  EXPECT_EQ(s.errors[3], "request 5: transport: Connection");
  EXPECT_FALSE(out[2].ok);  // the outcomes are marked too
  EXPECT_EQ((std::vector<double>{2.0, 1.0}), s.e2e);
  EXPECT_EQ((std::vector<double>{0.5, 0.2}), s.normalized);
  EXPECT_DOUBLE_EQ(s.mean_normalized(), 0.35);
  EXPECT_EQ((std::vector<double>{0.5}), s.ttft);
  ASSERT_EQ(s.tpot.size(), 1u);
  EXPECT_DOUBLE_EQ(s.tpot[0], 1.5 / 3);
}

TEST(ServeBench, AtMostFiveErrorsAndNothingCompleted) {
  std::vector<RequestSpec> specs(7, Spec(1, 2));
  std::vector<CompletionOutcome> out(7);
  for (CompletionOutcome& c : out) c.error = "HTTP 500: x";
  const ClientSummary s = SummarizeClients(out, specs);
  EXPECT_EQ(s.failed, 7);
  EXPECT_EQ(s.errors.size(), 5u);
  EXPECT_EQ(s.seconds(), 0);
  EXPECT_EQ(s.output_tok_s(), 0);
  EXPECT_EQ(s.mean_normalized(), 0);
}

TEST(ServeBench, MetricDeltasAgainstTheClients) {
  auto before = serve::ParsePrometheusText(
      "fathom_requests_finished_total{reason=\"length\"} 2\n"
      "fathom_requests_finished_total{reason=\"stop\"} 9\n"
      "fathom_output_tokens_total 8\n"
      "fathom_steps_total 100\n");
  auto after = serve::ParsePrometheusText(
      "# TYPE fathom_requests_finished_total counter\n"
      "fathom_requests_finished_total{reason=\"length\"} 4\n"
      "fathom_requests_finished_total{reason=\"stop\"} 30\n"
      "fathom_output_tokens_total 17\n"
      "fathom_prompt_tokens_total 5\n"
      "fathom_steps_total 160\n");
  ASSERT_TRUE(before.ok() && after.ok());
  const MetricsDeltas d = DeltasOf(*before, *after);
  EXPECT_EQ(d.finished_length, 2);  // the stop reason is not counted
  EXPECT_EQ(d.output_tokens, 9);
  EXPECT_EQ(d.prompt_tokens, 5);    // absent before: 0
  EXPECT_EQ(d.steps, 60);
  ClientSummary c;
  c.completed = 2, c.output_tokens = 9, c.prompt_tokens = 5;
  EXPECT_TRUE(d.Agree(c));
  for (int field = 0; field < 3; ++field) {
    ClientSummary off = c;
    (field == 0 ? off.completed : field == 1 ? off.output_tokens : off.prompt_tokens) += 1;
    EXPECT_FALSE(d.Agree(off)) << field;
  }
}

}  // namespace
}  // namespace fathom::bench
