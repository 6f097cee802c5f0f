// Int4 weights in groups of 32 along K with one f16 scale per group (the shape of llama.cpp's
// Q4_0: 4.5 bits per weight), quantized at load, times int8 activations (quantized at every
// call exactly as W8A8 does: one scale per row and group of 32, matmul_w8a8.h), with integer
// dot products (AVX512-VNNI vpdpbusd, else AVX2 vpmaddubsw; and an exact scalar path).
//
// Definitions (W [N, K] f32, G = ceil(K / 32) groups; a row's padding past K is 0):
//   weights:     per (n, g): wmax = the element of largest |W| in the group (the first of
//                ties), d16 = f16(wmax / -8) (round to nearest even), d = float(d16);
//                d == 0: q = 0 for the group; else q[n, k] = clamp(RNE(W[n, k] / d), -8, 7)
//                (so wmax itself is -8 d, the 16th level llama.cpp's Q4_0 also uses);
//                stored as the nibble q + 8;
//   activations: xq[m, k], sx[m, g] as in matmul_w8a8.h;
//   result:      dot[m, n, g] = sum_{k in g} xq[m, k] * q[n, k]                (exact)
//                acc = 0; for g: acc = fma(float(dot), d[n, g] * sx[m, g], acc)
//                (the product of the two scales rounded to f32 first)
//                y[m, n] = acc + bias[n]                                          (f32)
// Every step is exact or an f32 rounding in a fixed order: the three paths are
// bit-identical, rows are independent of M and of each other, threads split N only.
// An f16 scale that would overflow (|wmax| > 8 * 65504) is an error naming row and group.
//
// Layout: output channels in blocks of 16, K padded to Kp = 32 G. Block b, group g: 256
// bytes = 4 x 64: bytes [64 p, 64 p + 64) hold the vpdpbusd steps s = 2p (low nibbles) and
// 2p + 1 (high nibbles); in a step, byte 4 c + j is channel 16 b + c at k = 32 g + 4 s + j.
// Blocks are contiguous at stride 8 Kp bytes. Scales: [blocks][G][16] f16 (32 bytes per
// block and group: one vcvtph2ps). vpdpbusd multiplies unsigned by signed bytes: the
// nibbles (0..15) go in unsigned and the activations signed, and each group subtracts
// 8 * sum_{k in g} xq[m, k], computed once per row when the activations are quantized.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "kernels/matmul_w8a8.h"

namespace fathom {

inline constexpr int64_t kInt4BlockN = 16;  // output channels per packed block
inline constexpr int64_t kInt4Group = 32;   // weights (and activations) per scale

class Int4Weights {
 public:
  // w: [n, k] f32 row-major, finite (an inf or NaN is an error naming the row).
  static Result<Int4Weights> Quantize(const float* w, int64_t n, int64_t k);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  // q[row, col] in [-8, 7] and the group scale d[row, col / 32] (as f32), read back from the
  // packed layout.
  int q(int64_t row, int64_t col) const;
  float scale(int64_t row, int64_t group) const;
  // Bytes one Matmul streams: the nibbles (N padded to 16, K to 32) and the f16 scales.
  size_t bytes() const { return packed_.size() + scales_.size() * sizeof(uint16_t); }

  // x: [m, K] f32 row-major, finite; bias: [N] f32 or nullptr; y: [m, N] f32 row-major.
  // Parallel over N with OpenMP when the weights are large enough to pay for it.
  void Matmul(const float* x, int64_t m, const float* bias, float* y, DotPath path = DotPath::kBest) const;

 private:
  int64_t n_ = 0, k_ = 0, kp_ = 0;
  std::vector<uint8_t> packed_;   // [ceil(N/16)][G][4][64] nibble pairs
  std::vector<uint16_t> scales_;  // [ceil(N/16)][G][16] f16, 0 in the padding
};

}  // namespace fathom
