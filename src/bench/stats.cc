#include "bench/stats.h"

#include <algorithm>
#include <cstddef>

namespace fathom::bench {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double n = static_cast<double>(v.size());
  const auto rank = static_cast<size_t>(std::clamp(q * n + 0.5, 1.0, n));
  return v[rank - 1];
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  const size_t mid = v.size() / 2;
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid), v.end());
  const double upper = v[mid];
  if (v.size() % 2 == 1) return upper;
  const double lower = *std::max_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(mid));
  return 0.5 * (lower + upper);
}

Saturation FindSaturation(const std::vector<double>& rates, const std::vector<double>& latency, double slo) {
  Saturation s;
  const size_t n = std::min(rates.size(), latency.size());
  for (size_t i = 0; i < n; ++i) {
    if (latency[i] <= slo) {
      s.highest_within = std::max(s.highest_within, rates[i]);
      continue;
    }
    if (!s.exceeded) {
      s.exceeded = true;
      if (i > 0) {  // latency[i - 1] <= slo < latency[i]
        const double f = (slo - latency[i - 1]) / (latency[i] - latency[i - 1]);
        s.crossing = rates[i - 1] + f * (rates[i] - rates[i - 1]);
      }
    }
  }
  if (!s.exceeded && n > 0) s.crossing = rates[n - 1];
  return s;
}

}  // namespace fathom::bench
