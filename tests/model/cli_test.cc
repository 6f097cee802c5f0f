// The `fathom` binary: help on every subcommand, flag validation, and the commands end to end.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/test_util.h"

namespace fathom {
namespace {

using testing::CommandResult;
using testing::RunCommand;
using testing::TempDir;

CommandResult Fathom(const std::string& args) { return RunCommand(testing::FathomBinary() + " " + args); }

TEST(CliTest, HelpOnEverySubcommand) {
  for (const char* cmd : {"make-model", "logits", "generate", "bench decode", "bench step-latency"}) {
    CommandResult r = Fathom(std::string(cmd) + " --help");
    EXPECT_EQ(r.exit_code, 0) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("usage: fathom"), std::string::npos) << cmd << ": " << r.output;
  }
  EXPECT_EQ(Fathom("--help").exit_code, 0);
  EXPECT_EQ(Fathom("").exit_code, 2);
  EXPECT_EQ(Fathom("frobnicate").exit_code, 2);
}

TEST(CliTest, BadFlagsAreUsageErrorsNamingTheFlag) {
  struct BadCase {
    std::string args, expect;
  };
  const std::vector<BadCase> cases = {
      {"generate --model /x --prompt-ids 1,2 --max-tokens abc", "--max-tokens"},
      {"generate --model /x --prompt-ids 1,x,2", "--prompt-ids: element 1"},
      {"generate --model /x --prompt-ids 1,2 --bogus 3", "unknown flag --bogus"},
      {"generate --model /x", "exactly one of --prompt-ids and --prompt"},
      {"generate --model /x --prompt-ids 1 --top-p 2", "--top-p"},
      {"generate --model /x --prompt-ids 1 --loops 2 --exit-threshold 0.5", "exclusive"},
      {"generate --model /x --prompt-ids 1 --max-tokens", "--max-tokens: missing value"},
      {"logits --model /x --ids 1 --out /tmp/o --init-state random", "--init-state"},
      {"make-model llama", "OUTDIR"},
      {"make-model llama /tmp/x --dtype f64", "--dtype"},
      {"bench decode --prompt 0 --model /x", "--prompt"},
      {"generate --model /x --prompt-ids 1 --weights int2",
       "--weights: 'int2' is not checkpoint, int8, w8a8 or int4"},
      {"eval --model /x --ids-file /x --weights fp8", "--weights: 'fp8'"},
      {"bench decode --model /x --weights q4", "--weights: 'q4'"},
      {"bench decode --model /x --lm-head-weights q6_k",
       "--lm-head-weights: 'q6_k' is not checkpoint, int8, w8a8 or int4"},
  };
  for (const BadCase& c : cases) {
    CommandResult r = Fathom(c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args << ": " << r.output;
    EXPECT_NE(r.output.find(c.expect), std::string::npos) << c.args << ": " << r.output;
  }
}

TEST(CliTest, RuntimeErrorsNameTheProblem) {
  TempDir dir;
  CommandResult r = Fathom("make-model gpt9 " + (dir / "m"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("unknown family 'gpt9'"), std::string::npos) << r.output;
  r = Fathom("make-model llama " + (dir / "m") + " --preset huge");
  EXPECT_NE(r.output.find("unknown preset 'huge'"), std::string::npos) << r.output;
  ASSERT_EQ(Fathom("make-model llama " + (dir / "m")).exit_code, 0);
  r = Fathom("generate --model " + (dir / "m") + " --prompt-ids 1,300 --max-tokens 2");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("token 1 has id 300"), std::string::npos) << r.output;
  r = Fathom("generate --model " + (dir / "m") + " --prompt-ids 1 --loops 2");
  EXPECT_NE(r.output.find("not a looped model"), std::string::npos) << r.output;
  r = Fathom("generate --model " + (dir / "nothing") + " --prompt-ids 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("nothing"), std::string::npos) << r.output;
}

TEST(CliTest, MakeModelLogitsAndGenerateEndToEnd) {
  TempDir dir;
  const std::string m = dir / "ouro";
  ASSERT_EQ(Fathom("make-model ouro " + m + " --dtype f32 --seed 3").exit_code, 0);
  CommandResult r = Fathom("logits --model " + m + " --ids 1,2,3,4 --loops 2 --out " + (dir / "l.f32"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(testing::ReadF32File(dir / "l.f32").size(), 4u * 256u);

  r = Fathom("generate --model " + m +
             " --prompt-ids 1,2,3 --max-tokens 6 --exit-threshold 0.3 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["output_ids"].size(), 6u);
  EXPECT_EQ(j["exit_depths"].size(), 6u);
  EXPECT_TRUE(j.contains("decode_tokens_per_s"));

  r = Fathom("generate --model " + m + " --prompt-ids 1,2,3 --max-tokens 5 --temperature 0.8 "
             "--top-p 0.9 --top-k 20 --seed 5 --ignore-eos --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  CommandResult again = Fathom("generate --model " + m + " --prompt-ids 1,2,3 --max-tokens 5 "
                               "--temperature 0.8 --top-p 0.9 --top-k 20 --seed 5 --ignore-eos --json");
  EXPECT_EQ(nlohmann::json::parse(r.output)["output_ids"],
            nlohmann::json::parse(again.output)["output_ids"]);

  r = Fathom("bench decode --model " + m + " --prompt 8 --gen 4 --batch 1,3 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto bench = nlohmann::json::parse(r.output);
  ASSERT_EQ(bench["results"].size(), 2u);
  EXPECT_EQ(bench["results"][1]["batch"], 3);
  EXPECT_GT(bench["results"][1]["decode_tokens_per_s"].get<double>(), 0);

  r = Fathom("bench step-latency --model " + m + " --batch 1,2 --context 8 --reps 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(r.output)["results"].size(), 2u);
}

}  // namespace
}  // namespace fathom
