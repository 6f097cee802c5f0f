#include "core/bandwidth.h"

#include <algorithm>
#include <chrono>
#include <memory>

namespace fathom {
namespace {

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

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
    double t = Seconds();
    float sum = 0;
#pragma omp parallel for schedule(static) reduction(+ : sum)
    for (long i = 0; i < n; ++i) sum += pb[i];
    sink = sink + sum;
    bw.read_gbs = std::max(bw.read_gbs, gb / (Seconds() - t));

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
