// The budget in offline runs, `fathom generate --requests F` (issue 14): the request fields
// budget / deadline_ms / service_tier, and `--reclaim-at S --reclaim-s T`, a reclaim notice:
// at the notice the requests not started yet are not started, the others run on, and what
// has not finished T seconds later is cut. Checked against the same requests run without a
// notice (greedy, batch-invariant: each request's tokens are a function of its own input).
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "model/test_util.h"

namespace fathom {
namespace {

using nlohmann::json;
using testing::RunCommand;
using testing::TempDir;

constexpr int kRequests = 12;

class RequestsBudgetCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    ASSERT_EQ(RunCommand(testing::FathomBinary() + " make-model ouro " + *dir_ / "ouro").exit_code, 0);
    std::ofstream f(*dir_ / "reqs.jsonl");
    for (int i = 0; i < kRequests; ++i) {
      json ids = json::array();
      for (int t = 0; t < 8; ++t) ids.push_back(1 + (i * 7 + t * 3) % 200);
      f << json{{"id", "r" + std::to_string(i)}, {"prompt_ids", ids}, {"max_tokens", 24},
                {"temperature", 0}, {"exit_threshold", 0.9}}
               .dump()
        << "\n";
    }
  }
  static void TearDownTestSuite() { delete dir_; }
  // --prefill-budget 8: one 8-token prompt per prefill step, so the first step starts
  // only some of the requests; --batch-invariant: a request's tokens do not depend on
  // which others share its steps.
  static json Run(const std::string& extra) {
    const auto r = RunCommand(testing::FathomBinary() + " generate --model " + *dir_ / "ouro" + " --requests " +
                              *dir_ / "reqs.jsonl" + " --width 4 --prefill-budget 8 --batch-invariant --json " +
                              extra);
    EXPECT_EQ(r.exit_code, 0) << r.output;
    return json::parse(r.output.substr(r.output.find('{')));
  }
  static std::map<std::string, json> ById(const json& report) {
    std::map<std::string, json> m;
    for (const json& q : report["requests"]) m[q["id"].get<std::string>()] = q;
    return m;
  }
  static TempDir* dir_;
};
TempDir* RequestsBudgetCli::dir_ = nullptr;

TEST_F(RequestsBudgetCli, RequestsStartedBeforeTheNoticeFinishAndTheRestAreNotStarted) {
  const auto plain = ById(Run(""));
  // The notice after the first step, with time to spare: what had started finishes as it
  // would have without a notice; nothing else starts.
  const json report = Run("--reclaim-at 0 --reclaim-s 1000");
  const json& rc = report["summary"]["reclaim"];
  ASSERT_TRUE(rc["noticed"].get<bool>()) << rc;
  const int64_t in_flight = rc["in_flight"], not_started = rc["not_started"];
  EXPECT_GE(in_flight, 1) << rc;
  EXPECT_GE(not_started, 1) << rc;
  EXPECT_EQ(in_flight + not_started, kRequests) << rc;
  EXPECT_EQ(rc["finished_in_time"], in_flight) << rc;
  EXPECT_EQ(rc["cut"], 0) << rc;
  int64_t finished = 0, refused = 0;
  for (const auto& [id, q] : ById(report)) {
    if (q.contains("reclaim")) {
      EXPECT_EQ(q["reclaim"], "not_started") << id;
      EXPECT_TRUE(q["output_ids"].empty()) << id << ": " << q;
      ++refused;
    } else {
      EXPECT_EQ(q["output_ids"], plain.at(id)["output_ids"]) << id;
      EXPECT_EQ(q["exit_depths"], plain.at(id)["exit_depths"]) << id;
      EXPECT_EQ(q["finish_reason"], "length") << id;
      ++finished;
    }
  }
  EXPECT_EQ(finished, in_flight);
  EXPECT_EQ(refused, not_started);
}

