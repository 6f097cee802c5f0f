// Int8 per-channel weights (matmul_int8.h) and Linear with WeightFormat::kInt8, against a
// scalar quantizer written here and a double-accumulation matmul on its dequantized weights.
#include "kernels/matmul_int8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/matmul.h"
#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;
using testing::RelErr;

// The scalar quantizer of the header's definition: scale = max|w| / 127, q = RNE(w / scale)
// clamped to [-127, 127]; a zero row has scale 0 and q 0.
struct RefQuant {
  std::vector<int8_t> q;     // [n, k]
  std::vector<float> scale;  // [n]
};

RefQuant RefQuantize(const std::vector<float>& w, int64_t n, int64_t k) {
  RefQuant r;
  r.q.assign(static_cast<size_t>(n * k), 0);
  r.scale.assign(static_cast<size_t>(n), 0.f);
  for (int64_t i = 0; i < n; ++i) {
    float amax = 0.f;
    for (int64_t j = 0; j < k; ++j) amax = std::max(amax, std::fabs(w[static_cast<size_t>(i * k + j)]));
    const float s = amax / 127.f;
    r.scale[static_cast<size_t>(i)] = s;
    if (s == 0.f) continue;
    for (int64_t j = 0; j < k; ++j) {
      const double v = static_cast<double>(w[static_cast<size_t>(i * k + j)] / s);
      double q = std::floor(v);
      const double frac = v - q;
      if (frac > 0.5 || (frac == 0.5 && std::fmod(q, 2.0) != 0.0)) q += 1.0;  // ties to even
      q = std::min(127.0, std::max(-127.0, q));
      r.q[static_cast<size_t>(i * k + j)] = static_cast<int8_t>(q);
    }
  }
  return r;
}

// y[m, n] = sum_k x[m, k] * (scale[n] * q[n, k]) + bias[n], in double.
std::vector<float> RefMatmul(const RefQuant& w, int64_t n, int64_t k, const std::vector<float>& x,
                             int64_t m, const float* bias) {
  std::vector<float> y(static_cast<size_t>(m * n));
  for (int64_t r = 0; r < m; ++r)
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0;
      for (int64_t t = 0; t < k; ++t)
        acc += static_cast<double>(x[static_cast<size_t>(r * k + t)]) *
               (static_cast<double>(w.scale[static_cast<size_t>(c)]) *
                static_cast<double>(w.q[static_cast<size_t>(c * k + t)]));
      y[static_cast<size_t>(r * n + c)] = static_cast<float>(acc + (bias ? bias[c] : 0.f));
    }
  return y;
}

// Random weights with a zero row (row 3, where it exists) and an outlier per row, so the
// scales differ from row to row.
std::vector<float> TestWeights(int64_t n, int64_t k, uint64_t seed) {
  std::vector<float> w = RandomFloats(static_cast<size_t>(n * k), seed);
  for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i * k + (i * 7) % k)] *= 1.f + static_cast<float>(i % 5);
  if (n > 3) std::fill(w.begin() + 3 * k, w.begin() + 4 * k, 0.f);
  return w;
}

void ExpectSameQuantization(const Int8Weights& got, const RefQuant& ref, int64_t n, int64_t k) {
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(got.scale(i), ref.scale[static_cast<size_t>(i)]) << "row " << i;
    for (int64_t j = 0; j < k; ++j)
      ASSERT_EQ(got.q(i, j), ref.q[static_cast<size_t>(i * k + j)]) << "row " << i << " col " << j;
  }
}

