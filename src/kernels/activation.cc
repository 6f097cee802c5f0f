// SwiGLU on a fused gate|up projection: out = silu(gate) * up, silu(x) = x / (1 + exp(-x)).
#include "kernels/activation.h"

#include <cmath>

#include "core/parallel.h"
#include "kernels/vec_math.h"

namespace fathom {
namespace {

// gate, up, out: [inter].
void SwiGluRow(const float* gate, const float* up, int64_t inter, float* out) {
  const __m256 one = _mm256_set1_ps(1.f);
  int64_t i = 0;
  for (; i + 8 <= inter; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = internal::Exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
    const __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, e));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < inter; ++i) out[i] = gate[i] / (1.f + internal::ExpScalar(-gate[i])) * up[i];
}

}  // namespace

// gate_up: [rows, 2*inter]; out: [rows, inter].
void SwiGlu(const float* gate_up, int64_t rows, int64_t inter, float* out) {
  ParallelFor(rows, rows >= 4 && rows * inter >= (int64_t{1} << 16), [&](int64_t r) {
    const float* g = gate_up + r * 2 * inter;
    SwiGluRow(g, g + inter, inter, out + r * inter);
  });
}

void SwiGluReference(const float* gate_up, int64_t rows, int64_t inter, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < inter; ++i) {
      const double g = gate_up[r * 2 * inter + i], u = gate_up[r * 2 * inter + inter + i];
      out[r * inter + i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
    }
  }
}

}  // namespace fathom
