// The bounds of DESIGN.md §5 and the least-squares fit of the recurrent-step latency model.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace fathom::bench {

// S_dec = (F_0 + r_max F_r) / (F_0 + d F_r): decode speed-up bound at mean exit depth d.
double DecodeSpeedupBound(double f0, double fr, double r_max, double mean_depth);
// S_e2e = (alpha + (1 - alpha) / S_dec)^-1, alpha the prefill share of CB's time.
double EndToEndBound(double alpha, double s_dec);
// The refinement of DESIGN.md §5, as the public CDB code writes it, with f1 the share of
// output tokens that prefill itself emits: w = (1/S_dec - f1) / (1 - f1),
// S_e2e = 1 / (alpha + (1 - alpha) w). f1 >= 1 falls back to EndToEndBound.
double EndToEndBoundRefined(double alpha, double s_dec, double f1);

// Ordinary least squares: coefficients c minimizing sum_i (y_i - x_i . c)^2, x rows of
// equal length k (normal equations, Gaussian elimination with partial pivoting). Errors:
// no rows, ragged rows, fewer rows than unknowns, singular system.
Result<std::vector<double>> LeastSquares(const std::vector<std::vector<double>>& x,
                                         const std::vector<double>& y);

// t = delta + gamma N_b + alpha_kv N_c over points (N_b, N_c, t).
struct StepFit {
  double delta = 0, gamma = 0, alpha_kv = 0;
  double r2 = 0;  // coefficient of determination
  // Saturation batch at context c (tokens per sequence): delta / (gamma + alpha_kv c);
  // at c = 0 it is delta / gamma.
  double SaturationBatch(double context) const;
};
struct StepPoint {
  double n_b = 0, n_c = 0, seconds = 0;
};
Result<StepFit> FitStepLatency(const std::vector<StepPoint>& points);

}  // namespace fathom::bench
