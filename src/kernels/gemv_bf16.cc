#include "kernels/gemv_bf16.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "core/check.h"
#include "core/parallel.h"

// Everything with AVX-512 instructions carries this attribute and is only reached after
// CpuHasAvx512Bf16() said yes (the rest of the project targets x86-64-v3).
#define FATHOM_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

namespace fathom::internal {
namespace {

std::atomic<bool> g_gemv_enabled{true};

constexpr int64_t kBlockN = 64;                         // columns per packed block
constexpr int64_t kPairElems = 2 * kBlockN;             // bf16 per k pair in a block (256 bytes)

// The one-row pass (M = 1: a pure weight stream) prefetches each pair's 256 bytes a fixed
// distance ahead; how far and into which cache was measured per CPU (docs/BENCHMARKS.md,
// "bf16 GEMV at one row: the prefetch by CPU"): 1 KiB into L1 on Sapphire Rapids (~100% of
// the read bandwidth there); 16 KiB into L2 on Zen 5, 1.07-1.14x the 1 KiB one there and
// faster than a plain read loop (4-8 KiB into L1 1.04-1.07x, 4 KiB into L2 0.95-0.98x).
constexpr int64_t kL1PrefetchElems = 4 * kPairElems;   // 1 KiB: Intel (measured on SPR)
constexpr int64_t kL2PrefetchElems = 64 * kPairElems;  // 16 KiB: AMD (measured on Zen 5)
bool OneRowPrefetchIntoL2() {
  static const bool amd = __builtin_cpu_is("amd");
  return amd;
}

// Mask of the valid lanes of column group j (16 columns) when `valid` columns are live.
FATHOM_TARGET_AVX512BF16 inline __mmask16 LaneMask(int64_t valid, int j) {
  const int64_t cnt = std::clamp<int64_t>(valid - 16 * j, 0, 16);
  return static_cast<__mmask16>((1u << cnt) - 1u);
}

// One 64-column block for MR rows, k pairs [p0, p1) of its kp / 2: acc[m][j] holds columns
// 16j..16j+15 of row m. wb: [kp/2][64][2] bf16; x: MR rows of kp bf16 at stride xs; y: MR
// rows at stride ys. A range that does not start at 0 resumes the sums kept in `carry`
// ([MR][64] f32); one that does not end at kp / 2 keeps them there instead of writing y.
// Prefetch: with `next`, the cache lines [l0, l1) from `next`, spread evenly over the range's
// pairs; without, each pair's 256 bytes kAhead elements ahead, with prefetch hint kHint.
// (decltype: GCC's hints are an enum, clang's ints.)
template <int MR, decltype(_MM_HINT_T0) kHint = _MM_HINT_T0, int64_t kAhead = kL1PrefetchElems>
FATHOM_TARGET_AVX512BF16 void GemvBlock(const uint16_t* wb, int64_t kp, const uint16_t* x,
                                        int64_t xs, const float* bias, int64_t valid, float* y,
                                        int64_t ys, int64_t p0, int64_t p1, float* carry,
                                        const char* next, int64_t l0, int64_t l1) {
  __m512 acc[MR][4];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 4; ++j)
      acc[m][j] = p0 > 0 ? _mm512_loadu_ps(carry + m * 64 + 16 * j) : _mm512_setzero_ps();
  const int64_t pairs = kp / 2;
  const int64_t share = l1 - l0, span = p1 - p0;
  const char* line = next + l0 * 64;
  int64_t owed = 0;  // share x pairs done, less span x lines issued
  for (int64_t p = p0; p < p1; ++p) {
    const uint16_t* wp = wb + p * kPairElems;
    // The hardware prefetcher alone leaves ~20% of the bandwidth on the table here.
    if (next != nullptr) {
      for (owed += share; owed >= span; owed -= span, line += 64) _mm_prefetch(line, _MM_HINT_T0);
    } else {
      // One pointer and immediate offsets: four offsets held in registers made GCC 12 spill
      // two weight vectors to the stack in the 6-row loop.
      const char* ahead = reinterpret_cast<const char*>(wp + kAhead);
      for (int j = 0; j < 4; ++j) _mm_prefetch(ahead + 64 * j, kHint);
    }
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
// 4 weight vectors and the broadcast fill 29 of the 32 zmm registers). A row's sums run in
// the same order in any pass, so a row's result does not depend on m.
constexpr int64_t kRowsPerPass = 6;

// With two or more rows the passes go chunk by chunk of k (kChunkPairs pairs, 16 KiB of the
// block; the sums are carried between chunks in the same order, so a row's bits do not
// change): the first pass reads the chunk from memory, the later ones from L1. Meanwhile all
// passes together prefetch the next chunk (the next block's first one after the last: a
// thread's blocks are contiguous), each pass a share of its lines in proportion to its rows,
// spread over the pass's pairs: memory and dot products overlap for the whole chunk.
// History (docs/BENCHMARKS.md): whole-block passes kept them apart (60% of the vdpbf16ps peak
// at M = 16 on Zen 5); chunks with every pass prefetching 12 KiB ahead gave 1.2-1.3x that but
// fetched only during the first pass; the spread another 1.05-1.35x at M = 2..16 (1 and 2
// threads; engine decode batch 4 / 8 / 16 median 1.12x / 1.17x / 1.29x).
// One row keeps the fixed-distance prefetch measured best for the memory-bound M = 1, by
// CPU vendor (kL1PrefetchElems, kL2PrefetchElems above).
constexpr int64_t kChunkPairs = 64;

// GemvBlock for each row count of a pass, indexed by it.
using GemvPass = void (*)(const uint16_t*, int64_t, const uint16_t*, int64_t, const float*, int64_t,
                          float*, int64_t, int64_t, int64_t, float*, const char*, int64_t, int64_t);
constexpr GemvPass kPasses[kRowsPerPass + 1] = {
    nullptr, GemvBlock<1>, GemvBlock<2>, GemvBlock<3>, GemvBlock<4>, GemvBlock<5>, GemvBlock<6>};

FATHOM_TARGET_AVX512BF16 void GemvBlockRows(const uint16_t* wb, int64_t kp, const uint16_t* x,
                                            int64_t m, int64_t xs, const float* bias, int64_t valid,
                                            float* y, int64_t ys) {
  const int64_t pairs = kp / 2;
  alignas(64) float carry[kGemvMaxTallRows * 64];  // the rows' sums between chunks
  if (m == 1) {
    if (OneRowPrefetchIntoL2())
      GemvBlock<1, _MM_HINT_T2, kL2PrefetchElems>(wb, kp, x, xs, bias, valid, y, ys, 0, pairs,
                                                  carry, nullptr, 0, 0);
    else
      GemvBlock<1>(wb, kp, x, xs, bias, valid, y, ys, 0, pairs, carry, nullptr, 0, 0);
    return;
  }
  for (int64_t p0 = 0; p0 < pairs; p0 += kChunkPairs) {
    const int64_t p1 = std::min(pairs, p0 + kChunkPairs);
    const char* next = reinterpret_cast<const char*>(wb + p1 * kPairElems);
    const int64_t next_pairs = std::min(kChunkPairs, p1 < pairs ? pairs - p1 : pairs);
    const int64_t lines = next_pairs * kPairElems * 2 / 64;
    for (int64_t r = 0; r < m; r += kRowsPerPass) {
      const uint16_t* xr = x + r * xs;
      float* yr = y + r * ys;
      float* cr = carry + r * 64;
      const int64_t rows = std::min(kRowsPerPass, m - r);
      const int64_t l0 = lines * r / m, l1 = lines * (r + rows) / m;
      kPasses[rows](wb, kp, xr, xs, bias, valid, yr, ys, p0, p1, cr, next, l0, l1);
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
    const bool amx_bf16 =
        __get_cpuid_count(7, 0, &a, &b, &c, &d) && (d >> 22 & 1u);  // CPUID.7.0:EDX[22]
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
  // Guided runs (ParallelFor): each thread first takes a long contiguous run of blocks (the passes'
  // next-block prefetch assumes contiguity), then ever shorter ones, so a thread that the memory
  // system served less at the start no longer keeps the other waiting at the end. A small effect:
  // on Zen 5 (2 threads, engine decode under perf) libgomp's spinning fell in 4 of 5 runs
  // (e.g. 13% -> 6% of the GEMV's samples at batch 1, 12% -> 7% at batch 4), the GEMV alone
  // 1.00-1.05x, decode tok/s within the host's noise; dynamic runs of 2 blocks were slower
  // (docs/BENCHMARKS.md "bf16 GEMV at one row: the prefetch by CPU"). Same bits either way.
  ParallelFor(blocks, parallel, [&](int64_t b) {
    const int64_t col = b * kBlockN;
    GemvBlockRows(w + b * kp * kBlockN, kp, x, m, x_stride, bias ? bias + col : nullptr,
                  std::min(kBlockN, n - col), y + col, n);
  });
}

}  // namespace fathom::internal
