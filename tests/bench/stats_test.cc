// Summary statistics, against values worked out by hand.
#include "bench/stats.h"

#include <gtest/gtest.h>

namespace fathom::bench {
namespace {

TEST(Stats, PercentileIsNearestRank) {
  const std::vector<double> v = {5, 1, 4, 2, 3};  // sorted: 1 2 3 4 5
  EXPECT_EQ(Percentile(v, 0.0), 1);
  EXPECT_EQ(Percentile(v, 0.5), 3);   // rank round(2.5 + 0.5) = 3
  EXPECT_EQ(Percentile(v, 0.9), 5);   // rank 5
  EXPECT_EQ(Percentile(v, 0.7), 4);   // rank round(3.5 + 0.5) = 4
  EXPECT_EQ(Percentile(v, 1.0), 5);
  EXPECT_EQ(Percentile({}, 0.5), 0);
}

TEST(Stats, MedianOfOddAndEvenCounts) {
  EXPECT_EQ(Median({3, 1, 2}), 2);
  EXPECT_EQ(Median({4, 1, 3, 2}), 2.5);
  EXPECT_EQ(Median({7}), 7);
  EXPECT_DOUBLE_EQ(Median({1.0, 1.2}), 1.1);
  EXPECT_EQ(Median({}), 0);
}

TEST(Stats, SaturationInterpolatesTheCrossing) {
  // Latency 10, 20, 40, 80 at rates 1, 2, 4, 8; bound 30: crosses halfway between 2 and 4.
  Saturation s = FindSaturation({1, 2, 4, 8}, {10, 20, 40, 80}, 30);
  EXPECT_TRUE(s.exceeded);
  EXPECT_EQ(s.highest_within, 2);
  EXPECT_DOUBLE_EQ(s.crossing, 3);
  // A later dip back under the bound does not move the first crossing, but counts as within.
  s = FindSaturation({1, 2, 4, 8}, {10, 40, 20, 80}, 30);
  EXPECT_DOUBLE_EQ(s.crossing, 1 + (30.0 - 10) / 30);
  EXPECT_EQ(s.highest_within, 4);
  // Never exceeded: the highest rate is only a lower bound.
  s = FindSaturation({1, 2}, {10, 20}, 30);
  EXPECT_FALSE(s.exceeded);
  EXPECT_EQ(s.crossing, 2);
  EXPECT_EQ(s.highest_within, 2);
  // Already beyond at the lowest rate.
  s = FindSaturation({1, 2}, {50, 60}, 30);
  EXPECT_TRUE(s.exceeded);
  EXPECT_EQ(s.crossing, 0);
  EXPECT_EQ(s.highest_within, 0);
}

}  // namespace
}  // namespace fathom::bench
