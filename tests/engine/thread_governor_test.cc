// ThreadGovernor against simulated hosts: each test's host says what a step costs on t
// threads (and when a competing load arrives or leaves); the governor sees only the
// seconds of the steps it chose, as the engine's step timer gives them.
#include "engine/thread_governor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <random>

namespace fathom {
namespace {

using Host = std::function<double(int64_t step, int threads)>;

struct Counts {
  int64_t steps_at_one = 0, steps_at_max = 0;
};

// Steps [from, to) of one bucket on `host`; counts the steps by thread count.
Counts Drive(ThreadGovernor& g, const Host& host, int64_t from, int64_t to, int bucket = 0) {
  Counts r;
  for (int64_t s = from; s < to; ++s) {
    const int t = g.Choose(bucket);
    g.Record(bucket, t, host(s, t));
    if (t == 1) ++r.steps_at_one;
    if (t == g.candidates().back()) ++r.steps_at_max;
  }
  return r;
}

// 2 threads 1.8x faster than 1 (an idle 2-core host, a memory-bound decode step).
double Idle(int threads) { return threads == 2 ? 1e-3 / 1.8 : 1e-3; }
// Under a competing load: 1 thread a little slower, 2 threads 5x slower than 1 (what
// BENCHMARKS_CDB.md and this measurements saw on the 2-core VM).
double Loaded(int threads) { return threads == 2 ? 5.5e-3 : 1.1e-3; }

TEST(ThreadGovernor, CandidatesAreTheHalvingsOfTheMaximum) {
  EXPECT_EQ(ThreadGovernor({.max_threads = 8}).candidates(), (std::vector<int>{1, 2, 4, 8}));
  EXPECT_EQ(ThreadGovernor({.max_threads = 6}).candidates(), (std::vector<int>{1, 3, 6}));
  EXPECT_EQ(ThreadGovernor({.max_threads = 2}).candidates(), (std::vector<int>{1, 2}));
  EXPECT_EQ(ThreadGovernor({.max_threads = 0}).candidates(), (std::vector<int>{1}));
}

TEST(ThreadGovernor, OneThreadConfiguredIsOneThreadAlways) {
  ThreadGovernor g({.max_threads = 1});
  const Counts r = Drive(g, [](int64_t, int t) { return t == 1 ? 1.0 : 0.001; }, 0, 1000);
  EXPECT_EQ(r.steps_at_one, 1000);
  EXPECT_EQ(g.stats().probes, 0);
}

TEST(ThreadGovernor, BucketsSplitStagesAndRowsByPowersOfTwo) {
  constexpr int R = ThreadGovernor::kRowBuckets;
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kPrefill, 1), 0);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kPrefill, 256), 8);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kPrelude, 1), R);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kCore, 1), 2 * R);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kCore, 2), 2 * R + 1);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kCore, 3), 2 * R + 2);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kCore, 4), 2 * R + 2);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kCore, 5), 2 * R + 3);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kCoda, 1), 3 * R);
  EXPECT_EQ(ThreadGovernor::Bucket(Stage::kCoda, 1 << 20), ThreadGovernor::kBuckets - 1);
}

TEST(ThreadGovernor, AnIdleHostKeepsAllThreadsAndProbesLessThanOnePercent) {
  ThreadGovernor g({.max_threads = 2});
  const Counts r = Drive(g, [](int64_t, int t) { return Idle(t); }, 0, 20000);
  EXPECT_EQ(g.current(0), 2);
  EXPECT_EQ(g.stats().switches, 0);
  // Probes at 32, 96, 224, ... steps (the interval doubling to 2048): 14 in 20000 steps,
  // 3 counted steps each and one uncounted first step.
  EXPECT_LT(r.steps_at_one, 20000 / 100);
  EXPECT_GT(r.steps_at_one, 0);
}

TEST(ThreadGovernor, ACompetingLoadMovesItToOneThreadWithinAFewSteps) {
  ThreadGovernor g({.max_threads = 2});
  const Host host = [](int64_t s, int t) { return s < 3000 ? Idle(t) : Loaded(t); };
  Drive(g, host, 0, 3000);
  ASSERT_EQ(g.current(0), 2);
  // The loaded steps at 2 threads raise the mean past rise_factor within two steps (decay
  // 0.2), the probe runs 3 steps: one thread from about the 6th loaded step on.
  Drive(g, host, 3000, 3008);
  EXPECT_EQ(g.current(0), 1);
  // Under the load from then on, 2 threads only in probes: 5x slower, so what the probes
  // cost is what matters, and the doubling interval keeps it small.
  const Counts r = Drive(g, host, 3008, 23008);
  EXPECT_EQ(g.current(0), 1);
  EXPECT_LT(r.steps_at_max, 20000 / 100);
}

