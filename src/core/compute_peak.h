// Compute peak probe: the arithmetic rate of the instruction each matmul kernel is built
// on, measured on all OpenMP threads with enough independent accumulators to fill the
// pipes (no loads). The other half of a roofline next to core/bandwidth.h: a kernel's time
// is bounded below by max(bytes / bandwidth, operations / peak). Benchmarks measure both in
// the same run as what they compare with them: a shared host's clock and neighbours drift.
#pragma once

#include <cstdint>
#include <string_view>

namespace fathom {

// The arithmetic a matmul runs in, which decides the peak that bounds it.
enum class Arithmetic : uint8_t {
  kF32Fma,   // f32 FMA: f32 weights, f16 and int8 (weight-only) widened in registers,
             // bf16 on CPUs without AVX512-BF16, the batch-invariant kernel, attention
  kBf16Dot,  // bf16 pair dot products into f32 (AVX512-BF16 vdpbf16ps): bf16 weights
  kInt8Dot,  // u8 x s8 dot products into s32 (AVX512-VNNI vpdpbusd, else AVX2
             // vpmaddubsw + vpmaddwd + vpaddd): w8a8 and int4 weights
};
std::string_view ArithmeticName(Arithmetic a);

struct ComputePeak {
  // Operations per second, 1e9 units; a multiply-add counts as 2. 0 where the CPU lacks
  // the instruction.
  double f32_gflops = 0;   // vfmadd231ps on 512-bit registers with AVX-512F, else 256-bit
  double bf16_gflops = 0;  // vdpbf16ps zmm (AVX512-BF16 only)
  double int8_gops = 0;    // vpdpbusd zmm with AVX512-VNNI, else the AVX2 three-instruction sequence
  double of(Arithmetic a) const;
};

// Best of `reps` runs of each probe, each about `seconds` long.
ComputePeak MeasureComputePeak(double seconds = 0.05, int reps = 3);

}  // namespace fathom
