// The batch-invariant f32 matmul (matmul_row_invariant.h) and Linear::MakeBatchInvariant:
// against the scalar double reference, and every row of an M-row call bit-equal to the same
// row computed alone, whatever M and the row's place (which oneDNN does not give: see the
// header).
#include "kernels/matmul_row_invariant.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;
using testing::RelErr;

std::vector<float> Reference(const std::vector<float>& x, int64_t m, int64_t k,
                             const std::vector<float>& w, int64_t n, const float* bias) {
  std::vector<float> y(static_cast<size_t>(m * n));
  TensorView wv{DType::kF32, {n, k}, w.data()};
  LinearReference(x.data(), m, wv, bias, y.data());
  return y;
}

TEST(MatmulRowInvariant, MatchesTheDoubleReference) {
  for (int64_t k : {1, 7, 8, 37, 64, 300}) {
    for (int64_t n : {1, 2, 3, 5, 16, 47}) {
      for (int64_t m : {1, 2, 4, 5, 9}) {
        for (bool with_bias : {false, true}) {
          const auto x = RandomFloats(static_cast<size_t>(m * k), 1);
          const auto w = RandomFloats(static_cast<size_t>(n * k), 2);
          const auto b = RandomFloats(static_cast<size_t>(n), 3);
          const float* bias = with_bias ? b.data() : nullptr;
          std::vector<float> y(static_cast<size_t>(m * n));
          internal::MatmulF32RowInvariant(x.data(), m, k, w.data(), n, bias, y.data());
          const auto want = Reference(x, m, k, w, n, bias);
          // f32 accumulation of k products of O(1) values: a few ulp per term at most.
          EXPECT_LT(RelErr(y, want), 2e-6) << "m=" << m << " k=" << k << " n=" << n;
        }
      }
    }
  }
}

// Row r of an m-row call equals the same row alone, bit for bit, for every m up to 20 and
// every place of the row, with 1 and 2 threads (a large shape so that the parallel loop runs).
TEST(MatmulRowInvariant, EveryRowEqualsItselfAlone) {
  for (int64_t k : {37, 256}) {
    for (int64_t n : {29, 700}) {
      const int64_t max_m = 20;
      const auto x = RandomFloats(static_cast<size_t>(max_m * k), 4);
      const auto w = RandomFloats(static_cast<size_t>(n * k), 5);
      const auto b = RandomFloats(static_cast<size_t>(n), 6);
      std::vector<float> alone(static_cast<size_t>(max_m * n));
      for (int64_t r = 0; r < max_m; ++r)
        internal::MatmulF32RowInvariant(x.data() + r * k, 1, k, w.data(), n, b.data(),
                                        alone.data() + r * n);
      for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        for (int64_t m = 1; m <= max_m; ++m) {
          for (int64_t first = 0; first + m <= max_m; first += 7) {
            std::vector<float> y(static_cast<size_t>(m * n));
            internal::MatmulF32RowInvariant(x.data() + first * k, m, k, w.data(), n, b.data(), y.data());
            EXPECT_EQ(std::memcmp(y.data(), alone.data() + first * n, y.size() * sizeof(float)), 0)
                << "k=" << k << " n=" << n << " m=" << m << " rows from " << first << ", "
                << threads << " threads";
          }
        }
      }
      omp_set_num_threads(1);
    }
  }
}

// Linear::MakeBatchInvariant: the same function as before (within f32 rounding of the two
// sum orders), the reference's values, bf16 and f16 weights unpacked exactly, fused parts and
// biases kept, and rows invariant. (With the 16-bit weights of CPUs without AVX-512 a bf16
// or f16 Linear is row-invariant from the start: this test is about oneDNN's copy.)
TEST(LinearBatchInvariant, SameFunctionAndRowsInvariant) {
  const testing::ScopedHalfWeights onednn(0);
  const int64_t k = 96, m = 11;
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const std::vector<int64_t> parts = {40, 24};
    std::vector<std::vector<uint8_t>> bytes;
    std::vector<TensorView> ws;
    std::vector<float> all_w;  // the parts' values as stored, f32 [64, k]
    for (size_t i = 0; i < parts.size(); ++i) {
      auto v = RandomFloats(static_cast<size_t>(parts[i] * k), 10 + static_cast<uint64_t>(i));
      bytes.emplace_back(v.size() * DTypeSize(dtype));
      ConvertFromF32(dtype, v.data(), bytes.back().data(), v.size());
      ws.push_back(TensorView{dtype, {parts[i], k}, bytes.back().data()});
      const auto back = ws.back().ToF32();
      all_w.insert(all_w.end(), back.begin(), back.end());
    }
    auto bias = RandomFloats(static_cast<size_t>(parts[0]), 20);
    TensorView bv{DType::kF32, {parts[0]}, bias.data()};
    auto lin = Linear::Create(ws, {&bv, nullptr});
    ASSERT_TRUE(lin.ok()) << lin.status().message();
    const int64_t n = 64;
    const auto x = RandomFloats(static_cast<size_t>(m * k), 21);
    std::vector<float> before(static_cast<size_t>(m * n)), after(before.size());
    lin->Forward(x.data(), m, before.data());
    EXPECT_FALSE(lin->batch_invariant());
    ASSERT_TRUE(lin->MakeBatchInvariant().ok());
    EXPECT_TRUE(lin->batch_invariant());
    EXPECT_EQ(lin->compute_dtype(), DType::kF32);
    EXPECT_EQ(lin->weight_bytes(), static_cast<size_t>(n * k) * sizeof(float));
    lin->Forward(x.data(), m, after.data());
    std::vector<float> full_bias(static_cast<size_t>(n), 0.f);
    std::copy(bias.begin(), bias.end(), full_bias.begin());
    const auto want = Reference(x, m, k, all_w, n, full_bias.data());
    EXPECT_LT(RelErr(after, want), 2e-6) << DTypeName(dtype);
    // bf16 compute rounds x to bf16 on AVX-512 machines: "before" is within that of "after".
    EXPECT_LT(RelErr(before, after), dtype == DType::kBF16 ? 2e-2 : 2e-6) << DTypeName(dtype);
    for (int64_t r = 0; r < m; ++r) {
      std::vector<float> one(static_cast<size_t>(n));
      lin->Forward(x.data() + r * k, 1, one.data());
      EXPECT_EQ(std::memcmp(one.data(), after.data() + r * n, one.size() * sizeof(float)), 0)
          << DTypeName(dtype) << " row " << r;
    }
  }
}

}  // namespace
}  // namespace fathom
