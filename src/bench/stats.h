// Summary statistics of benchmark samples (latencies, per-round throughput ratios).
#pragma once

#include <vector>

namespace fathom::bench {

// Nearest-rank percentile, q in [0, 1]: the smallest sample with at least q of the samples
// at or below it (q = 0 gives the minimum). 0 for no samples.
double Percentile(std::vector<double> v, double q);
// The median: the middle sample, or the mean of the two middle ones. 0 for no samples.
double Median(std::vector<double> v);

// Where a latency-against-load curve leaves its bound. rates ascending, one latency each.
//   highest_within: the highest rate whose latency is within slo (0: none);
//   crossing: the rate at which the latency first exceeds slo, interpolated linearly
//             between the rate before it and the first rate beyond it (0 if already the
//             lowest rate is beyond); when no rate exceeds slo it is the highest rate
//             tested and `exceeded` is false: a lower bound, not a measurement.
struct Saturation {
  double highest_within = 0, crossing = 0;
  bool exceeded = false;
};
Saturation FindSaturation(const std::vector<double>& rates, const std::vector<double>& latency, double slo);

}  // namespace fathom::bench
