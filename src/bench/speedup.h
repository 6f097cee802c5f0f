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
// than FLOPs, so the FLOP ratio F_0/F_r misstates what an exit saves; and the FLOP bound
// takes CB's whole non-prefill time as useful decode work, which it is not when CB
// preempted and recomputed. A bound is what a perfect CDB could achieve at CB's costs.
//
// Derivation. From CB's run of the same round, per row of each stage (at CB's batch sizes
// and contexts; rows include any recompute after preemption):
//   c_p  prefill seconds / prefill rows (prompt tokens prefilled);
//   c_0  prelude seconds / prelude rows + coda seconds / coda rows: seconds per decode
//        token outside the core (the F_0-equivalent);
//   c_r  core seconds / core rows: seconds per token per loop step (the F_r-equivalent);
//   T    CB's engine time: P + D + O, with P its prefill seconds, D its prelude, core and
//        coda seconds and O the rest (scheduling).
// The useful work is fixed by the workload: P_tok prompt tokens and N decode tokens (the
// output tokens the coda emits: every output token but each request's first, which
// prefill emits). A perfect CDB prefills each prompt once, runs each decode token once
// through the prelude and the coda and through exactly its exit depth of core steps (d
// on average), recomputes nothing, and pays CB's cost per row:
//   T_perfect = c_p P_tok + N (c_0 + d c_r) (1 + O / D)
// (scheduling scaled with the decode work: the generous choice), and the bound is
//   S_e2e_measured = T / T_perfect,     with  S_dec_measured = (c_0 + r_max c_r) / (c_0 + d c_r)
// the FLOP formula with measured costs. When CB recomputed nothing (P = c_p P_tok,
// D = N (c_0 + r_max c_r)) this is exactly DESIGN.md §5's
//   S_e2e_measured = 1 / (alpha + (1 - alpha) / S_dec_measured),  alpha = P / T,
// the measured prefill share; CB's recompute after preemption only raises it (a perfect
// CDB would not recompute), and `recompute_share` = 1 - T_useful / T says by how much, with
// T_useful = c_p P_tok + N (c_0 + r_max c_r) (1 + O / D) CB's time without it.
// The f1 refinement (EndToEndBoundRefined) is not applied: it corrects an S_dec that
// averages over every output token, prefill-emitted ones included; here c_0 and c_r are
// per coda-emitted token and d is their mean depth, so the first tokens are already in P.
// Every input comes from CB's run and d from the workload's seeded exit depths, never from
// a CDB run's own times, so ratio / S_e2e_measured is not circular. It bounds a CDB that
// does no better per row than CB: a fraction above 1 beyond the run-to-run spread means a
// CDB run paid less per row than CB (fuller batches than the baseline formed, or a quieter
// host during its run), not an exit saving.
struct StageCosts {
  double prefill_s = 0, prelude_s = 0, core_s = 0, coda_s = 0;
  int64_t prefill_rows = 0, prelude_rows = 0, core_rows = 0, coda_rows = 0;
  double total_s = 0;  // the engine's whole time: the stages plus scheduling
};
struct MeasuredBound {
  double cp = 0;              // s per prefill row
  double c0 = 0, cr = 0;      // s per decode token outside the core; s per core row
  double alpha = 0;           // prefill share of CB's time
  double s_dec = 0, s_e2e = 0;
  double recompute_share = 0;  // share of CB's time beyond its useful work (preemption)
};
// From CB's stage costs, the useful work (prompt tokens, decode tokens), r_max and the mean
// exit depth d of the decode tokens. Errors: no decode tokens or rows, or no time.
Result<MeasuredBound> MeasuredCostBound(const StageCosts& cb, int64_t prompt_tokens, int64_t decode_tokens,
                                        double r_max, double mean_depth);

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
