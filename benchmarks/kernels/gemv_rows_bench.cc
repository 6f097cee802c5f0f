// The bf16 GEMV (kernels/gemv_bf16.h) alone on TinyLlama's four matmul shapes x 22 layers
// (1.9 GB of bf16 weights, cold), M rows: GFLOP/s of 4 timed rounds and a checksum of the
// outputs (equal checksums: the same bits). Not built by CMake; build by hand after a build:
//   g++ -O3 -std=c++20 -march=native -fopenmp -Isrc benchmarks/kernels/gemv_rows_bench.cc
//       build/libfathom_kernels.a build/libfathom_core.a -ldnnl -o /tmp/gemv_rows
//   OMP_NUM_THREADS=1 /tmp/gemv_rows 16     # M = 16; an optional second argument: layers
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/gemv_bf16.h"

using namespace fathom::internal;
static uint16_t Bf16(float f) {  // truncation: any bf16 values will do
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}
int main(int argc, char** argv) {
  if (argc < 2 || std::atoi(argv[1]) < 1 || std::atoi(argv[1]) > kGemvMaxTallRows) {
    std::fprintf(stderr, "usage: %s M [LAYERS]   (1 <= M <= %lld)\n", argv[0],
                 static_cast<long long>(kGemvMaxTallRows));
    return 2;
  }
  const int64_t m = std::atoi(argv[1]);
  const int layers = argc > 2 ? std::atoi(argv[2]) : 22;
  const int64_t shapes[][2] = {{2560, 2048}, {2048, 2048}, {11264, 2048}, {2048, 5632}};  // [N, K]
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> dist(-1, 1);
  std::vector<std::vector<uint16_t>> ws;
  std::vector<int64_t> ns, ks;
  for (int l = 0; l < layers; ++l)
    for (const auto& s : shapes) {
      std::vector<uint16_t> w(
          static_cast<size_t>(s[0] * s[1]));  // random bits: the layout does not matter
      for (auto& v : w) v = Bf16(dist(rng));
      ws.push_back(std::move(w));
      ns.push_back(s[0]);
      ks.push_back(s[1]);
    }
  std::vector<uint16_t> x(16 * 5632);
  for (auto& v : x) v = Bf16(dist(rng));
  std::vector<float> y(16 * 11264);
  double flops = 0;
  for (size_t i = 0; i < ws.size(); ++i) flops += 2.0 * static_cast<double>(m * ns[i] * ks[i]);
  double checksum = 0;
  for (int round = 0; round < 5; ++round) {  // round 0 warms up
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < ws.size(); ++i) {
      GemvBf16Packed(ws[i].data(), ks[i], ns[i], x.data(), m, 5632, nullptr, y.data());
      for (int64_t j = 0; j < m * ns[i]; j += 7) checksum += y[static_cast<size_t>(j)];
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (round > 0) std::printf("%.0f ", flops / s / 1e9);
  }
  std::printf("GFLOP/s m=%lld (checksum %g)\n", static_cast<long long>(m), checksum);
}
