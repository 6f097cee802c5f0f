// W8A8 (matmul_w8a8.h) and Linear with WeightFormat::kW8A8, against a reference written here
// from the header's definitions: activations quantized per row and group of 32 in double-
// checked scalar code, integer dots in int64, the sum over groups in double.
#include "kernels/matmul_w8a8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "kernels/matmul.h"
#include "kernels/matmul_int8.h"
#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;
using testing::RelErr;

// xq of one row (the header's definition, written independently): per group of 32,
// amax = max |x|, xq = clamp(RNE(x * (127 / amax)), -127, 127); sx = amax / 127.
void RefQuantizeRow(const float* x, int64_t k, std::vector<int>* xq, std::vector<float>* sx) {
  const int64_t groups = (k + 31) / 32;
  xq->assign(static_cast<size_t>(groups * 32), 0);
  sx->assign(static_cast<size_t>(groups), 0.f);
  for (int64_t g = 0; g < groups; ++g) {
    float amax = 0.f;
    for (int64_t i = g * 32; i < std::min(k, (g + 1) * 32); ++i) amax = std::max(amax, std::fabs(x[i]));
    if (amax < 1e-30f) continue;
    (*sx)[static_cast<size_t>(g)] = amax / 127.f;
    const float inv = 127.f / amax;
    for (int64_t i = g * 32; i < std::min(k, (g + 1) * 32); ++i) {
      const double v = static_cast<double>(x[i] * inv);  // the f32 product, as the kernel forms it
      double q = std::floor(v);
      const double frac = v - q;
      if (frac > 0.5 || (frac == 0.5 && std::fmod(q, 2.0) != 0.0)) q += 1.0;  // ties to even
      (*xq)[static_cast<size_t>(i)] = static_cast<int>(std::min(127.0, std::max(-127.0, q)));
    }
  }
}

// y = sw[n] * sum_g sx[g] * dot_g + bias, the dots exact, the rest in double.
std::vector<double> RefMatmul(const Int8Weights& w, const std::vector<float>& x, int64_t m, const float* bias) {
  const int64_t n = w.n(), k = w.k();
  std::vector<double> y(static_cast<size_t>(m * n));
  std::vector<int> xq;
  std::vector<float> sx;
  for (int64_t r = 0; r < m; ++r) {
    RefQuantizeRow(x.data() + r * k, k, &xq, &sx);
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0;
      for (size_t g = 0; g < sx.size(); ++g) {
        int64_t dot = 0;
        for (int64_t t = static_cast<int64_t>(g) * 32; t < std::min(k, static_cast<int64_t>(g + 1) * 32); ++t)
          dot += int64_t{xq[static_cast<size_t>(t)]} * w.q(c, t);
        acc += static_cast<double>(sx[g]) * static_cast<double>(dot);
      }
      y[static_cast<size_t>(r * n + c)] = acc * w.scale(c) + (bias ? bias[c] : 0.0);
    }
  }
  return y;
}

// Largest |got - ref| over rows, relative to the largest |ref| of the row.
double MaxRowRelErr(const std::vector<float>& got, const std::vector<double>& ref, int64_t m, int64_t n) {
  double worst = 0;
  for (int64_t r = 0; r < m; ++r) {
    double scale = 0, err = 0;
    for (int64_t c = 0; c < n; ++c) {
      scale = std::max(scale, std::fabs(ref[static_cast<size_t>(r * n + c)]));
      err = std::max(err, std::fabs(got[static_cast<size_t>(r * n + c)] - ref[static_cast<size_t>(r * n + c)]));
    }
    worst = std::max(worst, err / std::max(scale, 1e-30));
  }
  return worst;
}

// Random weights with a zero row and an outlier per row; activations with a zero group and
// one outlier group, so the per-group scales differ.
std::vector<float> TestWeights(int64_t n, int64_t k, uint64_t seed) {
  std::vector<float> w = RandomFloats(static_cast<size_t>(n * k), seed);
  for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i * k + (i * 7) % k)] *= 1.f + static_cast<float>(i % 5);
  if (n > 3) std::fill(w.begin() + 3 * k, w.begin() + 4 * k, 0.f);
  return w;
}
std::vector<float> TestActivations(int64_t m, int64_t k, uint64_t seed) {
  std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), seed);
  for (int64_t r = 0; r < m; ++r) {
    if (k >= 64) std::fill(x.begin() + r * k + 32, x.begin() + r * k + 64, 0.f);
    x[static_cast<size_t>(r * k)] *= 40.f;
  }
  return x;
}

