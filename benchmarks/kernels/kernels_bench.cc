// Micro-benchmark of Linear (bf16 / f32 weights) on TinyLlama-sized layers, next to the
// machine's read bandwidth, plus decode attention and sampling. Not built by CMake; build by
// hand after `ninja -C build-kernels kernels_tests`:
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -fopenmp -Isrc benchmarks/kernels/kernels_bench.cc
//       build-kernels/libfathom_kernels.a build-kernels/libfathom_core.a -ldnnl -o /tmp/kbench
//   OMP_NUM_THREADS=2 /tmp/kbench [--no-gemv | --attention]
// --no-gemv: oneDNN at every M (turns off the M <= 2 AVX512-BF16 GEMV).
// "hot": one weight matrix reused (it may sit in L3); "cold": a rotation of copies totalling
// >= 512 MiB, as a real model's layers are. The % column is GB/s over a plain AVX2 read
// loop of as many bytes (no software prefetch, so a GEMV can beat it slightly).
// Run it on a quiet machine: times of exactly 4/8/16 ms mean a thread lost its core.
#include <immintrin.h>
#include <omp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/attention.h"
#include "kernels/gemv_bf16.h"
#include "kernels/matmul.h"
#include "kernels/sampling.h"

using namespace fathom;
using Clock = std::chrono::steady_clock;

namespace {

// Read bandwidth of `bytes` with all OpenMP threads, best of 5 passes (GB/s). AVX2 with
// eight independent sums so that the loads, not the adds, are the limit.
double ReadBandwidth(size_t bytes) {
  const size_t n = bytes / sizeof(float);
  std::vector<float> a(n, 1.f);
  double best = 0;
  volatile float sink = 0;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    float total = 0;
#pragma omp parallel reduction(+ : total)
    {
      __m256 acc[8];
      for (auto& v : acc) v = _mm256_setzero_ps();
#pragma omp for schedule(static)
      for (size_t i = 0; i < n; i += 64)
        for (int j = 0; j < 8; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(&a[i + 8 * j]));
      for (int j = 1; j < 8; ++j) acc[0] = _mm256_add_ps(acc[0], acc[j]);
      float lanes[8];
      _mm256_storeu_ps(lanes, acc[0]);
      for (float v : lanes) total += v;
    }
    sink = total;
    const double t = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, static_cast<double>(bytes) / t / 1e9);
  }
  (void)sink;
  return best;
}

void BenchLinear(DType dt, int64_t k, int64_t n, bool cold) {
  std::vector<uint16_t> w16(static_cast<size_t>(n * k), 0x3c00);  // 1.0 in f16 / ~1 in bf16
  std::vector<float> w32(static_cast<size_t>(n * k), 0.01f);
  const void* data = dt == DType::kF32 ? static_cast<const void*>(w32.data()) : w16.data();
  const TensorView view{dt, {n, k}, data};
  std::vector<Linear> lins;
  size_t total = 0;
  do {
    auto lin = Linear::Create({view});
    if (!lin.ok()) {
      std::printf("%s\n", lin.status().message().c_str());
      return;
    }
    total += lin->weight_bytes();
    lins.push_back(std::move(lin).value());
  } while (cold && total < (size_t{512} << 20));
  const double gb = static_cast<double>(lins[0].weight_bytes()) / 1e9;
  // The read bandwidth of as many bytes, measured right before (it drifts on a shared VM).
  const double bw = ReadBandwidth(total);
  std::printf("%s K=%lld N=%lld %s (%zu copies, read bandwidth of %zu MiB: %.1f GB/s)\n",
              dt == DType::kF32 ? "f32" : "bf16", static_cast<long long>(k),
              static_cast<long long>(n), cold ? "cold" : "hot", lins.size(), total >> 20, bw);
  for (int64_t m : {1, 2, 4, 16, 64, 256, 1024}) {
    std::vector<float> x(static_cast<size_t>(m * k), 0.5f), y(static_cast<size_t>(m * n));
    for (auto& l : lins) l.Forward(x.data(), m, y.data());  // warm up: primitives, caches
    const double flop = 2.0 * static_cast<double>(m * n * k);
    // Best of 5 timed runs: this VM's bandwidth fluctuates with its neighbours.
    const int iters =
        static_cast<int>(std::max<size_t>(2 * lins.size(), static_cast<size_t>(1e10 / flop / 200)));
    double t = 1e30;
    for (int rep = 0; rep < 5; ++rep) {
      const auto t0 = Clock::now();
      for (int i = 0; i < iters; ++i) lins[i % lins.size()].Forward(x.data(), m, y.data());
      t = std::min(t, std::chrono::duration<double>(Clock::now() - t0).count() / iters);
    }
    std::printf("  M=%4lld  %8.3f ms  %6.1f GB/s (%3.0f%%)  %7.1f GFLOP/s\n",
                static_cast<long long>(m), t * 1e3, gb / t, 100 * gb / t / bw, flop / t / 1e9);
  }
}

