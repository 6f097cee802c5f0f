// Memory bandwidth probe: STREAM-style copy and triad loops plus a read-only sum, over
// arrays far larger than the caches, on all OpenMP threads. Benchmarks measure it in the
// same run as what they compare with it, since a shared host's bandwidth drifts.
#pragma once

#include <cstddef>

namespace fathom {

struct Bandwidth {
  double read_gbs = 0;   // the faster of two sums of one array (SumAll without and with
                         // software prefetch): bytes read / s
  double copy_gbs = 0;   // a = b: 2 x bytes / s
  double triad_gbs = 0;  // a = b + s c: 3 x bytes / s
  double best() const;   // the largest of the three
};

// Best of `reps` repetitions of each loop over arrays of `bytes_per_array` bytes.
Bandwidth MeasureBandwidth(size_t bytes_per_array = size_t{512} << 20, int reps = 4);

// The read loop MeasureBandwidth times: the sum of x[0 .. n) on all OpenMP threads, each over
// its own contiguous share, with vector accumulators (a loop that only reads, as a GEMV over
// its weights does). prefetch: each step also asks for its cache lines 32 KiB ahead into L2.
// Public so that a kernel's benchmark can time this loop over the kernel's own bytes.
float SumAll(const float* x, long n, bool prefetch);

}  // namespace fathom