// The packed weights hold Int8Weights' quantization exactly, and the activation quantizer
// equals the reference's, group for group.
TEST(W8A8Weights, QuantizersMatchTheDefinitions) {
  for (int64_t k : {1, 31, 32, 33, 100, 256}) {
    SCOPED_TRACE("K=" + std::to_string(k));
    const int64_t n = 37;
    const std::vector<float> w = TestWeights(n, k, 3);
    auto q = W8A8Weights::Quantize(w.data(), n, k);
    auto i8 = Int8Weights::Quantize(w.data(), n, k);
    ASSERT_TRUE(q.ok() && i8.ok());
    for (int64_t r = 0; r < n; ++r) {
      ASSERT_EQ(q->scale(r), i8->scale(r)) << "row " << r;
      for (int64_t c = 0; c < k; ++c) ASSERT_EQ(q->q(r, c), i8->q(r, c)) << "row " << r << " col " << c;
    }
    const std::vector<float> x = TestActivations(1, k, 4);
    const int64_t kp = (k + 31) / 32 * 32;
    std::vector<uint8_t> u(static_cast<size_t>(kp));
    std::vector<float> sx(static_cast<size_t>(kp / 32));
    QuantizeActivationRow(x.data(), k, kp, u.data(), sx.data());
    std::vector<int> xq;
    std::vector<float> rsx;
    RefQuantizeRow(x.data(), k, &xq, &rsx);
    for (size_t g = 0; g < sx.size(); ++g) EXPECT_EQ(sx[g], rsx[g]) << "group " << g;
    for (int64_t i = 0; i < kp; ++i) ASSERT_EQ(int{u[static_cast<size_t>(i)]} - 128, xq[static_cast<size_t>(i)]) << i;
  }
}

TEST(W8A8Weights, RejectsNonFiniteWeights) {
  std::vector<float> w(6, 1.f);
  w[4] = NAN;
  auto q = W8A8Weights::Quantize(w.data(), 2, 3);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("row 1"), std::string::npos) << q.status().message();
  EXPECT_NE(q.status().message().find("w8a8"), std::string::npos) << q.status().message();
}

// The scalar path against the reference, on shapes with partial blocks, partial groups, odd
// pairs of blocks and every row count of a pass; the AVX2 and VNNI paths (where the CPU has
// VNNI) equal the scalar path bit for bit.
TEST(W8A8Weights, MatmulMatchesReferenceAndPathsAgreeBitForBit) {
  struct Shape { int64_t n, k; };
  for (Shape s : {Shape{1, 1}, Shape{16, 32}, Shape{17, 33}, Shape{48, 96}, Shape{100, 257}, Shape{40, 64}}) {
    SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k));
    const std::vector<float> w = TestWeights(s.n, s.k, 11);
    auto q = W8A8Weights::Quantize(w.data(), s.n, s.k);
    auto i8 = Int8Weights::Quantize(w.data(), s.n, s.k);
    ASSERT_TRUE(q.ok() && i8.ok());
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(s.n), 12);
    for (int64_t m : {1, 2, 3, 4, 5, 9}) {
      SCOPED_TRACE("M=" + std::to_string(m));
      const std::vector<float> x = TestActivations(m, s.k, static_cast<uint64_t>(20 + m));
      std::vector<float> avx2(static_cast<size_t>(m * s.n), NAN), vnni(avx2.size(), NAN), scalar(avx2.size(), NAN);
      q->Matmul(x.data(), m, bias.data(), avx2.data(), DotPath::kAvx2);
      q->Matmul(x.data(), m, bias.data(), vnni.data(), DotPath::kVnni);
      q->Matmul(x.data(), m, bias.data(), scalar.data(), DotPath::kScalar);
      // f32 sums over at most 9 groups: a few ulps of the row's largest term.
      EXPECT_LE(MaxRowRelErr(scalar, RefMatmul(*i8, x, m, bias.data()), m, s.n), 1e-5);
      EXPECT_EQ(std::memcmp(avx2.data(), scalar.data(), avx2.size() * sizeof(float)), 0) << "AVX2";
      EXPECT_EQ(std::memcmp(vnni.data(), scalar.data(), vnni.size() * sizeof(float)), 0) << "VNNI";
    }
  }
  if (!CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX512-VNNI here: its comparison ran the AVX2 path twice";
}

