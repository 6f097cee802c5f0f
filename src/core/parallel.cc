// The pool behind ParallelFor (parallel.h).
//
// One loop runs at a time. Its state is published as one 64-bit word, generation << 32 |
// next unclaimed item: a thread claims a run [next, next + r) with a compare-and-swap that
// fails if the loop has changed, so a late worker can never take items of a newer loop, and
// it reads the loop's function only after such a claim succeeded (the caller wrote it
// before publishing the word). The caller returns when `done` counts every item.
#include "core/parallel.h"

#include <fcntl.h>
#include <immintrin.h>
#include <omp.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string_view>
#include <thread>
#include <vector>

namespace fathom {
namespace {

// Idle workers spin this long for the next loop before they sleep on a futex (waking one
// costs tens of microseconds, but the caller never waits for it: it starts the loop
// alone). Past kWorkerYieldAfter they yield between checks, so that a spinning worker
// gives its core to a thread that shares it. Short, because between a prefill's loops
// oneDNN runs its GEMMs on libgomp's own team, whose threads need these cores: with 2 ms
// of spinning (libgomp's order) prompts ran 5-14% slower than with OpenMP loops on this
// 2-core Zen 5 host, at 200 and 50 us on a par (the decode steps' loops follow each other
// closely enough either way); under a competing process, 50 us: 2 threads at 0.68-0.69 of
// 1 thread, 200 us: 0.56-0.78 (docs/BENCHMARKS.md "Threads under a competing load").
constexpr auto kWorkerSpin = std::chrono::microseconds(50);
constexpr auto kWorkerYieldAfter = std::chrono::microseconds(20);
// The caller, waiting for runs other threads hold, spins this long, then yields its core
// (to a preempted worker that shares it, if any) between checks.
constexpr auto kCallerSpin = std::chrono::microseconds(50);

thread_local bool t_inside = false;  // in a loop's body (or a worker): nested loops run serially

class Pool {
 public:
  // Runs the loop on the caller and up to threads - 1 workers; returns when all is done.
  void Run(int64_t n, int threads, int64_t max_run, parallel_internal::RangeFn fn, void* ctx) {
    StartWorkers(threads - 1);
    n_.store(n, std::memory_order_relaxed);
    max_run_.store(std::max<int64_t>(1, max_run), std::memory_order_relaxed);
    threads_.store(threads, std::memory_order_relaxed);
    fn_.store(fn, std::memory_order_relaxed);
    ctx_.store(ctx, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    park_.store(false, std::memory_order_relaxed);
    const uint32_t gen = ++last_gen_;
    word_.store(uint64_t{gen} << 32, std::memory_order_release);
    generation_.store(gen, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) generation_.notify_all();
    Work(gen);
    const auto start = std::chrono::steady_clock::now();
    for (int spins = 0; done_.load(std::memory_order_acquire) < n; ++spins) {
      if (spins < 64 || std::chrono::steady_clock::now() - start < kCallerSpin)
        _mm_pause();
      else
        sched_yield();
    }
  }

  int started() const { return started_.load(std::memory_order_relaxed); }

  double RunDelaySeconds(int workers) {
    std::lock_guard<std::mutex> lock(schedstat_mu_);
    uint64_t ns = 0;
    for (size_t i = 0; i < schedstat_.size() && static_cast<int>(i) < workers; ++i) {
      char buf[96];
      const ssize_t got = schedstat_[i] < 0 ? -1 : pread(schedstat_[i], buf, sizeof buf - 1, 0);
      if (got <= 0) continue;
      buf[got] = '\0';
      // "<ns on cpu> <ns waiting on a run queue> <timeslices>"
      char* end = nullptr;
      std::strtoull(buf, &end, 10);
      ns += std::strtoull(end, nullptr, 10);
    }
    return 1e-9 * static_cast<double>(ns);
  }
  void Park() { park_.store(true, std::memory_order_relaxed); }
  std::mutex& busy() { return busy_; }

 private:
  // Claims runs of the loop `gen` until none are left (or the loop is another).
  void Work(uint32_t gen) {
    uint64_t w = word_.load(std::memory_order_acquire);
    for (;;) {
      if (static_cast<uint32_t>(w >> 32) != gen) return;
      const auto next = static_cast<int64_t>(w & 0xFFFFFFFFu);
      const int64_t n = n_.load(std::memory_order_relaxed);
      if (next >= n) return;
      // Guided: long contiguous runs first, shorter ones as the loop drains.
      const int64_t guided = (n - next) / (2 * threads_.load(std::memory_order_relaxed));
      const int64_t run = std::clamp<int64_t>(guided, 1, max_run_.load(std::memory_order_relaxed));
      if (!word_.compare_exchange_weak(w, w + static_cast<uint64_t>(run), std::memory_order_acq_rel,
                                       std::memory_order_acquire))
        continue;
      fn_.load(std::memory_order_relaxed)(ctx_.load(std::memory_order_relaxed), next, next + run);
      done_.fetch_add(run, std::memory_order_release);
      w = word_.load(std::memory_order_acquire);
    }
  }

  void StartWorkers(int count) {
    for (int i = started_.load(std::memory_order_relaxed); i < count; ++i) {
      std::thread([this, i] { WorkerLoop(i); }).detach();
      started_.store(i + 1, std::memory_order_relaxed);
    }
  }

  void WorkerLoop(int index) {
    t_inside = true;
    {  // this thread's scheduler statistics, for RunDelaySeconds (-1 where there are none)
      const int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
      std::lock_guard<std::mutex> lock(schedstat_mu_);
      if (schedstat_.size() <= static_cast<size_t>(index))
        schedstat_.resize(static_cast<size_t>(index) + 1, -1);
      schedstat_[static_cast<size_t>(index)] = fd;
    }
    uint32_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      uint32_t gen = 0;
      auto idle_since = std::chrono::steady_clock::now();
      bool yielding = false;
      for (int spins = 0; (gen = generation_.load(std::memory_order_acquire)) == seen; ++spins) {
        if (yielding)
          sched_yield();
        else
          _mm_pause();
        const bool park = park_.load(std::memory_order_relaxed);
        if (spins % 64 != 63 && !park) continue;
        const auto idle = std::chrono::steady_clock::now() - idle_since;
        yielding = idle >= kWorkerYieldAfter;
        if (idle < kWorkerSpin && !park) continue;
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        generation_.wait(seen, std::memory_order_seq_cst);  // returns at once if it moved
        sleepers_.fetch_sub(1, std::memory_order_seq_cst);
        idle_since = std::chrono::steady_clock::now();
        yielding = false;
      }
      seen = gen;
      if (index < threads_.load(std::memory_order_relaxed) - 1) Work(gen);
    }
  }

