// The `fathom bench` benchmark-suite subcommands end to end on tiny random models (fast).
// Every number a command reports is checked against the same quantity recomputed here
// from what else it reports (per-round values, stage rows and seconds, the generated
// workload) with the formulas of DESIGN.md §5, not against the code that printed it.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/driver.h"
#include "bench/workload.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using testing::CommandResult;
using testing::RunCommand;
using testing::TempDir;

CommandResult Fathom(const std::string& args) { return RunCommand(testing::FathomBinary() + " " + args); }

// JSON objects, one per line of stdout (progress lines on stderr are not JSON objects).
std::vector<nlohmann::json> JsonLines(const std::string& out) {
  std::vector<nlohmann::json> v;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) v.push_back(j);
  }
  return v;
}

double Get(const nlohmann::json& j, const char* key) { return j.at(key).get<double>(); }

// The middle of an odd number of samples, by sorting (not bench::Median).
double Middle(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Equal to a relative 1e-12: the values went through JSON's shortest round-trip printing.
void ExpectRel(double actual, double expected, const std::string& what) {
  EXPECT_NEAR(actual, expected, 1e-12 * std::max(1.0, std::abs(expected))) << what;
}

// DESIGN.md §5, written out here.
double SDec(double f0, double fr, double r_max, double d) { return (f0 + r_max * fr) / (f0 + d * fr); }
double SE2e(double alpha, double s_dec) { return 1.0 / (alpha + (1.0 - alpha) / s_dec); }

// Stage rows and seconds of a `breakdown` object.
int64_t Rows(const nlohmann::json& b, const char* stage) { return b.at(stage).at("rows").get<int64_t>(); }
double Seconds(const nlohmann::json& b, const char* stage) { return b.at(stage).at("seconds").get<double>(); }

class BenchCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_EQ(Fathom("make-model ouro " + *dir_ / "ouro").exit_code, 0);
    ASSERT_EQ(Fathom("make-model huginn " + *dir_ / "huginn").exit_code, 0);
  }
  static void TearDownTestSuite() { delete dir_; }
  static TempDir* dir_;
};
TempDir* BenchCli::dir_ = nullptr;

TEST_F(BenchCli, HelpAndBadFlags) {
  for (const char* cmd : {"bench offline", "bench online", "bench k-sweep"}) {
    CommandResult r = Fathom(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("usage: fathom"), std::string::npos) << r.output;
  }
  CommandResult r = Fathom("bench offline --model " + *dir_ / "ouro" + " --workload nope");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--workload"), std::string::npos) << r.output;
  r = Fathom("bench offline --model " + *dir_ / "ouro" + " --schedulers cb,xx");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--schedulers"), std::string::npos) << r.output;
  r = Fathom("bench offline --model " + *dir_ / "ouro" + " --mean-depth 9");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--mean-depth"), std::string::npos) << r.output;
}

