// SoftmaxInPlace and LogSoftmax vs SoftmaxReference (double).
#include "kernels/softmax.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;

TEST(SoftmaxTest, MatchesReference) {
  uint64_t seed = 20;
  for (int64_t n : {1, 7, 8, 9, 100, 32005}) {
    for (float spread : {1.f, 30.f}) {
      SCOPED_TRACE("n=" + std::to_string(n) + " spread=" + std::to_string(spread));
      std::vector<float> x = RandomFloats(static_cast<size_t>(n), ++seed, -spread, spread);
      if (n > 3) x[2] = -std::numeric_limits<float>::infinity();  // a masked logit
      std::vector<float> ref(x.size()), sm = x, logsm(x.size());
      SoftmaxReference(x.data(), n, ref.data());
      SoftmaxInPlace(sm.data(), n);
      LogSoftmax(x.data(), n, logsm.data());
      double sum = 0;
      for (int64_t i = 0; i < n; ++i) {
        ASSERT_NEAR(sm[i], ref[i], 1e-5 * ref[i] + 1e-30) << "at " << i;
        sum += sm[i];
        if (ref[i] > 0) {
          const double log_ref = std::log(static_cast<double>(ref[i]));
          ASSERT_NEAR(logsm[i], log_ref, 1e-5 * std::max(1.0, std::fabs(log_ref))) << "at " << i;
        }
      }
      EXPECT_NEAR(sum, 1.0, 1e-5);
      if (n > 3) {
        EXPECT_EQ(sm[2], 0.f);
        EXPECT_EQ(logsm[2], -std::numeric_limits<float>::infinity());
      }
    }
  }
}

TEST(SoftmaxTest, LogSoftmaxInPlace) {
  std::vector<float> x = RandomFloats(37, 3, -5.f, 5.f), out(37);
  LogSoftmax(x.data(), 37, out.data());
  LogSoftmax(x.data(), 37, x.data());
  EXPECT_EQ(x, out);
}

TEST(SoftmaxTest, HugeLogitsDoNotOverflow) {
  std::vector<float> x = {1e30f, 1e30f, -1e30f};
  SoftmaxInPlace(x.data(), 3);
  EXPECT_FLOAT_EQ(x[0], 0.5f);
  EXPECT_FLOAT_EQ(x[1], 0.5f);
  EXPECT_EQ(x[2], 0.f);
}

}  // namespace
}  // namespace fathom
