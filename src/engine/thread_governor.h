// ThreadGovernor: how many OpenMP threads the engine's next step runs on (issue 15, part 5).
//
// N threads are not always faster than 1. On a host where other processes hold cores, a
// statically split step waits at every barrier for the thread that shares its core, and
// libgomp's spinning waiters take time from it too: ouro-small measured 9.6 tok/s with 2
// threads against 240 with 1 on a contended 2-core VM (docs/BENCHMARKS_CDB.md). OpenMP's
// wait policy is read from the environment before main() runs, so a program cannot change
// it; what it can change is the team size of its next parallel region.
//
// The governor chooses that size per step shape from the engine's own step times, like a
// scheduler: a pure policy, no clock and no OpenMP inside (the engine times the step and
// sets the threads). Candidates are N, N/2, N/4, ..., 1. Per shape bucket (the stage:
// prefill, prelude, core or coda, and rows rounded up to a power of two: step time within a
// bucket varies little, and small and large steps may prefer different counts; a looped
// model's prelude, core and coda steps of the same rows differ 10-100x in cost, so a bucket
// that mixed them compared a probe of one stage with a mean of others) it keeps a decayed mean of
// the step seconds of each candidate and exploits the best; every `interval` steps of the bucket it
// probes a neighbouring candidate for `probe_steps` steps and switches when the probe's median
// beats the current mean by `switch_margin`. A probe that loses doubles the interval (up to
// max_interval), so a count that is 5x slower under load costs about probe_steps x 4 / max_interval
// of the steps; a current mean that rises by rise_factor over its value at the last decision (a
// competing load arrived) brings the next probe forward, and so does a switch in another bucket:
// every bucket still on the count that lost probes the winner's side at its next step (a load
// comes to the whole host, not to one shape, and a short run has too few steps per bucket for
// each to find it alone). The first step of a candidate in a bucket is not counted: it builds
// that count's matmul primitives.
//
// Timing alone is a weak signal under a load: with one busy process on 2 cores, 1 thread was
// only 7-10% faster per step than 2, near the switch margin, so half the probes of 1 thread
// lost to noise and half the steps stayed on 2 (0.97-0.99 of 1 thread's tok/s; BENCHMARKS.md
// "The governor by stage"). The engine therefore also reports how long the calling thread
// was off its CPU during the step (wall minus the thread's CPU time: the caller never
// sleeps in a step, so that is time spent waiting for a core another process holds) and how
// long the pool's workers waited, runnable, for a core (their run delay). Where the current
// count runs on more than one thread and its threads spend more than `contended_share` of
// the step's thread-time waiting, the host is contended: a probe of fewer threads
// then switches on any win (`contended_margin`), and contention that appears brings the
// next probe forward like a rise in step time. An idle host's steps are off-CPU ~0% of
// the time, and there the probes of fewer threads are skipped altogether (while the
// host's share of waiting, over all steps of the last second or so, stays at or below 3%):
// they only lost there, and in a short run, whose buckets probe at their 32nd and 96th
// steps, they were most of the governor's idle cost (BENCHMARKS.md, "The governor
// skips its probes on an idle host"). The price: on an idle host a shape whose steps are
// faster on fewer threads (too short to pay for the pool's fork and join) stays on N.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "sched/plan.h"

namespace fathom {

struct ThreadGovernorConfig {
  int max_threads = 1;          // N; 1: every step on one thread (the governor is off)
  int probe_steps = 3;          // counted steps a probe runs the other candidate (<= 8)
  int min_interval = 32;        // steps of a bucket between probes, after a switch
  int max_interval = 2048;      // the interval's cap as losing probes double it
  double switch_margin = 0.92;  // switch when probe median < margin x current mean
  double rise_factor = 1.5;     // current mean this much above its last-decision value: probe now
  double decay = 0.2;           // weight of a new sample in the decayed means
  // off-CPU share of a step's thread-time above which it is contended
  double contended_share = 0.05;
  double contended_margin = 1.0;  // switch margin for a probe of fewer threads when contended
  // The host's waiting: the off-CPU share of all steps on more than one thread, weighted by
  // their thread-time and decayed with a time constant of host_window_seconds. At or below
  // host_idle_share the host is idle, and a bucket's due probe of fewer threads is skipped:
  // on an idle host those probes only lost, and in short runs they were most of its cost.
  // 0 turns the skip off.
  double host_window_seconds = 1.0;
  double host_idle_share = 0.03;
};

struct ThreadGovernorStats {
  int64_t steps = 0, probes = 0, switches = 0;
  int64_t contended_steps = 0;  // counted steps on more than 1 thread over contended_share off-CPU
  int64_t skipped_probes = 0;   // probes of fewer threads skipped on an idle host
  // steps run at each candidate, in candidates() order
  std::vector<int64_t> steps_at;
};

class ThreadGovernor {
 public:
  static constexpr int kRowBuckets = 12;   // rows 1, 2, 4, ..., >= 2048
  static constexpr int kStageBuckets = 4;  // prefill, prelude, core, coda
  static constexpr int kBuckets = kStageBuckets * kRowBuckets;

  explicit ThreadGovernor(const ThreadGovernorConfig& config = {});

  // The bucket of a step: its stage, and its rows (prefill: prompt tokens).
  static int Bucket(Stage stage, int64_t rows);
  // Threads for the next step of this bucket.
  int Choose(int bucket);
  // The step of this bucket ran on `threads` (what Choose returned) in `seconds` of wall
  // time, while its threads waited for cores `off_cpu_seconds` thread-seconds in all
  // (negative: not measured, as none is on one thread); its off-CPU share is
  // off_cpu_seconds / (threads x seconds).
  void Record(int bucket, int threads, double seconds, double off_cpu_seconds = -1);

  const std::vector<int>& candidates() const { return candidates_; }
  // The count the bucket exploits now (not a probe's).
  int current(int bucket) const { return candidates_[static_cast<size_t>(buckets_[bucket].current)]; }
  const ThreadGovernorStats& stats() const { return stats_; }

 private:
  static constexpr int kMaxCandidates = 8, kMaxProbe = 8;
  struct BucketState {
    int current = 0;   // index into candidates_: starts at N
    int probing = -1;  // candidate under probe, or -1
    int probe_n = 0;   // probe seconds so far
    std::array<double, kMaxProbe> probe{};
    int interval = 0, until_probe = 0;
    int next_side = -1;          // which neighbour the next probe tries: -1 fewer, +1 more
    double mean_at_decision = 0;  // the current candidate's mean when it was last chosen
    bool contended_at_decision = false;
    std::array<double, kMaxCandidates> mean{};
    std::array<double, kMaxCandidates> off_cpu{};  // decayed off-CPU share of the steps
    std::array<bool, kMaxCandidates> warm{}, measured{};
  };
  int Index(int threads) const;
  int Neighbour(BucketState& b) const;
  // The bucket's candidate i runs on more than one thread and its steps wait for cores.
  bool Contended(const BucketState& b, int i) const;
  void EndProbe(BucketState& b);
  // Steps on more than one thread measured their waiting, and the host's decayed off-CPU
  // share is at or below host_idle_share.
  bool HostIdle() const;

  ThreadGovernorConfig config_;
  std::vector<int> candidates_;  // ascending: 1, ..., N
  std::array<BucketState, kBuckets> buckets_{};
  double host_off_cpu_ = 0, host_thread_seconds_ = 0;  // decayed sums (HostIdle)
  ThreadGovernorStats stats_;
};

}  // namespace fathom
