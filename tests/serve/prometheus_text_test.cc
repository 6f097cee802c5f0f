// The Prometheus text reader on what the server's own writer renders (every sample read
// back, label escapes undone and redone) and on hand-written text: comments, HELP / TYPE,
// escapes, blanks, trailing commas, NaN / Inf, timestamps; and errors naming the line.
#include "serve/prometheus_text.h"

#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "serve/metrics.h"

namespace fathom::serve {
namespace {

TEST(PrometheusText, ReadsBackWhatTheServerWrites) {
  MetricsSnapshot m;
  m.model = "a \"quoted\" \\ name\nwith a newline";
  m.running = 3;
  m.finished_length = 41;
  m.batch_core = 6.125;
  m.last_stage = "core";
  m.output_tokens = 1234567890123;
  m.output_tokens_per_second = 0.1;  // not exact in binary: %.17g must round-trip
  const std::string text = RenderPrometheus(m);
  auto p = ParsePrometheusText(text);
  ASSERT_TRUE(p.ok()) << p.status().message() << "\n" << text;
  // Every sample line, and each one's key is the text before its value.
  std::istringstream in(text);
  std::string line;
  size_t samples = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    ASSERT_LT(samples, p->samples.size());
    EXPECT_EQ(p->samples[samples].Key(), line.substr(0, line.rfind(' '))) << line;
    ++samples;
  }
  EXPECT_EQ(samples, p->samples.size());
  EXPECT_EQ(p->Find("fathom_requests{state=\"running\"}"), 3.0);
  EXPECT_EQ(p->Find("fathom_requests_finished_total{reason=\"length\"}"), 41.0);
  EXPECT_EQ(p->Find("fathom_batch_size_mean{stage=\"core\"}"), 6.125);
  EXPECT_EQ(p->Find("fathom_output_tokens_total"), 1234567890123.0);
  EXPECT_EQ(p->Find("fathom_output_tokens_per_second"), 0.1);
  EXPECT_EQ(p->Find("fathom_last_batch_size{stage=\"core\"}"), 0.0);
  EXPECT_EQ(p->Find("fathom_no_such_metric"), std::nullopt);
  EXPECT_EQ(p->ValueOr0("fathom_no_such_metric"), 0.0);
  // The model name, unescaped.
  const PrometheusSample& info = p->samples.front();
  ASSERT_EQ(info.name, "fathom_info");
  ASSERT_EQ(info.labels.size(), 1u);
  EXPECT_EQ(info.labels[0].first, "model");
  EXPECT_EQ(info.labels[0].second, m.model);
  EXPECT_EQ(p->type.at("fathom_requests"), "gauge");
  EXPECT_EQ(p->type.at("fathom_steps_total"), "counter");
  EXPECT_EQ(p->help.at("fathom_steps_total"), "Engine steps.");
}

TEST(PrometheusText, ReadsHandWrittenText) {
  const std::string text =
      "# HELP http_requests_total The total number of \\\\ HTTP requests.\\nSecond line.\n"
      "# TYPE http_requests_total counter\n"
      "# a plain comment, and a blank line next\n"
      "\n"
      "http_requests_total{method=\"post\",code=\"200\"} 1027 1395066363000\n"
      "http_requests_total{method=\"post\",code=\"400\",}    3   1395066363000\r\n"
      "  http_requests_total { method = \"get\" , code=\"200\" }\t42\n"
      "msdos_file_access_time_seconds{path=\"C:\\\\DIR\\\\FILE.TXT\",error=\"Cannot find file:\\n\\\"FILE.TXT\\\"\"} "
      "1.458255915e9\n"
      "metric_without_timestamp_and_labels 12.47\n"
      "something_weird{problem=\"division by zero\"} +Inf -3982045\n"
      "minus_inf -Inf\n"
      "not_a_number NaN\n"
      "empty_labels{} 7\n"
      "colons:in:names 1\n";
  auto p = ParsePrometheusText(text);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_EQ(p->samples.size(), 10u);
  EXPECT_EQ(p->help.at("http_requests_total"), "The total number of \\ HTTP requests.\nSecond line.");
  EXPECT_EQ(p->type.at("http_requests_total"), "counter");
  EXPECT_EQ(p->Find("http_requests_total{method=\"post\",code=\"200\"}"), 1027.0);
  EXPECT_EQ(p->samples[0].timestamp_ms, 1395066363000);
  EXPECT_EQ(p->Find("http_requests_total{method=\"post\",code=\"400\"}"), 3.0);  // trailing comma, CRLF
  EXPECT_EQ(p->Find("http_requests_total{method=\"get\",code=\"200\"}"), 42.0);  // blanks around labels
  EXPECT_EQ(p->samples[2].timestamp_ms, std::nullopt);
  const PrometheusSample& file = p->samples[3];
  ASSERT_EQ(file.labels.size(), 2u);
  EXPECT_EQ(file.labels[0].second, "C:\\DIR\\FILE.TXT");
  EXPECT_EQ(file.labels[1].second, "Cannot find file:\n\"FILE.TXT\"");
  EXPECT_EQ(file.value, 1.458255915e9);
  EXPECT_EQ(p->Find("metric_without_timestamp_and_labels"), 12.47);
  EXPECT_EQ(p->samples[5].value, INFINITY);
  EXPECT_EQ(p->samples[5].timestamp_ms, -3982045);
  EXPECT_EQ(p->Find("minus_inf"), -INFINITY);
  EXPECT_TRUE(std::isnan(*p->Find("not_a_number")));
  EXPECT_EQ(p->Find("empty_labels"), 7.0);
  EXPECT_EQ(p->Find("colons:in:names"), 1.0);
}

TEST(PrometheusText, ErrorsNameTheLineAndTheProblem) {
  struct Case {
    std::string text, expect;
  };
  const std::vector<Case> cases = {
      {"ok 1\nbad{a=\"x} 1\n", "line 2, column 12: label 'a': unterminated value"},
      {"bad{a=\"\\t\"} 1\n", "label 'a': unknown escape '\\t'"},
      {"bad{a=x} 1\n", "label 'a': expected '\"' to open its value"},
      {"bad{a} 1\n", "expected '=' after label 'a'"},
      {"bad{a=\"1\" b=\"2\"} 1\n", "expected ',' or '}' after a label value"},
      {"bad{a=\"1\",a=\"2\"} 1\n", "label 'a' given twice"},
      {"bad{1a=\"1\"} 1\n", "expected a label name"},
      {"9bad 1\n", "line 1, column 1: expected a metric name"},
      {"bad\n", "expected a blank and a value after 'bad'"},
      {"bad{a=\"1\"}\n", "expected a blank and a value after 'bad{a=\"1\"}'"},
      {"bad 12abc\n", "the value '12abc' is not a number"},
      {"bad 1 soon\n", "the timestamp 'soon' is not an integer"},
      {"bad 1 2 3\n", "unexpected text after the timestamp: '3'"},
      {"# TYPE bad countr\n", "unknown metric type 'countr' for 'bad'"},
      {"# TYPE bad counter\n# TYPE bad gauge\n", "line 2, column 17: a second TYPE line for 'bad'"},
      {"# HELP\n", "expected a metric name"},
      {"x{a=\"1\"} 1\ny 2\nx{a=\"1\"} 3\n", "line 3: the sample 'x{a=\"1\"}' again (first on line 1)"},
  };
  for (const Case& c : cases) {
    auto p = ParsePrometheusText(c.text);
    ASSERT_FALSE(p.ok()) << c.text;
    EXPECT_NE(p.status().message().find(c.expect), std::string::npos)
        << c.text << "\n  got: " << p.status().message() << "\n  want: " << c.expect;
  }
}

}  // namespace
}  // namespace fathom::serve
