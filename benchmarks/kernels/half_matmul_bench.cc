// Micro-benchmark of the 16-bit weight matmul (matmul_half.h, blocked16_avx2.h) for one
// [N, K] bf16 weight (default 5632 x 2048, TinyLlama's down projection transposed: its
// gate/up) at M = 1 ... 512 rows: HalfWeights, and oneDNN's f32 matmul over the same weights
// widened (what a bf16 checkpoint ran as on CPUs without AVX-512 before HalfWeights). ms per
// call (mean of reps after one warm-up; two passes, the second printed), GFLOP/s. Not built by CMake; by hand after
// `cmake --build build --target kernels_tests`:
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -fopenmp -Isrc benchmarks/kernels/half_matmul_bench.cc
//       build/libfathom_kernels.a build/libfathom_core.a -ldnnl -o /tmp/halfbench
//   OMP_NUM_THREADS=1 /tmp/halfbench [N K]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/matmul_half.h"

using namespace fathom;

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 5632, k = argc > 2 ? std::atoll(argv[2]) : 2048;
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  std::vector<float> w32(w.size());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (size_t i = 0; i < w.size(); ++i) w[i] = F32ToBF16(d(rng)), w32[i] = BF16ToF32(w[i]);
  auto half = HalfWeights::Pack(w.data(), DType::kBF16, n, k);
  auto f32 = Linear::Create({TensorView{DType::kF32, {n, k}, w32.data()}}, {}, WeightFormat::kCheckpoint);
  if (!half.ok() || !f32.ok()) return std::fprintf(stderr, "setup failed\n"), 1;
  std::printf("N=%lld K=%lld\n", static_cast<long long>(n), static_cast<long long>(k));
  for (int64_t m : {1, 4, 8, 16, 64, 128, 512}) {
    std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
    for (auto& v : x) v = d(rng);
    const std::pair<const char*, std::function<void(float*)>> runs[] = {
        {"half", [&](float* out) { half->Matmul(x.data(), m, nullptr, out); }},
        {"onednn-f32", [&](float* out) { f32->Forward(x.data(), m, out); }},
    };
    for (int pass = 0; pass < 2; ++pass)
      for (const auto& [name, run] : runs) {
        run(y.data());
        const int reps = m >= 64 ? 3 : 20;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) run(y.data());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        if (pass == 1)
          std::printf("M=%3lld %-10s %8.3f ms %7.1f GFLOP/s\n", static_cast<long long>(m), name, s * 1e3,
                      2.0 * static_cast<double>(m * n * k) / s / 1e9);
      }
  }
  return 0;
}
