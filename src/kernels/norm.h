// RMSNorm over the last dimension, computed in f32 as Llama, Qwen, Ouro and Huginn do:
// y = x * rsqrt(mean(x^2) + eps) * weight.
#pragma once

#include <cstdint>

namespace fathom {

// x, y: [rows, dim] (y may alias x); weight: [dim].
void RmsNorm(const float* x, const float* weight, float eps, int64_t rows, int64_t dim, float* y);
void RmsNormReference(const float* x, const float* weight, float eps, int64_t rows, int64_t dim,
                      float* y);

}  // namespace fathom
