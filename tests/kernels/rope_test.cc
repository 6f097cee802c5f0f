// ApplyRope (f32 table, PyTorch-style angles) vs ApplyRopeReference (angles in double).
#include "kernels/rope.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;

struct RopeCase {
  int64_t head_dim, n_heads;
  float theta;
};

TEST(RopeTest, MatchesReferenceBothStyles) {
  const RopeCase cases[] = {{2, 1, 10000.f},  {24, 3, 10000.f}, {40, 2, 500000.f},
                            {64, 5, 10000.f}, {96, 2, 1e6f},    {128, 4, 500000.f}};
  const int64_t max_pos = 4096, rows = 37;
  uint64_t seed = 30;
  for (const RopeCase& c : cases) {
    const RopeTable table(c.head_dim, c.theta, max_pos);
    std::mt19937 rng(static_cast<uint32_t>(++seed));
    std::vector<int32_t> pos(rows);
    for (int32_t& p : pos) p = static_cast<int32_t>(rng() % max_pos);
    pos[0] = 0;
    pos[1] = max_pos - 1;
    for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
      SCOPED_TRACE("head_dim=" + std::to_string(c.head_dim) +
                   (style == RopeStyle::kNeox ? " neox" : " interleaved"));
      const std::vector<float> x =
          RandomFloats(static_cast<size_t>(rows * c.n_heads * c.head_dim), ++seed);
      std::vector<float> y = x, ref = x;
      ApplyRope(table, style, pos.data(), rows, c.n_heads, y.data());
      ApplyRopeReference(c.theta, style, pos.data(), rows, c.n_heads, c.head_dim, ref.data());
      for (int64_t r = 0; r < rows; ++r) {
        // f32 angles are off by up to a few ulps of pos * inv_freq (inv_freq <= 1), so the
        // tolerance grows with the position (about 1e-3 at 4000, as in PyTorch's f32 RoPE).
        const double tol = 2e-6 + 3e-7 * pos[r];
        const size_t base = static_cast<size_t>(r * c.n_heads * c.head_dim);
        for (size_t i = base; i < base + static_cast<size_t>(c.n_heads * c.head_dim); ++i)
          ASSERT_NEAR(y[i], ref[i], tol) << "row " << r << " pos " << pos[r] << " at " << i - base;
      }
      // Position 0 is the identity.
      for (int64_t i = 0; i < c.n_heads * c.head_dim; ++i) EXPECT_EQ(y[i], x[i]);
    }
  }
}

// llama3 scaling (head_dim 16, theta 10000, original length 32, factor 8, low 1, high 4):
// wavelengths 2 pi theta^(2i/16) below 32 / 4 = 8 keep their frequency, above 32 / 1 are
// divided by 8, between blend; values worked out by hand in double.
TEST(RopeTest, Llama3ScalingKeepsDividesAndBlendsFrequencies) {
  RopeScaling sc;
  sc.kind = RopeScaling::Kind::kLlama3;
  sc.factor = 8;
  sc.low_freq_factor = 1;
  sc.high_freq_factor = 4;
  sc.original_max_positions = 32;
  const std::vector<float> inv = RopeInvFrequencies(16, 10000.f, sc);
  ASSERT_EQ(inv.size(), 8u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);  // wavelength 6.28: kept
  // i = 1: inv 10^-0.5 = 0.316228, wavelength 19.869: s = (32 / 19.869 - 1) / 3 = 0.203512,
  // (1 - s) 0.316228 / 8 + s 0.316228 = 0.095840.
  EXPECT_NEAR(inv[1], 0.0958400, 2e-6);
  // i = 2..7: wavelengths 62.8 .. 19869 > 32: divided by 8.
  for (int i = 2; i < 8; ++i)
    EXPECT_NEAR(inv[i], std::pow(10000.0, -i / 8.0) / 8, 1e-6 * std::pow(10000.0, -i / 8.0)) << i;
  // The table and the double reference follow the same rule.
  const RopeTable table(16, 10000.f, 256, sc);
  std::vector<int32_t> pos = {0, 1, 31, 32, 100, 255};
  for (RopeStyle style : {RopeStyle::kNeox, RopeStyle::kInterleaved}) {
    const std::vector<float> x = RandomFloats(pos.size() * 2 * 16, 77);
    std::vector<float> y = x, ref = x, plain = x;
    ApplyRope(table, style, pos.data(), static_cast<int64_t>(pos.size()), 2, y.data());
    ApplyRopeReference(10000.f, style, pos.data(), static_cast<int64_t>(pos.size()), 2, 16,
                       ref.data(), sc);
    ApplyRopeReference(10000.f, style, pos.data(), static_cast<int64_t>(pos.size()), 2, 16,
                       plain.data());
    double moved = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      ASSERT_NEAR(y[i], ref[i], 2e-6 + 3e-7 * 255) << i;
      moved = std::max(moved, std::abs(static_cast<double>(y[i]) - plain[i]));
    }
    EXPECT_GT(moved, 0.1) << "the scaling changed nothing";
  }
}

TEST(RopeTest, TableMatchesFloatMath) {
  const RopeTable t(64, 10000.f, 100);
  for (int64_t p : {0, 1, 17, 99}) {
    for (int64_t i = 0; i < 32; ++i) {
      const float inv = 1.0f / std::pow(10000.f, static_cast<float>(2 * i) / 64.f);
      const float angle = static_cast<float>(p) * inv;
      EXPECT_EQ(t.cos(p)[i], static_cast<float>(std::cos(static_cast<double>(angle))));
      EXPECT_EQ(t.sin(p)[i], static_cast<float>(std::sin(static_cast<double>(angle))));
    }
  }
}

TEST(RopeTest, StylesPairDifferentElements) {
  // head_dim 4 at position 1: neox rotates (0,2) and (1,3); interleaved (0,1) and (2,3).
  const RopeTable t(4, 10000.f, 2);
  const int32_t pos = 1;
  float neox[4] = {1, 0, 0, 0}, inter[4] = {1, 0, 0, 0};
  ApplyRope(t, RopeStyle::kNeox, &pos, 1, 1, neox);
  ApplyRope(t, RopeStyle::kInterleaved, &pos, 1, 1, inter);
  EXPECT_FLOAT_EQ(neox[0], std::cos(1.f));
  EXPECT_FLOAT_EQ(neox[2], std::sin(1.f));
  EXPECT_EQ(neox[1], 0.f);
  EXPECT_FLOAT_EQ(inter[0], std::cos(1.f));
  EXPECT_FLOAT_EQ(inter[1], std::sin(1.f));
  EXPECT_EQ(inter[2], 0.f);
}

}  // namespace
}  // namespace fathom
