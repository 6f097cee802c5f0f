// Linear layers: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
//
// W comes from a checkpoint (f32, bf16 or f16, row-major [N, K] as Hugging Face stores
// nn.Linear weights). Several weights may be concatenated along N at construction (fused
// q|k|v or gate|up projections), so one call streams them all. The fast path keeps the
// weights prepacked in oneDNN's own blocked layout in memory we allocate (which also keeps
// hot weights out of the page cache's reach); activations are f32 in and out. On CPUs
// without AVX-512, where oneDNN 2.6 would run bf16 and f16 weights as f32, they stay 16-bit
// in fathom's own blocked kernel instead (matmul_half.h: widened in registers, half the bytes).
//
// WeightFormat::kInt8 instead quantizes W at Create to int8 with one scale per output channel
// (matmul_int8.h) and keeps only that: a quarter of f32's bytes, half of bf16's; every
// Forward runs the int8 kernel (dequantization in registers, f32 accumulation).
// WeightFormat::kW8A8 keeps the same int8 weights and also quantizes the activations to int8
// at every Forward (per row and group of 32), for integer dot products (matmul_w8a8.h).
// WeightFormat::kInt4 quantizes W to int4 in groups of 32 with f16 scales (Q4_0's shape) and
// multiplies it by activations quantized as kW8A8's (matmul_int4.h).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace fathom {

// How a Linear stores its weights.
enum class WeightFormat : uint8_t {
  kCheckpoint,  // the checkpoint's dtype, exact: prepacked for oneDNN (f16 as f32), or
                // bf16 / f16 in HalfWeights on CPUs without AVX-512
  kInt8,        // int8, per-output-channel scales, quantized at Create (matmul_int8.h)
  kW8A8,        // kInt8's weights times int8 activations (matmul_w8a8.h; VNNI)
  kInt4,        // int4 in groups of 32, f16 scales, times int8 activations (matmul_int4.h)
};
// The CLI spelling: "checkpoint", "int8", "w8a8", "int4".
std::string_view WeightFormatName(WeightFormat f);
std::optional<WeightFormat> ParseWeightFormat(std::string_view name);

class Linear {
 public:
  // `weights`: one or more [N_i, K] tensors with the same K and dtype, concatenated along N.
  // `biases`: empty, or one entry per weight (nullptr where that part has no bias), [N_i].
  // With kInt8 the parts are quantized as one [N, K] matrix (scales are per row, so this is
  // the same as quantizing each part alone). Errors name the offending index and shapes.
  static Result<Linear> Create(const std::vector<TensorView>& weights,
                               const std::vector<const TensorView*>& biases = {},
                               WeightFormat format = WeightFormat::kCheckpoint);

  Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  ~Linear();

  int64_t in_features() const;   // K
  int64_t out_features() const;  // N (sum of the parts)
  DType weight_dtype() const;    // of the checkpoint
  WeightFormat weight_format() const;
  // What the matmul runs in: kBF16 for bf16 weights (x is rounded to bf16 per call) where
  // the CPU supports it, else kF32 (f16 weights always, bf16 on CPUs without AVX-512, and
  // int8 weights: x stays f32, the weights are widened or dequantized to f32 in registers;
  // w8a8: also kF32, the int8 activations live inside the kernel).
  DType compute_dtype() const;
  // Bytes of W streamed by one Forward (kInt8, kW8A8, kInt4: the quantized weights and their
  // scales).
  size_t weight_bytes() const;

  // x: [m, K] f32 row-major; y: [m, N] f32 row-major. Not reentrant (one caller at a time);
  // parallel inside over omp_get_max_threads() threads: fathom's pool (core/parallel.h) for
  // its own kernels and, bf16 in oneDNN, for tiles of y each a one-thread oneDNN matmul
  // (oneDNN's own OpenMP team where that is not possible or FATHOM_MATMUL=team).
  void Forward(const float* x, int64_t m, float* y) const;

  // bf16 weights in kCheckpoint format only: run x as hi + lo bf16 parts (two passes over W), so activations
  // keep about 16 mantissa bits instead of 8. For reference checks of deep (looped)
  // models, where bf16 activation rounding compounds; twice the cost. Off by default.
  void set_split_bf16_activations(bool on) { split_bf16_ = on; }

  // From now on run every Forward through the batch-invariant f32 kernel
  // (matmul_row_invariant.h): a row's result no longer depends on the other rows of the call,
  // which oneDNN's M-dependent kernels do not promise. The weights are unpacked to plain f32
  // [N, K] (bf16 and f16 exactly) and oneDNN's copy is freed. Weights in fathom's own kernels
  // (int8, w8a8, int4, HalfWeights) are row-invariant already and stay as they are. Slower
  // than oneDNN at large M.
  Status MakeBatchInvariant();
  bool batch_invariant() const;

 private:
  void ForwardRounded(const float* x, int64_t m, float* y) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool split_bf16_ = false;
};

namespace internal {
// Switches the pool's path for oneDNN's matmuls (above) off and on, for tests (the
// environment's FATHOM_MATMUL=team / FATHOM_PARALLEL=openmp still turn it off), and counts
// the tiles that path has executed in this process.
void SetMatmulTilesEnabledForTesting(bool enabled);
int64_t MatmulTilesExecuted();
}  // namespace internal

// Scalar reference: double accumulation, W converted element by element. For tests.
void LinearReference(const float* x, int64_t m, const TensorView& w, const float* bias, float* y);

}  // namespace fathom
