// Int8 per-channel weights: the quantizer and the AVX2/FMA matmul (see matmul_int8.h).
//
// The matmul is the blocked AVX2 kernel shared with the 16-bit weights (blocked16_avx2.h).
#include "kernels/matmul_int8.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "kernels/blocked16_avx2.h"

namespace fathom {

static_assert(kInt8BlockN == internal::kBlocked16N);

Result<Int8Weights> Int8Weights::Quantize(const float* w, int64_t n, int64_t k) {
  if (n <= 0 || k <= 0)
    return Status::Error("int8 weights: [" + std::to_string(n) + ", " + std::to_string(k) +
                         "] is not a non-empty matrix");
  Int8Weights out;
  out.n_ = n;
  out.k_ = k;
  const int64_t blocks = (n + kInt8BlockN - 1) / kInt8BlockN;
  out.packed_.assign(static_cast<size_t>(blocks * kInt8BlockN * k), 0);
  out.scales_.assign(static_cast<size_t>(blocks * kInt8BlockN), 0.f);
  for (int64_t r = 0; r < n; ++r) {
    const float* row = w + r * k;
    float amax = 0.f;
    bool finite = true;
    for (int64_t c = 0; c < k; ++c) {
      amax = std::max(amax, std::fabs(row[c]));
      finite &= std::isfinite(row[c]);
    }
    if (!finite)
      return Status::Error("int8 weights: row " + std::to_string(r) + " of [" + std::to_string(n) +
                           ", " + std::to_string(k) + "] has an inf or NaN");
    // 0 for a zero row (and for rows so small that amax / 127 underflows): q stays 0.
    out.scales_[static_cast<size_t>(r)] = amax / 127.f;
  }
#pragma omp parallel for schedule(static) if (n * k >= (int64_t{1} << 20))
  for (int64_t r = 0; r < n; ++r) {
    const float s = out.scales_[static_cast<size_t>(r)];
    if (s == 0.f) continue;
    const float* row = w + r * k;
    int8_t* dst = out.packed_.data() + (r / kInt8BlockN) * k * kInt8BlockN + r % kInt8BlockN;
    for (int64_t c = 0; c < k; ++c) {
      const float q = std::clamp(std::nearbyint(row[c] / s), -127.f, 127.f);  // ties to even
      dst[c * kInt8BlockN] = static_cast<int8_t>(q);
    }
  }
  return out;
}

void Int8Weights::Matmul(const float* x, int64_t m, const float* bias, float* y) const {
  internal::Blocked16Matmul<internal::LoadInt8>(packed_.data(), n_, k_, scales_.data(), x, m, bias, y);
}

}  // namespace fathom
