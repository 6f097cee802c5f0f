// Micro-benchmark of decode attention over a bf16 KV cache with GQA: B rows (one per
// sequence, each with its own shuffled block table) attend to L keys each, TinyLlama's shape
// (32 query heads, 4 KV heads, head_dim 64) by default. Median ms per call of R rounds, K/V
// GB/s (the bytes the call must read once) and G FMA lanes/s (scores and weighted sums:
// 2 * B * L * heads * head_dim); a change is measured by running the binaries built before
// and after it in turns. Not built by CMake; by hand after
// `cmake --build build --target kernels_tests`:
//   g++ -O3 -std=c++20 -mavx2 -mfma -mf16c -fopenmp -Isrc benchmarks/kernels/decode_attention_bench.cc
//       build/libfathom_kernels.a build/libfathom_core.a -o /tmp/dabench
//   OMP_NUM_THREADS=2 /tmp/dabench [L ...]      (env: HEADS, KV_HEADS, HEAD_DIM, BATCH, ROUNDS;
//   SHUFFLE=0 keeps each sequence's blocks in order)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/paged_attention.h"

using namespace fathom;

namespace {
int64_t Env(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoll(v) : fallback;
}
}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> lengths;
  for (int i = 1; i < argc; ++i) lengths.push_back(std::atoll(argv[i]));
  if (lengths.empty()) lengths = {512, 2048, 8192};
  const int64_t heads = Env("HEADS", 32), kv_heads = Env("KV_HEADS", 4), hd = Env("HEAD_DIM", 64);
  const int64_t batch = Env("BATCH", 8), rounds = Env("ROUNDS", 5);
  const int32_t block = 16;
  const AttentionShape shape{heads, kv_heads, hd, 1.f / std::sqrt(static_cast<float>(hd))};
  std::printf("heads %lld/%lld x %lld, batch %lld, bf16 K/V, %lld rounds (median)\n",
              static_cast<long long>(heads), static_cast<long long>(kv_heads),
              static_cast<long long>(hd), static_cast<long long>(batch), static_cast<long long>(rounds));
  for (const int64_t n : lengths) {
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.f, 1.f);
    const int64_t row = kv_heads * hd, per_seq = (n + block - 1) / block, stride = block * row;
    const int64_t n_blocks = per_seq * batch;
    std::vector<uint16_t> k(static_cast<size_t>(n_blocks * stride)), v(k.size());
    for (auto& x : k) x = F32ToBF16(u(rng));
    for (auto& x : v) x = F32ToBF16(u(rng));
    std::vector<int32_t> perm(static_cast<size_t>(n_blocks));
    std::iota(perm.begin(), perm.end(), 0);
    if (Env("SHUFFLE", 1) != 0) std::shuffle(perm.begin(), perm.end(), rng);
    const PagedKvView view{k.data(), v.data(), stride, row, block, DType::kBF16};
    std::vector<float> q(static_cast<size_t>(batch * heads * hd)), out(q.size());
    for (float& x : q) x = u(rng);
    std::vector<KeySegment> segs(static_cast<size_t>(batch));
    std::vector<PagedAttentionRow> rows(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      segs[static_cast<size_t>(b)] = {perm.data() + b * per_seq, 0, n, nullptr, 0};
      rows[static_cast<size_t>(b)] = {q.data() + b * heads * hd, out.data() + b * heads * hd,
                                      static_cast<int32_t>(b), static_cast<int32_t>(b + 1)};
    }
    const auto time = [&] {
      const auto t0 = std::chrono::steady_clock::now();
      PagedAttention(shape, view, rows.data(), batch, segs.data());
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    time();  // warm
    std::vector<double> secs;
    for (int64_t r = 0; r < rounds; ++r) secs.push_back(time());
    std::sort(secs.begin(), secs.end());
    const double t = secs[secs.size() / 2];
    const double bytes = 2.0 * static_cast<double>(batch * n * row) * 2;  // K and V, bf16
    const double lanes = 2.0 * static_cast<double>(batch * n * heads * hd);
    // FNV-1a over the output's bits, so that two builds' results can be compared exactly.
    uint64_t hash = 1469598103934665603ull;
    for (const float x : out) {
      uint32_t b;
      std::memcpy(&b, &x, sizeof b);
      hash = (hash ^ b) * 1099511628211ull;
    }
    std::printf("L %6lld: %8.3f ms  %5.1f GB/s  %5.2f G FMA lanes/s  out %016llx\n",
                static_cast<long long>(n), t * 1e3, bytes / t / 1e9, lanes / t / 1e9,
                static_cast<unsigned long long>(hash));
  }
  return 0;
}
