// W8A8: int8 weights (one scale per output channel, quantized at load) times int8
// activations (quantized at every call, one scale per row and group of 32 along K, as
// llama.cpp quantizes activations for its Q8_0 dot products), with integer dot products:
// AVX512-VNNI vpdpbusd where the CPU has it, else AVX2 (vpmaddubsw on |xq| and sign(xq) * wq,
// which cannot saturate: |xq|, |wq| <= 127), and an exact scalar path for the tests.
//
// Why a second int8 format: Int8Weights (matmul_int8.h) keeps activations f32 and
// dequantizes every weight to f32 in registers, so its arithmetic is f32 FMAs (8 lanes per
// AVX2 instruction): compute-bound from batch ~4. vpdpbusd does 64 int8 multiply-adds per
// instruction, which moves the compute ceiling up ~4-8x; the price is the activations'
// rounding (relative error ~ 1/254 of each group's largest |x|).
//
// Definitions (W [N, K] f32, x [M, K] f32, G = ceil(K / 32) groups of kW8A8Group = 32):
//   weights:     sw[n] = max_k |W[n, k]| / 127,  wq[n, k] = RNE(W[n, k] / sw[n]) in [-127, 127]
//                (Int8Weights' quantizer: the same numbers);
//   activations: amax = max_{k in g} |x[m, k]|; sx[m, g] = amax / 127;
//                xq[m, k] = clamp(RNE(x[m, k] * (127 / amax)), -127, 127); a zero group: 0s;
//   result:      dot[m, n, g] = sum_{k in g} xq[m, k] * wq[n, k]           (exact, int32)
//                acc = 0; for g = 0 .. G-1: acc = fma(float(dot[m, n, g]), sx[m, g], acc)
//                y[m, n] = fma(acc, sw[n], bias[n])                          (f32)
// Every step is exact or one f32 rounding in a fixed order, so the three paths are
// bit-identical, a row's result does not depend on M or on the other rows (row-independent),
// and threads (which split N, never K) do not change it.
//
// Layout: output channels in blocks of 16, K zero-padded to Kp = 32 G; block b holds channels
// 16b .. 16b+15 as [Kp/4][16][4] int8 (64 bytes per 4 k: one zmm, lane c = channel 16b+c's
// 4 consecutive k, what vpdpbusd multiplies with 4 broadcast activation bytes). Blocks are
// contiguous at stride 16 Kp bytes; N is padded to 16 with zero channels (scale 0).
// vpdpbusd multiplies unsigned by signed bytes, so activations go in as u = xq + 128 and each
// group's dot subtracts 128 * sum_{k in g} wq[n, k], computed by a vpdpbusd against 0x80
// bytes that all rows of a pass share.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace fathom {

inline constexpr int64_t kW8A8BlockN = 16;  // output channels per packed block
inline constexpr int64_t kW8A8Group = 32;   // activation values per scale

// True when this CPU (and OS) run AVX512F/BW and AVX512-VNNI (the fast path).
bool CpuHasAvx512Vnni();

// Which integer dot-product code a W8A8 or Int4 matmul runs. kBest: VNNI where the CPU has
// it, else AVX2 (fathom's baseline ISA); kVnni on a CPU without it runs AVX2. The tests run
// every path and compare the bits.
enum class DotPath : uint8_t { kBest, kScalar, kAvx2, kVnni };
DotPath ResolveDotPath(DotPath requested);

class W8A8Weights {
 public:
  // w: [n, k] f32 row-major, finite (an inf or NaN is an error naming the row).
  static Result<W8A8Weights> Quantize(const float* w, int64_t n, int64_t k);

  int64_t n() const { return n_; }
  int64_t k() const { return k_; }
  // wq[row, col] and sw[row], read back from the packed layout.
  int8_t q(int64_t row, int64_t col) const {
    return packed_[static_cast<size_t>((row / kW8A8BlockN) * kp_ * kW8A8BlockN + (col / 4) * 64 +
                                       (row % kW8A8BlockN) * 4 + col % 4)];
  }
  float scale(int64_t row) const { return scales_[static_cast<size_t>(row)]; }
  // Bytes one Matmul streams: the packed int8 blocks (N padded to 16, K to 32) and the scales.
  size_t bytes() const { return packed_.size() + scales_.size() * sizeof(float); }

  // x: [m, K] f32 row-major, finite; bias: [N] f32 or nullptr; y: [m, N] f32 row-major.
  // Parallel over N with OpenMP when the weights are large enough to pay for it.
  void Matmul(const float* x, int64_t m, const float* bias, float* y, DotPath path = DotPath::kBest) const;

 private:
  int64_t n_ = 0, k_ = 0, kp_ = 0;
  std::vector<int8_t> packed_;  // [ceil(N/16)][Kp/4][16][4]
  std::vector<float> scales_;   // [ceil(N/16) * 16], 0 in the padding
};

// The activation quantization above for one row: u[Kp] = xq + 128 (128 in the padding),
// sx[G]; scalar code (the tests' check of the definition).
void QuantizeActivationRow(const float* x, int64_t k, int64_t kp, uint8_t* u, float* sx);
// The same for m rows (x [m, K]; u [m, Kp]; sx [m, G]), with AVX-512 code on the VNNI path
// (the same bytes either way). Int4Weights shares it.
void QuantizeActivationRows(const float* x, int64_t m, int64_t k, int64_t kp, uint8_t* u, float* sx,
                            DotPath path);

}  // namespace fathom
