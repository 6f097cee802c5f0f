// bench budget: the report's arithmetic on hand-made runs (no engine), and a few-second run of
// the CLI on a tiny random Ouro: every policy serves every request, the policies run at the
// budgets they claim (full at b = 1 and r_max, low at its fixed b and shallower), the
// reclaim runs refuse what arrives after the notice, and bad flags are named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "bench/budget_bench.h"
#include "model/test_util.h"

namespace fathom {
namespace {

using nlohmann::json;

bench::BudgetBenchOptions Options() {
  bench::BudgetBenchOptions o;
  o.warm_s = 2, o.burst_s = 2, o.after_s = 4, o.bin_s = 1;
  return o;
}

TEST(BudgetBenchReport, MissesGoodputAndRecoveryFromHandMadeRuns) {
  const bench::BudgetBenchOptions o = Options();
  bench::PolicyRun run;
  run.policy = bench::BudgetPolicy::kController;
  // Met (1 s of 2), missed (3 s of 2, in the burst), never finished (in the burst), met.
  run.requests = {{0.5, 2, 1.5, 4, false}, {2.5, 2, 5.5, 4, true}, {3.0, 2, -1, 0, true}, {6.0, 2, 7.0, 4, false}};
  // b per 1 s bin: 1 1 0.5 0.5 0.8 1 1 1; the burst ends at 4 s: recovered from 5 s.
  for (double b : {1.0, 1.0, 0.5, 0.5, 0.8, 1.0, 1.0, 1.0}) {
    bench::BudgetBin bin;
    bin.steps = 2, bin.b_sum = 2 * b;
    run.bins.push_back(bin);
  }
  const json r = bench::LoadReport(run, o);
  EXPECT_EQ(r["requests"], 4);
  EXPECT_EQ(r["finished"], 3);
  EXPECT_EQ(r["deadline_misses"], 2);
  EXPECT_EQ(r["burst_requests"], 2);
  EXPECT_EQ(r["burst_misses"], 2);
  EXPECT_DOUBLE_EQ(r["goodput_per_s"].get<double>(), 2.0 / 8.0);  // met over the 8 s load window
  EXPECT_DOUBLE_EQ(r["b_recovery_s"].get<double>(), 1.0);         // 5 s - the burst's end at 4 s
  EXPECT_EQ(r["timeline"]["b"].size(), 8u);
  EXPECT_DOUBLE_EQ(r["timeline"]["b"][2].get<double>(), 0.5);

  run.bins[7].b_sum = 1.0;  // the last bin low again: not recovered
  EXPECT_DOUBLE_EQ(bench::LoadReport(run, o)["b_recovery_s"].get<double>(), -1.0);

  bench::PolicyRun rc;
  rc.policy = bench::BudgetPolicy::kController;
  rc.notice_at = 3;
  rc.requests = {{0.5, 2, 1.5, 4, false, false, false}, {2.5, 2, 4.0, 4, true, false, true},
                 {2.8, 2, -1, 1, true, false, true}, {3.5, 2, -1, 0, true, true, false}};
  const json rr = bench::ReclaimReport(rc);
  EXPECT_EQ(rr["in_flight"], 2);
  EXPECT_EQ(rr["finished_in_time"], 1);
  EXPECT_EQ(rr["refused"], 1);
  EXPECT_DOUBLE_EQ(rr["fraction"].get<double>(), 0.5);
}

TEST(BudgetBenchReport, LoadHasTheBurstAndTheDeadlines) {
  bench::BudgetBenchOptions o = Options();
  o.warm_s = 20, o.burst_s = 20, o.after_s = 20, o.burst_factor = 3, o.deadline_factor = 20;
  ModelSpec spec;
  spec.vocab = 256;
  spec.eos_id = 0;
  o.max_prompt = 12;
  const std::vector<bench::LoadRequest> load = bench::MakeLoad(spec, o, 2.0, 0.05);
  int64_t warm = 0, burst = 0, after = 0, cut = 0;
  for (const bench::LoadRequest& r : load) {
    (r.arrival < 20 ? warm : r.arrival < 40 ? burst : after) += 1;
    EXPECT_EQ(r.burst, r.arrival >= 20 && r.arrival < 40);
    EXPECT_DOUBLE_EQ(r.deadline, 20 * r.spec.max_tokens * 0.05);
    EXPECT_LE(r.spec.max_tokens, o.max_output);
    EXPECT_LE(static_cast<int64_t>(r.spec.prompt.size()), o.max_prompt);
    cut += static_cast<int64_t>(r.spec.prompt.size()) == o.max_prompt;
  }
  EXPECT_GT(cut, 0);  // Alpaca's prompts are mostly longer than 12 tokens
  // 40 expected per base phase, 120 in the burst (Poisson: wide bounds).
  EXPECT_GT(burst, 2 * warm);
  EXPECT_GT(burst, 2 * after);
  EXPECT_NEAR(static_cast<double>(burst), 120, 40);
  for (size_t i = 1; i < load.size(); ++i) EXPECT_LE(load[i - 1].arrival, load[i].arrival);
}

TEST(BenchBudget, ShortRunServesEveryRequestUnderEachPolicy) {
  testing::TempDir tmp;
  const std::string dir = tmp / "ouro";
  testing::MakeTinyModel("ouro", dir, DType::kF32);
  const testing::CommandResult r = testing::RunCommand(
      testing::FathomBinary() + " bench budget --model " + dir +
      " --warm 1 --burst 1.5 --after 1 --rate 3 --reclaim-at 1.5 --reclaim-s 1 --calib-requests 4 --width 4"
      " --max-output 8 --threads 1 --json --quiet 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json j = json::parse(r.output.substr(r.output.find('{')));
  ASSERT_EQ(j["runs"].size(), 3u);
  const auto n = j["load"]["requests"].get<int64_t>();
  ASSERT_GT(n, 0);
  for (const json& run : j["runs"]) {
    EXPECT_EQ(run["requests"], n) << run["policy"];
    EXPECT_EQ(run["finished"], n) << run["policy"];
    EXPECT_EQ(run["timeline"]["t"].size(), run["timeline"]["b"].size());
  }
  EXPECT_EQ(j["runs"][0]["policy"], "full");
  EXPECT_DOUBLE_EQ(j["runs"][0]["mean_b"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(j["runs"][0]["mean_depth"].get<double>(), 4.0);  // the tiny preset's 4 loop steps
  EXPECT_EQ(j["runs"][1]["policy"], "low");
  EXPECT_NEAR(j["runs"][1]["mean_b"].get<double>(), 0.25, 1e-6);  // the default tier's floor
  EXPECT_LT(j["runs"][1]["mean_depth"].get<double>(), 4.0);
  EXPECT_EQ(j["runs"][2]["policy"], "controller");
  ASSERT_EQ(j["reclaim"].size(), 2u);
  for (const json& rc : j["reclaim"]) {
    EXPECT_GE(rc["notice_at_s"].get<double>(), 1.5);
    EXPECT_LE(rc["finished_in_time"], rc["in_flight"]);
  }
  EXPECT_TRUE(j["targets"].contains("reclaim_fraction"));
}

// A gate checkpoint: b reaches its routers, and the report says what the gates ran. Forced
// gates give known fractions: all on is the ungated model; all off under the `mask` policy
// runs no layer matmul at all (under `compute` a skipped attention still runs q/k/v).
TEST(BenchBudget, GateCheckpointsReportWhatTheirGatesRan) {
  testing::TempDir tmp;
  for (const char* force : {"on", "off"}) {
    const std::string dir = tmp / (std::string("l2a_") + force);
    testing::MakeUpstreamTinyModel("llama", dir, DType::kF32,
                                   std::string("--l2a-gates attention,mlp --l2a-kv mask --l2a-force ") + force);
    const testing::CommandResult r = testing::RunCommand(
        testing::FathomBinary() + " bench budget --model " + dir +
        " --warm 0.5 --burst 0.5 --after 0.5 --rate 4 --no-reclaim --calib-requests 4 --width 4"
        " --max-output 6 --threads 1 --json --quiet 2>&1");
    ASSERT_EQ(r.exit_code, 0) << force << ": " << r.output;
    const json j = json::parse(r.output.substr(r.output.find('{')));
    ASSERT_EQ(j["runs"].size(), 3u);
    const double want = force == std::string("on") ? 1.0 : 0.0;
    for (const json& run : j["runs"]) {
      ASSERT_TRUE(run["gate_compute"].is_object()) << force << " " << run["policy"];
      EXPECT_DOUBLE_EQ(run["gate_compute"]["attention"].get<double>(), want) << force << " " << run["policy"];
      EXPECT_DOUBLE_EQ(run["gate_compute"]["mlp"].get<double>(), want) << force << " " << run["policy"];
      EXPECT_NEAR(run["gate_compute"]["matmul_flops"].get<double>(), want, 1e-12) << force << " " << run["policy"];
      EXPECT_EQ(run["finished"], j["load"]["requests"]) << force << " " << run["policy"];
    }
  }
  // A dense model without gates: b would change nothing, so it is refused.
  const std::string dense = tmp / "dense";
  testing::MakeTinyModel("llama", dense, DType::kF32);
  const testing::CommandResult r =
      testing::RunCommand(testing::FathomBinary() + " bench budget --model " + dense + " 2>&1");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("neither a looped model nor an L2A gate checkpoint"), std::string::npos) << r.output;
}

TEST(BenchBudget, BadFlagsAreNamed) {
  testing::TempDir tmp;
  const std::string dir = tmp / "ouro";
  testing::MakeTinyModel("ouro", dir, DType::kF32);
  for (const auto& [flag, name] : {std::pair<std::string, std::string>{"--tier gold", "--tier"},
                                   {"--workload nope", "--workload"},
                                   {"--burst-factor 0.5", "--burst-factor"},
                                   {"--warm 0 --burst 0 --after 0", "--warm"}}) {
    const testing::CommandResult r =
        testing::RunCommand(testing::FathomBinary() + " bench budget --model " + dir + " " + flag + " 2>&1");
    EXPECT_EQ(r.exit_code, 2) << flag << ": " << r.output;
    EXPECT_NE(r.output.find(name), std::string::npos) << flag << ": " << r.output;
  }
}

}  // namespace
}  // namespace fathom
