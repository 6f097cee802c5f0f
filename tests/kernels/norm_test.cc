// RmsNorm vs RmsNormReference.
#include "kernels/norm.h"

#include <gtest/gtest.h>

#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::MaxAbs;
using testing::MaxAbsDiff;
using testing::RandomFloats;

TEST(RmsNormTest, MatchesReference) {
  uint64_t seed = 1;
  for (int64_t rows : {1, 3, 17, 300}) {
    for (int64_t dim : {1, 7, 64, 2051}) {
      SCOPED_TRACE("rows=" + std::to_string(rows) + " dim=" + std::to_string(dim));
      std::vector<float> x = RandomFloats(static_cast<size_t>(rows * dim), ++seed);
      // Rows of very different scales: the norm must not care.
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < dim; ++i)
          x[r * dim + i] *= std::pow(10.f, static_cast<float>(r % 7 - 3));
      const std::vector<float> w = RandomFloats(static_cast<size_t>(dim), ++seed, 0.5f, 1.5f);
      std::vector<float> y(x.size()), ref(x.size());
      RmsNorm(x.data(), w.data(), 1e-6f, rows, dim, y.data());
      RmsNormReference(x.data(), w.data(), 1e-6f, rows, dim, ref.data());
      for (int64_t r = 0; r < rows; ++r) {
        const float* yr = y.data() + r * dim;
        const float* rr = ref.data() + r * dim;
        const auto n = static_cast<size_t>(dim);
        ASSERT_LE(MaxAbsDiff(yr, rr, n), 1e-5 * MaxAbs(rr, n)) << "row " << r;
      }
      // In place (y aliases x) gives the same values.
      RmsNorm(x.data(), w.data(), 1e-6f, rows, dim, x.data());
      EXPECT_EQ(x, y);
    }
  }
}

TEST(RmsNormTest, EpsDominatesZeroRow) {
  const std::vector<float> x(16, 0.f), w(16, 1.f);
  std::vector<float> y(16, 1.f);
  RmsNorm(x.data(), w.data(), 1e-5f, 1, 16, y.data());
  for (float v : y) EXPECT_EQ(v, 0.f);
}

}  // namespace
}  // namespace fathom
