// Linear layers: y[M, N] = x[M, K] · W[N, K]^T (+ bias[N]).
//
// W comes from a checkpoint (f32, bf16 or f16, row-major [N, K] as Hugging Face stores
// nn.Linear weights). Several weights may be concatenated along N at construction (fused
// q|k|v or gate|up projections), so one call streams them all. The fast path keeps the
// weights prepacked in oneDNN's own blocked layout in memory we allocate (which also keeps
// hot weights out of the page cache's reach); activations are f32 in and out.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"

namespace fathom {

class Linear {
 public:
  // `weights`: one or more [N_i, K] tensors with the same K and dtype, concatenated along N.
  // `biases`: empty, or one entry per weight (nullptr where that part has no bias), [N_i].
  // Errors name the offending index and shapes.
  static Result<Linear> Create(const std::vector<TensorView>& weights,
                               const std::vector<const TensorView*>& biases = {});

  Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  ~Linear();

  int64_t in_features() const;   // K
  int64_t out_features() const;  // N (sum of the parts)
  DType weight_dtype() const;
  // What the matmul runs in: kBF16 for bf16 weights (x is rounded to bf16 per call) where
  // the CPU supports it, else kF32 (f16 weights always, bf16 on CPUs without AVX-512).
  DType compute_dtype() const;
  size_t weight_bytes() const;   // bytes of W streamed by one Forward

  // x: [m, K] f32 row-major; y: [m, N] f32 row-major. Not reentrant (one caller at a time);
  // parallel inside over the process's OpenMP threads.
  void Forward(const float* x, int64_t m, float* y) const;

  // bf16 weights only: run x as hi + lo bf16 parts (two passes over W), so activations
  // keep about 16 mantissa bits instead of 8. For reference checks of deep (looped)
  // models, where bf16 activation rounding compounds; twice the cost. Off by default.
  void set_split_bf16_activations(bool on) { split_bf16_ = on; }

 private:
  void ForwardRounded(const float* x, int64_t m, float* y) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  bool split_bf16_ = false;
};

// Scalar reference: double accumulation, W converted element by element. For tests.
void LinearReference(const float* x, int64_t m, const TensorView& w, const float* bias, float* y);

}  // namespace fathom