  std::atomic<uint64_t> word_{0};        // generation << 32 | next unclaimed item
  std::atomic<uint32_t> generation_{0};  // the futex word idle workers sleep on
  std::atomic<int64_t> done_{0};         // items of the current loop finished
  std::atomic<int> sleepers_{0};
  std::atomic<int> started_{0};
  std::atomic<bool> park_{false};  // ParallelPark: idle workers sleep now
  // The current loop, valid for the generation in word_ (written before it is published).
  std::atomic<int64_t> n_{0};
  std::atomic<int> threads_{1};
  std::atomic<int64_t> max_run_{1};
  std::atomic<parallel_internal::RangeFn> fn_{nullptr};
  std::atomic<void*> ctx_{nullptr};
  uint32_t last_gen_ = 0;  // the caller's (under busy_)
  std::mutex busy_;        // one loop at a time
  std::mutex schedstat_mu_;
  std::vector<int> schedstat_;  // each worker's /proc/thread-self/schedstat, by index
};

// Never destroyed: its detached workers run until the process ends.
Pool& ThePool() {
  static Pool* pool = new Pool;
  return *pool;
}

// FATHOM_PARALLEL=openmp: loops run as OpenMP `parallel for` regions (guided, or dynamic
// runs of one for max_run 1), as before the pool: for comparisons in one binary.
bool UseOpenMp() {
  static const bool openmp = [] {
    const char* v = std::getenv("FATHOM_PARALLEL");
    return v != nullptr && std::string_view(v) == "openmp";
  }();
  return openmp;
}

}  // namespace

namespace parallel_internal {

void Run(int64_t n, bool parallel, int64_t max_run, RangeFn fn, void* ctx) {
  if (n <= 0) return;
  if (UseOpenMp()) {
    if (max_run == 1) {
#pragma omp parallel for schedule(dynamic, 1) if (parallel && n > 1)
      for (int64_t i = 0; i < n; ++i) fn(ctx, i, i + 1);
    } else {
#pragma omp parallel for schedule(guided) if (parallel && n > 1)
      for (int64_t i = 0; i < n; ++i) fn(ctx, i, i + 1);
    }
    return;
  }
  const int threads = parallel && !t_inside && n > 1 && n <= 0xFFFFFFFF ? omp_get_max_threads() : 1;
  if (threads <= 1) return fn(ctx, 0, n);
  Pool& pool = ThePool();
  std::unique_lock<std::mutex> lock(pool.busy(), std::try_to_lock);
  if (!lock.owns_lock()) return fn(ctx, 0, n);  // another thread's loop holds the pool
  t_inside = true;
  pool.Run(n, threads, max_run, fn, ctx);
  t_inside = false;
}

}  // namespace parallel_internal

int ParallelWorkersStarted() { return ThePool().started(); }

double ParallelWorkersRunDelaySeconds(int workers) { return ThePool().RunDelaySeconds(workers); }

void ParallelPark() { ThePool().Park(); }

}  // namespace fathom