TEST(Int8Weights, QuantizerMatchesScalarReference) {
  for (int64_t n : {1, 7, 16, 33})
    for (int64_t k : {1, 37, 64, 300}) {
      SCOPED_TRACE("N=" + std::to_string(n) + " K=" + std::to_string(k));
      const std::vector<float> w = TestWeights(n, k, static_cast<uint64_t>(n * 1000 + k));
      auto q = Int8Weights::Quantize(w.data(), n, k);
      ASSERT_TRUE(q.ok()) << q.status().message();
      EXPECT_EQ(q->n(), n);
      EXPECT_EQ(q->k(), k);
      const int64_t padded = (n + 15) / 16 * 16;
      EXPECT_EQ(q->bytes(), static_cast<size_t>(padded * k + padded * 4));
      const RefQuant ref = RefQuantize(w, n, k);
      ExpectSameQuantization(*q, ref, n, k);
      // The definition's error bound: |w - scale q| <= scale / 2 (plus float rounding).
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < k; ++j) {
          const double err = std::fabs(w[static_cast<size_t>(i * k + j)] - double{q->scale(i)} * q->q(i, j));
          ASSERT_LE(err, q->scale(i) * (0.5 + 1e-5)) << "row " << i << " col " << j;
        }
    }
}

TEST(Int8Weights, RoundsHalfToEvenAndKeepsZeroRows) {
  // Row 0: max |w| = 127, so scale = 1 exactly and w / scale = w.
  // Row 1: all zero -> scale 0, q 0 (no division by zero).
  const std::vector<float> w = {127.f, 2.5f, 3.5f, -2.5f, 0.5f, -126.5f, 1.49f, -127.f,
                                0.f,   0.f,  0.f,  0.f,   0.f,  0.f,     0.f,   0.f};
  auto q = Int8Weights::Quantize(w.data(), 2, 8);
  ASSERT_TRUE(q.ok()) << q.status().message();
  EXPECT_EQ(q->scale(0), 1.f);
  const int expected[8] = {127, 2, 4, -2, 0, -126, 1, -127};
  for (int j = 0; j < 8; ++j) EXPECT_EQ(q->q(0, j), expected[j]) << "col " << j;
  EXPECT_EQ(q->scale(1), 0.f);
  for (int j = 0; j < 8; ++j) EXPECT_EQ(q->q(1, j), 0) << "col " << j;
  const std::vector<float> x = RandomFloats(8, 3);
  const float bias[2] = {0.25f, -0.5f};
  float y[2];
  q->Matmul(x.data(), 1, bias, y);
  EXPECT_EQ(y[1], -0.5f);  // a zero row gives exactly its bias
}

TEST(Int8Weights, RejectsNonFiniteWeights) {
  std::vector<float> w(2 * 5, 0.5f);
  w[7] = std::nanf("");
  auto q = Int8Weights::Quantize(w.data(), 2, 5);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("row 1"), std::string::npos) << q.status().message();
  w[7] = INFINITY;
  EXPECT_FALSE(Int8Weights::Quantize(w.data(), 2, 5).ok());
}

TEST(Int8Weights, MatmulMatchesDequantizedReference) {
  for (int64_t k : {37, 64, 300})
    for (int64_t n : {1, 7, 16, 33}) {
      const std::vector<float> w = TestWeights(n, k, static_cast<uint64_t>(k * 100 + n));
      auto q = Int8Weights::Quantize(w.data(), n, k);
      ASSERT_TRUE(q.ok()) << q.status().message();
      const RefQuant ref = RefQuantize(w, n, k);
      const std::vector<float> bias = RandomFloats(static_cast<size_t>(n), 11);
      for (int64_t m : {1, 2, 3, 5, 8, 13, 64, 65})
        for (bool with_bias : {false, true}) {
          SCOPED_TRACE("M=" + std::to_string(m) + " K=" + std::to_string(k) + " N=" +
                       std::to_string(n) + (with_bias ? " bias" : ""));
          const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), static_cast<uint64_t>(m));
          const float* b = with_bias ? bias.data() : nullptr;
          std::vector<float> y(static_cast<size_t>(m * n), NAN);
          q->Matmul(x.data(), m, b, y.data());
          EXPECT_LE(RelErr(y, RefMatmul(ref, n, k, x, m, b)), 1e-5);
        }
    }
}

