// Linear with split bf16 activations (x = hi + lo, two bf16 passes) against the double
// reference on unrounded x: about 2^-16 relative instead of bf16's 2^-8 (on CPUs with a bf16
// matmul; elsewhere both are the exact f32 path).
#include <gtest/gtest.h>

#include "kernels/matmul.h"
#include "test_util.h"

namespace fathom {
namespace {

TEST(LinearSplitTest, SplitActivationsAreNearF32Accurate) {
  for (int64_t m : {1, 2, 5, 40}) {
    const int64_t k = 300, n = 129;
    std::vector<float> wf = testing::RandomFloats(static_cast<size_t>(n * k), 7);
    std::vector<uint16_t> wb(wf.size());
    ConvertFromF32(DType::kBF16, wf.data(), wb.data(), wf.size());
    std::vector<float> bias = testing::RandomFloats(static_cast<size_t>(n), 8);
    const TensorView w{DType::kBF16, {n, k}, wb.data()};
    const TensorView b{DType::kF32, {n}, bias.data()};
    auto lin = Linear::Create({w}, {&b});
    ASSERT_TRUE(lin.ok()) << lin.status().message();
    const std::vector<float> x = testing::RandomFloats(static_cast<size_t>(m * k), 9);
    std::vector<float> ref(static_cast<size_t>(m * n)), fast(ref.size()), split(ref.size());
    LinearReference(x.data(), m, w, bias.data(), ref.data());
    lin->Forward(x.data(), m, fast.data());
    lin->set_split_bf16_activations(true);
    lin->Forward(x.data(), m, split.data());
    const double fast_err = testing::RelErr(fast, ref), split_err = testing::RelErr(split, ref);
    if (lin->compute_dtype() == DType::kF32) {
      // No bf16 matmul on this CPU (oneDNN 2.6 below AVX-512): bf16 weights run exactly as
      // f32, activations are never rounded, and both passes are the f32 path.
      EXPECT_LE(fast_err, 1e-6) << "m=" << m;
      EXPECT_EQ(fast, split) << "m=" << m;
      continue;
    }
    EXPECT_LE(split_err, 1e-4) << "m=" << m;
    EXPECT_LT(split_err, fast_err / 10) << "m=" << m << " fast " << fast_err;
  }
}

}  // namespace
}  // namespace fathom
