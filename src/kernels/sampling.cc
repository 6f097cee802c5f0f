// Token sampling: greedy, or temperature -> top-k -> top-p (nucleus) -> draw.
//
// Candidates are ordered by (logit descending, id ascending), the order probabilities have
// after temperature, so top-k keeps the first k and top-p the shortest prefix whose mass is
// >= top_p. The draw uses the raw 64-bit output of mt19937_64 (not a std:: distribution,
// whose algorithm varies between standard libraries), so a seed gives the same tokens
// everywhere.
#include "kernels/sampling.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace fathom {
namespace {

using Cand = std::pair<float, int32_t>;  // (logit, id)

// Higher logit first; lower id first on ties.
bool Before(const Cand& a, const Cand& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}

// Sorts the best `k` of `c` to its front.
void SortTop(std::vector<Cand>& c, size_t k) {
  k = std::min(k, c.size());
  if (k < c.size()) std::nth_element(c.begin(), c.begin() + k, c.end(), Before);
  std::sort(c.begin(), c.begin() + k, Before);
}

// Unnormalized probability of logit l: exp((l - max) / temperature).
double Weight(float logit, float max_logit, float temperature) {
  return std::exp((static_cast<double>(logit) - max_logit) / temperature);
}

// How many of the sorted candidates top-p keeps: the shortest prefix with mass >= top_p
// (at least one). Returns 0 when `sorted_n` candidates are not enough to decide.
size_t NucleusSize(const std::vector<Cand>& c, size_t sorted_n, double total, float top_p,
                   float max_logit, float temperature) {
  double cum = 0;
  for (size_t i = 0; i < sorted_n; ++i) {
    cum += Weight(c[i].first, max_logit, temperature);
    if (cum >= static_cast<double>(top_p) * total) return i + 1;
  }
  return sorted_n == c.size() ? c.size() : 0;
}

// The candidates the draw is made from: fills `c` with (logit, id) and returns how many of
// its first entries are kept (sorted when any filter applies).
size_t Filter(const float* logits, int64_t vocab, const SamplingParams& p, std::vector<Cand>& c) {
  c.resize(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) c[i] = {logits[i], static_cast<int32_t>(i)};
  size_t keep = c.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = static_cast<size_t>(p.top_k);
    SortTop(c, keep);
    c.resize(keep);
  }
  if (p.top_p >= 1.f) return keep;
  const float mx = std::min_element(c.begin(), c.end(), Before)->first;  // the first ranked
  double total = 0;
  for (const Cand& x : c) total += Weight(x.first, mx, p.temperature);
  // Usually a nucleus is a few hundred tokens: sort a prefix, widen only if it is not enough.
  for (size_t sorted = std::min<size_t>(1024, c.size());; sorted = std::min(8 * sorted, c.size())) {
    SortTop(c, sorted);
    if (size_t n = NucleusSize(c, sorted, total, p.top_p, mx, p.temperature)) return n;
  }
}

}  // namespace

int32_t Argmax(const float* x, int64_t n) {
  FATHOM_CHECK_MSG(n > 0, "n=" << n);
  int64_t best = 0;
  for (int64_t i = 1; i < n; ++i)
    if (x[i] > x[best]) best = i;  // strict: the lowest id wins ties
  return static_cast<int32_t>(best);
}

int32_t Sampler::Sample(const float* logits, int64_t vocab, const SamplingParams& p) {
  FATHOM_CHECK_MSG(vocab > 0, "vocab=" << vocab);
  if (p.temperature <= 0.f || p.top_k == 1) return Argmax(logits, vocab);
  const size_t keep = Filter(logits, vocab, p, scratch_);
  float mx = scratch_[0].first;
  for (size_t i = 1; i < keep; ++i) mx = std::max(mx, scratch_[i].first);
  weights_.resize(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i)
    total += weights_[i] = Weight(scratch_[i].first, mx, p.temperature);
  // u in [0, 1) from the top 53 bits; walk the kept candidates to the one holding u * total.
  const double u = static_cast<double>(rng_() >> 11) * 0x1.0p-53;
  const double target = u * total;
  double cum = 0;
  for (size_t i = 0; i < keep; ++i) {
    cum += weights_[i];
    if (target < cum) return scratch_[i].second;
  }
  return scratch_[keep - 1].second;  // rounding left target at the very end
}

std::vector<double> SamplingDistributionReference(const float* logits, int64_t vocab,
                                                  const SamplingParams& p) {
  std::vector<double> dist(static_cast<size_t>(vocab), 0.0);
  if (p.temperature <= 0.f || p.top_k == 1) {
    dist[static_cast<size_t>(Argmax(logits, vocab))] = 1.0;
    return dist;
  }
  std::vector<Cand> c(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i) c[i] = {logits[i], static_cast<int32_t>(i)};
  std::sort(c.begin(), c.end(), Before);  // the full order, no shortcuts
  size_t keep = c.size();
  if (p.top_k > 0) keep = std::min(keep, static_cast<size_t>(p.top_k));
  const double mx = c[0].first;
  std::vector<double> w(keep);
  double total = 0;
  for (size_t i = 0; i < keep; ++i) total += w[i] = std::exp((c[i].first - mx) / p.temperature);
  if (p.top_p < 1.f) {
    double cum = 0;
    size_t n = 0;
    while (n < keep && (n == 0 || cum < static_cast<double>(p.top_p) * total)) cum += w[n++];
    keep = n;
    total = cum;
  }
  for (size_t i = 0; i < keep; ++i) dist[static_cast<size_t>(c[i].second)] = w[i] / total;
  return dist;
}

}  // namespace fathom
