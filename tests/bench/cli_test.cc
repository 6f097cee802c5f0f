// The `fathom bench` benchmark-suite subcommands end to end on tiny random models (fast).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "bench/driver.h"
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

TEST_F(BenchCli, OfflineJsonHasOneObjectPerScheduler) {
  for (const char* fam : {"ouro", "huginn"}) {
    CommandResult r = Fathom("bench offline --model " + *dir_ / fam + " --requests 6 --mean-depth 3 --json");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    const auto rows = JsonLines(r.output);
    ASSERT_EQ(rows.size(), 3u) << r.output;
    EXPECT_EQ(rows[0]["scheduler"], "cb");
    EXPECT_DOUBLE_EQ(rows[0]["ratio_to_cb"].get<double>(), 1.0);
    for (const auto& j : rows) {
      for (const char* k : {"scheduler", "output_tok_s", "ratio_to_cb", "s_dec", "s_e2e", "fraction_of_s_e2e",
                            "control_ratio_to_cb", "alpha", "f0", "fr"})
        EXPECT_TRUE(j.contains(k)) << k;
      EXPECT_GT(j["output_tok_s"].get<double>(), 0);
      EXPECT_GT(j["s_dec"].get<double>(), 1.0);
      // Replayed lengths: every scheduler produces the same tokens count.
      EXPECT_EQ(j["output_tokens"], rows[0]["output_tokens"]);
    }
    EXPECT_NEAR(rows[1]["mean_depth"].get<double>(), 3.0, 0.5);
    EXPECT_NE(r.output.find("ETA"), std::string::npos);  // progress, on stderr
  }
}

TEST_F(BenchCli, OnlineKSweepAndStepLatencyFit) {
  CommandResult r = Fathom("bench online --model " + *dir_ / "ouro" + " --requests 4 --rates 100,400 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 6u);
  for (const auto& j : rows)
    for (const char* k : {"normalized_latency_s", "ttft_p50_s", "tpot_p90_s", "saturation_rate"}) EXPECT_TRUE(j.contains(k)) << k;
  r = Fathom("bench k-sweep --model " + *dir_ / "huginn" + " --requests 4 --ks 1,2 --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1]["k"], 2);
  r = Fathom("bench step-latency --model " + *dir_ / "ouro" + " --batch 1,2,4 --context 16,64 --reps 1 --fit --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_TRUE(rows[0].contains("fit")) << r.output;
  EXPECT_EQ(rows[0]["fit"]["per_context"].size(), 2u);
  EXPECT_TRUE(rows[0]["fit"].contains("delta_ms"));
}

TEST_F(BenchCli, OfflineRepeatReportsTheMedianOfRounds) {
  CommandResult r = Fathom("bench offline --model " + *dir_ / "ouro" +
                           " --requests 4 --mean-depth 3 --repeat 3 --schedulers cdb-refill --quiet --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = JsonLines(r.output);
  ASSERT_EQ(rows.size(), 2u) << r.output;
  for (const auto& j : rows) {
    EXPECT_EQ(j["repeats"], 3);
    EXPECT_LE(j["ratio_to_cb_min"].get<double>(), j["ratio_to_cb"].get<double>());
    EXPECT_LE(j["ratio_to_cb"].get<double>(), j["ratio_to_cb_max"].get<double>());
    EXPECT_LE(j["control_ratio_to_cb_min"].get<double>(), j["control_ratio_to_cb"].get<double>());
    EXPECT_LE(j["control_ratio_to_cb"].get<double>(), j["control_ratio_to_cb_max"].get<double>());
  }
  // CB against itself in every round.
  EXPECT_DOUBLE_EQ(rows[0]["ratio_to_cb_min"].get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(rows[0]["ratio_to_cb_max"].get<double>(), 1.0);
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
