// Int4 group-quantized weights (matmul_int4.h) and Linear with WeightFormat::kInt4, against a
// quantizer and a matmul written here from the header's definitions (integer dots in int64,
// the sum over groups in double).
#include "kernels/matmul_int4.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "core/dtype.h"
#include "kernels/matmul.h"
#include "kernels/matmul_w8a8.h"
#include "kernels/test_util.h"

namespace fathom {
namespace {

using testing::RandomFloats;
using testing::RelErr;

struct RefQuant {
  int64_t groups = 0;
  std::vector<int> q;      // [n, k]
  std::vector<float> d;    // [n, groups]
};

int RoundHalfEven(double v) {
  double q = std::floor(v);
  const double frac = v - q;
  if (frac > 0.5 || (frac == 0.5 && std::fmod(q, 2.0) != 0.0)) q += 1.0;
  return static_cast<int>(q);
}

RefQuant RefQuantize(const std::vector<float>& w, int64_t n, int64_t k) {
  RefQuant r;
  r.groups = (k + 31) / 32;
  r.q.assign(static_cast<size_t>(n * k), 0);
  r.d.assign(static_cast<size_t>(n * r.groups), 0.f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < r.groups; ++g) {
      float wmax = 0.f;  // the signed value of largest magnitude, first of ties
      for (int64_t j = g * 32; j < std::min(k, g * 32 + 32); ++j)
        if (std::fabs(w[static_cast<size_t>(i * k + j)]) > std::fabs(wmax)) wmax = w[static_cast<size_t>(i * k + j)];
      const float d = F16ToF32(F16FromF32(wmax / -8.f));
      r.d[static_cast<size_t>(i * r.groups + g)] = d;
      if (d == 0.f) continue;
      for (int64_t j = g * 32; j < std::min(k, g * 32 + 32); ++j) {
        const int q = RoundHalfEven(static_cast<double>(w[static_cast<size_t>(i * k + j)] / d));
        r.q[static_cast<size_t>(i * k + j)] = std::min(7, std::max(-8, q));
      }
    }
  return r;
}

// y = sum_g d[n, g] * sx[m, g] * dot_g + bias, in double; activations as W8A8 rounds them
// (QuantizeActivationRow: its own test checks it against the definition).
std::vector<double> RefMatmul(const RefQuant& w, int64_t n, int64_t k, const std::vector<float>& x, int64_t m,
                              const float* bias) {
  const int64_t kp = w.groups * 32;
  std::vector<double> y(static_cast<size_t>(m * n));
  std::vector<uint8_t> u(static_cast<size_t>(kp));
  std::vector<float> sx(static_cast<size_t>(w.groups));
  for (int64_t r = 0; r < m; ++r) {
    QuantizeActivationRow(x.data() + r * k, k, kp, u.data(), sx.data());
    for (int64_t c = 0; c < n; ++c) {
      double acc = 0;
      for (int64_t g = 0; g < w.groups; ++g) {
        int64_t dot = 0;
        for (int64_t t = g * 32; t < std::min(k, g * 32 + 32); ++t)
          dot += (int64_t{u[static_cast<size_t>(t)]} - 128) * w.q[static_cast<size_t>(c * k + t)];
        acc += static_cast<double>(w.d[static_cast<size_t>(c * w.groups + g)]) * sx[static_cast<size_t>(g)] *
               static_cast<double>(dot);
      }
      y[static_cast<size_t>(r * n + c)] = acc + (bias ? bias[c] : 0.0);
    }
  }
  return y;
}

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

// Random weights with a zero row, a positive and a negative outlier per row (so wmax takes
// both signs), and a zero group in row 5.
std::vector<float> TestWeights(int64_t n, int64_t k, uint64_t seed) {
  std::vector<float> w = RandomFloats(static_cast<size_t>(n * k), seed);
  for (int64_t i = 0; i < n; ++i) w[static_cast<size_t>(i * k + (i * 7) % k)] *= (i % 2 ? -1.f : 1.f) * (2.f + static_cast<float>(i % 5));
  if (n > 3) std::fill(w.begin() + 3 * k, w.begin() + 4 * k, 0.f);
  if (n > 5 && k >= 64) std::fill(w.begin() + 5 * k + 32, w.begin() + 5 * k + 64, 0.f);
  return w;
}

TEST(Int4Weights, QuantizerMatchesTheDefinition) {
  for (int64_t k : {1, 31, 32, 33, 100, 256}) {
    SCOPED_TRACE("K=" + std::to_string(k));
    const int64_t n = 37;
    const std::vector<float> w = TestWeights(n, k, 3);
    auto q = Int4Weights::Quantize(w.data(), n, k);
    ASSERT_TRUE(q.ok()) << q.status().message();
    const RefQuant ref = RefQuantize(w, n, k);
    int lowest = 0;
    for (int64_t r = 0; r < n; ++r) {
      for (int64_t g = 0; g < ref.groups; ++g)
        ASSERT_EQ(q->scale(r, g), ref.d[static_cast<size_t>(r * ref.groups + g)]) << "row " << r << " group " << g;
      for (int64_t c = 0; c < k; ++c) {
        ASSERT_EQ(q->q(r, c), ref.q[static_cast<size_t>(r * k + c)]) << "row " << r << " col " << c;
        lowest = std::min(lowest, q->q(r, c));
      }
    }
    EXPECT_EQ(lowest, -8);  // the 16th level is used
    // 4 bits per weight and 2 bytes per group scale, N padded to 16 and K to 32.
    EXPECT_EQ(q->bytes(), static_cast<size_t>(48 * ref.groups * 32 / 2 + 48 * ref.groups * 2));
  }
}

TEST(Int4Weights, RejectsNonFiniteAndUnscalableWeights) {
  std::vector<float> w(6, 1.f);
  w[4] = INFINITY;
  auto q = Int4Weights::Quantize(w.data(), 2, 3);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("row 1"), std::string::npos) << q.status().message();
  w[4] = 1e6f;  // scale 1.25e5 > f16's 65504
  q = Int4Weights::Quantize(w.data(), 2, 3);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.status().message().find("row 1 group 0"), std::string::npos) << q.status().message();
}

