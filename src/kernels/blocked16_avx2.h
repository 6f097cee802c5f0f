// Private to kernels/: the AVX2/FMA matmul over weights packed in blocks of 16 output
// channels, [ceil(N/16)][K][16], shared by the int8 weights (matmul_int8.h) and the 16-bit
// weights kept as the checkpoint stores them (matmul_half.h). Only the load of 16 weights
// differs (int8 -> f32, bf16 -> f32, f16 -> f32); everything else is this file.
//
// y[m, n] = (sum_k x[m, k] * w[n, k]) * scale[n] + bias[n]   (scale: int8 only; else 1)
//
// The small loops over rows and parities carry `#pragma GCC unroll`: unrolled that early,
// GCC keeps the accumulator array in registers; otherwise it also stores it to the stack on
// every k (12 dead stores per k pair at 3 rows, which bounded the kernel by store throughput).
//
// Register blocking: one 16-channel block for up to kBlocked16MaxRows = 3 rows at a time.
// Each row keeps four 8-lane f32 accumulators, [k parity][channel half], so consecutive k go
// to independent FMA chains (the FMA latency does not bound M = 1); 3 rows x 4 = 12
// accumulators plus the two converted weight vectors and the broadcast activation fit the
// 16 ymm registers. Every row runs the same instruction sequence on its own accumulators
// whatever the group size, and threads split N blocks, never K: a row's result is
#include "core/parallel.h"
// bit-identical whatever M is, whatever rows share the call and whatever the thread count.
// One call reads each weight from memory once: a block is read for its first group of rows
// and comes from cache (L1/L2) for the following groups.
#pragma once

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace fathom::internal {

inline constexpr int64_t kBlocked16N = 16;       // output channels per packed block
inline constexpr int64_t kBlocked16MaxRows = 3;  // rows per pass over a block
inline constexpr int64_t kBlocked16PrefetchBytes = 1024;  // ahead of the weight stream

// Loaders: 16 consecutive weights of one k (one block row) as two 8-lane f32 vectors.
struct LoadInt8 {
  using Elem = int8_t;
  static void Load(const int8_t* p, __m256* w0, __m256* w1) {  // each 8-byte load folds into vpmovsxbd
    *w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p))));
    *w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 8))));
  }
};
struct LoadBf16 {  // bf16 is the high half of an f32: widen and shift, exact
  using Elem = uint16_t;
  static void Load(const uint16_t* p, __m256* w0, __m256* w1) {
    const auto widen = [](const uint16_t* q) {
      const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)));
      return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
    };
    *w0 = widen(p);
    *w1 = widen(p + 8);
  }
};
struct LoadF16 {  // F16C's vcvtph2ps, exact
  using Elem = uint16_t;
  static void Load(const uint16_t* p, __m256* w0, __m256* w1) {
    *w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    *w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 8)));
  }
};

// y[r, :valid] for MR rows against one packed block. wb: [k][16]; x: MR rows of k f32 at
// stride xs; scale: 16 f32 (padded) or nullptr; bias: `valid` f32 or nullptr; y: MR rows at
// stride ys.
template <int MR, class L>
void Blocked16Rows(const typename L::Elem* wb, int64_t k, const float* x, int64_t xs,
                   const float* scale, const float* bias, int64_t valid, float* y, int64_t ys) {
  __m256 acc[MR][2][2];
  #pragma GCC unroll 4
  for (int m = 0; m < MR; ++m)
    #pragma GCC unroll 4
    for (int p = 0; p < 2; ++p) acc[m][p][0] = acc[m][p][1] = _mm256_setzero_ps();
  int64_t t = 0;
  for (; t + 2 <= k; t += 2) {
    _mm_prefetch(reinterpret_cast<const char*>(wb + t * kBlocked16N) + kBlocked16PrefetchBytes,
                 _MM_HINT_T0);
    #pragma GCC unroll 4
    for (int p = 0; p < 2; ++p) {
      __m256 w0, w1;
      L::Load(wb + (t + p) * kBlocked16N, &w0, &w1);
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
    L::Load(wb + t * kBlocked16N, &w0, &w1);
    #pragma GCC unroll 4
    for (int m = 0; m < MR; ++m) {
      const __m256 xv = _mm256_broadcast_ss(x + m * xs + t);
      acc[m][0][0] = _mm256_fmadd_ps(w0, xv, acc[m][0][0]);
      acc[m][0][1] = _mm256_fmadd_ps(w1, xv, acc[m][0][1]);
    }
  }
  alignas(32) float b[kBlocked16N] = {};
  if (bias) std::memcpy(b, bias, static_cast<size_t>(valid) * sizeof(float));
  const __m256 b0 = _mm256_load_ps(b), b1 = _mm256_load_ps(b + 8);
  #pragma GCC unroll 4
  for (int m = 0; m < MR; ++m) {
    // y = scale * (even-k sum + odd-k sum) + bias, or without the scale.
    const __m256 sum0 = _mm256_add_ps(acc[m][0][0], acc[m][1][0]);
    const __m256 sum1 = _mm256_add_ps(acc[m][0][1], acc[m][1][1]);
    const __m256 r0 = scale ? _mm256_fmadd_ps(sum0, _mm256_loadu_ps(scale), b0) : _mm256_add_ps(sum0, b0);
    const __m256 r1 = scale ? _mm256_fmadd_ps(sum1, _mm256_loadu_ps(scale + 8), b1) : _mm256_add_ps(sum1, b1);
    float* out = y + m * ys;
    if (valid == kBlocked16N) {
      _mm256_storeu_ps(out, r0);
      _mm256_storeu_ps(out + 8, r1);
    } else {
      alignas(32) float tmp[kBlocked16N];
      _mm256_store_ps(tmp, r0);
      _mm256_store_ps(tmp + 8, r1);
      std::memcpy(out, tmp, static_cast<size_t>(valid) * sizeof(float));
    }
  }
}

// y[m, n] over the whole packed matrix. packed: [ceil(n/16)][k][16]; scales: ceil(n/16)*16
// f32 or nullptr; x: [m, k] f32; bias: [n] f32 or nullptr; y: [m, n] f32. Parallel over N
// blocks with OpenMP from 2^18 weights (below that the fork/join costs more than the second
// core saves).
template <class L>
void Blocked16Matmul(const typename L::Elem* packed, int64_t n, int64_t k, const float* scales,
                     const float* x, int64_t m, const float* bias, float* y) {
  if (m <= 0) return;
  const int64_t blocks = (n + kBlocked16N - 1) / kBlocked16N;
  const bool parallel = blocks > 1 && n * k >= (int64_t{1} << 18);
  ParallelFor(blocks, parallel, [&](int64_t b) {
    const int64_t col = b * kBlocked16N;
    const int64_t valid = std::min(kBlocked16N, n - col);
    const typename L::Elem* wb = packed + b * kBlocked16N * k;
    const float* sc = scales ? scales + col : nullptr;
    const float* bb = bias ? bias + col : nullptr;
    for (int64_t r = 0; r < m; r += kBlocked16MaxRows) {
      const float* xr = x + r * k;
      float* yr = y + r * n + col;
      switch (std::min(kBlocked16MaxRows, m - r)) {
        case 3: Blocked16Rows<3, L>(wb, k, xr, k, sc, bb, valid, yr, n); break;
        case 2: Blocked16Rows<2, L>(wb, k, xr, k, sc, bb, valid, yr, n); break;
        default: Blocked16Rows<1, L>(wb, k, xr, k, sc, bb, valid, yr, n); break;
      }
    }
  });
}

}  // namespace fathom::internal
