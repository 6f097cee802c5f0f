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

// The bound from measured stage costs instead of weight FLOPs.
//
// Why: on a CPU a stage costs memory traffic (weights, KV reads over the context) more
// than FLOPs, so the FLOP ratio F_0/F_r misstates what an exit saves; a CDB run can then
// exceed the FLOP "bound". The same formulas with measured costs give a bound that holds.
//
// Derivation. CB runs every decode token through the prelude, r_max core steps and the
// coda; its engine time is T = P + N (c_0 + r_max c_r) + O with
//   P    CB's prefill seconds;
//   N    decode tokens (the tokens the coda emits; prefill emits each request's first);
//   c_0  CB's seconds per decode token outside the core: prelude seconds / prelude rows
//        + coda seconds / coda rows, measured at CB's batch sizes (the F_0-equivalent);
//   c_r  CB's seconds per core row (one token, one loop step): core seconds / core rows,
//        at CB's batch sizes and contexts (the F_r-equivalent);
//   O    the rest of the engine time (scheduling).
// A perfect CDB does the same prefill, runs each token through the prelude and coda once
// and through exactly its exit depth of core steps, at CB's cost per row (it cannot batch
// better than the baseline it is measured against), so its decode time is
// N (c_0 + d c_r) at mean exit depth d: the decode speed-up is
//   S_dec_measured = (c_0 + r_max c_r) / (c_0 + d c_r),
// the FLOP formula with measured costs. With alpha = P / T, the measured prefill share, and
// the rest of CB's time (O included: the generous choice) scaled by 1 / S_dec_measured:
//   S_e2e_measured = 1 / (alpha + (1 - alpha) / S_dec_measured).
// The f1 refinement (EndToEndBoundRefined) is not applied here: it corrects an S_dec that
// averages over every output token, prefill-emitted ones included; c_0 and c_r are per
// coda-emitted token and d is their mean depth, so the first tokens are already in P.
// Every input comes from CB's run of the same round and d from the workload's exit
// depths, never from the CDB run's own times, so the fraction ratio / S_e2e_measured is not
// circular. It is a bound only as far as CDB's per-row costs are no lower than CB's: a
// fraction above 1 beyond the run-to-run spread says a CDB scheduler ran rows more cheaply
// than CB (e.g. in fuller batches than the baseline formed): a defect of the baseline or
// of the measurement, not an exit saving.
struct StageCosts {
  double prefill_s = 0, prelude_s = 0, core_s = 0, coda_s = 0;
  int64_t prelude_rows = 0, core_rows = 0, coda_rows = 0;
  double total_s = 0;  // the engine's whole time: the stages plus scheduling
};
struct MeasuredBound {
  double c0 = 0, cr = 0;  // s per decode token outside the core; s per core row
  double alpha = 0;       // prefill share of CB's time
  double s_dec = 0, s_e2e = 0;
};
// From CB's stage costs, r_max and the mean exit depth d of the decode tokens. Errors: no
// decode or core rows, or no time.
Result<MeasuredBound> MeasuredCostBound(const StageCosts& cb, double r_max, double mean_depth);

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