TEST(ThreadGovernor, AfterTheLoadLeavesItReturnsWithinTheLongestProbeInterval) {
  ThreadGovernorConfig config{.max_threads = 2};
  ThreadGovernor g(config);
  const Host host = [](int64_t s, int t) { return s < 10000 ? Loaded(t) : Idle(t); };
  Drive(g, host, 0, 10000);
  ASSERT_EQ(g.current(0), 1);
  Drive(g, host, 10000, 10000 + config.max_interval + config.probe_steps + 1);
  EXPECT_EQ(g.current(0), 2);
}

TEST(ThreadGovernor, NoisyStepTimesStillPickTheFasterCount) {
  // +-25% multiplicative noise on every step; 2 threads 1.4x faster. The governor must spend
  // at least 95% of the steps on 2 threads.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> noise(0.75, 1.25);
  ThreadGovernor g({.max_threads = 2});
  const Counts r = Drive(g, [&](int64_t, int t) { return noise(rng) * (t == 2 ? 1.0 / 1.4 : 1.0); }, 0, 20000);
  EXPECT_GT(r.steps_at_max, 20000 * 95 / 100);
  // And the other way round: 1 thread 1.4x faster.
  ThreadGovernor h({.max_threads = 2});
  const Counts s = Drive(h, [&](int64_t, int t) { return noise(rng) * (t == 1 ? 1.0 / 1.4 : 1.0); }, 0, 20000);
  EXPECT_GT(s.steps_at_one, 20000 * 95 / 100);
}

TEST(ThreadGovernor, OneSlowFirstStepOfACountDoesNotDecide) {
  // Each count's first step builds its primitives (100x slower); 2 threads are faster after.
  ThreadGovernor g({.max_threads = 2});
  int seen[3] = {0, 0, 0};
  Drive(g, [&](int64_t, int t) { return (seen[t]++ == 0 ? 100.0 : 1.0) * Idle(t); }, 0, 5000);
  EXPECT_EQ(g.current(0), 2);
  EXPECT_EQ(g.stats().switches, 0);
}

TEST(ThreadGovernor, ManyCandidatesClimbToTheBestOne) {
  // 8 threads allowed, but 3 cores are held by other work: 4 threads is the fastest.
  const std::map<int, double> cost = {{1, 4.0}, {2, 2.1}, {4, 1.2}, {8, 3.0}};
  ThreadGovernor g({.max_threads = 8});
  Drive(g, [&](int64_t, int t) { return cost.at(t); }, 0, 2000);
  EXPECT_EQ(g.current(0), 4);
  // And down to 1 when one thread is the fastest.
  const std::map<int, double> serial = {{1, 1.0}, {2, 1.5}, {4, 2.5}, {8, 6.0}};
  ThreadGovernor h({.max_threads = 8});
  Drive(h, [&](int64_t, int t) { return serial.at(t); }, 0, 2000);
  EXPECT_EQ(h.current(0), 1);
}

TEST(ThreadGovernor, BucketsDecideApart) {
  // Small decode steps are faster on 1 thread (barriers cost more than the work), large
  // prefill steps on 2.
  ThreadGovernor g({.max_threads = 2});
  const int small = ThreadGovernor::Bucket(Stage::kCore, 1),
            large = ThreadGovernor::Bucket(Stage::kPrefill, 256);
  for (int s = 0; s < 3000; ++s) {
    const int a = g.Choose(small);
    g.Record(small, a, a == 1 ? 1e-4 : 3e-4);
    const int b = g.Choose(large);
    g.Record(large, b, b == 2 ? 5e-3 : 9e-3);
  }
  EXPECT_EQ(g.current(small), 1);
  EXPECT_EQ(g.current(large), 2);
}

