// 16-bit weights kept as the checkpoint stores them (matmul_half.h) and Linear's use of them,
// against LinearReference (double accumulation of the exactly converted weights).
#include "kernels/matmul_half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/matmul.h"
#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::MakeTensor;
using testing::OwnedTensor;
using testing::RandomFloats;
using testing::RelErr;

std::vector<float> Reference(const TensorView& w, const std::vector<float>& x, int64_t m, const float* bias) {
  std::vector<float> y(static_cast<size_t>(m * w.shape[0]));
  LinearReference(x.data(), m, w, bias, y.data());
  return y;
}

HalfWeights Packed(const OwnedTensor& t) {
  auto h = HalfWeights::Pack(reinterpret_cast<const uint16_t*>(t.bytes.data()), t.view.dtype,
                             t.view.shape[0], t.view.shape[1]);
  EXPECT_TRUE(h.ok()) << h.status().message();
  return std::move(*h);
}

// f32 accumulation of exact weights: relative error at the level of f32 rounding over K.
TEST(HalfWeights, MatmulMatchesReference) {
  for (DType dt : {DType::kBF16, DType::kF16})
    for (int64_t k : {1, 37, 64, 300})
      for (int64_t n : {1, 7, 16, 33}) {
        const OwnedTensor w = MakeTensor(dt, {n, k}, RandomFloats(static_cast<size_t>(n * k), static_cast<uint64_t>(k * 100 + n)));
        const HalfWeights h = Packed(w);
        EXPECT_EQ(h.bytes(), static_cast<size_t>((n + 15) / 16 * 16 * k * 2));
        const std::vector<float> bias = RandomFloats(static_cast<size_t>(n), 11);
        for (int64_t m : {1, 2, 3, 4, 8, 13, 65})
          for (bool with_bias : {false, true}) {
            SCOPED_TRACE(std::string(DTypeName(dt)) + " M=" + std::to_string(m) + " K=" +
                         std::to_string(k) + " N=" + std::to_string(n) + (with_bias ? " bias" : ""));
            const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), static_cast<uint64_t>(m));
            const float* b = with_bias ? bias.data() : nullptr;
            std::vector<float> y(static_cast<size_t>(m * n), NAN);
            h.Matmul(x.data(), m, b, y.data());
            EXPECT_LE(RelErr(y, Reference(w.view, x, m, b)), 1e-5);
          }
      }
}

// Every row of an M-row call is bit-identical to the same row alone, on a matrix large
// enough for the threaded path (N * K >= 2^18).
TEST(HalfWeights, RowsAreIndependentOfTheBatch) {
  const int64_t k = 300, n = 1000, m = 65;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    const OwnedTensor w = MakeTensor(dt, {n, k}, RandomFloats(static_cast<size_t>(n * k), 5));
    const HalfWeights h = Packed(w);
    const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 6);
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(n), 7);
    std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
    h.Matmul(x.data(), m, bias.data(), all.data());
    EXPECT_LE(RelErr(all, Reference(w.view, x, m, bias.data())), 1e-5);
    for (int64_t r = 0; r < m; ++r) {
      h.Matmul(x.data() + r * k, 1, bias.data(), one.data());
      ASSERT_EQ(std::memcmp(one.data(), all.data() + r * n, static_cast<size_t>(n) * sizeof(float)), 0)
          << "row " << r;
    }
  }
}

TEST(HalfWeights, RejectsOtherDtypesAndEmptyMatrices) {
  const std::vector<uint16_t> w(6, 0);
  auto f32 = HalfWeights::Pack(w.data(), DType::kF32, 2, 3);
  ASSERT_FALSE(f32.ok());
  EXPECT_NE(f32.status().message().find("F32"), std::string::npos) << f32.status().message();
  EXPECT_FALSE(HalfWeights::Pack(w.data(), DType::kBF16, 0, 3).ok());
  EXPECT_FALSE(HalfWeights::Pack(w.data(), DType::kF16, 2, 0).ok());
}

// Linear on fused parts with the 16-bit kernel forced on (it is the CPU's choice only
// without AVX-512): exact weights, half the bytes, row-independent, so batch-invariant as
// loaded; f32 checkpoints stay in oneDNN.
TEST(LinearHalf, FusedPartsMatchReference) {
  const testing::ScopedHalfWeights force(1);
  const int64_t k = 129;
  const std::vector<int64_t> parts = {33, 7, 64};
  const std::vector<bool> has_bias = {true, false, true};
  for (DType dt : {DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    std::vector<OwnedTensor> ws, bs;
    std::vector<float> all_w, all_b;
    for (size_t i = 0; i < parts.size(); ++i) {
      ws.push_back(MakeTensor(dt, {parts[i], k}, RandomFloats(static_cast<size_t>(parts[i] * k), 40 + i)));
      const std::vector<float> wf = ws.back().view.ToF32();
      all_w.insert(all_w.end(), wf.begin(), wf.end());
      const std::vector<float> b = has_bias[i] ? RandomFloats(static_cast<size_t>(parts[i]), 50 + i)
                                               : std::vector<float>(static_cast<size_t>(parts[i]), 0.f);
      all_b.insert(all_b.end(), b.begin(), b.end());
      bs.push_back(MakeTensor(DType::kF32, {parts[i]}, b));
    }
    std::vector<TensorView> views;
    std::vector<const TensorView*> bias_ptrs;
    for (size_t i = 0; i < ws.size(); ++i) {
      views.push_back(ws[i].view);
      bias_ptrs.push_back(has_bias[i] ? &bs[i].view : nullptr);
    }
    auto lin = Linear::Create(views, bias_ptrs);
    ASSERT_TRUE(lin.ok()) << lin.status().message();
    const int64_t n = 33 + 7 + 64;
    EXPECT_EQ(lin->weight_dtype(), dt);
    EXPECT_EQ(lin->weight_format(), WeightFormat::kCheckpoint);
    EXPECT_EQ(lin->compute_dtype(), DType::kF32);
    EXPECT_EQ(lin->weight_bytes(), static_cast<size_t>(112 * k * 2));  // N padded to 112
    EXPECT_TRUE(lin->batch_invariant());
    const OwnedTensor all = MakeTensor(DType::kF32, {n, k}, all_w);  // exact: the parts' values
    for (int64_t m : {1, 5, 64, 600}) {
      SCOPED_TRACE("M=" + std::to_string(m));
      const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), static_cast<uint64_t>(m + 1));
      std::vector<float> y(static_cast<size_t>(m * n), NAN);
      lin->Forward(x.data(), m, y.data());
      EXPECT_LE(RelErr(y, Reference(all.view, x, m, all_b.data())), 1e-5);
    }
  }
  const OwnedTensor f32 = MakeTensor(DType::kF32, {16, 8}, RandomFloats(128, 3));
  auto lin32 = Linear::Create({f32.view});
  ASSERT_TRUE(lin32.ok());
  EXPECT_FALSE(lin32->batch_invariant());  // oneDNN's
}

}  // namespace
}  // namespace fathom