// Every row of an M-row call equals the row alone, bit for bit, on a matrix large enough for
// the threaded path (N * Kp >= 2^18).
TEST(W8A8Weights, RowsAreIndependentOfTheBatch) {
  const int64_t k = 300, n = 1000, m = 19;
  const std::vector<float> w = TestWeights(n, k, 5);
  auto q = W8A8Weights::Quantize(w.data(), n, k);
  ASSERT_TRUE(q.ok()) << q.status().message();
  const std::vector<float> x = TestActivations(m, k, 6);
  std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
  q->Matmul(x.data(), m, nullptr, all.data());
  for (int64_t r = 0; r < m; ++r) {
    q->Matmul(x.data() + r * k, 1, nullptr, one.data());
    ASSERT_EQ(std::memcmp(one.data(), all.data() + r * n, static_cast<size_t>(n) * sizeof(float)), 0) << "row " << r;
  }
}

// The price of rounding activations, bounded on random data: against the exact f32 matmul of
// the same int8 weights (Int8Weights), per-row relative error below 2% (int8 with a scale per
// 32 values: ~0.2% rms per element, outliers included).
TEST(W8A8Weights, ActivationRoundingCostsLittle) {
  const int64_t k = 512, n = 64, m = 8;
  const std::vector<float> w = TestWeights(n, k, 30);
  auto q = W8A8Weights::Quantize(w.data(), n, k);
  auto i8 = Int8Weights::Quantize(w.data(), n, k);
  ASSERT_TRUE(q.ok() && i8.ok());
  const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 31);
  std::vector<float> a(static_cast<size_t>(m * n)), b(a.size());
  q->Matmul(x.data(), m, nullptr, a.data());
  i8->Matmul(x.data(), m, nullptr, b.data());
  const double err = RelErr(a, b);
  EXPECT_LE(err, 0.02);
  EXPECT_GT(err, 0.0);  // the activations were rounded: this is not the f32 path
}

using testing::MakeTensor;
using testing::OwnedTensor;

// Linear with kW8A8 on fused parts with biases, every checkpoint dtype, against the
// reference on the concatenated weights.
TEST(LinearW8A8, FusedPartsMatchReference) {
  const int64_t k = 129;
  const std::vector<int64_t> parts = {33, 7, 64};
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    SCOPED_TRACE(std::string(DTypeName(dt)));
    std::vector<OwnedTensor> ws, bs;
    std::vector<float> all_w, all_b;
    for (size_t i = 0; i < parts.size(); ++i) {
      ws.push_back(MakeTensor(dt, {parts[i], k}, TestWeights(parts[i], k, 40 + i)));
      const std::vector<float> wf = ws.back().view.ToF32();
      all_w.insert(all_w.end(), wf.begin(), wf.end());
      const std::vector<float> b = RandomFloats(static_cast<size_t>(parts[i]), 50 + i);
      all_b.insert(all_b.end(), b.begin(), b.end());
      bs.push_back(MakeTensor(DType::kF32, {parts[i]}, b));
    }
    std::vector<TensorView> views;
    std::vector<const TensorView*> bias_ptrs;
    for (size_t i = 0; i < ws.size(); ++i) {
      views.push_back(ws[i].view);
      bias_ptrs.push_back(&bs[i].view);
    }
    auto lin = Linear::Create(views, bias_ptrs, WeightFormat::kW8A8);
    ASSERT_TRUE(lin.ok()) << lin.status().message();
    const int64_t n = 33 + 7 + 64;
    EXPECT_EQ(lin->weight_format(), WeightFormat::kW8A8);
    EXPECT_TRUE(lin->batch_invariant());
    EXPECT_EQ(lin->weight_bytes(), static_cast<size_t>(112 * 160 + 112 * 4));  // N to 112, K to 160
    auto i8 = Int8Weights::Quantize(all_w.data(), n, k);
    ASSERT_TRUE(i8.ok());
    for (int64_t m : {1, 6, 33}) {
      SCOPED_TRACE("M=" + std::to_string(m));
      const std::vector<float> x = TestActivations(m, k, static_cast<uint64_t>(m + 1));
      std::vector<float> y(static_cast<size_t>(m * n), NAN);
      lin->Forward(x.data(), m, y.data());
      EXPECT_LE(MaxRowRelErr(y, RefMatmul(*i8, x, m, all_b.data()), m, n), 1e-5);
    }
  }
  EXPECT_EQ(ParseWeightFormat("w8a8"), WeightFormat::kW8A8);
  EXPECT_EQ(WeightFormatName(WeightFormat::kW8A8), "w8a8");
}

}  // namespace
}  // namespace fathom
