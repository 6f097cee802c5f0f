// A reader of the Prometheus text exposition format (0.0.4), the format RenderPrometheus
// (metrics.h) writes: what a client of /metrics, such as `fathom bench serve`, reads back.
//
//   # HELP name text          (text escapes \\ and \n)
//   # TYPE name counter|gauge|histogram|summary|untyped
//   # any other comment
//   name{label="value",...} value [timestamp_ms]
//
// Label values escape \\, \" and \n; a trailing comma inside {} is allowed; the value is a
// float or NaN, +Inf, -Inf. Blank lines are skipped. Anything else is an error naming the
// line and what is wrong there.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace fathom::serve {

struct PrometheusSample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in the text's order, unescaped
  double value = 0;
  std::optional<int64_t> timestamp_ms;
  // "name" or name{a="x",b="y"}: the labels in the text's order, values escaped again, so
  // that the key of a sample RenderPrometheus wrote is the text it wrote before the value.
  std::string Key() const;
};

struct PrometheusText {
  std::vector<PrometheusSample> samples;  // in the text's order
  std::map<std::string, std::string> help, type;  // by metric family name; help unescaped

  // The value of the sample whose Key() is `key`; nullopt when there is none.
  std::optional<double> Find(const std::string& key) const;
  // The same, 0 when absent (a counter not yet exported counts nothing).
  double ValueOr0(const std::string& key) const { return Find(key).value_or(0.0); }
};

Result<PrometheusText> ParsePrometheusText(const std::string& text);

}  // namespace fathom::serve
