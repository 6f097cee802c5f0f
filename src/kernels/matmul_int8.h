// Int8 weights, quantized at load: symmetric, one scale per output channel, and the matmul
// y[M, N] = x[M, K] · dequant(W)[N, K]^T (+ bias[N]) over them with f32 activations.
//
// Quantization of W [N, K] (f32 values; bf16 / f16 checkpoints are converted exactly first):
//   scale[n] = max_k |W[n, k]| / 127               (a zero row: scale 0, all q 0)
//   q[n, k]  = round-to-nearest-even(W[n, k] / scale[n]), clamped to [-127, 127]
// so dequant(W)[n, k] = scale[n] * q[n, k], |W - dequant(W)| <= scale[n] / 2 per element.
//
// Layout: output channels in blocks of kInt8BlockN = 16; block b holds channels
// 16b .. 16b+15 interleaved along K, [K][16] int8 (16 contiguous bytes per k: one load and
// two cvtepi8_epi32 feed 16 lanes). Blocks are contiguous at stride 16 K bytes; N is padded
// to a multiple of 16 with zero channels (scale 0). One Matmul call reads each weight byte
// from memory once: a block's 16 K bytes are read for its first group of rows and come
// from cache (L1/L2) for the following groups.
//
// The matmul dequantizes in registers (int8 -> int32 -> f32, then FMA with the broadcast
// activation) and accumulates in f32, in an order that depends only on K: a row's result is
// bit-identical whatever M is and whatever rows share the call (row-independent), and
// whatever the thread count (threads split N blocks, never K).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace fathom {

inline constexpr int64_t kInt8BlockN = 16;  // output channels per packed block

class Int8Weights {
 public:
  // w: [n, k] f32 row-major, finite (an inf or NaN is an error naming the row).
  static Result<Int8Weights> Quantize(const float* w, int64_t n, int64_t k);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  // q[row, col] and scale[row], read back from the packed layout.
  int8_t q(int64_t row, int64_t col) const {
    return packed_[static_cast<size_t>((row / kInt8BlockN) * k_ * kInt8BlockN + col * kInt8BlockN +
                                       row % kInt8BlockN)];
  }
  float scale(int64_t row) const { return scales_[static_cast<size_t>(row)]; }
  // Bytes one Matmul streams: the packed int8 blocks (N padded to 16) and the f32 scales.
  size_t bytes() const { return packed_.size() + scales_.size() * sizeof(float); }

  // x: [m, K] f32 row-major; bias: [N] f32 or nullptr; y: [m, N] f32 row-major.
  // Parallel over N blocks with OpenMP when the weights are large enough to pay for it.
  void Matmul(const float* x, int64_t m, const float* bias, float* y) const;

 private:
  int64_t n_ = 0, k_ = 0;
  std::vector<int8_t> packed_;  // [ceil(N/16)][K][16]
  std::vector<float> scales_;   // [ceil(N/16) * 16], 0 in the padding
};

}  // namespace fathom
