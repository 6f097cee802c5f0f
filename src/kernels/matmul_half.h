// 16-bit weights (bf16 or f16) kept as the checkpoint stores them, for CPUs on which oneDNN
// would run them as f32, and the matmul y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]) over them.
//
// Why: without AVX-512, oneDNN 2.6 has no bf16 (and nowhere an f16) matmul, so a 16-bit
// checkpoint used to be converted to f32 at load: twice the memory and twice the bytes a
// decode step streams. Here the weights stay 16-bit and are widened to f32 in registers
// (bf16: a shift, f16: F16C's vcvtph2ps; both exact); activations stay f32 (unlike the
// AVX512-BF16 path, x is not rounded), accumulation is f32 FMA.
//
// Layout: the blocked layout of the int8 weights (matmul_int8.h), [ceil(N/16)][K][16]
// 16-bit values (32 contiguous bytes per k), N padded with zero channels. The kernel is
// theirs (blocked16_avx2.h): row-independent (a row's bits do not depend on M or on the
// other rows of the call) and thread-independent.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace fathom {

class HalfWeights {
 public:
  // w: [n, k] row-major values of `dtype` (kBF16 or kF16; anything else is an error).
  static Result<HalfWeights> Pack(const uint16_t* w, DType dtype, int64_t n, int64_t k);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  DType dtype() const { return dtype_; }
  // Bytes one Matmul streams: the packed blocks (N padded to 16).
  size_t bytes() const { return packed_.size() * sizeof(uint16_t); }

  // x: [m, K] f32 row-major; bias: [N] f32 or nullptr; y: [m, N] f32 row-major.
  // Parallel over N blocks with OpenMP when the weights are large enough to pay for it.
  void Matmul(const float* x, int64_t m, const float* bias, float* y) const;

 private:
  int64_t n_ = 0, k_ = 0;
  DType dtype_ = DType::kBF16;
  std::vector<uint16_t> packed_;  // [ceil(N/16)][K][16]
};

namespace internal {
// True where Linear keeps bf16 / f16 checkpoints in HalfWeights: CPUs without AVX-512F,
// where oneDNN 2.6 would run them as f32. (With AVX-512, bf16 runs in oneDNN / the
// AVX512-BF16 GEMV, and f16 is still converted to f32: not measured against this kernel.)
bool PreferHalfWeights();
// Tests: force the choice (true / false) on any CPU, or -1 to go back to the CPU's.
void SetPreferHalfWeightsForTesting(int prefer);
}  // namespace internal

}  // namespace fathom
