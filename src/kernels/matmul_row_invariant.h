// A batch-invariant f32 matmul: every output element is one fixed sum, so a row's result
// does not depend on how many other rows share the call or where it sits among them.
//
// Why: oneDNN picks its kernels and blockings by M, so a row computed in an M-row call can
// differ in the last bits from the same row computed alone (measured with the system's
// oneDNN 2.7 on AVX2: rows differ from M = 1 at M = 2, 3, 7, 8, 9, ... for K <= 128, at
// every M > 1 for K = 256). In a batched engine that makes a request's tokens depend on
// what else is in flight whenever two logits nearly tie. This kernel is what
// LoadOptions::batch_invariant (and `--batch-invariant`) runs instead, as vLLM's and
// SGLang's batch-invariant modes do: batched generation then equals generating alone bit
// for bit. It is slower than oneDNN at large M (prefill), about as fast at small M, where
// both stream the weights.
#pragma once

#include <cstdint>

namespace fathom::internal {

// x: [m, k] f32, w: [n, k] f32 row-major (nn.Linear's layout), bias: [n] or nullptr,
// y: [m, n] f32. y[i, j] = Σ_t x[i, t] w[j, t] (+ bias[j]), summed in 8 lanes over t (lane
// l holds t ≡ l mod 8, FMA in order of t, the tail masked), then the lanes added in a
// fixed tree, then the bias: the same operations for (i, j) whatever m is. Parallel over
// blocks of output columns (each element is computed by exactly one thread, in the same
// order, so the thread count does not change results either).
void MatmulF32RowInvariant(const float* x, int64_t m, int64_t k, const float* w, int64_t n,
                           const float* bias, float* y);

}  // namespace fathom::internal
