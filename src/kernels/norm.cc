// RMSNorm: y = x * rsqrt(mean(x^2) + eps) * weight, in f32 like the PyTorch models
// (Llama's LlamaRMSNorm: hidden * rsqrt(var + eps), then weight * that).
#include "kernels/norm.h"

#include <cmath>

#include "core/parallel.h"
#include "kernels/vec_math.h"

namespace fathom {
namespace {

// One row; y may alias x (the sum is taken before anything is written).
void RmsNormRow(const float* x, const float* weight, float eps, int64_t dim, float* y) {
  const float mean_sq = internal::SumSquares(x, dim) / static_cast<float>(dim);
  const float r = 1.f / std::sqrt(mean_sq + eps);
  for (int64_t i = 0; i < dim; ++i) y[i] = weight[i] * (x[i] * r);  // vectorized by gcc
}

}  // namespace

// x, y: [rows, dim]; weight: [dim].
void RmsNorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim, float* y) {
  // A fork/join costs a few microseconds: only worth it for many rows.
  ParallelFor(rows, rows >= 8 && rows * dim >= (int64_t{1} << 16),
              [&](int64_t r) { RmsNormRow(x + r * dim, weight, eps, dim, y + r * dim); });
}

void RmsNormReference(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
                      float* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    double sum = 0;
    for (int64_t i = 0; i < dim; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(sum / static_cast<double>(dim) + static_cast<double>(eps));
    for (int64_t i = 0; i < dim; ++i)
      y[r * dim + i] = static_cast<float>(static_cast<double>(xr[i]) * inv * weight[i]);
  }
}

}  // namespace fathom
