// 16-bit weights in the blocked layout and their matmul (see matmul_half.h).
#include "kernels/matmul_half.h"

#include <atomic>
#include <string>

#include "kernels/blocked16_avx2.h"

namespace fathom {

Result<HalfWeights> HalfWeights::Pack(const uint16_t* w, DType dtype, int64_t n, int64_t k) {
  if (dtype != DType::kBF16 && dtype != DType::kF16)
    return Status::Error("16-bit weights: " + std::string(DTypeName(dtype)) + " is not bf16 or f16");
  if (n <= 0 || k <= 0)
    return Status::Error("16-bit weights: [" + std::to_string(n) + ", " + std::to_string(k) +
                         "] is not a non-empty matrix");
  constexpr int64_t kB = internal::kBlocked16N;
  HalfWeights out;
  out.n_ = n;
  out.k_ = k;
  out.dtype_ = dtype;
  const int64_t blocks = (n + kB - 1) / kB;
  out.packed_.assign(static_cast<size_t>(blocks * kB * k), 0);
#pragma omp parallel for schedule(static) if (n * k >= (int64_t{1} << 20))
  for (int64_t r = 0; r < n; ++r) {
    const uint16_t* row = w + r * k;
    uint16_t* dst = out.packed_.data() + (r / kB) * k * kB + r % kB;
    for (int64_t c = 0; c < k; ++c) dst[c * kB] = row[c];
  }
  return out;
}

void HalfWeights::Matmul(const float* x, int64_t m, const float* bias, float* y) const {
  if (dtype_ == DType::kBF16)
    internal::Blocked16Matmul<internal::LoadBf16>(packed_.data(), n_, k_, nullptr, x, m, bias, y);
  else
    internal::Blocked16Matmul<internal::LoadF16>(packed_.data(), n_, k_, nullptr, x, m, bias, y);
}

namespace internal {
namespace {
std::atomic<int> prefer_override{-1};
}  // namespace

bool PreferHalfWeights() {
  static const bool cpu_prefers = !__builtin_cpu_supports("avx512f");
  const int forced = prefer_override.load(std::memory_order_relaxed);
  return forced < 0 ? cpu_prefers : forced != 0;
}

void SetPreferHalfWeightsForTesting(int prefer) { prefer_override.store(prefer < 0 ? -1 : prefer != 0); }
}  // namespace internal

}  // namespace fathom
