#include "kernels/gemv_bf16.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/check.h"

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

// One 64-column block for MR rows, k pairs [p0, p1) of its kp / 2: acc[m][j] holds columns
// 16j..16j+15 of row m. wb: [kp/2][64][2] bf16; x: MR rows of kp bf16 at stride xs; y: MR
// rows at stride ys. A range that does not start at 0 resumes the sums kept in `carry`
// ([MR][64] f32); one that does not end at kp / 2 keeps them there instead of writing y.
template <int MR>
FATHOM_TARGET_AVX512BF16 void GemvBlock(const uint16_t* wb, int64_t kp, const uint16_t* x,
                                        int64_t xs, const float* bias, int64_t valid, float* y,
                                        int64_t ys, int64_t p0, int64_t p1, float* carry, int64_t ahead) {
  __m512 acc[MR][4];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j) acc[m][j] = p0 > 0 ? _mm512_loadu_ps(carry + m * 64 + 16 * j) : _mm512_setzero_ps();
  const int64_t pairs = kp / 2;
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* wp = wb + p * kPairElems;
    // The hardware prefetcher alone leaves ~20% of the bandwidth on the table here.
    for (int j = 0; j < 4; ++j)
      _mm_prefetch(reinterpret_cast<const char*>(wp + ahead + 32 * j), _MM_HINT_T0);
    __m512bh w[4];
    for (int j = 0; j < 4; ++j) w[j] = (__m512bh)_mm512_loadu_si512(wp + 32 * j);
    for (int m = 0; m < MR; ++m) {
      int32_t xpair;  // (x[2p], x[2p+1]) as one 32-bit lane, broadcast to all 16 lanes
      std::memcpy(&xpair, x + m * xs + 2 * p, sizeof xpair);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(xpair);
      for (int j = 0; j < 4; ++j) acc[m][j] = _mm512_dpbf16_ps(acc[m][j], w[j], xv);
    }
  }
  if (p1 < pairs) {
    for (int m = 0; m < MR; ++m)
      for (int j = 0; j < 4; ++j) _mm512_storeu_ps(carry + m * 64 + 16 * j, acc[m][j]);
    return;
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

//
// With more rows than one pass (M = 7..16), whole-block passes left the memory bus idle
// during the later passes and the dot products idle during the first (memory and compute
// did not overlap: 252 GFLOP/s at M = 16 on Zen 5, 60% of the vdpbf16ps peak, oneDNN the
// same). So the passes go chunk by chunk of k (kChunkPairs pairs, 16 KiB of the block; the
// sums are carried between chunks in the same order, so a row's bits do not change): the
// first row group reads the chunk from memory, the later ones from L1, and every pass
// prefetches kAheadPairs pairs (12 KiB) ahead, far enough to cover the memory latency of
// a loop that spends 12+ cycles per pair: 1.2-1.3x oneDNN at M = 8-16 (docs/BENCHMARKS.md).
// One pass (M <= 6) keeps the 1 KiB distance measured best for the memory-bound M = 1.
constexpr int64_t kChunkPairs = 64;
constexpr int64_t kAheadPairs = 48;

FATHOM_TARGET_AVX512BF16 void GemvBlockRows(const uint16_t* wb, int64_t kp, const uint16_t* x,
                                            int64_t m, int64_t xs, const float* bias, int64_t valid,
                                            float* y, int64_t ys) {
  const int64_t pairs = kp / 2;
  const int64_t chunk = m > kRowsPerPass ? kChunkPairs : pairs;
  alignas(64) float carry[kGemvMaxTallRows * 64];  // the rows' sums between chunks
  const int64_t ahead = m > kRowsPerPass ? kAheadPairs * kPairElems : kPrefetchElems;
  for (int64_t p0 = 0; p0 < pairs; p0 += chunk) {
    const int64_t p1 = std::min(pairs, p0 + chunk);
    for (int64_t r = 0; r < m; r += kRowsPerPass) {
      const uint16_t* xr = x + r * xs;
      float* yr = y + r * ys;
      float* cr = carry + r * 64;
      switch (std::min(kRowsPerPass, m - r)) {
        case 6: GemvBlock<6>(wb, kp, xr, xs, bias, valid, yr, ys, p0, p1, cr, ahead); break;
        case 5: GemvBlock<5>(wb, kp, xr, xs, bias, valid, yr, ys, p0, p1, cr, ahead); break;
        case 4: GemvBlock<4>(wb, kp, xr, xs, bias, valid, yr, ys, p0, p1, cr, ahead); break;
        case 3: GemvBlock<3>(wb, kp, xr, xs, bias, valid, yr, ys, p0, p1, cr, ahead); break;
        case 2: GemvBlock<2>(wb, kp, xr, xs, bias, valid, yr, ys, p0, p1, cr, ahead); break;
        default: GemvBlock<1>(wb, kp, xr, xs, bias, valid, yr, ys, p0, p1, cr, ahead); break;
      }
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

int64_t GemvMaxRows() {
  static const int64_t rows = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool amx_bf16 = __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u);  // CPUID.7.0:EDX[22]
    return amx_bf16 ? int64_t{4} : kGemvMaxTallRows;
  }();
  return rows;
}

bool GemvEnabled() { return g_gemv_enabled.load(std::memory_order_relaxed); }
void SetGemvEnabledForTesting(bool enabled) { g_gemv_enabled.store(enabled); }

void GemvBf16Packed(const uint16_t* w, int64_t kp, int64_t n, const uint16_t* x, int64_t m,
                    int64_t x_stride, const float* bias, float* y) {
  FATHOM_CHECK_MSG(m >= 1 && m <= kGemvMaxTallRows, "GemvBf16Packed: " << m << " rows");
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
