// How fast one thread reads memory in blocks visited in shuffled order: the access pattern of
// a paged KV cache whose blocks a sequence got from anywhere in the pool. Sums the 64-byte
// lines of a 256 MiB buffer, B bytes at a time, the blocks in random (or, with SHUFFLE=0,
// sequential) order; optionally prefetches the block DIST places ahead (HINT=t0|t2) and asks
// for transparent huge pages (HUGE=1). Prints GB/s of the last of 4 passes. Not built by
// CMake:
//   g++ -O2 -mavx512f benchmarks/kernels/block_read_bench.cc -o /tmp/blockread
//   /tmp/blockread BLOCK_BYTES [DIST]      e.g. 256, 4096, 65536; DIST 0 = no prefetch
#include <immintrin.h>
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

int main(int argc, char** argv) {
  const size_t bytes = size_t{256} << 20;
  const size_t blk = argc > 1 ? std::strtoul(argv[1], nullptr, 10) : 4096;
  const size_t dist = argc > 2 ? std::strtoul(argv[2], nullptr, 10) : 0;
  const char* shuffle_env = std::getenv("SHUFFLE");
  const bool shuffle = !shuffle_env || std::strcmp(shuffle_env, "0") != 0;
  const char* hint_env = std::getenv("HINT");
  const bool t2 = hint_env && std::strcmp(hint_env, "t2") == 0;
  if (blk < 256 || blk % 256 != 0 || bytes % blk != 0) {
    std::fprintf(stderr, "BLOCK_BYTES must be a multiple of 256 that divides 256 MiB\n");
    return 2;
  }
  const size_t n = bytes / blk;
  auto* buf = static_cast<char*>(std::aligned_alloc(size_t{1} << 21, bytes));
  if (std::getenv("HUGE")) madvise(buf, bytes, MADV_HUGEPAGE);
  for (size_t i = 0; i < bytes; ++i) buf[i] = static_cast<char>(i);
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(1);
  if (shuffle) std::shuffle(order.begin(), order.end(), rng);
  __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
  double gbs = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (size_t i = 0; i < n; ++i) {
      const char* b = buf + order[i] * blk;
      if (dist) {
        const char* ahead = buf + order[(i + dist) % n] * blk;
        for (size_t o = 0; o < blk; o += 64) {
          if (t2) _mm_prefetch(ahead + o, _MM_HINT_T2);
          else _mm_prefetch(ahead + o, _MM_HINT_T0);
        }
      }
      for (size_t o = 0; o < blk; o += 256)
        for (int j = 0; j < 4; ++j)
          acc[j] = _mm512_add_ps(acc[j], _mm512_load_ps(reinterpret_cast<const float*>(b + o + 64 * j)));
    }
    gbs = static_cast<double>(bytes) / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e9;
  }
  float sink[16];
  _mm512_storeu_ps(sink, _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3])));
  std::printf("block %zu bytes, %s, prefetch %zu ahead%s%s: %.1f GB/s (%g)\n", blk, shuffle ? "shuffled" : "in order",
              dist, dist ? (t2 ? " (t2)" : " (t0)") : "", std::getenv("HUGE") ? ", huge pages" : "", gbs,
              static_cast<double>(sink[0]) * 0);
  std::free(buf);
  return 0;
}
