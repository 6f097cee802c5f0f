// Int8 per-channel weights: the quantizer and the AVX2/FMA matmul (see matmul_int8.h).
//
// The small loops over rows and parities carry `#pragma GCC unroll`: unrolled that early,
// GCC keeps the accumulator array in registers; otherwise it also stores it to the stack on
// every k (12 dead stores per k pair at 3 rows, which bounded the kernel by store throughput).
//
// Register blocking: one 16-channel block for up to kMaxRows = 3 rows at a time. Each row
// keeps four 8-lane f32 accumulators, [k parity][channel half], so consecutive k go to
// independent FMA chains (the FMA latency does not bound M = 1); 3 rows x 4 = 12
// accumulators plus the two dequantized weight vectors and the broadcast activation fit
// the 16 ymm registers. Every row runs the same instruction sequence on its own
// accumulators whatever the group size, which is what makes rows independent of M.
#include "kernels/matmul_int8.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace fathom {
namespace {

constexpr int64_t kMaxRows = 3;          // rows per pass over a block
constexpr int64_t kPrefetchBytes = 1024;  // ahead of the weight stream

// 16 int8 at p as two 8-lane f32 vectors; each 8-byte load folds into vpmovsxbd's operand.
inline void LoadW(const int8_t* p, __m256* w0, __m256* w1) {
  *w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
  *w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))));
}

// y[r, :valid] for MR rows against one packed block. wb: [k][16] int8; x: MR rows of k f32
// at stride xs; scale: 16 f32 (padded); bias: `valid` f32 or nullptr; y: MR rows at stride ys.
template <int MR>
void BlockRows(const int8_t* wb, int64_t k, const float* x, int64_t xs, const float* scale,
               const float* bias, int64_t valid, float* y, int64_t ys) {
  __m256 acc[MR][2][2];
  #pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 4
    for (int p = 0; p < 2; ++p) acc[m][p][0] = acc[m][p][1] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 2 <= k; t += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(wb + t * kInt8BlockN + kPrefetchBytes), _MM_HINT_T0);
    #pragma GCC unroll 4
    for (int p = 0; p < 2; ++p) {
      __m256 w0, w1;
      LoadW(wb + (t + p) * kInt8BlockN, &w0, &w1);
      #pragma GCC unroll 4
      for (int m = 0; m < MR; ++m) {
        const __m256 xv = _mm256_broadcast_ss(x + m * xs + t + p);
        acc[m][p][0] = _mm256_fmadd_ps(w0, xv, acc[m][p][0]);
        acc[m][p][1] = _mm256_fmadd_ps(w1, xv, acc[m][p][1]);
      }
    }
  }
  if (t < k) {  // odd K: the last k goes to the parity-0 chain
    __m256 w0, w1;
    LoadW(wb + t * kInt8BlockN, &w0, &w1);
    #pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * xs + t);
      acc[m][0][0] = _mm256_fmadd_ps(w0, xv, acc[m][0][0]);
      acc[m][0][1] = _mm256_fmadd_ps(w1, xv, acc[m][0][1]);
    }
  }
  alignas(32) float b[kInt8BlockN] = {};
  if (bias) std::memcpy(b, bias, static_cast<size_t>(valid) * sizeof(float));
  const __m256 s0 = _mm256_loadu_ps(scale), s1 = _mm256_loadu_ps(scale + 8);
  const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
  #pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    // y = scale * (even-k sum + odd-k sum) + bias.
    const __m256 r0 = _mm256_fmadd_ps(_mm256_add_ps(acc[m][0][0], acc[m][1][0]), s0, b0);
    const __m256 r1 = _mm256_fmadd_ps(_mm256_add_ps(acc[m][0][1], acc[m][1][1]), s1, b1);
    float* out = y + m * ys;
    if (valid == kInt8BlockN) {
      _mm256_storeu_ps(out, r0);
      _mm256_storeu_ps(out + 8, r1);
    } else {
      alignas(32) float tmp[kInt8BlockN];
      _mm256_store_ps(tmp, r0);
      _mm256_store_ps(tmp + 8, r1);
      std::memcpy(out, tmp, static_cast<size_t>(valid) * sizeof(float));
    }
  }
}

}  // namespace

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
  if (m <= 0) return;
  const int64_t blocks = (n_ + kInt8BlockN - 1) / kInt8BlockN;
  // Below ~256 KiB of weights the fork/join costs more than the second core saves.
  const bool parallel = blocks > 1 && n_ * k_ >= (int64_t{1} << 18);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t col = b * kInt8BlockN;
    const int64_t valid = std::min(kInt8BlockN, n_ - col);
    const int8_t* wb = packed_.data() + b * kInt8BlockN * k_;
    const float* sc = scales_.data() + col;
    const float* bb = bias ? bias + col : nullptr;
    for (int64_t r = 0; r < m; r += kMaxRows) {
      const float* xr = x + r * k_;
      float* yr = y + r * n_ + col;
      switch (std::min(kMaxRows, m - r)) {
        case 3: BlockRows<3>(wb, k_, xr, k_, sc, bb, valid, yr, n_); break;
        case 2: BlockRows<2>(wb, k_, xr, k_, sc, bb, valid, yr, n_); break;
        default: BlockRows<1>(wb, k_, xr, k_, sc, bb, valid, yr, n_); break;
      }
    }
  }
}

}  // namespace fathom
