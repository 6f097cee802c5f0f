// Sampler: greedy ties, filters, and the drawn frequencies vs SamplingDistributionReference.
#include "kernels/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;

TEST(SamplingTest, ArgmaxTakesLowestIdOnTies) {
  const float x[6] = {1.f, 3.f, -2.f, 3.f, 0.f, 3.f};
  EXPECT_EQ(Argmax(x, 6), 1);
  Sampler s(1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(s.Sample(x, 6, SamplingParams{}), 1);
  const auto dist = SamplingDistributionReference(x, 6, SamplingParams{});
  EXPECT_EQ(dist, (std::vector<double>{0, 1, 0, 0, 0, 0}));
  // top_k = 1 is greedy too, whatever the temperature.
  EXPECT_EQ(s.Sample(x, 6, SamplingParams{2.f, 1, 1.f}), 1);
}

TEST(SamplingTest, ReferenceFiltersAsDocumented) {
  // Probabilities at T = 1 proportional to 8, 4, 2, 1, 1 (ids 0..4).
  const float x[5] = {std::log(8.f), std::log(4.f), std::log(2.f), 0.f, 0.f};
  auto d = SamplingDistributionReference(x, 5, {1.f, 2, 1.f});
  EXPECT_NEAR(d[0], 8.0 / 12, 1e-6);
  EXPECT_NEAR(d[1], 4.0 / 12, 1e-6);
  EXPECT_EQ(d[2] + d[3] + d[4], 0.0);
  // top_p = 0.75: 8/16 = 0.5 < 0.75, 12/16 = 0.75 >= 0.75 -> keep ids 0 and 1.
  d = SamplingDistributionReference(x, 5, {1.f, 0, 0.75f});
  EXPECT_NEAR(d[0] + d[1], 1.0, 1e-9);
  // top_p = 0.85 needs id 2 (14/16); the tied ids 3 and 4 are not reached.
  d = SamplingDistributionReference(x, 5, {1.f, 0, 0.85f});
  EXPECT_GT(d[2], 0.0);
  EXPECT_EQ(d[3] + d[4], 0.0);
  // A tiny top_p still keeps one token.
  d = SamplingDistributionReference(x, 5, {1.f, 0, 1e-6f});
  EXPECT_EQ(d[0], 1.0);
}

// Draws 20k tokens and compares the counts with the reference distribution (chi-square
// over bins with >= 5 expected draws, the rest merged). Seeded, so deterministic.
void CheckDraws(const std::vector<float>& logits, const SamplingParams& p, uint64_t seed) {
  const int64_t vocab = static_cast<int64_t>(logits.size());
  const auto dist = SamplingDistributionReference(logits.data(), vocab, p);
  EXPECT_NEAR(std::accumulate(dist.begin(), dist.end(), 0.0), 1.0, 1e-9);
  const int draws = 20000;
  std::vector<int> counts(static_cast<size_t>(vocab), 0);
  Sampler s(seed);
  for (int i = 0; i < draws; ++i) {
    const int32_t t = s.Sample(logits.data(), vocab, p);
    ASSERT_TRUE(t >= 0 && t < vocab);
    ASSERT_GT(dist[t], 0.0) << "drew filtered-out token " << t;
    ++counts[t];
  }
  double chi2 = 0, rest_exp = 0, rest_obs = 0;
  int bins = 0;
  for (int64_t i = 0; i < vocab; ++i) {
    const double e = dist[i] * draws;
    if (e >= 5) {
      chi2 += (counts[i] - e) * (counts[i] - e) / e;
      ++bins;
    } else {
      rest_exp += e;
      rest_obs += counts[i];
    }
  }
  if (rest_exp >= 5) {
    chi2 += (rest_obs - rest_exp) * (rest_obs - rest_exp) / rest_exp;
    ++bins;
  }
  const double dof = std::max(1, bins - 1);
  EXPECT_LT(chi2, dof + 5 * std::sqrt(2 * dof)) << "bins " << bins;  // ~5 sigma
}

TEST(SamplingTest, DrawsFollowReferenceDistribution) {
  const std::vector<float> logits = RandomFloats(50, 60, -3.f, 3.f);
  const SamplingParams params[] = {
      {1.f, 0, 1.f}, {0.7f, 10, 1.f}, {1.3f, 0, 0.8f}, {1.f, 20, 0.9f}, {0.5f, 0, 0.5f}};
  uint64_t seed = 100;
  for (const SamplingParams& p : params) {
    SCOPED_TRACE("T=" + std::to_string(p.temperature) + " k=" + std::to_string(p.top_k) +
                 " p=" + std::to_string(p.top_p));
    CheckDraws(logits, p, ++seed);
  }
}

TEST(SamplingTest, WideLogitRangeDoesNotOverflow) {
  // exp of (logit - min) would overflow here: weights must be taken relative to the max.
  std::vector<float> logits = RandomFloats(64, 63, -5.f, 5.f);
  logits[3] = 1000.f;
  logits[9] = 999.f;
  logits[20] = -1000.f;
  for (const SamplingParams& p :
       {SamplingParams{1.f, 0, 1.f}, SamplingParams{1.f, 0, 0.9f}, SamplingParams{2.f, 5, 0.95f}}) {
    SCOPED_TRACE("top_k=" + std::to_string(p.top_k) + " top_p=" + std::to_string(p.top_p));
    CheckDraws(logits, p, 5);
  }
}

TEST(SamplingTest, LargeNucleusBeyondFirstSortedPrefix) {
  // Nearly flat logits over 5000 tokens: a 0.9 nucleus holds ~4500 tokens, more than the
  // sampler sorts at first.
  const std::vector<float> logits = RandomFloats(5000, 61, -0.1f, 0.1f);
  const SamplingParams p{1.f, 0, 0.9f};
  const auto dist = SamplingDistributionReference(logits.data(), 5000, p);
  const auto kept = std::count_if(dist.begin(), dist.end(), [](double d) { return d > 0; });
  EXPECT_GT(kept, 4000);
  Sampler s(7);
  for (int i = 0; i < 500; ++i) {
    const int32_t t = s.Sample(logits.data(), 5000, p);
    ASSERT_GT(dist[t], 0.0) << "drew filtered-out token " << t;
  }
}

TEST(SamplingTest, SameSeedSameSequence) {
  const std::vector<float> logits = RandomFloats(1000, 62, -2.f, 2.f);
  const SamplingParams p{0.9f, 50, 0.95f};
  Sampler a(42), b(42), c(43);
  std::vector<int32_t> sa, sb, sc;
  for (int i = 0; i < 200; ++i) {
    sa.push_back(a.Sample(logits.data(), 1000, p));
    sb.push_back(b.Sample(logits.data(), 1000, p));
    sc.push_back(c.Sample(logits.data(), 1000, p));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

}  // namespace
}  // namespace fathom
