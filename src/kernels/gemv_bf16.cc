#include "kernels/gemv_bf16.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

// Everything with AVX-512 instructions carries this attribute and is only reached after
// CpuHasAvx512Bf16() said yes (the rest of the project targets x86-64-v3).
#define FATHOM_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace fathom::internal {
namespace {

std::atomic<bool> g_gemv_enabled{true};

constexpr int64_t kBlockN = 64;                     // columns per packed block
constexpr int64_t kPairElems = 2 * kBlockN;         // bf16 per k pair in a block (256 bytes)
constexpr int64_t kPrefetchElems = 4 * kPairElems;  // 1 KiB ahead: measured best on SPR

// Mask of the valid lanes of column group j (16 columns) when `valid` columns are live.
FATHOM_TARGET_AVX512BF16 inline __mmask16 LaneMask(int64_t valid, int j) {
  const int64_t cnt = std::clamp<int64_t>(valid - 16 * j, 0, 16);
  return static_cast<__mmask16>((1u << cnt) - 1u);
}

// One 64-column block for MR rows: acc[m][j] holds columns 16j..16j+15 of row m.
// wb: [kp/2][64][2] bf16; x: MR rows of kp bf16 at stride xs; y: MR rows at stride ys.
template <int MR>
FATHOM_TARGET_AVX512BF16 void GemvBlock(const uint16_t* wb, int64_t kp, const uint16_t* x,
                                        int64_t xs, const float* bias, int64_t valid, float* y,
                                        int64_t ys) {
  __m512 acc[MR][4];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_setzero_ps();
  const int64_t pairs = kp / 2;
  for (int64_t p = 0; p < pairs; ++p) {
    const uint16_t* wp = wb + p * kPairElems;
    // The hardware prefetcher alone leaves ~20% of the bandwidth on the table here.
    for (int j = 0; j < 4; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(wp + kPrefetchElems + 32 * j), _MM_HINT_T0);
    __m512bh w[4];
    for (int j = 0; j < 4; ++j) w[j] = (__m512bh)_mm512_loadu_si512(wp + 32 * j);
    for (int m = 0; m < MR; ++m) {
      int32_t xpair;  // (x[2p], x[2p+1]) as one 32-bit lane, broadcast to all 16 lanes
      std::memcpy(&xpair, x + m * xs + 2 * p, sizeof xpair);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(xpair);
      for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], w[j], xv);
    }
  }
  for (int j = 0; j < 4; ++j) {
    const __mmask16 mask = LaneMask(valid, j);
    const __m512 b = bias ? _mm512_maskz_loadu_ps(mask, bias + 16 * j) : _mm512_setzero_ps();
    for (int m = 0; m < MR; ++m)
      _mm512_mask_storeu_ps(y + m * ys + 16 * j, mask, _mm512_add_ps(acc[m][j], b));
  }
}

// All m rows against one block, in passes of up to kRowsPerPass rows (6 x 4 accumulators,
// 4 weight vectors and the broadcast fill 29 of the 32 zmm registers). The first pass
// streams the block from memory; the later ones find it in L2 (Kp x 128 bytes: 256 KiB at
// K = 2048, 704 KiB at K = 5632). A row's sums run in the same order in any pass, so a row's
// result does not depend on m.
constexpr int64_t kRowsPerPass = 6;

FATHOM_TARGET_AVX512BF16 void GemvBlockRows(const uint16_t* wb, int64_t kp, const uint16_t* x,
                                            int64_t m, int64_t xs, const float* bias, int64_t valid,
                                            float* y, int64_t ys) {
  for (int64_t r = 0; r < m; r += kRowsPerPass) {
    const uint16_t* xr = x + r * xs;
    float* yr = y + r * ys;
    switch (std::min(kRowsPerPass, m - r)) {
      case 6: GemvBlock<6>(wb, kp, xr, xs, bias, valid, yr, ys); break;
      case 5: GemvBlock<5>(wb, kp, xr, xs, bias, valid, yr, ys); break;
      case 4: GemvBlock<4>(wb, kp, xr, xs, bias, valid, yr, ys); break;
      case 3: GemvBlock<3>(wb, kp, xr, xs, bias, valid, yr, ys); break;
      case 2: GemvBlock<2>(wb, kp, xr, xs, bias, valid, yr, ys); break;
      default: GemvBlock<1>(wb, kp, xr, xs, bias, valid, yr, ys); break;
    }
  }
}

}  // namespace

bool CpuHasAvx512Bf16() {
  static const bool has = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bf16");
  return has;
}

bool GemvEnabled() { return g_gemv_enabled.load(std::memory_order_relaxed); }
void SetGemvEnabledForTesting(bool enabled) { g_gemv_enabled.store(enabled); }

void GemvBf16Packed(const uint16_t* w, int64_t kp, int64_t n, const uint16_t* x, int64_t m,
                    int64_t x_stride, const float* bias, float* y) {
  const int64_t blocks = (n + kBlockN - 1) / kBlockN;
  // Below ~256 KiB of weights the fork/join costs more than the second core saves.
  const bool parallel = blocks > 1 && kp * n * 2 >= (int64_t{1} << 18);
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t col = b * kBlockN;
    GemvBlockRows(w + b * kp * kBlockN, kp, x, m, x_stride, bias ? bias + col : nullptr,
                  std::min(kBlockN, n - col), y + col, n);
  }
}

}  // namespace fathom::internal
