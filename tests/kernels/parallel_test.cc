// ParallelFor (core/parallel.h): every item once, whatever the threads, nesting and callers.
#include "core/parallel.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

namespace fathom {
namespace {

// Sets the OpenMP team size (which ParallelFor follows) for one test.
class Threads {
 public:
  explicit Threads(int n) : saved_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~Threads() { omp_set_num_threads(saved_); }

 private:
  int saved_;
};

TEST(ParallelFor, RunsEveryItemOnce) {
  for (const int threads : {1, 2, 3, 4}) {
    Threads t(threads);
    for (const int64_t n : {0L, 1L, 2L, 3L, 17L, 1000L, 100000L}) {
      for (const int64_t max_run : {int64_t{1}, int64_t{3}, INT64_MAX}) {
        std::vector<std::atomic<int>> count(static_cast<size_t>(n));
        ParallelFor(
            n, true, [&](int64_t i) { count[static_cast<size_t>(i)].fetch_add(1); }, max_run);
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(count[static_cast<size_t>(i)].load(), 1)
              << "item " << i << " of " << n << ", " << threads << " threads, runs of at most "
              << max_run;
      }
    }
  }
}

TEST(ParallelFor, SerialWhenNotParallelRunsInOrderOnTheCaller) {
  Threads t(4);
  std::vector<int64_t> order;
  const auto caller = std::this_thread::get_id();
  bool elsewhere = false;
  ParallelFor(100, false, [&](int64_t i) {
    order.push_back(i);
    elsewhere |= std::this_thread::get_id() != caller;
  });
  ASSERT_EQ(order.size(), 100u);
  for (int64_t i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  EXPECT_FALSE(elsewhere);
}

TEST(ParallelFor, WorkersTakePart) {
  // Items that each take ~100 us: with 2 threads a started worker takes some of them. Up to
  // five tries, for a host so loaded that the worker gets no core during one loop.
  Threads t(2);
  std::set<std::thread::id> ids;
  for (int attempt = 0; attempt < 5 && ids.size() < 2; ++attempt) {
    std::mutex mu;
    ParallelFor(200, true, [&](int64_t) {
      const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(100);
      while (std::chrono::steady_clock::now() < end) {
      }
      std::lock_guard<std::mutex> lock(mu);
      ids.insert(std::this_thread::get_id());
    });
  }
  EXPECT_GE(ParallelWorkersStarted(), 1);
  EXPECT_EQ(ids.size(), 2u) << "no item ran on a worker";
}

TEST(ParallelFor, WorkersRunDelayCountsTheirWaitForACore) {
  if (std::FILE* f = std::fopen("/proc/thread-self/schedstat", "r"))
    std::fclose(f);
  else
    GTEST_SKIP() << "no /proc/thread-self/schedstat on this kernel";
  Threads t(2);
  auto busy_items = [] {  // ~10 ms of 50 us items
    ParallelFor(200, true, [](int64_t) {
      const auto end = std::chrono::steady_clock::now() + std::chrono::microseconds(50);
      while (std::chrono::steady_clock::now() < end) {
      }
    });
  };
  busy_items();  // starts the worker
  ASSERT_GE(ParallelWorkersStarted(), 1);
  EXPECT_EQ(ParallelWorkersRunDelaySeconds(0), 0.0);
  const auto start = std::chrono::steady_clock::now();
  const double before = ParallelWorkersRunDelaySeconds(1);
  // One busy thread per CPU for 300 ms beside the loops: the caller and the worker are two
  // more runnable threads than there are CPUs, so the worker waits for one much of the time.
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (unsigned i = 0; i < std::max(1u, std::thread::hardware_concurrency()); ++i)
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < end) busy_items();
  stop = true;
  for (std::thread& s : spinners) s.join();
  const double waited = ParallelWorkersRunDelaySeconds(1) - before;
  const double wall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GT(waited, 0.005) << "the worker's run delay grew by " << waited
                           << " s in 300 ms of contention";
  // One worker cannot wait much longer than the time that passed (a wait is counted when it
  // ends, so one begun before `before` adds up to a time slice: the 50 ms of slack).
  EXPECT_LE(waited, wall + 0.05);
}

TEST(ParallelFor, NestedLoopsRunSerially) {
  Threads t(3);
  std::vector<std::atomic<int>> count(64 * 50);
  ParallelFor(64, true, [&](int64_t i) {
    const auto outer = std::this_thread::get_id();
    ParallelFor(50, true, [&](int64_t j) {
      EXPECT_EQ(std::this_thread::get_id(), outer);
      count[static_cast<size_t>(i * 50 + j)].fetch_add(1);
    });
  });
  for (size_t i = 0; i < count.size(); ++i) ASSERT_EQ(count[i].load(), 1) << i;
}

TEST(ParallelFor, ConcurrentCallersEachGetEveryItem) {
  // Several threads (each with its own team size) run loops at once: one holds the pool,
  // the others run theirs serially; none loses or repeats an item.
  constexpr int kCallers = 3, kLoops = 200, kItems = 500;
  std::vector<std::thread> callers;
  std::atomic<int> failures{0};
  for (int c = 0; c < kCallers; ++c)
    callers.emplace_back([&] {
      omp_set_num_threads(2);
      std::vector<std::atomic<int>> count(kItems);
      for (int loop = 0; loop < kLoops; ++loop) {
        for (auto& x : count) x.store(0);
        ParallelFor(kItems, true, [&](int64_t i) { count[static_cast<size_t>(i)].fetch_add(1); });
        for (auto& x : count)
          if (x.load() != 1) failures.fetch_add(1);
      }
    });
  for (auto& t : callers) t.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace
}  // namespace fathom
