// SwiGlu vs SwiGluReference.
#include "kernels/activation.h"

#include <gtest/gtest.h>

#include <cmath>

#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;

TEST(SwiGluTest, MatchesReference) {
  uint64_t seed = 10;
  for (int64_t rows : {1, 5, 33}) {
    for (int64_t inter : {1, 7, 8, 100, 5633}) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " inter=" + std::to_string(inter));
      std::vector<float> gu =
          RandomFloats(static_cast<size_t>(rows * 2 * inter), ++seed, -20.f, 20.f);
      gu[0] = -100.f;  // exp(-gate) far beyond f32 range
      if (gu.size() > 2) gu[1] = 100.f;
      std::vector<float> out(static_cast<size_t>(rows * inter)), ref(out.size());
      SwiGlu(gu.data(), rows, inter, out.data());
      SwiGluReference(gu.data(), rows, inter, ref.data());
      for (size_t i = 0; i < out.size(); ++i)
        ASSERT_NEAR(out[i], ref[i], 1e-5 * std::fabs(ref[i]) + 1e-30) << "at " << i;
    }
  }
}

TEST(SwiGluTest, KnownValues) {
  // gate | up for inter = 2: silu(0) * 3 = 0, silu(1) * 2 = 2 / (1 + e^-1).
  const float gu[4] = {0.f, 1.f, 3.f, 2.f};
  float out[2];
  SwiGlu(gu, 1, 2, out);
  EXPECT_EQ(out[0], 0.f);
  EXPECT_NEAR(out[1], 2.0 / (1.0 + std::exp(-1.0)), 1e-6);
}

}  // namespace
}  // namespace fathom
