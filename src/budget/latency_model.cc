#include "budget/latency_model.h"

#include <algorithm>
#include <cmath>

namespace fathom {

StepLatencyModel::StepLatencyModel(double half_life) : decay_(std::pow(0.5, 1.0 / std::max(half_life, 1.0))) {}

void StepLatencyModel::Add(double rows, double ctx_tokens, double seconds) {
  const double x[3] = {1, rows, ctx_tokens};
  for (int i = 0; i < 3; ++i) {
    r_[i] = r_[i] * decay_ + x[i] * seconds;
    for (int j = 0; j < 3; ++j) s_[i][j] = s_[i][j] * decay_ + x[i] * x[j];
  }
  ++n_;
}

LatencyFit StepLatencyModel::fit() const {
  if (n_ == 0 || s_[0][0] <= 0) return {};
  // Ridge relative to each slope's own scale, so units (rows vs tokens) do not matter.
  double a[3][4];
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) a[i][j] = s_[i][j];
    a[i][3] = r_[i];
  }
  for (int i = 1; i < 3; ++i) a[i][i] += 1e-6 * a[i][i] + 1e-12;
  // Gaussian elimination with partial pivoting on the 3x3 system.
  for (int c = 0; c < 3; ++c) {
    int p = c;
    for (int i = c + 1; i < 3; ++i)
      if (std::fabs(a[i][c]) > std::fabs(a[p][c])) p = i;
    if (std::fabs(a[p][c]) < 1e-300) return {r_[0] / s_[0][0], 0, 0};  // the mean time
    for (int j = 0; j < 4; ++j) std::swap(a[c][j], a[p][j]);
    for (int i = 0; i < 3; ++i) {
      if (i == c) continue;
      const double f = a[i][c] / a[c][c];
      for (int j = c; j < 4; ++j) a[i][j] -= f * a[c][j];
    }
  }
  return {a[0][3] / a[0][0], a[1][3] / a[1][1], a[2][3] / a[2][2]};
}

double StepLatencyModel::Predict(double rows, double ctx_tokens) const {
  if (n_ == 0) return 0;
  const LatencyFit f = fit();
  const double t = f.delta + f.gamma * rows + f.alpha_kv * ctx_tokens;
  // A fit from few or noisy samples can extrapolate below 0; a step never costs less than
  // nothing, and never less than a tenth of the mean step seen.
  return std::max(t, 0.1 * r_[0] / s_[0][0]);
}

}  // namespace fathom
