// Synthetic benchmark workloads shaped like the datasets of the CDB paper (MODELS.md,
// "Workloads"): per request a prompt length and a reference output length, drawn from
// seeded truncated log-normal distributions calibrated so that the *filtered* sample hits
// the published statistics:
//   alpaca    input mean 19.3,                    output mean 58.5
//   sharegpt  input mean 161.3,                   output mean 338.0
//   arxiv     input median 7059, P90 12985;       output median 208, P90 371
// Filters (applied by construction, never by rejection): prompt >= 4, output >= 4,
// prompt + output <= 16384. The shape parameters that the statistics do not fix (the
// log-space sigma of the mean-only workloads) are our choice and documented in
// docs/BENCHMARKS_CDB.md. The output length is replayed: the request runs exactly that
// many tokens (max_tokens = length, no EOS stop).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace fathom::bench {

inline constexpr int64_t kMinPrompt = 4, kMinOutput = 4, kMaxTotal = 16384;

enum class WorkloadKind { kAlpaca, kShareGpt, kArxiv };
Result<WorkloadKind> ParseWorkload(std::string_view name);  // alpaca, sharegpt, arxiv
std::string_view WorkloadName(WorkloadKind w);

struct RequestShape {
  int64_t prompt = 0, output = 0;
};

// Log-normal in log space (mu, sigma), truncated to [lo, hi] (continuous; samples are
// rounded to the nearest integer, with lo = 3.5 so that the rounded value is >= 4).
struct LogNormal {
  double mu = 0, sigma = 1;
};

// The calibrated distributions of one workload.
struct WorkloadModel {
  WorkloadKind kind;
  LogNormal input, output;
};
WorkloadModel CalibratedModel(WorkloadKind kind);

// n request shapes; the same (kind, n, seed) gives the same list.
std::vector<RequestShape> GenerateWorkload(WorkloadKind kind, int64_t n, uint64_t seed);

// True if a shape passes the benchmark filters.
inline bool PassesFilters(const RequestShape& r) {
  return r.prompt >= kMinPrompt && r.output >= kMinOutput && r.prompt + r.output <= kMaxTotal;
}

// Prompt token ids for a synthetic request: uniform in [lo, vocab), skipping `avoid`
// (e.g. EOS); deterministic in (seed).
std::vector<int32_t> SyntheticPrompt(int64_t length, int64_t vocab, int32_t avoid, uint64_t seed);

// Statistics helpers (also used by the tests and the reports).
double Mean(const std::vector<int64_t>& v);
double Quantile(std::vector<int64_t> v, double q);  // nearest-rank on a sorted copy

// Standard normal CDF and its inverse (Acklam's rational approximation, refined by Newton).
double NormalCdf(double z);
double NormalQuantile(double p);

}  // namespace fathom::bench
