#include "engine/thread_governor.h"

#include <algorithm>
#include <cmath>

namespace fathom {

ThreadGovernor::ThreadGovernor(const ThreadGovernorConfig& config) : config_(config) {
  config_.probe_steps = std::clamp(config_.probe_steps, 1, kMaxProbe);
  config_.min_interval = std::max(config_.min_interval, 1);
  config_.max_interval = std::max(config_.max_interval, config_.min_interval);
  for (int t = std::max(config_.max_threads, 1); t >= 1 && candidates_.size() < kMaxCandidates; t /= 2)
    candidates_.insert(candidates_.begin(), t);
  stats_.steps_at.assign(candidates_.size(), 0);
  for (BucketState& b : buckets_) {
    b.current = static_cast<int>(candidates_.size()) - 1;
    b.interval = b.until_probe = config_.min_interval;
  }
}

int ThreadGovernor::Bucket(Stage stage, int64_t rows) {
  int log2 = 0;
  while (log2 < kRowBuckets - 1 && (int64_t{1} << log2) < rows) ++log2;
  // kIdle plans do not run; they share the core's buckets rather than have their own.
  const int kind = stage == Stage::kPrefill   ? 0
                   : stage == Stage::kPrelude ? 1
                   : stage == Stage::kCoda    ? 3
                                              : 2;
  return kind * kRowBuckets + log2;
}

int ThreadGovernor::Index(int threads) const {
  for (size_t i = 0; i < candidates_.size(); ++i)
    if (candidates_[i] == threads) return static_cast<int>(i);
  return -1;
}

// The candidate next to the current one on the side the bucket tries next (the other side
// at either end of the list).
int ThreadGovernor::Neighbour(BucketState& b) const {
  const int last = static_cast<int>(candidates_.size()) - 1;
  if (b.current + b.next_side < 0 || b.current + b.next_side > last) b.next_side = -b.next_side;
  return b.current + b.next_side;
}

int ThreadGovernor::Choose(int bucket) {
  BucketState& b = buckets_[static_cast<size_t>(std::clamp(bucket, 0, kBuckets - 1))];
  if (candidates_.size() == 1) return candidates_[0];
  if (b.probing < 0 && b.until_probe <= 0) {
    const int next = Neighbour(b);
    if (next < b.current && config_.host_idle_share > 0 && HostIdle()) {
      // Nothing else wants the cores: fewer threads would only be slower (a bucket's own
      // contention on an idle host is a spike of one step). Look again after the interval,
      // not doubled: a load that comes is found then.
      b.until_probe = b.interval;
      ++stats_.skipped_probes;
    } else {
      b.probing = next;
      b.probe_n = 0;
      ++stats_.probes;
    }
  }
  return candidates_[static_cast<size_t>(b.probing >= 0 ? b.probing : b.current)];
}

bool ThreadGovernor::HostIdle() const {
  return host_thread_seconds_ > 0 &&
         host_off_cpu_ <= config_.host_idle_share * host_thread_seconds_;
}

bool ThreadGovernor::Contended(const BucketState& b, int i) const {
  return candidates_[static_cast<size_t>(i)] > 1 &&
         b.off_cpu[static_cast<size_t>(i)] > config_.contended_share;
}

void ThreadGovernor::Record(int bucket, int threads, double seconds, double off_cpu_seconds) {
  BucketState& b = buckets_[static_cast<size_t>(std::clamp(bucket, 0, kBuckets - 1))];
  const int i = Index(threads);
  if (i < 0 || !(seconds >= 0)) return;  // not a count the governor chose, or no time
  ++stats_.steps;
  ++stats_.steps_at[static_cast<size_t>(i)];
  if (!b.warm[static_cast<size_t>(i)]) {  // builds this count's primitives: not counted
    b.warm[static_cast<size_t>(i)] = true;
    return;
  }
  const bool measured = off_cpu_seconds >= 0;
  const double share =
      measured && seconds > 0 ? std::clamp(off_cpu_seconds / (threads * seconds), 0.0, 1.0) : 0.0;
  if (threads > 1 && share > config_.contended_share) ++stats_.contended_steps;
  if (threads > 1 && measured) {  // the host's window: older steps weigh exp(-elapsed / window)
    const double keep = std::exp(-seconds / std::max(config_.host_window_seconds, 1e-9));
    host_off_cpu_ = keep * host_off_cpu_ + share * threads * seconds;
    host_thread_seconds_ = keep * host_thread_seconds_ + threads * seconds;
  }
  double& off_cpu = b.off_cpu[static_cast<size_t>(i)];  // probes' steps too: a load seen is a load
  off_cpu =
      b.measured[static_cast<size_t>(i)] ? off_cpu + config_.decay * (share - off_cpu) : share;
  if (i == b.probing) {
    b.probe[static_cast<size_t>(b.probe_n++)] = seconds;
    if (b.probe_n == config_.probe_steps) EndProbe(b);
    return;
  }
  if (i != b.current) return;
  double& mean = b.mean[static_cast<size_t>(i)];
  if (!b.measured[static_cast<size_t>(i)]) {
    mean = b.mean_at_decision = seconds;
    b.measured[static_cast<size_t>(i)] = true;
  } else {
    mean += config_.decay * (seconds - mean);
  }
  --b.until_probe;
  if (mean > config_.rise_factor * b.mean_at_decision) {  // slower than when chosen: look again
    b.until_probe = 0;
    b.interval = config_.min_interval;
  } else if (Contended(b, i) && !b.contended_at_decision) {
    // Waiting for cores where it did not: fewer threads are the count to try, once per spell
    // of contention, against a mean of the steps since (the decayed one still holds the
    // faster steps of before), so after probe_steps of them.
    b.contended_at_decision = true;
    b.next_side = -1;
    mean = seconds;
    b.until_probe = config_.probe_steps;
    b.interval = config_.min_interval;
  }
}

// The probe's median (one step that built a primitive or met a page fault does not decide)
// against the current candidate's decayed mean; a probe of fewer threads needs only to be
// faster where the current count's steps wait for cores.
void ThreadGovernor::EndProbe(BucketState& b) {
  std::sort(b.probe.begin(), b.probe.begin() + b.probe_n);
  const double probe = b.probe[static_cast<size_t>(b.probe_n / 2)];
  const auto p = static_cast<size_t>(b.probing);
  b.mean[p] = probe;
  b.measured[p] = true;
  const auto c = static_cast<size_t>(b.current);
  const double margin = b.probing < b.current && Contended(b, b.current) ? config_.contended_margin
                                                                         : config_.switch_margin;
  if (b.measured[c] && probe < margin * b.mean[c]) {
    // A competing load (or its end) is the host's, not one shape's: every other bucket
    // still on the count that lost probes the winner's side at its next step.
    const int side = b.probing > b.current ? 1 : -1;
    for (BucketState& o : buckets_)
      if (&o != &b && o.current == b.current && o.probing < 0) {
        o.until_probe = 0;
        o.next_side = side;
      }
    b.current = b.probing;  // and the next probe goes on in the same direction
    b.interval = config_.min_interval;
    ++stats_.switches;
  } else {
    b.interval = std::min(2 * b.interval, config_.max_interval);
    b.next_side = -b.next_side;
  }
  b.mean_at_decision = b.mean[static_cast<size_t>(b.current)];
  b.contended_at_decision = Contended(b, b.current);
  b.until_probe = b.interval;
  b.probing = -1;
}

}  // namespace fathom
