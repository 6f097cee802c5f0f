// Private to kernels/: a small-M bf16 GEMV over oneDNN's prepacked weight layout.
//
// Why: at M = 1 a Linear is a pure weight stream. oneDNN 2.6's AMX brgemm reaches about 80%
// of the machine's read bandwidth there; this AVX512-BF16 loop with software prefetch reaches
// ~100%. At M = 2 it ties oneDNN on cold weights (and is ~25% faster on weights in L3). With
// up to 6 rows per pass over a block (gemv_bf16.cc), TinyLlama-shape decode, 2 threads, two
// interleaved rounds (2026-12-02, 2-core Sapphire Rapids VM), decode tok/s oneDNN -> GEMV:
// M = 3 29.3/28.7 -> 34.1/32.5, M = 4 38.2/38.7 -> 43.0/40.9, M = 6 57.6/58.1 -> 62.7/58.8,
// M = 8 75.3/69.3 -> 63.5/59.9, M = 16 141 -> 77 (oneDNN's AMX kernels win once compute
// matters), so on CPUs with AMX the GEMV stops at M = 4. Without AMX (Zen 4/5, where oneDNN
// runs its avx512_core_bf16 brgemm) the GEMV goes to M = 16, its rows over k in chunks while
// the next chunk is prefetched (gemv_bf16.cc): 1.2-1.3x oneDNN at M = 8-16 on Zen 5 before
// the prefetch was spread over the passes, another 1.05-1.35x after.
// It reads the very buffer oneDNN packed (no second copy of W) and is only used when the
// CPU has AVX512_BF16 (runtime check) and the layout is the one below.
//
// Layout (oneDNN "BA16a64b2a" for a [K, N] weights tensor): N in blocks of 64 columns; each
// block is contiguous, Kp * 64 bf16 ([Kp/2][64][2]: for k pair p, column c, element k&1),
// Kp = K rounded up to 32 (zero padded), blocks at stride Kp * 64.
#pragma once

#include <cstdint>

namespace fathom::internal {

inline constexpr int64_t kGemvMaxTallRows = 16;  // the most rows GemvBf16Packed takes

// The largest M Linear sends to the GEMV on this CPU: 4 where it has AMX-BF16 (oneDNN's AMX
// kernels were faster from M = 8 on Sapphire Rapids), else kGemvMaxTallRows.
int64_t GemvMaxRows();

// True when this CPU (and OS) support AVX512F/BW and AVX512_BF16.
bool CpuHasAvx512Bf16();

// A switch for tests and benchmarks, so they can run the oneDNN path at small M too.
bool GemvEnabled();
void SetGemvEnabledForTesting(bool enabled);

// y[m, n] = x[m, :Kp] · W^T (+ bias). x: bf16 rows at stride x_stride (>= kp), zero from K
// to kp. w: packed as above with kp (multiple of 32) rows of K. 1 <= m <= kGemvMaxTallRows.
// Parallel over N blocks with OpenMP when the stream is large enough to pay for it.
void GemvBf16Packed(const uint16_t* w, int64_t kp, int64_t n, const uint16_t* x, int64_t m,
                    int64_t x_stride, const float* bias, float* y);

}  // namespace fathom::internal
