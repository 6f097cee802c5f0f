#include "exec/exit_policy.h"

#include <algorithm>

namespace fathom {

bool CumulativeHazardExit::ShouldExit(int32_t, const StepSignal& s) {
  const double lambda = s.gate_lambda;
  cdf_ += lambda * survive_;
  survive_ *= 1.0 - lambda;
  return cdf_ >= q_b_;
}

std::string CumulativeHazardExit::Describe() const {
  return "cumulative exit probability >= " + std::to_string(q_);
}
std::string LatentDiffExit::Describe() const {
  return "latent change < " + std::to_string(t_);
}
std::string KlExit::Describe() const { return "KL between steps < " + std::to_string(t_); }

bool ReplayExit::ShouldExit(int32_t step, const StepSignal&) {
  if (depths_.empty()) return false;
  const size_t i = std::min(static_cast<size_t>(cur_), depths_.size() - 1);
  return step + ahead_ >= depths_[i];
}
std::string ReplayExit::Describe() const {
  return "replayed depths (" + std::to_string(depths_.size()) + " entries)";
}

RandomDepthExit::RandomDepthExit(double mean, int32_t min_depth, int32_t max_depth, uint64_t seed,
                                 int32_t ahead)
    : mean_(mean), min_(min_depth), max_(std::max(min_depth, max_depth)), ahead_(ahead), seed_(seed) {
  const int32_t n = max_ - min_;
  p_ = n > 0 ? std::clamp((mean - min_) / n, 0.0, 1.0) : 0.0;
}

int32_t RandomDepthExit::Depth(int64_t token) const {
  auto mix = [](uint64_t z) {  // splitmix64
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  };
  int32_t d = min_;
  uint64_t h = mix(seed_ ^ mix(static_cast<uint64_t>(token)));
  for (int32_t k = min_; k < max_; ++k) {
    h = mix(h);
    if (static_cast<double>(h >> 11) * 0x1.0p-53 < p_) ++d;
  }
  return d;
}

std::string RandomDepthExit::Describe() const {
  return "random depths, mean " + std::to_string(mean_) + ", min " + std::to_string(min_);
}

std::string MinDepthExit::Describe() const {
  return inner_->Describe() + ", at least " + std::to_string(min_depth_) + " steps";
}

}  // namespace fathom
