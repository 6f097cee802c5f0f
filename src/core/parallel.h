// fathom's own thread pool for its kernels' parallel loops, in place of OpenMP's
// `parallel for`.
//
// Why: with another busy process on a 2-core host, libgomp's teams made 2 threads run at
// 0.45-0.57 of 1 thread (docs/BENCHMARKS.md "Threads under a competing load"): every
// region ends at a barrier that waits for each thread of the team, so a worker the OS has
// descheduled holds the whole step until its core comes back, and a static split gives it
// as much work as a thread that has a core to itself. Here a loop's items are claimed by
// whichever threads are running, in shrinking runs (long contiguous ones first, as OpenMP's
// guided schedule), and the call returns once every item is done: a worker that wakes late
// finds nothing left and costs nothing, and one that is preempted holds up only the run it
// took. The caller always works, so a loop never waits for a worker to start.
//
// Threads: up to omp_get_max_threads() (the team size --threads and the ThreadGovernor set)
// take part, the caller and workers started on first use. Idle workers spin briefly
// (parallel.cc says how long and why) and then sleep on a futex until the next loop. A
// ParallelFor from inside another (or from a second thread while one runs) runs serially on
// its caller, as nested OpenMP regions did. Items must be independent: which thread runs
// which item is not fixed, so kernels that split only their outputs keep the same bits for
// any thread count. oneDNN's matmuls (prefill, M > 16) run on it too, as tiles that are
// each a one-thread oneDNN matmul (kernels/matmul.cc); FATHOM_MATMUL=team puts them back on
// oneDNN's own OpenMP team.
// FATHOM_PARALLEL=openmp in the environment runs every loop as an OpenMP region instead
// (guided, or dynamic runs of one): the old behaviour, for comparisons in one binary.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

namespace fathom {

namespace parallel_internal {
// A loop body: fn(ctx, begin, end) runs items [begin, end).
using RangeFn = void (*)(void* ctx, int64_t begin, int64_t end);
// max_run: the most items one claim takes (guided runs are capped by it).
void Run(int64_t n, bool parallel, int64_t max_run, RangeFn fn, void* ctx);
}  // namespace parallel_internal

// Runs body(i) for every i in [0, n), on the pool's threads when `parallel` (and more than
// one thread is allowed), else in order on the calling thread. Threads claim guided runs:
// long contiguous ones first (what a kernel that prefetches its next item wants), shorter
// as the loop drains, at most max_run items each (1: one item a claim, for items of very
// different costs, as OpenMP's dynamic schedule).
template <typename Body>
void ParallelFor(int64_t n, bool parallel, Body&& body, int64_t max_run = INT64_MAX) {
  using B = std::remove_reference_t<Body>;
  auto range = [](void* ctx, int64_t begin, int64_t end) {
    B& b = *static_cast<B*>(ctx);
    for (int64_t i = begin; i < end; ++i) b(i);
  };
  parallel_internal::Run(n, parallel, max_run, range,
                         const_cast<void*>(static_cast<const void*>(std::addressof(body))));
}

// Idle workers stop spinning and sleep until the next loop: for a caller about to hand the
// cores to another runtime's threads (oneDNN's OpenMP team), which the spinning would slow.
void ParallelPark();

// Seconds the pool's first `workers` workers have spent runnable but waiting for a CPU since
// they started (the run delay in /proc/thread-self/schedstat), summed: the difference over a
// step is how long other processes held cores its workers needed (engine/thread_governor.h).
// Costs a read of a /proc file per worker (~2 us each). 0 where the kernel reports nothing.
double ParallelWorkersRunDelaySeconds(int workers);

// Workers the pool has started (0 before the first parallel loop); for tests.
int ParallelWorkersStarted();

}  // namespace fathom
