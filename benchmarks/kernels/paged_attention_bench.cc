// Micro-benchmark of prefill attention: one sequence's whole prompt attended in chunks of
// 512 rows (causal ends, one segment, a shuffled block table), per-row path against the
// tiled path, in one process. Not built by CMake; build by hand after
// `cmake --build build-attn --target kernels_tests`:
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -fopenmp -Isrc benchmarks/kernels/paged_attention_bench.cc
//       build-attn/libfathom_kernels.a build-attn/libfathom_core.a -ldnnl -o /tmp/pabench
//   OMP_NUM_THREADS=1 /tmp/pabench [n_tokens ...]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/paged_attention.h"

using namespace fathom;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::vector<int64_t> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
  if (lengths.empty()) lengths = {2048, 8192};
  const int64_t heads = 8, kv_heads = 8, hd = 64, chunk = 512;
  const int32_t block = 16;
  const AttentionShape shape{heads, kv_heads, hd, 1.f / std::sqrt(static_cast<float>(hd))};
  std::printf("tiles supported: %d, heads %lld/%lld x %lld, chunks of %lld rows\n",
              internal::PagedAttentionTilesSupported(), static_cast<long long>(heads),
              static_cast<long long>(kv_heads), static_cast<long long>(hd),
              static_cast<long long>(chunk));
  for (const int64_t n : lengths) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const int64_t row = kv_heads * hd, n_blocks = (n + block - 1) / block, stride = block * row;
    std::vector<float> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
    for (float& x : k) x = u(rng);
    for (float& x : v) x = u(rng);
    std::vector<int32_t> table(static_cast<size_t>(n_blocks));
    std::iota(table.begin(), table.end(), 0);
    std::shuffle(table.begin(), table.end(), rng);
    const PagedKvView view{k.data(), v.data(), stride, row, block};
    std::vector<float> q(static_cast<size_t>(n * heads * hd)), out_a(q.size()), out_b(q.size());
    for (float& x : q) x = u(rng);
    std::vector<KeySegment> segs(static_cast<size_t>(n));
    std::vector<PagedAttentionRow> rows_a(static_cast<size_t>(n)), rows_b;
    for (int64_t i = 0; i < n; ++i) {
      segs[static_cast<size_t>(i)] = {table.data(), 0, i + 1, nullptr, 0};
      rows_a[static_cast<size_t>(i)] = {q.data() + i * heads * hd, out_a.data() + i * heads * hd,
                                        static_cast<int32_t>(i), static_cast<int32_t>(i + 1)};
    }
    rows_b = rows_a;
    for (int64_t i = 0; i < n; ++i) rows_b[static_cast<size_t>(i)].out = out_b.data() + i * heads * hd;
    const auto time = [&](auto&& fn) {
      const auto t0 = Clock::now();
      for (int64_t c = 0; c < n; c += chunk) fn(c, std::min(chunk, n - c));
      return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    const double t_row = time([&](int64_t c, int64_t m) {
      internal::PagedAttentionRowwise(shape, view, rows_a.data() + c, m, segs.data());
    });
    const double t_tile = time([&](int64_t c, int64_t m) {
      PagedAttention(shape, view, rows_b.data() + c, m, segs.data());
    });
    double max_diff = 0, max_ref = 0;
    for (size_t i = 0; i < out_a.size(); ++i) {
      max_diff = std::max(max_diff, static_cast<double>(std::abs(out_a[i] - out_b[i])));
      max_ref = std::max(max_ref, static_cast<double>(std::abs(out_a[i])));
    }
    const double flops = 4.0 * static_cast<double>(heads * hd) * static_cast<double>(n) *
                         static_cast<double>(n + 1) / 2;  // QK^T and PV, causal
    std::printf("n %6lld: per-row %8.3f s (%5.1f GFLOP/s)  tiled %8.3f s (%5.1f GFLOP/s)  "
                "speedup %5.2fx  max |diff| %.2e (max |out| %.2e)\n",
                static_cast<long long>(n), t_row, flops / t_row / 1e9, t_tile,
                flops / t_tile / 1e9, t_row / t_tile, max_diff, max_ref);
  }
  return 0;
}