// Every row of an M-row call is bit-identical to the same row computed alone, on a matrix
// large enough to run the threaded path (N * K >= 2^18).
TEST(Int8Weights, RowsAreIndependentOfTheBatch) {
  const int64_t k = 300, n = 1000, m = 65;
  const std::vector<float> w = TestWeights(n, k, 5);
  auto q = Int8Weights::Quantize(w.data(), n, k);
  ASSERT_TRUE(q.ok()) << q.status().message();
  const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 6);
  const std::vector<float> bias = RandomFloats(static_cast<size_t>(n), 7);
  std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
  q->Matmul(x.data(), m, bias.data(), all.data());
  EXPECT_LE(RelErr(all, RefMatmul(RefQuantize(w, n, k), n, k, x, m, bias.data())), 1e-5);
  for (int64_t r = 0; r < m; ++r) {
    q->Matmul(x.data() + r * k, 1, bias.data(), one.data());
    ASSERT_EQ(std::memcmp(one.data(), all.data() + r * n, static_cast<size_t>(n) * sizeof(float)), 0)
        << "row " << r;
  }
  // Row r of a 5-row call at an offset (another grouping into passes of rows) agrees too.
  std::vector<float> five(static_cast<size_t>(5 * n));
  q->Matmul(x.data() + 7 * k, 5, bias.data(), five.data());
  EXPECT_EQ(std::memcmp(five.data(), all.data() + 7 * n, five.size() * sizeof(float)), 0);
}

using testing::MakeTensor;
using testing::OwnedTensor;

// Linear with kInt8 on parts concatenated along N (the fused qkv / gate_up case), every
// checkpoint dtype, against the scalar quantization of the concatenated weights as the
// checkpoint stores them.
TEST(LinearInt8, FusedPartsMatchReference) {
  const int64_t k = 129;
  const std::vector<int64_t> parts = {33, 7, 64};
  const std::vector<bool> has_bias = {true, false, true};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    std::vector<OwnedTensor> ws, bs;
    std::vector<float> all_w, all_b;
    for (size_t i = 0; i < parts.size(); ++i) {
      ws.push_back(MakeTensor(dt, {parts[i], k}, TestWeights(parts[i], k, 40 + i)));
      const std::vector<float> wf = ws.back().view.ToF32();  // as the checkpoint holds it
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
    auto lin = Linear::Create(views, bias_ptrs, WeightFormat::kInt8);
    ASSERT_TRUE(lin.ok()) << lin.status().message();
    const int64_t n = 33 + 7 + 64;
    EXPECT_EQ(lin->out_features(), n);
    EXPECT_EQ(lin->in_features(), k);
    EXPECT_EQ(lin->weight_dtype(), dt);
    EXPECT_EQ(lin->weight_format(), WeightFormat::kInt8);
    EXPECT_EQ(lin->compute_dtype(), DType::kF32);
    EXPECT_EQ(lin->weight_bytes(), static_cast<size_t>(112 * k + 112 * 4));  // N padded to 112
    const RefQuant ref = RefQuantize(all_w, n, k);
    for (int64_t m : {1, 5, 64, 600}) {
      SCOPED_TRACE("M=" + std::to_string(m));
      const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), static_cast<uint64_t>(m + 1));
      std::vector<float> y(static_cast<size_t>(m * n), NAN);
      lin->Forward(x.data(), m, y.data());
      EXPECT_LE(RelErr(y, RefMatmul(ref, n, k, x, m, all_b.data())), 1e-5);
    }
  }
}

TEST(LinearInt8, WeightFormatNames) {
  EXPECT_EQ(ParseWeightFormat("int8"), WeightFormat::kInt8);
  EXPECT_EQ(ParseWeightFormat("checkpoint"), WeightFormat::kCheckpoint);
  EXPECT_FALSE(ParseWeightFormat("int2").has_value());
  EXPECT_FALSE(ParseWeightFormat("bf16").has_value());
  EXPECT_EQ(WeightFormatName(WeightFormat::kInt8), "int8");
  EXPECT_EQ(WeightFormatName(WeightFormat::kCheckpoint), "checkpoint");
}

}  // namespace
}  // namespace fathom