// Decode-style attention: n_q rows each seeing `ctx` cached positions (TinyLlama heads).
void BenchAttention(int64_t n_q, int64_t ctx) {
  const AttentionShape s{32, 4, 64, 0.125f};
  const int64_t stride = s.n_kv_heads * s.head_dim;
  std::vector<float> q(static_cast<size_t>(n_q * s.n_heads * s.head_dim), 0.1f), out(q.size()),
      kv(static_cast<size_t>(ctx * stride), 0.01f);
  std::vector<int32_t> nv(static_cast<size_t>(n_q), static_cast<int32_t>(ctx));
  Attention(s, q.data(), n_q, nv.data(), kv.data(), kv.data(), stride, out.data());
  double t = 1e30;
  for (int rep = 0; rep < 5; ++rep) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 20; ++i)
      Attention(s, q.data(), n_q, nv.data(), kv.data(), kv.data(), stride, out.data());
    t = std::min(t, std::chrono::duration<double>(Clock::now() - t0).count() / 20);
  }
  const double flop = 4.0 * static_cast<double>(n_q * s.n_heads * ctx * s.head_dim);
  std::printf("attention 32/4 heads hd 64: n_q=%3lld ctx=%5lld  %8.3f ms  %6.1f GFLOP/s\n",
              static_cast<long long>(n_q), static_cast<long long>(ctx), t * 1e3, flop / t / 1e9);
}

// One Sample over a 32000-token vocabulary for a few parameter sets.
void BenchSampling() {
  std::vector<float> logits(32000);
  for (size_t i = 0; i < logits.size(); ++i)
    logits[i] = static_cast<float>((i * 7919) % 1000) * 0.01f;
  const SamplingParams params[] = {{0.f, 0, 1.f}, {1.f, 0, 1.f}, {0.7f, 40, 1.f}, {0.7f, 0, 0.9f}};
  Sampler sampler(1);
  for (const SamplingParams& p : params) {
    const auto t0 = Clock::now();
    for (int i = 0; i < 200; ++i) sampler.Sample(logits.data(), 32000, p);
    const double t = std::chrono::duration<double>(Clock::now() - t0).count() / 200;
    std::printf("sample vocab 32000 T=%.1f top_k=%d top_p=%.1f: %.3f ms\n", p.temperature, p.top_k,
                p.top_p, t * 1e3);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && !std::strcmp(argv[1], "--no-gemv")) internal::SetGemvEnabledForTesting(false);
  if (argc > 1 && !std::strcmp(argv[1], "--attention")) {
    for (int64_t n_q : {1, 16}) BenchAttention(n_q, 2048);
    BenchAttention(1, 8192);
    BenchSampling();
    return 0;
  }
  std::printf("threads=%d gemv=%d\n", omp_get_max_threads(), internal::GemvEnabled() ? 1 : 0);
  for (bool cold : {false, true}) {
    BenchLinear(DType::kBF16, 2048, 5632, cold);
    BenchLinear(DType::kBF16, 2048, 32000, cold);
  }
  BenchLinear(DType::kF32, 2048, 5632, true);
  for (int64_t n_q : {1, 16}) BenchAttention(n_q, 2048);
  BenchAttention(1, 8192);
  BenchSampling();
}