// The scalar path against the reference on shapes with partial blocks and groups and every
// row count of a pass; the AVX2 and VNNI paths (where the CPU has VNNI) equal it bit for bit.
TEST(Int4Weights, MatmulMatchesReferenceAndPathsAgreeBitForBit) {
  struct Shape { int64_t n, k; };
  for (Shape s : {Shape{1, 1}, Shape{16, 32}, Shape{17, 33}, Shape{48, 96}, Shape{100, 257}, Shape{40, 64}}) {
    SCOPED_TRACE("N=" + std::to_string(s.n) + " K=" + std::to_string(s.k));
    const std::vector<float> w = TestWeights(s.n, s.k, 11);
    auto q = Int4Weights::Quantize(w.data(), s.n, s.k);
    ASSERT_TRUE(q.ok()) << q.status().message();
    const RefQuant ref = RefQuantize(w, s.n, s.k);
    const std::vector<float> bias = RandomFloats(static_cast<size_t>(s.n), 12);
    for (int64_t m : {1, 2, 3, 4, 5, 9}) {
      SCOPED_TRACE("M=" + std::to_string(m));
      const std::vector<float> x = RandomFloats(static_cast<size_t>(m * s.k), static_cast<uint64_t>(20 + m));
      std::vector<float> avx2(static_cast<size_t>(m * s.n), NAN), vnni(avx2.size(), NAN), scalar(avx2.size(), NAN);
      q->Matmul(x.data(), m, bias.data(), avx2.data(), DotPath::kAvx2);
      q->Matmul(x.data(), m, bias.data(), vnni.data(), DotPath::kVnni);
      q->Matmul(x.data(), m, bias.data(), scalar.data(), DotPath::kScalar);
      EXPECT_LE(MaxRowRelErr(scalar, RefMatmul(ref, s.n, s.k, x, m, bias.data()), m, s.n), 1e-5);
      EXPECT_EQ(std::memcmp(avx2.data(), scalar.data(), avx2.size() * sizeof(float)), 0) << "AVX2";
      EXPECT_EQ(std::memcmp(vnni.data(), scalar.data(), vnni.size() * sizeof(float)), 0) << "VNNI";
    }
  }
  if (!CpuHasAvx512Vnni()) GTEST_SKIP() << "no AVX512-VNNI here: its comparison ran the AVX2 path twice";
}

TEST(Int4Weights, RowsAreIndependentOfTheBatch) {
  const int64_t k = 300, n = 1000, m = 19;
  const std::vector<float> w = TestWeights(n, k, 5);
  auto q = Int4Weights::Quantize(w.data(), n, k);
  ASSERT_TRUE(q.ok()) << q.status().message();
  const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), 6);
  std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
  q->Matmul(x.data(), m, nullptr, all.data());
  for (int64_t r = 0; r < m; ++r) {
    q->Matmul(x.data() + r * k, 1, nullptr, one.data());
    ASSERT_EQ(std::memcmp(one.data(), all.data() + r * n, static_cast<size_t>(n) * sizeof(float)), 0) << "row " << r;
  }
}

using testing::MakeTensor;
using testing::OwnedTensor;

// Linear with kInt4 on fused parts with biases, every checkpoint dtype; and what 4 bits cost
// against the exact f32 matmul on random weights (int4 with a scale per 32: ~8% rms).
TEST(LinearInt4, FusedPartsMatchReference) {
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
    auto lin = Linear::Create(views, bias_ptrs, WeightFormat::kInt4);
    ASSERT_TRUE(lin.ok()) << lin.status().message();
    const int64_t n = 33 + 7 + 64;
    EXPECT_EQ(lin->weight_format(), WeightFormat::kInt4);
    EXPECT_TRUE(lin->batch_invariant());
    const RefQuant ref = RefQuantize(all_w, n, k);
    for (int64_t m : {1, 6, 33}) {
      SCOPED_TRACE("M=" + std::to_string(m));
      const std::vector<float> x = RandomFloats(static_cast<size_t>(m * k), static_cast<uint64_t>(m + 1));
      std::vector<float> y(static_cast<size_t>(m * n), NAN);
      lin->Forward(x.data(), m, y.data());
      EXPECT_LE(MaxRowRelErr(y, RefMatmul(ref, n, k, x, m, all_b.data()), m, n), 1e-5);
      if (dt == DType::kF32) {
        std::vector<float> exact(y.size());
        LinearReference(x.data(), m, TensorView{DType::kF32, {n, k}, all_w.data()}, all_b.data(), exact.data());
        const double err = RelErr(y, exact);
        EXPECT_LE(err, 0.15);
        EXPECT_GT(err, 0.01);  // 4 bits: clearly not the exact weights
      }
    }
  }
  EXPECT_EQ(ParseWeightFormat("int4"), WeightFormat::kInt4);
  EXPECT_EQ(WeightFormatName(WeightFormat::kInt4), "int4");
}

}  // namespace
}  // namespace fathom
