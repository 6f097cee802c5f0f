#include "core/compute_peak.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>

// The AVX-512 probes carry these attributes and run only after __builtin_cpu_supports said
// yes (the rest of the project targets x86-64-v3).
#define FATHOM_TARGET_AVX512F __attribute__((target("avx512f")))
#define FATHOM_TARGET_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512bf16")))
#define FATHOM_TARGET_AVX512VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

namespace fathom {
namespace {

// A vector's lanes summed through memory (GCC 12's _mm512_reduce_* helpers trip
// -Wmaybe-uninitialized in its own headers).
template <typename V, typename T>
T SumLanes(const V& v) {
  T lanes[sizeof(V) / sizeof(T)];
  std::memcpy(lanes, &v, sizeof(V));
  T s = 0;
  for (T x : lanes) s += x;
  return s;
}

// Independent accumulators per probe: FMA-class latency (4-5 cycles) times two pipes, with
// room to spare, so the loop is throughput-bound.
constexpr int kChains = 12;

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Each probe runs `iters` iterations of kChains independent instructions and returns a value
// that depends on all of them (kept in a volatile sink, so nothing is optimized away).
// Operands move toward a fixed point (acc = acc * 0.999 + 0.001), never to inf or denormals.

float F32Avx2(int64_t iters) {
  __m256 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
  const __m256 a = _mm256_set1_ps(0.999f), b = _mm256_set1_ps(0.001f);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& v : acc) v = _mm256_fmadd_ps(v, a, b);
  for (int j = 1; j < kChains; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
  return SumLanes<__m256, float>(acc[0]);
}

FATHOM_TARGET_AVX512F float F32Avx512(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512 a = _mm512_set1_ps(0.999f), b = _mm512_set1_ps(0.001f);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& v : acc) v = _mm512_fmadd_ps(v, a, b);
  for (int j = 1; j < kChains; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return SumLanes<__m512, float>(acc[0]);
}

// vdpbf16ps: acc[16 f32] += sum of 32 bf16 pair products. The products are tiny (bf16 of
// 1e-3 squared), so the sums stay finite for any iteration count the probe uses.
FATHOM_TARGET_AVX512BF16 float Bf16Dot(int64_t iters) {
  __m512 acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
  const __m512bh a = _mm512_cvtne2ps_pbh(_mm512_set1_ps(1e-3f), _mm512_set1_ps(1e-3f));
  for (int64_t i = 0; i < iters; ++i)
    for (auto& v : acc) v = _mm512_dpbf16_ps(v, a, a);
  for (int j = 1; j < kChains; ++j) acc[0] = _mm512_add_ps(acc[0], acc[j]);
  return SumLanes<__m512, float>(acc[0]);
}

// vpdpbusd: acc[16 s32] += sum of 64 u8 x s8 products (wraps in the register; summed as
// unsigned, so the sink never overflows a signed int).
FATHOM_TARGET_AVX512VNNI float Int8DotVnni(int64_t iters) {
  __m512i acc[kChains];
  for (int j = 0; j < kChains; ++j) acc[j] = _mm512_set1_epi32(j);
  const __m512i a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i)
    for (auto& v : acc) v = _mm512_dpbusd_epi32(v, a, b);
  for (int j = 1; j < kChains; ++j) acc[0] = _mm512_add_epi32(acc[0], acc[j]);
  return static_cast<float>(SumLanes<__m512i, uint32_t>(acc[0]));
}

// The AVX2 kernels' sequence for 32 u8 x s8 products: vpmaddubsw (pairs to s16), vpmaddwd
// with ones (to s32), vpaddd. The u8 operand changes every iteration so that the products
// cannot be hoisted out of the loop. Fewer chains than the others: 16 ymm registers hold
// the accumulators, the four constants and the two temporaries without spilling, and the
// loop-carried vpaddd has a latency of one cycle.
constexpr int kAvx2IntChains = 8;
float Int8DotAvx2(int64_t iters) {
  __m256i acc[kAvx2IntChains];
  for (int j = 0; j < kAvx2IntChains; ++j) acc[j] = _mm256_set1_epi32(j);
  __m256i a = _mm256_set1_epi8(3);
  const __m256i b = _mm256_set1_epi8(-2), ones = _mm256_set1_epi16(1), step = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < iters; ++i) {
    for (auto& v : acc) v = _mm256_add_epi32(v, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), ones));
    a = _mm256_add_epi8(a, step);
  }
  for (int j = 1; j < kAvx2IntChains; ++j) acc[0] = _mm256_add_epi32(acc[0], acc[j]);
  return static_cast<float>(SumLanes<__m256i, uint32_t>(acc[0]));
}

// Runs `probe` on every OpenMP thread at once; returns operations per second (1e9 units),
// best of `reps`. `ops_per_iter`: operations one iteration of one thread does. A run lasts
// the longest of the threads' own probe times, each timed from its start inside the parallel
// region: a thread that starts late (on a busy host the OS may wake it milliseconds after
// the others) does not count its wait, one that is preempted while probing counts it.
double Rate(float (*probe)(int64_t), double ops_per_iter, double seconds, int reps) {
  volatile float sink = 0;
  auto run = [&](int64_t iters) {
    double longest = 0;
#pragma omp parallel
    {
      const double t0 = Seconds();
      const float v = probe(iters);
      const double t = Seconds() - t0;
#pragma omp critical
      {
        sink = sink + v;
        longest = std::max(longest, t);
      }
    }
    return longest;
  };
  // Calibrate: double the iterations until a run takes a quarter of `seconds`, then scale to
  // `seconds`.
  int64_t iters = 1 << 12;
  double t = run(iters);
  while (t < seconds / 4 && iters < (int64_t{1} << 40)) t = run(iters *= 2);
  iters = std::max(iters, static_cast<int64_t>(static_cast<double>(iters) * seconds / t));
  double best = 0;
  const double ops = ops_per_iter * static_cast<double>(iters) * omp_get_max_threads();
  for (int r = 0; r < reps; ++r) best = std::max(best, ops / run(iters) / 1e9);
  return best;
}

}  // namespace

std::string_view ArithmeticName(Arithmetic a) {
  switch (a) {
    case Arithmetic::kF32Fma: return "f32-fma";
    case Arithmetic::kBf16Dot: return "bf16-dot";
    case Arithmetic::kInt8Dot: return "int8-dot";
  }
  return "?";
}

double ComputePeak::of(Arithmetic a) const {
  switch (a) {
    case Arithmetic::kF32Fma: return f32_gflops;
    case Arithmetic::kBf16Dot: return bf16_gflops;
    case Arithmetic::kInt8Dot: return int8_gops;
  }
  return 0;
}

ComputePeak MeasureComputePeak(double seconds, int reps) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512bf16");
  const bool vnni = avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vnni");
  ComputePeak p;
  // Operations per iteration: kChains instructions x lanes x 2 (multiply and add).
  p.f32_gflops = avx512 ? Rate(F32Avx512, kChains * 16 * 2, seconds, reps)
                        : Rate(F32Avx2, kChains * 8 * 2, seconds, reps);
  if (bf16) p.bf16_gflops = Rate(Bf16Dot, kChains * 32 * 2, seconds, reps);
  p.int8_gops = vnni ? Rate(Int8DotVnni, kChains * 64 * 2, seconds, reps)
                     : Rate(Int8DotAvx2, kAvx2IntChains * 32 * 2, seconds, reps);
  return p;
}

}  // namespace fathom
