// The AVX2 helpers the f32 kernels are built on: Exp, Dot, Axpy.
#include "kernels/vec_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "kernels/test_util.h"

namespace fathom {
namespace {

TEST(VecMathTest, ExpIsWithinFewUlp) {
  double worst = 0;
  for (double x = -87.0; x <= 88.0; x += 0.00731) {
    const float xf = static_cast<float>(x);
    const double ref = std::exp(static_cast<double>(xf));
    const double rel = std::fabs(internal::ExpScalar(xf) - ref) / ref;
    worst = std::max(worst, rel);
  }
  EXPECT_LT(worst, 4e-7);  // ~3 ulp of f32
}

TEST(VecMathTest, ExpEdges) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(internal::ExpScalar(0.f), 1.f);
  EXPECT_EQ(internal::ExpScalar(-inf), 0.f);
  EXPECT_EQ(internal::ExpScalar(-100.f), 0.f);
  EXPECT_TRUE(std::isfinite(internal::ExpScalar(1000.f)));  // clamped, not inf
  EXPECT_TRUE(std::isnan(internal::ExpScalar(std::nanf(""))));
}

TEST(VecMathTest, DotAndAxpyAllLengths) {
  for (int64_t n = 0; n <= 40; ++n) {
    const auto a = testing::RandomFloats(static_cast<size_t>(n), 1 + n);
    const auto b = testing::RandomFloats(static_cast<size_t>(n), 100 + n);
    double ref = 0;
    for (int64_t i = 0; i < n; ++i) ref += static_cast<double>(a[i]) * b[i];
    EXPECT_NEAR(internal::Dot(a.data(), b.data(), n), ref, 1e-5) << "n=" << n;
    std::vector<float> y = b;
    internal::Axpy(0.5f, a.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_FLOAT_EQ(y[i], b[i] + 0.5f * a[i]);
  }
}

}  // namespace
}  // namespace fathom