TEST_F(BenchCli, OfflineNumbersFollowFromTheirInputs) {
  constexpr int kRequests = 6;
  // The workload the command generates (alpaca, seed 0): its lengths are replayed exactly.
  int64_t prompt_sum = 0, output_sum = 0;
  for (const bench::RequestShape& r : bench::GenerateWorkload(bench::WorkloadKind::kAlpaca, kRequests, 0))
    prompt_sum += r.prompt, output_sum += r.output;
  for (const char* fam : {"ouro", "huginn"}) {
    SCOPED_TRACE(fam);
    CommandResult r = Fathom("bench offline --model " + *dir_ / fam + " --requests " + std::to_string(kRequests) +
                             " --mean-depth 3 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto rows = JsonLines(r.output);
    ASSERT_EQ(rows.size(), 3u) << r.output;
    EXPECT_NE(r.output.find("ETA"), std::string::npos);  // progress, on stderr
    const nlohmann::json& cb = rows[0];
    ASSERT_EQ(cb["scheduler"], "cb");
    EXPECT_EQ(rows[1]["scheduler"], "cdb-norefill");
    EXPECT_EQ(rows[2]["scheduler"], "cdb-refill");
    const double r_max = Get(cb, "r_max");
    const double d = Get(rows[2], "mean_depth");  // the depth the CDB runs measured
    EXPECT_NEAR(d, 3.0, 0.5);
    EXPECT_DOUBLE_EQ(Get(cb, "mean_depth"), r_max);
    const nlohmann::json& cbb = cb["breakdown"];
    // Alpha: CB's prefill seconds over its whole engine time (the stages plus scheduling).
    const double cb_engine_s = Seconds(cbb, "prefill") + Seconds(cbb, "prelude") + Seconds(cbb, "core") +
                               Seconds(cbb, "coda") + Get(cbb, "schedule_seconds");
    EXPECT_NEAR(Get(cb, "alpha"), Seconds(cbb, "prefill") / cb_engine_s, 1e-9);
    // The measured costs: CB's seconds per decode token outside the core and per core row.
    const double c0 = Seconds(cbb, "prelude") / static_cast<double>(Rows(cbb, "prelude")) +
                      Seconds(cbb, "coda") / static_cast<double>(Rows(cbb, "coda"));
    const double cr = Seconds(cbb, "core") / static_cast<double>(Rows(cbb, "core"));
    for (const auto& j : rows) {
      const std::string name = j["scheduler"].get<std::string>();
      SCOPED_TRACE(name);
      EXPECT_EQ(j["prompt_tokens"].get<int64_t>(), prompt_sum);
      EXPECT_EQ(j["output_tokens"].get<int64_t>(), output_sum);
      EXPECT_EQ(j["preemptions"].get<int64_t>(), 0);
      // What ran: every prompt token prefilled once; every output token but each request's
      // first (prefill emits it) through one prelude and one coda; CB's tokens through r_max
      // core steps, the CDB tokens through their exit depths (d on average).
      const nlohmann::json& b = j["breakdown"];
      EXPECT_EQ(Rows(b, "prefill"), prompt_sum);
      EXPECT_EQ(Rows(b, "prelude"), output_sum - kRequests);
      EXPECT_EQ(Rows(b, "coda"), output_sum - kRequests);
      const double depth = name == "cb" ? r_max : d;
      EXPECT_NEAR(static_cast<double>(Rows(b, "core")), depth * static_cast<double>(output_sum - kRequests), 1e-6);
      if (name != "cb") {
        EXPECT_DOUBLE_EQ(Get(j, "mean_depth"), d);  // one seeded trace for every CDB run
      }
      // The no-exit control: every scheduler runs every token at r_max.
      const nlohmann::json& cbk = j["control_breakdown"];
      EXPECT_EQ(Rows(cbk, "core"), static_cast<int64_t>(r_max) * (output_sum - kRequests));
      // Throughput and its ratio to CB, taken from the same round.
      const double ratio = Get(j, "output_tok_s") / Get(cb, "output_tok_s");
      ExpectRel(Get(j, "ratio_to_cb"), ratio, "ratio_to_cb");
      ExpectRel(Get(j, "output_tok_s"), static_cast<double>(output_sum) / Get(j, "seconds"), "output_tok_s");
      ExpectRel(Get(j, "control_ratio_to_cb"), Get(j, "control_output_tok_s") / Get(cb, "control_output_tok_s"),
                "control_ratio_to_cb");
      EXPECT_EQ(Get(j, "ratio_to_cb_min"), Get(j, "ratio_to_cb"));  // one round
      EXPECT_EQ(Get(j, "ratio_to_cb_max"), Get(j, "ratio_to_cb"));
      // The same ratio over the process's CPU time (one thread: at most the wall time).
      EXPECT_GT(Get(j, "cpu_seconds"), 0);
      EXPECT_LE(Get(j, "cpu_seconds"), Get(j, "seconds") * 1.01 + 0.01);
      const double ratio_cpu = Get(cb, "cpu_seconds") / Get(j, "cpu_seconds");  // the same tokens
      ExpectRel(Get(j, "ratio_to_cb_cpu"), ratio_cpu, "ratio_to_cb_cpu");
      // The FLOP bounds from the reported F_0, F_r, r_max and d.
      const double s_dec = SDec(Get(j, "f0"), Get(j, "fr"), r_max, d);
      ExpectRel(Get(j, "s_dec"), s_dec, "s_dec");
      ExpectRel(Get(j, "s_e2e"), SE2e(Get(cb, "alpha"), s_dec), "s_e2e");
      const double f1 = static_cast<double>(kRequests) / static_cast<double>(output_sum);
      const double w = (1.0 / s_dec - f1) / (1.0 - f1);
      ExpectRel(Get(j, "s_e2e_refined"), 1.0 / (Get(cb, "alpha") + (1.0 - Get(cb, "alpha")) * w), "s_e2e_refined");
      ExpectRel(Get(j, "fraction_of_s_e2e"), ratio / Get(j, "s_e2e"), "fraction_of_s_e2e");
      // The measured-cost bounds from CB's breakdown.
      ExpectRel(Get(j, "c0_measured_s"), c0, "c0_measured_s");
      ExpectRel(Get(j, "cr_measured_s"), cr, "cr_measured_s");
      const double s_dec_m = SDec(c0, cr, r_max, d);
      ExpectRel(Get(j, "s_dec_measured"), s_dec_m, "s_dec_measured");
      ExpectRel(Get(j, "s_e2e_measured"), SE2e(Get(cb, "alpha"), s_dec_m), "s_e2e_measured");  // no preemption
      EXPECT_NEAR(Get(j, "cb_recompute_share"), 0, 1e-12);
      ExpectRel(Get(j, "fraction_of_s_e2e_measured"), ratio / SE2e(Get(cb, "alpha"), s_dec_m),
                "fraction_of_s_e2e_measured");
      ExpectRel(Get(j, "fraction_of_s_e2e_measured_cpu"), ratio_cpu / SE2e(Get(cb, "alpha"), s_dec_m),
                "fraction_of_s_e2e_measured_cpu");
      // With one round the round's values are the reported ones.
      ASSERT_EQ(j["rounds"].size(), 1u);
      EXPECT_EQ(Get(j["rounds"][0], "ratio_to_cb"), Get(j, "ratio_to_cb"));
      EXPECT_EQ(Get(j["rounds"][0], "s_e2e_measured"), Get(j, "s_e2e_measured"));
    }
  }
}

TEST_F(BenchCli, OfflineMeasuredBoundCountsOnlyUsefulWork) {
  // A KV pool of 1 MiB makes CB preempt (deterministically: all requests arrive at t = 0),
  // and recompute prompt rows and tokens. The bound is CB's time over a perfect CDB's,
  // which does the useful work only at CB's per-row costs.
  CommandResult r = Fathom("bench offline --model " + *dir_ / "ouro" +
                           " --requests 12 --mean-depth 3 --kv-mb 1 --kv-dtype f32 --schedulers cdb-refill --no-control --quiet"
                           " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  const nlohmann::json& cb = rows[0];
  const nlohmann::json& b = cb["breakdown"];
  ASSERT_GT(cb["preemptions"].get<int64_t>(), 0) << "the pool no longer forces a preemption: shrink --kv-mb";
  const auto prompt = cb["prompt_tokens"].get<int64_t>(), n = cb["output_tokens"].get<int64_t>() - 12;
  EXPECT_GT(Rows(b, "prefill"), prompt);  // recomputed prompt rows
  const double t = Seconds(b, "prefill") + Seconds(b, "prelude") + Seconds(b, "core") + Seconds(b, "coda") +
                   Get(b, "schedule_seconds");
  const double cp = Seconds(b, "prefill") / static_cast<double>(Rows(b, "prefill"));
  const double c0 = Seconds(b, "prelude") / static_cast<double>(Rows(b, "prelude")) +
                    Seconds(b, "coda") / static_cast<double>(Rows(b, "coda"));
  const double cr = Seconds(b, "core") / static_cast<double>(Rows(b, "core"));
  const double d_s = Seconds(b, "prelude") + Seconds(b, "core") + Seconds(b, "coda");
  const double other = 1 + Get(b, "schedule_seconds") / d_s;
  const double r_max = Get(cb, "r_max"), d = Get(rows[1], "mean_depth");
  const double perfect = cp * static_cast<double>(prompt) + static_cast<double>(n) * (c0 + d * cr) * other;
  const double useful = cp * static_cast<double>(prompt) + static_cast<double>(n) * (c0 + r_max * cr) * other;
  for (const auto& j : rows) {
    ExpectRel(Get(j, "cp_measured_s"), cp, "cp_measured_s");
    EXPECT_NEAR(Get(j, "s_e2e_measured"), t / perfect, 1e-9) << "s_e2e_measured";
    EXPECT_NEAR(Get(j, "cb_recompute_share"), 1 - useful / t, 1e-9) << "cb_recompute_share";
    EXPECT_GT(Get(j, "cb_recompute_share"), 0);
    // Above the formula that takes all of CB's time as useful work.
    EXPECT_GT(Get(j, "s_e2e_measured"), SE2e(Get(cb, "alpha"), SDec(c0, cr, r_max, d)));
    ExpectRel(Get(j, "fraction_of_s_e2e_measured"), Get(j, "ratio_to_cb") / Get(j, "s_e2e_measured"), "fraction");
  }
}

TEST_F(BenchCli, OnlineKSweepAndStepLatencyFit) {
  CommandResult r = Fathom("bench online --model " + *dir_ / "ouro" + " --requests 4 --rates 100,400 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 6u);
  int64_t output_sum = 0;
  for (const bench::RequestShape& s : bench::GenerateWorkload(bench::WorkloadKind::kAlpaca, 4, 0)) output_sum += s.output;
  // The latency bound: 3x CB's normalized latency at the lowest rate.
  double slo = 0;
  for (const auto& j : rows)
    if (j["scheduler"] == "cb" && Get(j, "rate") == 100) slo = 3 * Get(j, "normalized_latency_s");
  ASSERT_GT(slo, 0);
  for (const char* sched : {"cb", "cdb-norefill", "cdb-refill"}) {
    SCOPED_TRACE(sched);
    std::vector<nlohmann::json> mine;
    for (const auto& j : rows)
      if (j["scheduler"] == sched) mine.push_back(j);
    ASSERT_EQ(mine.size(), 2u);
    ASSERT_EQ(Get(mine[0], "rate"), 100);
    ASSERT_EQ(Get(mine[1], "rate"), 400);
    for (const auto& j : mine) {
      EXPECT_EQ(j["requests"], 4);
      // Every replayed output token came out in the run's time.
      EXPECT_NEAR(Get(j, "output_tok_s") * Get(j, "seconds"), static_cast<double>(output_sum),
                  1e-6 * static_cast<double>(output_sum));
      EXPECT_DOUBLE_EQ(Get(j, "slo_s_per_token"), slo);
    }
    // The saturation crossing of two rates, worked out here.
    const double l0 = Get(mine[0], "normalized_latency_s"), l1 = Get(mine[1], "normalized_latency_s");
    const double within = l1 <= slo ? 400 : l0 <= slo ? 100 : 0;  // the highest rate within the bound
    double crossing = 400;                                          // the first crossing
    bool exceeded = true;
    if (l0 > slo) crossing = 0;
    else if (l1 > slo) crossing = 100 + (slo - l0) / (l1 - l0) * 300;
    else exceeded = false;
    EXPECT_NEAR(Get(mine[1], "saturation_crossing"), crossing, 1e-9);
    EXPECT_EQ(Get(mine[1], "saturation_rate"), within);
    EXPECT_EQ(mine[1]["saturation_exceeded"].get<bool>(), exceeded);
  }
  r = Fathom("bench k-sweep --model " + *dir_ / "huginn" + " --requests 4 --ks 1,2 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0]["k"], 1);
  EXPECT_EQ(rows[1]["k"], 2);
  for (const auto& j : rows) {
    EXPECT_EQ(Get(j, "cb_output_tok_s"), Get(rows[0], "cb_output_tok_s"));  // one CB run for all K
    ExpectRel(Get(j, "ratio_to_cb"), Get(j, "output_tok_s") / Get(j, "cb_output_tok_s"), "k-sweep ratio");
  }
  r = Fathom("bench step-latency --model " + *dir_ / "ouro" + " --batch 1,2,4 --context 16,64 --reps 1 --fit --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_TRUE(rows[0].contains("fit")) << r.output;
  const nlohmann::json& fit = rows[0]["fit"];
  // The fit t = delta + gamma N_b + alpha_kv N_c (N_c = N_b x context) recomputed from the
  // reported points: normal equations solved by Cramer's rule.
  const nlohmann::json& pts = rows[0]["results"];
  ASSERT_EQ(pts.size(), 6u);
  double a[3][3] = {}, y[3] = {};
  for (const auto& p : pts) {
    ASSERT_FALSE(p["skipped"].get<bool>());
    const double b = Get(p, "batch"), x[3] = {1.0, b, b * Get(p, "context")}, t = Get(p, "step_ms");
    for (int i = 0; i < 3; ++i) {
      for (int k = 0; k < 3; ++k) a[i][k] += x[i] * x[k];
      y[i] += x[i] * t;
    }
  }
  const auto det = [](const double m[3][3]) {
    return m[0][0] * (m[1][1] * m[2][2] - m[1][2] * m[2][1]) - m[0][1] * (m[1][0] * m[2][2] - m[1][2] * m[2][0]) +
           m[0][2] * (m[1][0] * m[2][1] - m[1][1] * m[2][0]);
  };
  double coef[3];
  for (int c = 0; c < 3; ++c) {
    double m[3][3];
    for (int i = 0; i < 3; ++i)
      for (int k = 0; k < 3; ++k) m[i][k] = k == c ? y[i] : a[i][k];
    coef[c] = det(m) / det(a);
  }
  const double tol = 1e-6 * std::max(std::abs(coef[0]), std::abs(coef[1]));
  EXPECT_NEAR(Get(fit, "delta_ms"), coef[0], tol);
  EXPECT_NEAR(Get(fit, "gamma_ms"), coef[1], tol);
  EXPECT_NEAR(Get(fit, "alpha_kv_us") * 1e-3, coef[2], tol / 64);
  ASSERT_EQ(fit["per_context"].size(), 2u);
  for (const auto& pc : fit["per_context"]) {
    const double c = Get(pc, "context");
    EXPECT_NEAR(Get(pc, "b_star"), coef[0] / (coef[1] + coef[2] * c), 1e-6 * std::abs(Get(pc, "b_star")) + 1e-9);
    // Its own line over the three batches at this context (simple linear regression).
    double sx = 0, sy = 0, sxx = 0, sxy = 0, n = 0;
    for (const auto& p : pts)
      if (Get(p, "context") == c) {
        const double b = Get(p, "batch"), t = Get(p, "step_ms");
        sx += b, sy += t, sxx += b * b, sxy += b * t, n += 1;
      }
    ASSERT_EQ(n, 3);
    const double gamma_c = (n * sxy - sx * sy) / (n * sxx - sx * sx), delta_c = (sy - gamma_c * sx) / n;
    EXPECT_NEAR(Get(pc, "delta_c_ms"), delta_c, 1e-9 + 1e-9 * std::abs(delta_c));
    EXPECT_NEAR(Get(pc, "gamma_c_ms"), gamma_c, 1e-9 + 1e-9 * std::abs(gamma_c));
    EXPECT_NEAR(Get(pc, "b_star_context_fit"), delta_c / gamma_c, 1e-6 * std::abs(delta_c / gamma_c));
  }
}

TEST_F(BenchCli, OfflineRepeatReportsTheMedianOfRounds) {
  CommandResult r = Fathom("bench offline --model " + *dir_ / "ouro" +
                           " --requests 4 --mean-depth 3 --repeat 3 --schedulers cdb-refill --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  int64_t output_sum = 0;
  for (const bench::RequestShape& s : bench::GenerateWorkload(bench::WorkloadKind::kAlpaca, 4, 0))
    output_sum += s.output;
  const nlohmann::json& cb = rows[0];
  ASSERT_EQ(cb["scheduler"], "cb");
  const double r_max = Get(cb, "r_max"), d = Get(rows[1], "mean_depth");
  std::vector<double> alphas;
  for (const auto& round : cb["rounds"]) alphas.push_back(Get(round, "prefill_share"));
  ASSERT_EQ(alphas.size(), 3u);
  EXPECT_DOUBLE_EQ(Get(cb, "alpha"), Middle(alphas));
  for (const auto& j : rows) {
    SCOPED_TRACE(j["scheduler"].get<std::string>());
    EXPECT_EQ(j["repeats"], 3);
    const nlohmann::json& rounds = j["rounds"];
    ASSERT_EQ(rounds.size(), 3u);
    std::vector<double> tok_s, ratios, control, fractions, s_e2e_m, cr, ratios_cpu, fractions_cpu;
    for (size_t i = 0; i < 3; ++i) {
      const nlohmann::json& pr = rounds[i];
      const nlohmann::json& cb_round = cb["rounds"][i];
      EXPECT_EQ(pr["output_tokens"].get<int64_t>(), output_sum);
      ExpectRel(Get(pr, "output_tok_s"), static_cast<double>(output_sum) / Get(pr, "seconds"), "round tok/s");
      // Each round's ratio is this scheduler's throughput over CB's in that round.
      ExpectRel(Get(pr, "ratio_to_cb"), Get(pr, "output_tok_s") / Get(cb_round, "output_tok_s"), "round ratio");
      // Each round's bound comes from that round's CB run, and its fraction from that ratio.
      EXPECT_EQ(Get(pr, "alpha"), alphas[i]);
      const double s_dec_m = SDec(Get(pr, "c0_measured_s"), Get(pr, "cr_measured_s"), r_max, d);
      ExpectRel(Get(pr, "s_dec_measured"), s_dec_m, "round s_dec_measured");
      ExpectRel(Get(pr, "s_e2e_measured"), SE2e(alphas[i], s_dec_m), "round s_e2e_measured");
      ExpectRel(Get(pr, "fraction_of_s_e2e_measured"), Get(pr, "ratio_to_cb") / Get(pr, "s_e2e_measured"),
                "round fraction");
      // Over CPU time: the same tokens, so the ratio is CB's CPU seconds over this one's.
      ExpectRel(Get(pr, "ratio_to_cb_cpu"), Get(cb_round, "cpu_seconds") / Get(pr, "cpu_seconds"), "round cpu ratio");
      ExpectRel(Get(pr, "fraction_of_s_e2e_measured_cpu"), Get(pr, "ratio_to_cb_cpu") / Get(pr, "s_e2e_measured"),
                "round cpu fraction");
      EXPECT_EQ(Get(pr, "cr_measured_s"), Get(cb_round, "cr_measured_s"));  // the same bound for every row
      tok_s.push_back(Get(pr, "output_tok_s"));
      ratios.push_back(Get(pr, "ratio_to_cb"));
      control.push_back(Get(pr, "control_ratio_to_cb"));
      fractions.push_back(Get(pr, "fraction_of_s_e2e_measured"));
      s_e2e_m.push_back(Get(pr, "s_e2e_measured"));
      cr.push_back(Get(pr, "cr_measured_s"));
      ratios_cpu.push_back(Get(pr, "ratio_to_cb_cpu"));
      fractions_cpu.push_back(Get(pr, "fraction_of_s_e2e_measured_cpu"));
    }
    // The reported values are the medians of the rounds, with their min and max.
    EXPECT_EQ(Get(j, "output_tok_s"), Middle(tok_s));
    EXPECT_EQ(Get(j, "ratio_to_cb"), Middle(ratios));
    EXPECT_EQ(Get(j, "ratio_to_cb_min"), *std::min_element(ratios.begin(), ratios.end()));
    EXPECT_EQ(Get(j, "ratio_to_cb_max"), *std::max_element(ratios.begin(), ratios.end()));
    EXPECT_EQ(Get(j, "control_ratio_to_cb"), Middle(control));
    EXPECT_EQ(Get(j, "control_ratio_to_cb_min"), *std::min_element(control.begin(), control.end()));
    EXPECT_EQ(Get(j, "control_ratio_to_cb_max"), *std::max_element(control.begin(), control.end()));
    EXPECT_EQ(Get(j, "fraction_of_s_e2e_measured"), Middle(fractions));
    EXPECT_EQ(Get(j, "fraction_of_s_e2e_measured_min"), *std::min_element(fractions.begin(), fractions.end()));
    EXPECT_EQ(Get(j, "fraction_of_s_e2e_measured_max"), *std::max_element(fractions.begin(), fractions.end()));
    EXPECT_EQ(Get(j, "s_e2e_measured"), Middle(s_e2e_m));
    EXPECT_EQ(Get(j, "cr_measured_s"), Middle(cr));
    EXPECT_EQ(Get(j, "ratio_to_cb_cpu"), Middle(ratios_cpu));
    EXPECT_EQ(Get(j, "ratio_to_cb_cpu_min"), *std::min_element(ratios_cpu.begin(), ratios_cpu.end()));
    EXPECT_EQ(Get(j, "ratio_to_cb_cpu_max"), *std::max_element(ratios_cpu.begin(), ratios_cpu.end()));
    EXPECT_EQ(Get(j, "fraction_of_s_e2e_measured_cpu"), Middle(fractions_cpu));
    // The per-round core costs are CB's: their mean is CB's breakdown (seconds averaged
    // over the rounds, the same rows every round) per row.
    const nlohmann::json& cbb = cb["breakdown"];
    ExpectRel((cr[0] + cr[1] + cr[2]) / 3, Seconds(cbb, "core") / static_cast<double>(Rows(cbb, "core")),
              "mean of the rounds' c_r");
  }
}

TEST_F(BenchCli, OfflineReplaysARecordedExitTrace) {
  // A trace whose decode tokens all exited at depth 2: every CDB token must exit there.
  std::ofstream(*dir_ / "trace2.jsonl") << "{\"exit_depths\": [4, 2, 2, 2]}\n";
  CommandResult r = Fathom("bench offline --model " + *dir_ / "ouro" + " --requests 4 --exit-trace " +
                           *dir_ / "trace2.jsonl" + " --schedulers cdb-refill --no-control --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_DOUBLE_EQ(rows[1]["mean_depth"].get<double>(), 2.0);
  EXPECT_NE(rows[1]["exits"].get<std::string>().find("recorded trace"), std::string::npos);
  // What the engine records (`generate --requests F --json`) is read as it is.
  std::ofstream(*dir_ / "reqs.jsonl") << "{\"id\": \"a\", \"prompt_ids\": [1, 2, 3], \"max_tokens\": 12, "
                                          "\"exit_threshold\": 0.5}\n";
  r = Fathom("generate --model " + *dir_ / "ouro" + " --requests " + *dir_ / "reqs.jsonl" + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ofstream(*dir_ / "recorded.jsonl") << r.output.substr(r.output.find('{'));
  r = Fathom("bench offline --model " + *dir_ / "ouro" + " --requests 3 --exit-trace " + *dir_ / "recorded.jsonl" +
             " --schedulers cdb-refill --no-control --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  EXPECT_NE(rows[1]["exits"].get<std::string>().find("11 depths from 1 records"), std::string::npos) << r.output;
  // Recorded depths and random-depth flags do not mix; a bad trace names its line.
  r = Fathom("bench offline --model " + *dir_ / "ouro" + " --exit-trace " + *dir_ / "trace2.jsonl" + " --mean-depth 3");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--exit-trace replays recorded depths"), std::string::npos) << r.output;
  std::ofstream(*dir_ / "trace9.jsonl") << "{\"exit_depths\": [4, 9]}\n";
  r = Fathom("bench online --model " + *dir_ / "ouro" + " --exit-trace " + *dir_ / "trace9.jsonl");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("trace9.jsonl line 1: exit_depths[1] = 9"), std::string::npos) << r.output;
}

TEST_F(BenchCli, OnlineDurationMakesTracesOfThatLength) {
  // 2 s at 4 and 16 req/s: ~8 and ~32 arrivals, the same seeded sequence scaled.
  CommandResult r = Fathom("bench online --model " + *dir_ / "ouro" +
                           " --duration 2 --rates 4,16 --schedulers cb --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  const auto expect = [](double rate) { return static_cast<int64_t>(bench::PoissonArrivalsWithin(2, rate, 0).size()); };
  EXPECT_EQ(rows[0]["requests"].get<int64_t>(), expect(4));
  EXPECT_EQ(rows[1]["requests"].get<int64_t>(), expect(16));
  EXPECT_LT(rows[0]["requests"].get<int64_t>(), rows[1]["requests"].get<int64_t>());
  EXPECT_EQ(rows[0]["duration_s"].get<double>(), 2.0);
  for (const char* k : {"saturation_rate", "saturation_crossing", "saturation_exceeded"})
    EXPECT_TRUE(rows[0].contains(k)) << k;
  r = Fathom("bench online --model " + *dir_ / "ouro" + " --duration 2 --requests 4");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--duration and --requests"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fathom
