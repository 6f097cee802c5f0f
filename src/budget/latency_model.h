// The step-latency model the budget controller predicts with:
//   t = δ + γ·N + α_kv·N_ctx     (N rows in the step, N_ctx context tokens they attend to)
// fitted online from the engine's own step times by least squares over exponentially
// decayed sums (half-life `half_life` samples), so that it follows a machine whose speed
// changes (other load, thermal). The normal equations get a small ridge on γ and α_kv:
// steps whose N and N_ctx move together (one sequence: N_ctx grows, N = 1) would leave
// them singular; the ridge keeps the fit defined and pulls unidentified slopes to 0.
#pragma once

#include <cstdint>

namespace fathom {

struct LatencyFit {
  double delta = 0, gamma = 0, alpha_kv = 0;
};

class StepLatencyModel {
 public:
  explicit StepLatencyModel(double half_life = 256);
  void Add(double rows, double ctx_tokens, double seconds);
  // Predicted seconds of one step; before any sample, 0.
  double Predict(double rows, double ctx_tokens) const;
  LatencyFit fit() const;
  int64_t samples() const { return n_; }

 private:
  double decay_;
  // Decayed sums for the normal equations of x = (1, N, N_ctx): S[i][j] = Σ x_i x_j,
  // r[i] = Σ x_i t.
  double s_[3][3] = {}, r_[3] = {};
  int64_t n_ = 0;
};

}  // namespace fathom