TEST_F(RequestsBudgetCli, WhatHasNotFinishedWhenTheTimeRunsOutIsCutWithItsTokensSoFar) {
  const auto plain = ById(Run(""));
  // 1 microsecond: the run stops after the step following the notice.
  const json report = Run("--reclaim-at 0 --reclaim-s 0.000001");
  const json& rc = report["summary"]["reclaim"];
  const int64_t in_flight = rc["in_flight"];
  EXPECT_GE(in_flight, 1) << rc;
  EXPECT_EQ(rc["cut"], in_flight) << rc;  // 24 tokens each cannot finish in two steps
  EXPECT_EQ(rc["finished_in_time"], 0) << rc;
  EXPECT_EQ(in_flight + rc["not_started"].get<int64_t>(), kRequests) << rc;
  int64_t cut = 0;
  for (const auto& [id, q] : ById(report)) {
    ASSERT_TRUE(q.contains("reclaim")) << id;
    if (q["reclaim"] != "cut") continue;
    ++cut;
    EXPECT_EQ(q["finish_reason"], "cancelled") << id;
    const json& all = plain.at(id)["output_ids"];
    ASSERT_LT(q["output_ids"].size(), all.size()) << id;
    for (size_t t = 0; t < q["output_ids"].size(); ++t) EXPECT_EQ(q["output_ids"][t], all[t]) << id << " token " << t;
  }
  EXPECT_EQ(cut, in_flight);
}

TEST_F(RequestsBudgetCli, ANoticeAfterTheRunEndedIsReportedAsNotGiven) {
  const json report = Run("--reclaim-at 100000");
  EXPECT_FALSE(report["summary"]["reclaim"]["noticed"].get<bool>());
  for (const json& q : report["requests"]) EXPECT_FALSE(q.contains("reclaim")) << q;
  const auto r = RunCommand(testing::FathomBinary() + " generate --model " + *dir_ / "ouro" + " --requests " +
                            *dir_ / "reqs.jsonl" + " --reclaim-s 0");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--reclaim-s"), std::string::npos) << r.output;
}

// Ouro's exit rule under b: a token exits once its cumulative exit probability reaches q·b.
// With q = 1, b = 1 only the last loop step reaches it; b = 0 exits at the first step.
TEST_F(RequestsBudgetCli, TheBudgetFieldSetsEachDecodeTokensExitRule) {
  {
    std::ofstream f(*dir_ / "budget.jsonl");
    f << R"({"id": "low", "prompt_ids": [5, 6, 7], "max_tokens": 8, "temperature": 0, "exit_threshold": 1.0, "budget": 0})"
      << "\n"
      << R"({"id": "full", "prompt_ids": [5, 6, 7], "max_tokens": 8, "temperature": 0, "exit_threshold": 1.0, "budget": 1, )"
      << R"("deadline_ms": 60000, "service_tier": "flex"})" << "\n";
  }
  const auto r = RunCommand(testing::FathomBinary() + " generate --model " + *dir_ / "ouro" + " --requests " +
                            *dir_ / "budget.jsonl" + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto by = ById(json::parse(r.output.substr(r.output.find('{'))));
  const json& low = by.at("low")["exit_depths"];
  const json& full = by.at("full")["exit_depths"];
  ASSERT_EQ(low.size(), 8u);
  ASSERT_EQ(full.size(), 8u);
  EXPECT_EQ(low[0], 4);  // the first token comes from the prompt's prefill, at full depth
  for (size_t t = 1; t < 8; ++t) EXPECT_EQ(low[t], 1) << "token " << t;
  for (size_t t = 0; t < 8; ++t) EXPECT_EQ(full[t], 4) << "token " << t;
}

TEST_F(RequestsBudgetCli, BadBudgetFieldsAreErrorsNamingLineAndField) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt_ids": [1], "budget": 1.5})", "line 1: field 'budget'"},
      {R"({"prompt_ids": [1], "budget": "low"})", "line 1: field 'budget'"},
      {R"({"prompt_ids": [1], "deadline_ms": 0})", "line 1: field 'deadline_ms'"},
      {R"({"prompt_ids": [1], "service_tier": "gold"})", "line 1: field 'service_tier': 'gold' is not one of"},
      {R"({"prompt_ids": [1], "service_tier": 3})", "line 1: field 'service_tier'"},
  };
  for (const auto& [line, expect] : cases) {
    {
      std::ofstream f(*dir_ / "bad.jsonl");
      f << line << "\n";
    }
    const auto r = RunCommand(testing::FathomBinary() + " generate --model " + *dir_ / "ouro" + " --requests " +
                              *dir_ / "bad.jsonl");
    EXPECT_EQ(r.exit_code, 2) << line << ": " << r.output;
    EXPECT_NE(r.output.find(expect), std::string::npos) << line << ": " << r.output;
  }
}

}  // namespace
}  // namespace fathom
