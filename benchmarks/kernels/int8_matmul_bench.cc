// Micro-benchmark of Linear with int8 weights (WeightFormat::kInt8, matmul_int8.h) against
// the checkpoint format (oneDNN; bf16 weights run as f32 on CPUs without AVX-512) for one
// [N, K] bf16 weight (default 6144 x 1024, about a fused gate|up of a 1024-wide model) and
// M = 1, 4, 16, 64, 256 rows: ms per call (mean of reps after one warm-up, two passes, the
// second printed), GFLOP/s and weight GB/s. Not built by CMake; build by hand after
// `cmake --build build --target kernels_tests`:
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -fopenmp -Isrc benchmarks/kernels/int8_matmul_bench.cc
//       build/libfathom_kernels.a build/libfathom_core.a -ldnnl -o /tmp/int8bench
//   OMP_NUM_THREADS=1 /tmp/int8bench [N K]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/matmul.h"

using namespace fathom;

int main(int argc, char** argv) {
  const int64_t n = argc > 1 ? std::atoll(argv[1]) : 6144, k = argc > 2 ? std::atoll(argv[2]) : 1024;
  std::vector<uint16_t> w(static_cast<size_t>(n * k));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1, 1);
  for (auto& v : w) v = F32ToBF16(d(rng));
  const TensorView tv{DType::kBF16, {n, k}, w.data()};
  auto ckpt = Linear::Create({tv}, {}, WeightFormat::kCheckpoint);
  auto int8 = Linear::Create({tv}, {}, WeightFormat::kInt8);
  if (!ckpt.ok() || !int8.ok()) return std::fprintf(stderr, "Linear::Create failed\n"), 1;
  std::printf("N=%lld K=%lld\n", static_cast<long long>(n), static_cast<long long>(k));
  for (int64_t m : {1, 4, 16, 64, 256}) {
    std::vector<float> x(static_cast<size_t>(m * k)), y(static_cast<size_t>(m * n));
    for (auto& v : x) v = d(rng);
    for (int pass = 0; pass < 2; ++pass)
      for (const Linear* l : {&*ckpt, &*int8}) {
        l->Forward(x.data(), m, y.data());
        const int reps = m >= 64 ? 5 : 20;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0; r < reps; ++r) l->Forward(x.data(), m, y.data());
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
        if (pass == 1)
          std::printf("M=%3lld %-10s %8.3f ms %7.1f GFLOP/s %7.2f GB/s of weights\n", static_cast<long long>(m),
                      l == &*ckpt ? "checkpoint" : "int8", s * 1e3, 2.0 * static_cast<double>(m * n * k) / s / 1e9,
                      static_cast<double>(l->weight_bytes()) / s / 1e9);
      }
  }
  return 0;
}