TEST(ThreadGovernor, ALoopedModelsStagesOfTheSameRowsDecideApart) {
  // A looped model's steps at 8 rows, in CB's order: prelude, four core steps, coda, each
  // 1.8x faster on 2 threads (an idle host) but 20x apart in cost. Had the stages shared a
  // bucket, a probe's median of whichever stages it met would be compared with a mean of
  // others (the first bucketing sent 30-42% of an idle host's steps to 1 thread).
  ThreadGovernor g({.max_threads = 2});
  const std::map<Stage, double> cost = {
      {Stage::kPrelude, 5e-5}, {Stage::kCore, 1e-3}, {Stage::kCoda, 2e-4}};
  const Stage order[] = {Stage::kPrelude, Stage::kCore, Stage::kCore,
                         Stage::kCore,    Stage::kCore, Stage::kCoda};
  int64_t at_two = 0, steps = 0;
  for (int round = 0; round < 4000; ++round)
    for (Stage stage : order) {
      const int bucket = ThreadGovernor::Bucket(stage, 8);
      const int t = g.Choose(bucket);
      g.Record(bucket, t, cost.at(stage) / (t == 2 ? 1.8 : 1.0));
      at_two += t == 2;
      ++steps;
    }
  EXPECT_EQ(g.stats().switches, 0);
  EXPECT_GT(at_two, steps * 99 / 100);
}

TEST(ThreadGovernor, ASwitchInOneBucketBringsTheOthersProbeForward) {
  // Two buckets, core steps four times as often as coda steps. A mild load (2 threads from
  // 1.25x faster to 1.1x slower than 1: under rise_factor, so no bucket's own mean calls a
  // probe) arrives after both probe intervals have grown to their cap; each bucket alone
  // would find it only at its next scheduled probe (up to max_interval of its own steps).
  const ThreadGovernorConfig config{.max_threads = 2};
  ThreadGovernor g(config);
  const int core = ThreadGovernor::Bucket(Stage::kCore, 8),
            coda = ThreadGovernor::Bucket(Stage::kCoda, 8);
  bool loaded = false;
  auto step = [&](int bucket) {
    const int t = g.Choose(bucket);
    g.Record(bucket, t, loaded ? (t == 2 ? 1.1 : 1.0) : (t == 2 ? 0.8 : 1.0));
  };
  auto round = [&] {
    for (int i = 0; i < 4; ++i) step(core);
    step(coda);
  };
  for (int r = 0; r < 20000; ++r) round();
  ASSERT_EQ(g.current(core), 2);
  ASSERT_EQ(g.current(coda), 2);
  loaded = true;
  int first = -1;
  for (int r = 0; r < 4000 && first < 0; ++r) {
    round();
    if (g.current(core) == 1 || g.current(coda) == 1) first = r;
  }
  ASSERT_GE(first, 0) << "neither bucket found the load";
  // The other one probes at its next step: its probe (probe_steps counted steps, and a first
  // step at 1 thread that is not counted if it never ran there) ends within probe_steps + 2.
  for (int r = 0; r < config.probe_steps + 2; ++r) round();
  EXPECT_EQ(g.current(core), 1);
  EXPECT_EQ(g.current(coda), 1);
}

// Steps of one bucket where 2 threads are `slower` x 1 thread's time (+-3% noise), and
// each step on 2 threads reports that its threads waited `share` of its thread-time for
// cores (share < 0: no waiting measured; steps on 1 thread measure none, as the engine's).
// Returns the steps on 1 thread.
int64_t DriveContended(ThreadGovernor& g, std::mt19937& rng, int64_t steps, double slower,
                       double share) {
  std::uniform_real_distribution<double> noise(0.97, 1.03);
  int64_t at_one = 0;
  for (int64_t s = 0; s < steps; ++s) {
    const int t = g.Choose(0);
    const double seconds = noise(rng) * (t == 2 ? slower * 1e-3 : 1e-3);
    g.Record(0, t, seconds, t == 2 && share >= 0 ? share * 2 * seconds : -1.0);
    at_one += t == 1;
  }
  return at_one;
}

TEST(ThreadGovernor, UnderContentionFewerThreadsWinOnAnyMargin) {
  // One busy process on 2 cores: 2 threads 4% slower than 1 (under the 8% switch margin),
  // their threads waiting for cores a quarter of the time.
  std::mt19937 rng(11);
  ThreadGovernor g({.max_threads = 2});
  EXPECT_GT(DriveContended(g, rng, 20000, 1.04, 0.25), 20000 * 95 / 100);
  EXPECT_GT(g.stats().contended_steps, 0);
  // The same step times with no waiting measured: timing alone keeps 2 threads.
  ThreadGovernor h({.max_threads = 2});
  EXPECT_LT(DriveContended(h, rng, 20000, 1.04, -1), 20000 / 100);
  EXPECT_GT(h.stats().probes, 0);
  EXPECT_EQ(h.stats().contended_steps, 0);
}

