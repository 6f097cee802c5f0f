#include "exec/exit_policy.h"

namespace fathom {

bool CumulativeHazardExit::ShouldExit(int32_t, const StepSignal& s) {
  const double lambda = s.gate_lambda;
  cdf_ += lambda * survive_;
  survive_ *= 1.0 - lambda;
  return cdf_ >= q_;
}

std::string CumulativeHazardExit::Describe() const {
  return "cumulative exit probability >= " + std::to_string(q_);
}
std::string LatentDiffExit::Describe() const {
  return "latent change < " + std::to_string(t_);
}
std::string KlExit::Describe() const { return "KL between steps < " + std::to_string(t_); }

}  // namespace fathom
