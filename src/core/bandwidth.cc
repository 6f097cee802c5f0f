#include "core/bandwidth.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <memory>

namespace fathom {
namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// How far ahead the prefetching read loop asks for its data, into L2: on a 2-core Zen 5 VM
// the hardware prefetchers alone left a read loop at 72-86% of what one with this software
// prefetch read in some spells (equal in others), and the bf16 GEMV, which prefetches as far
// ahead, then read its weights faster than the plain loop: a read bound that a kernel beat.
constexpr long kReadPrefetchFloats = (32 << 10) / sizeof(float);

}  // namespace

// Eight independent vector accumulators: a scalar `sum += x[i]` may not be reassociated, so
// it waits for each add's latency and measured a fifth of the machine's bandwidth.
float SumAll(const float* x, long n, bool prefetch) {
  float total = 0;
#pragma omp parallel reduction(+ : total)
  {
    const long threads = omp_get_num_threads(), t = omp_get_thread_num();
    const long per = ((n + threads - 1) / threads + 63) / 64 * 64;  // covers n
    const long lo = std::min(n, t * per), hi = std::min(n, lo + per);
    __m256 acc[8];
    for (__m256& a : acc) a = _mm256_setzero_ps();
    long i = lo;
    for (; i + 64 <= hi; i += 64) {
      if (prefetch)  // this step's four cache lines, kReadPrefetchFloats ahead
        for (int j = 0; j < 4; ++j)
          _mm_prefetch(reinterpret_cast<const char*>(x + i + kReadPrefetchFloats + 16 * j),
                       _MM_HINT_T1);
      for (int j = 0; j < 8; ++j) acc[j] = _mm256_add_ps(acc[j], _mm256_loadu_ps(x + i + 8 * j));
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])),
                                         _mm256_add_ps(_mm256_add_ps(acc[4], acc[5]), _mm256_add_ps(acc[6], acc[7]))));
    float s = 0;
    for (const float v : lanes) s += v;
    for (; i < hi; ++i) s += x[i];
    total += s;
  }
  return total;
}

double Bandwidth::best() const { return std::max({read_gbs, copy_gbs, triad_gbs}); }

Bandwidth MeasureBandwidth(size_t bytes_per_array, int reps) {
  const auto n = static_cast<long>(bytes_per_array / sizeof(float));
  std::unique_ptr<float[]> a(new float[static_cast<size_t>(n)]);
  std::unique_ptr<float[]> b(new float[static_cast<size_t>(n)]);
  std::unique_ptr<float[]> c(new float[static_cast<size_t>(n)]);
  float *pa = a.get(), *pb = b.get(), *pc = c.get();
#pragma omp parallel for schedule(static)
  for (long i = 0; i < n; ++i) pa[i] = 1.f, pb[i] = 2.f, pc[i] = 0.5f;

  const double gb = static_cast<double>(n) * sizeof(float) / 1e9;
  Bandwidth bw;
  volatile float sink = 0;
  for (int r = 0; r < reps; ++r) {
    double t = 0;
    for (const bool prefetch : {false, true}) {
      t = Seconds();
      sink = sink + SumAll(pb, n, prefetch);
      bw.read_gbs = std::max(bw.read_gbs, gb / (Seconds() - t));
    }

    t = Seconds();
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) pa[i] = pb[i];
    bw.copy_gbs = std::max(bw.copy_gbs, 2 * gb / (Seconds() - t));

    t = Seconds();
#pragma omp parallel for schedule(static)
    for (long i = 0; i < n; ++i) pa[i] = pb[i] + 0.5f * pc[i];
    bw.triad_gbs = std::max(bw.triad_gbs, 3 * gb / (Seconds() - t));
  }
  return bw;
}

}  // namespace fathom
