#include "bench/speedup.h"

#include <algorithm>
#include <cmath>
#include <utility>

namespace fathom::bench {

double DecodeSpeedupBound(double f0, double fr, double r_max, double mean_depth) {
  return (f0 + r_max * fr) / (f0 + mean_depth * fr);
}

double EndToEndBound(double alpha, double s_dec) { return 1.0 / (alpha + (1.0 - alpha) / s_dec); }

double EndToEndBoundRefined(double alpha, double s_dec, double f1) {
  if (f1 >= 1) return EndToEndBound(alpha, s_dec);
  const double w = (1.0 / s_dec - f1) / (1.0 - f1);
  return 1.0 / (alpha + (1.0 - alpha) * w);
}

Result<MeasuredBound> MeasuredCostBound(const StageCosts& cb, int64_t prompt_tokens, int64_t decode_tokens,
                                        double r_max, double mean_depth) {
  if (cb.prelude_rows <= 0 || cb.coda_rows <= 0 || cb.core_rows <= 0 || decode_tokens <= 0)
    return Status::Error("measured bound: CB ran no decode tokens (prelude, core or coda rows are 0)");
  const double decode_s = cb.prelude_s + cb.core_s + cb.coda_s;
  if (!(cb.total_s > 0) || !(decode_s > 0)) return Status::Error("measured bound: CB's run took no time");
  MeasuredBound b;
  b.cp = cb.prefill_rows > 0 ? cb.prefill_s / static_cast<double>(cb.prefill_rows) : 0;
  b.c0 = cb.prelude_s / static_cast<double>(cb.prelude_rows) + cb.coda_s / static_cast<double>(cb.coda_rows);
  b.cr = cb.core_s / static_cast<double>(cb.core_rows);
  b.alpha = cb.prefill_s / cb.total_s;
  b.s_dec = DecodeSpeedupBound(b.c0, b.cr, r_max, mean_depth);
  const double other = 1 + std::max(0.0, cb.total_s - cb.prefill_s - decode_s) / decode_s;  // 1 + O / D
  const double prefill = b.cp * static_cast<double>(prompt_tokens);
  const auto n = static_cast<double>(decode_tokens);
  b.s_e2e = cb.total_s / (prefill + n * (b.c0 + mean_depth * b.cr) * other);
  b.recompute_share = 1 - (prefill + n * (b.c0 + r_max * b.cr) * other) / cb.total_s;
  return b;
}

Result<std::vector<double>> LeastSquares(const std::vector<std::vector<double>>& x,
                                         const std::vector<double>& y) {
  if (x.empty() || x.size() != y.size()) return Status::Error("least squares: no rows, or rows and values differ in number");
  const size_t k = x[0].size();
  if (k == 0 || k > 64) return Status::Error("least squares: expected 1 to 64 unknowns");
  if (x.size() < k) return Status::Error("least squares: fewer points than unknowns");
  // Normal equations A c = b, A = X^T X, b = X^T y; augmented [A | b].
  std::vector<std::vector<double>> a(k, std::vector<double>(k + 1, 0.0));
  for (size_t i = 0; i < x.size(); ++i) {
    if (x[i].size() != k) return Status::Error("least squares: rows of different lengths");
    for (size_t r = 0; r < k; ++r) {
      for (size_t c = 0; c < k; ++c) a[r][c] += x[i][r] * x[i][c];
      a[r][k] += x[i][r] * y[i];
    }
  }
  double scale = 0;
  for (size_t r = 0; r < k; ++r) scale = std::max(scale, std::abs(a[r][r]));
  for (size_t col = 0; col < k; ++col) {
    size_t piv = col;
    for (size_t r = col + 1; r < k; ++r)
      if (std::abs(a[r][col]) > std::abs(a[piv][col])) piv = r;
    if (std::abs(a[piv][col]) <= 1e-12 * scale) return Status::Error("least squares: singular system (points do not determine the fit)");
    std::swap(a[piv], a[col]);
    for (size_t r = 0; r < k; ++r) {
      if (r == col) continue;
      const double f = a[r][col] / a[col][col];
      for (size_t c = col; c <= k; ++c) a[r][c] -= f * a[col][c];
    }
  }
  std::vector<double> out(k);
  for (size_t r = 0; r < k; ++r) out[r] = a[r][k] / a[r][r];
  return out;
}

double StepFit::SaturationBatch(double context) const { return delta / (gamma + alpha_kv * context); }

Result<StepFit> FitStepLatency(const std::vector<StepPoint>& points) {
  std::vector<std::vector<double>> x;
  std::vector<double> y;
  for (const StepPoint& p : points) {
    x.push_back({1.0, p.n_b, p.n_c});
    y.push_back(p.seconds);
  }
  FATHOM_ASSIGN_OR_RETURN(std::vector<double> c, LeastSquares(x, y));
  StepFit f{c[0], c[1], c[2], 0};
  double mean = 0;
  for (double v : y) mean += v;
  mean /= static_cast<double>(y.size());
  double ss_res = 0, ss_tot = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double pred = f.delta + f.gamma * x[i][1] + f.alpha_kv * x[i][2];
    ss_res += (y[i] - pred) * (y[i] - pred);
    ss_tot += (y[i] - mean) * (y[i] - mean);
  }
  f.r2 = ss_tot > 0 ? 1.0 - ss_res / ss_tot : 1.0;
  return f;
}

}  // namespace fathom::bench
