// Numerically stable softmax / log-softmax over one row of n values.
#pragma once

#include <cstdint>

namespace fathom {

void SoftmaxInPlace(float* x, int64_t n);
void LogSoftmax(const float* x, int64_t n, float* out);
void SoftmaxReference(const float* x, int64_t n, float* out);  // double math

}  // namespace fathom
