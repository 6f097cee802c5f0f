// Helpers shared by the kernel tests: seeded random data, error measures, tensors that own
// their bytes.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/tensor.h"
#include "kernels/matmul_half.h"

namespace fathom::testing {

// n values uniform in [lo, hi), from a fixed seed so failures reproduce.
inline std::vector<float> RandomFloats(size_t n, uint64_t seed, float lo = -1.f, float hi = 1.f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

inline double MaxAbs(const float* x, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::fabs(static_cast<double>(x[i])));
  return m;
}

inline double MaxAbsDiff(const float* a, const float* b, size_t n) {
  double m = 0;
  for (size_t i = 0; i < n; ++i)
    m = std::max(m, std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i])));
  return m;
}

// max |a - b| / max |b|: the error measure the kernel tolerances are stated in.
inline double RelErr(const std::vector<float>& a, const std::vector<float>& b) {
  const double scale = std::max(MaxAbs(b.data(), b.size()), 1e-30);
  return MaxAbsDiff(a.data(), b.data(), std::min(a.size(), b.size())) / scale;
}

// A tensor with its own storage: f32 values converted to `dtype`.
struct OwnedTensor {
  std::vector<uint8_t> bytes;
  TensorView view;
};

inline OwnedTensor MakeTensor(DType dtype, Shape shape, const std::vector<float>& values) {
  OwnedTensor t;
  t.bytes.resize(values.size() * DTypeSize(dtype));
  ConvertFromF32(dtype, values.data(), t.bytes.data(), values.size());
  t.view = TensorView{dtype, std::move(shape), t.bytes.data()};
  return t;
}

// Forces Linear's choice of HalfWeights for bf16 / f16 checkpoints (1 on, 0 off) for the
// scope, on any CPU; back to the CPU's own choice at the end however the test ends.
struct ScopedHalfWeights {
  explicit ScopedHalfWeights(int prefer) { internal::SetPreferHalfWeightsForTesting(prefer); }
  ~ScopedHalfWeights() { internal::SetPreferHalfWeightsForTesting(-1); }
  ScopedHalfWeights(const ScopedHalfWeights&) = delete;
  ScopedHalfWeights& operator=(const ScopedHalfWeights&) = delete;
};

}  // namespace fathom::testing
