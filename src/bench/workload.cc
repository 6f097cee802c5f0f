#include "bench/workload.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace fathom::bench {
namespace {

constexpr double kLo = kMinPrompt - 0.5;  // rounds to >= 4 (kMinPrompt == kMinOutput)

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
double Uniform01(uint64_t& s) { return (static_cast<double>(SplitMix(s) >> 11) + 0.5) * 0x1.0p-53; }

double Cdf(const LogNormal& d, double x) { return NormalCdf((std::log(x) - d.mu) / d.sigma); }

// exp(mu + sigma z) with z drawn from the standard normal truncated to [lo, hi].
double SampleTruncated(const LogNormal& d, double lo, double hi, uint64_t& s) {
  const double flo = Cdf(d, lo), fhi = Cdf(d, hi);
  const double u = flo + (fhi - flo) * Uniform01(s);
  const double x = std::exp(d.mu + d.sigma * NormalQuantile(u));
  return std::clamp(x, lo, hi);
}

// mu such that E[X | X > lo] = mean for the given sigma (upper truncation ignored: it
// removes well under 1e-4 of the mass for the mean-specified workloads).
LogNormal FitMean(double mean, double sigma) {
  auto truncated_mean = [&](double mu) {
    const double a = std::log(kLo);
    return std::exp(mu + sigma * sigma / 2) * NormalCdf((mu + sigma * sigma - a) / sigma) /
           NormalCdf((mu - a) / sigma);
  };
  double lo = -20, hi = 20;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (truncated_mean(mid) < mean ? lo : hi) = mid;
  }
  return {(lo + hi) / 2, sigma};
}

// (mu, sigma) such that the distribution truncated to [kLo, hi] has the given median and P90.
LogNormal FitQuantiles(double median, double p90, double hi) {
  LogNormal d{std::log(median), (std::log(p90) - std::log(median)) / NormalQuantile(0.9)};
  for (int it = 0; it < 100; ++it) {
    const double flo = Cdf(d, kLo), fhi = Cdf(d, hi);
    const double z1 = NormalQuantile(flo + 0.5 * (fhi - flo));
    const double z2 = NormalQuantile(flo + 0.9 * (fhi - flo));
    d.sigma = (std::log(p90) - std::log(median)) / (z2 - z1);
    d.mu = std::log(median) - d.sigma * z1;
  }
  return d;
}

}  // namespace

Result<WorkloadKind> ParseWorkload(std::string_view name) {
  if (name == "alpaca") return WorkloadKind::kAlpaca;
  if (name == "sharegpt") return WorkloadKind::kShareGpt;
  if (name == "arxiv") return WorkloadKind::kArxiv;
  return Status::Error("unknown workload '" + std::string(name) + "' (known: alpaca, sharegpt, arxiv)");
}

std::string_view WorkloadName(WorkloadKind w) {
  switch (w) {
    case WorkloadKind::kAlpaca: return "alpaca";
    case WorkloadKind::kShareGpt: return "sharegpt";
    case WorkloadKind::kArxiv: return "arxiv";
  }
  return "?";
}

WorkloadModel CalibratedModel(WorkloadKind kind) {
  switch (kind) {
    case WorkloadKind::kAlpaca: return {kind, FitMean(19.3, 0.7), FitMean(58.5, 0.9)};
    case WorkloadKind::kShareGpt: return {kind, FitMean(161.3, 1.3), FitMean(338.0, 1.0)};
    case WorkloadKind::kArxiv: {
      const LogNormal out = FitQuantiles(208, 371, kMaxTotal - kMinPrompt + 0.5);
      // The prompt's upper bound depends on the drawn output; calibrate at the median output.
      return {kind, FitQuantiles(7059, 12985, kMaxTotal + 0.5 - 208), out};
    }
  }
  return {kind, {}, {}};
}

std::vector<RequestShape> GenerateWorkload(WorkloadKind kind, int64_t n, uint64_t seed) {
  const WorkloadModel m = CalibratedModel(kind);
  uint64_t s = seed * 0x2545f4914f6cdd1dull + static_cast<uint64_t>(kind) + 1;
  std::vector<RequestShape> out;
  out.reserve(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) {
    RequestShape r;
    r.output = std::llround(SampleTruncated(m.output, kLo, kMaxTotal - kMinPrompt + 0.49, s));
    r.prompt = std::llround(SampleTruncated(m.input, kLo, static_cast<double>(kMaxTotal - r.output) + 0.49, s));
    out.push_back(r);
  }
  return out;
}

std::vector<int32_t> SyntheticPrompt(int64_t length, int64_t vocab, int32_t avoid, uint64_t seed) {
  uint64_t s = seed ^ 0x5851f42d4c957f2dull;
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(length));
  const int64_t lo = vocab > 2 ? 1 : 0;
  while (static_cast<int64_t>(ids.size()) < length) {
    const auto id = static_cast<int32_t>(lo + static_cast<int64_t>(SplitMix(s) % static_cast<uint64_t>(vocab - lo)));
    if (id != avoid || vocab - lo <= 1) ids.push_back(id);
  }
  return ids;
}

double Mean(const std::vector<int64_t>& v) {
  if (v.empty()) return 0;
  double sum = 0;
  for (int64_t x : v) sum += static_cast<double>(x);
  return sum / static_cast<double>(v.size());
}

double Quantile(std::vector<int64_t> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return static_cast<double>(v[std::clamp<size_t>(rank, 1, v.size()) - 1]);
}

double NormalCdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double NormalQuantile(double p) {
  if (p <= 0) return -40;
  if (p >= 1) return 40;
  // Acklam's approximation.
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02, -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01, -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00, 2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  double x;
  if (p < 0.02425) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p > 1 - 0.02425) {
    const double q = std::sqrt(-2 * std::log(1 - p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  }
  // One Newton step on Phi(x) = p.
  const double e = NormalCdf(x) - p;
  const double pdf = std::exp(-x * x / 2) / std::sqrt(2 * std::numbers::pi);
  if (pdf > 0) x -= e / pdf;
  return x;
}

}  // namespace fathom::bench
