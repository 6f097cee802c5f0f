// Softmax / log-softmax over one row, max-subtracted so exp never overflows.
#include "kernels/softmax.h"

#include <cmath>
#include <limits>

#include "kernels/vec_math.h"

namespace fathom {
namespace {

float RowMax(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  float mx = internal::HMax(m);
  for (; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  return mx;
}

// Returns Σ exp(x[i] - mx), storing the terms in out[i] unless out is null (it may alias x).
float ExpShiftSum(const float* x, int64_t n, float mx, float* out) {
  const __m256 vmx = _mm256_set1_ps(mx);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = internal::Exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmx));
    if (out) _mm256_storeu_ps(out + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float sum = internal::HSum(acc);
  for (; i < n; ++i) {
    const float e = internal::ExpScalar(x[i] - mx);
    if (out) out[i] = e;
    sum += e;
  }
  return sum;
}

}  // namespace

void SoftmaxInPlace(float* x, int64_t n) {
  if (n <= 0) return;
  const float sum = ExpShiftSum(x, n, RowMax(x, n), x);
  const float inv = 1.f / sum;
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

// out[i] = (x[i] - max) - log Σ exp(x - max), as PyTorch orders it; out may alias x.
void LogSoftmax(const float* x, int64_t n, float* out) {
  if (n <= 0) return;
  const float mx = RowMax(x, n);
  const float log_sum = std::log(ExpShiftSum(x, n, mx, nullptr));
  for (int64_t i = 0; i < n; ++i) out[i] = (x[i] - mx) - log_sum;
}

void SoftmaxReference(const float* x, int64_t n, float* out) {
  if (n <= 0) return;
  double mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = x[i] > mx ? x[i] : mx;
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(static_cast<double>(x[i]) - mx);
  for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(std::exp(x[i] - mx) / sum);
}

}  // namespace fathom