TEST(ThreadGovernor, ShortWaitsOfAnIdleHostChangeNothing) {
  // 2 threads 1.3x faster; their threads off-CPU 2% of the time (interrupts, daemons).
  std::mt19937 rng(12);
  ThreadGovernor g({.max_threads = 2});
  EXPECT_LT(DriveContended(g, rng, 20000, 1 / 1.3, 0.02), 20000 / 100);
  EXPECT_EQ(g.stats().switches, 0);
  EXPECT_EQ(g.stats().contended_steps, 0);
  // Contended but 2 threads still much faster (a light load): no switch either.
  ThreadGovernor h({.max_threads = 2});
  EXPECT_LT(DriveContended(h, rng, 20000, 1 / 1.3, 0.2), 20000 / 100);
  EXPECT_EQ(h.stats().switches, 0);
}

TEST(ThreadGovernor, ContentionThatAppearsBringsTheProbeForward) {
  // Idle until the probe interval has grown to its cap; then a load that makes 2 threads 4%
  // slower than 1 (well under rise_factor) and has them wait a quarter of the time.
  std::mt19937 rng(13);
  const ThreadGovernorConfig config{.max_threads = 2};
  ThreadGovernor g(config);
  DriveContended(g, rng, 20000, 1 / 1.3, 0.0);
  ASSERT_EQ(g.current(0), 2);
  EXPECT_EQ(g.stats().probes, 0);  // the idle host measured its waiting: no probe of 1 thread
  // The bucket's mean share passes 5% at the second step (decay 0.2), which calls a probe;
  // it runs once the host's share over its 1 s window passes 3% (2 threads x 1 s of
  // thread-time, 0.5 ms of waiting a step: ~120 steps), at the bucket's next look (every
  // min_interval steps), for probe_steps steps (after a first one on 1 thread that is not
  // counted: it never ran there). So about 150 steps (0.15 s) of the load, not the up to
  // max_interval (2048) steps of the next scheduled probe.
  int steps = 0;
  while (g.current(0) != 1 && steps < config.max_interval) {
    DriveContended(g, rng, 1, 1.04, 0.25);
    ++steps;
  }
  EXPECT_EQ(g.current(0), 1);
  EXPECT_LE(steps, 120 + config.min_interval + config.probe_steps + 2);
}

TEST(ThreadGovernor, AnIdleHostThatMeasuresItsWaitingProbesNoFewerThreads) {
  // 2 threads 1.3x faster, and their waiting measured at 0 on every step: the probes of 1
  // thread that only lose are skipped (in a short run they were most of the governor's idle
  // cost). Without the waiting measured, the probes run as before.
  std::mt19937 rng(14);
  ThreadGovernor g({.max_threads = 2});
  EXPECT_EQ(DriveContended(g, rng, 5000, 1 / 1.3, 0.0), 0);
  EXPECT_EQ(g.stats().probes, 0);
  EXPECT_GT(g.stats().skipped_probes, 0);
  ThreadGovernor h({.max_threads = 2});
  EXPECT_GT(DriveContended(h, rng, 5000, 1 / 1.3, -1), 0);  // its probes
  EXPECT_GT(h.stats().probes, 0);
  EXPECT_EQ(h.stats().skipped_probes, 0);
  // The cost of the skip: on an idle host a shape whose steps are faster on 1 thread (a
  // step too short to pay for the pool's fork and join) stays on 2.
  ThreadGovernor k({.max_threads = 2});
  EXPECT_EQ(DriveContended(k, rng, 5000, 1.3, 0.0), 0);
}

TEST(ThreadGovernor, AHostWhoseThreadsWaitALittleStillProbesFewerThreads) {
  // 2 threads 10% slower (past the 8% margin on time alone), waiting 4% of their time: under
  // the 5% that makes the bucket contended, over the 3% of an idle host, so the probes run
  // and time alone moves the bucket to 1 thread.
  std::mt19937 rng(15);
  ThreadGovernor g({.max_threads = 2});
  EXPECT_GT(DriveContended(g, rng, 5000, 1.1, 0.04), 5000 * 95 / 100);
  EXPECT_EQ(g.stats().contended_steps, 0);
  EXPECT_EQ(g.stats().skipped_probes, 0);
}

TEST(ThreadGovernor, CountsItDidNotChooseAreIgnored) {
  ThreadGovernor g({.max_threads = 2});
  g.Record(0, 3, 1.0);    // not a candidate
  g.Record(0, 2, -1.0);   // no time
  g.Record(0, 2, NAN);
  EXPECT_EQ(g.stats().steps, 0);
}

}  // namespace
}  // namespace fathom
