#include "serve/openai_api.h"

#include <gtest/gtest.h>

namespace fathom::serve {
namespace {

using nlohmann::json;

ApiRequest ParseOk(Endpoint ep, const std::string& body) {
  ApiRequest r;
  auto e = ParseApiRequest(ep, body, &r);
  EXPECT_FALSE(e.has_value()) << body << " -> " << (e ? e->message : "");
  return r;
}

// Each bad body is a 400 whose param (and message) names the field.
void ExpectBad(Endpoint ep, const std::string& body, const std::string& param, const std::string& in_message = "") {
  ApiRequest r;
  auto e = ParseApiRequest(ep, body, &r);
  ASSERT_TRUE(e.has_value()) << body;
  EXPECT_EQ(e->status, 400) << body;
  EXPECT_EQ(e->type, "invalid_request_error");
  EXPECT_EQ(e->param, param) << body << ": " << e->message;
  if (!param.empty()) {
    EXPECT_NE(e->message.find(param), std::string::npos) << e->message;
  }
  if (!in_message.empty()) {
    EXPECT_NE(e->message.find(in_message), std::string::npos) << e->message;
  }
}

TEST(OpenAiApi, ParsesACompletion) {
  ApiRequest r = ParseOk(Endpoint::kCompletions,
                         R"({"model": "m", "prompt": "Hello", "max_tokens": 5, "temperature": 0, "top_p": 0.5,
                             "top_k": 3, "seed": 42, "stop": ["a", "bc"], "stream": true,
                             "stream_options": {"include_usage": true}, "n": 1, "logprobs": null,
                             "exit_threshold": 0.7, "max_loops": 3, "min_loops": 2, "unknown_field": {"x": 1}})");
  EXPECT_EQ(r.model, "m");
  EXPECT_EQ(r.prompt, "Hello");
  EXPECT_FALSE(r.prompt_is_ids);
  EXPECT_EQ(r.max_tokens, 5);
  EXPECT_EQ(r.temperature, 0);
  EXPECT_EQ(r.top_p, 0.5);
  EXPECT_EQ(r.top_k, 3);
  EXPECT_EQ(r.seed, 42u);
  EXPECT_EQ(r.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_TRUE(r.stream);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.exit_threshold, 0.7);
  EXPECT_EQ(r.max_loops, 3);
  EXPECT_EQ(r.min_loops, 2);
}

TEST(OpenAiApi, PromptForms) {
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, R"({"prompt": ["one"]})").prompt, "one");
  ApiRequest ids = ParseOk(Endpoint::kCompletions, R"({"prompt": [1, 2, 3]})");
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, R"({"prompt": [[4, 5]]})").prompt_ids, (std::vector<int32_t>{4, 5}));
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, R"({"prompt": "x", "stop": "END"})").stop,
            (std::vector<std::string>{"END"}));
  EXPECT_EQ(ParseOk(Endpoint::kCompletions, R"({"prompt": "x", "max_tokens": 4.0})").max_tokens, 4);
}

TEST(OpenAiApi, ParsesChatMessages) {
  ApiRequest r = ParseOk(Endpoint::kChatCompletions,
                         R"({"messages": [{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": [{"type": "text", "text": "hi "},
                                                                       {"type": "text", "text": "there"}]}],
                             "max_completion_tokens": 7, "max_tokens": 99})");
  ASSERT_EQ(r.messages.size(), 2u);
  EXPECT_EQ(r.messages[0].role, "system");
  EXPECT_EQ(r.messages[1].content, "hi there");
  EXPECT_EQ(r.max_tokens, 7);  // max_completion_tokens wins
}

TEST(OpenAiApi, RejectsBadBodies) {
  const Endpoint C = Endpoint::kCompletions, H = Endpoint::kChatCompletions;
  ExpectBad(C, "{not json", "", "not valid JSON");
  ExpectBad(C, "[1, 2]", "", "JSON object");
  ExpectBad(C, "{\"prompt\": \"a\xff\"}", "", "UTF-8");
  ExpectBad(C, "{}", "prompt", "required");
  ExpectBad(C, R"({"prompt": ""})", "prompt", "empty");
  ExpectBad(C, R"({"prompt": []})", "prompt", "empty");
  ExpectBad(C, R"({"prompt": 5})", "prompt");
  ExpectBad(C, R"({"prompt": ["a", "b"]})", "prompt", "only one prompt per request");
  ExpectBad(C, R"({"prompt": [[1], [2]]})", "prompt", "only one prompt per request");
  ExpectBad(C, R"({"prompt": [1, -2]})", "prompt");
  ExpectBad(C, R"({"prompt": [1, "x"]})", "prompt");
  ExpectBad(C, R"({"prompt": "a", "model": 3})", "model");
  ExpectBad(C, R"({"prompt": "a", "max_tokens": 0})", "max_tokens");
  ExpectBad(C, R"({"prompt": "a", "max_tokens": "5"})", "max_tokens", "integer");
  ExpectBad(C, R"({"prompt": "a", "max_tokens": 2.5})", "max_tokens");
  ExpectBad(C, R"({"prompt": "a", "temperature": "hot"})", "temperature", "number");
  ExpectBad(C, R"({"prompt": "a", "temperature": 3})", "temperature");
  ExpectBad(C, R"({"prompt": "a", "top_p": 0})", "top_p");
  ExpectBad(C, R"({"prompt": "a", "top_k": -2})", "top_k");
  ExpectBad(C, R"({"prompt": "a", "seed": 1.5})", "seed");
  ExpectBad(C, R"({"prompt": "a", "stop": 1})", "stop");
  ExpectBad(C, R"({"prompt": "a", "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4");
  ExpectBad(C, R"({"prompt": "a", "stream": "yes"})", "stream");
  ExpectBad(C, R"({"prompt": "a", "stream_options": {"include_usage": 1}})", "stream_options.include_usage");
  ExpectBad(C, R"({"prompt": "a", "n": 2})", "n", "must be 1");
  ExpectBad(C, R"({"prompt": "a", "logprobs": 3})", "logprobs");
  ExpectBad(C, R"({"prompt": "a", "echo": true})", "echo");
  ExpectBad(C, R"({"prompt": "a", "best_of": 2})", "best_of");
  ExpectBad(C, R"({"prompt": "a", "suffix": "end"})", "suffix");
  ExpectBad(C, R"({"prompt": "a", "presence_penalty": 0.5})", "presence_penalty");
  ExpectBad(C, R"({"prompt": "a", "exit_threshold": "high"})", "exit_threshold");
  ExpectBad(C, R"({"prompt": "a", "max_loops": 0})", "max_loops");
  ExpectBad(C, R"({"prompt": "a", "min_loops": -1})", "min_loops");
  ExpectBad(H, "{}", "messages", "required");
  ExpectBad(H, R"({"messages": []})", "messages", "empty");
  ExpectBad(H, R"({"messages": "hi"})", "messages");
  ExpectBad(H, R"({"messages": [{"content": "hi"}]})", "messages[0].role");
  ExpectBad(H, R"({"messages": [{"role": "user"}]})", "messages[0].content");
  ExpectBad(H, R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content");
  ExpectBad(H, R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
            "messages[0].content[0].type");
  ExpectBad(H, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true})", "logprobs");
  ExpectBad(H, R"({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 0})",
            "max_completion_tokens");
}

TEST(OpenAiApi, AcceptsDisabledFeatures) {
  ParseOk(Endpoint::kCompletions, R"({"prompt": "a", "n": 1, "best_of": 1, "echo": false, "logprobs": 0,
                                      "suffix": null, "presence_penalty": 0, "frequency_penalty": 0.0, "user": "u"})");
  ParseOk(Endpoint::kChatCompletions, R"({"messages": [{"role": "user", "content": "x"}], "logprobs": false,
                                          "tools": [], "response_format": {"type": "text"}})");
}

ModelLimits Limits() {
  ModelLimits l;
  l.max_positions = 32;
  l.looped = true;
  l.max_loops = 4;
  return l;
}

TEST(OpenAiApi, BuildsTheEngineRequest) {
  ApiRequest r = ParseOk(Endpoint::kCompletions,
                         R"({"prompt": "a", "max_tokens": 6, "temperature": 0, "exit_threshold": 0.5,
                             "max_loops": 3, "min_loops": 2})");
  RequestSpec spec;
  ASSERT_FALSE(BuildRequestSpec(r, {5, 6, 7}, Limits(), {9}, 1234, &spec).has_value());
  EXPECT_EQ(spec.prompt, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(spec.max_tokens, 6);
  EXPECT_EQ(spec.sampling.temperature, 0.f);
  EXPECT_EQ(spec.seed, 1234u);
  EXPECT_EQ(spec.stop_ids, (std::vector<int32_t>{9}));
  EXPECT_EQ(spec.loops, 3);
  EXPECT_EQ(spec.exit.kind, ExitSpec::Kind::kThreshold);
  EXPECT_EQ(spec.exit.threshold, 0.5);
  EXPECT_EQ(spec.exit.min_depth, 2);

  // Defaults: 16 tokens for completions (capped by the context), the rest of the context
  // for chat; ignore_eos drops the stop ids.
  ApiRequest d = ParseOk(Endpoint::kCompletions, R"({"prompt": "a", "ignore_eos": true, "seed": 3})");
  ASSERT_FALSE(BuildRequestSpec(d, std::vector<int32_t>(20, 1), Limits(), {9}, 1, &spec).has_value());
  EXPECT_EQ(spec.max_tokens, 12);
  EXPECT_TRUE(spec.stop_ids.empty());
  EXPECT_FALSE(spec.stop_at_eos);
  EXPECT_EQ(spec.seed, 3u);
  ApiRequest c = ParseOk(Endpoint::kChatCompletions, R"({"messages": [{"role": "user", "content": "x"}]})");
  ASSERT_FALSE(BuildRequestSpec(c, std::vector<int32_t>(10, 1), Limits(), {}, 1, &spec).has_value());
  EXPECT_EQ(spec.max_tokens, 22);
}

TEST(OpenAiApi, RejectsRequestsBeyondTheModel) {
  RequestSpec spec;
  auto bad = [&](const std::string& body, std::vector<int32_t> prompt, const std::string& param, bool looped = true) {
    ApiRequest r = ParseOk(Endpoint::kCompletions, body);
    ModelLimits l = Limits();
    l.looped = looped;
    auto e = BuildRequestSpec(r, std::move(prompt), l, {}, 1, &spec);
    ASSERT_TRUE(e.has_value()) << body;
    EXPECT_EQ(e->status, 400);
    EXPECT_EQ(e->param, param) << e->message;
  };
  bad(R"({"prompt": "a", "max_tokens": 30})", std::vector<int32_t>(5, 1), "max_tokens");  // 35 > 32
  bad(R"({"prompt": "a"})", std::vector<int32_t>(32, 1), "prompt");                       // prompt too long
  bad(R"({"prompt": "a"})", {}, "prompt");                                                // no tokens
  bad(R"({"prompt": "a", "max_loops": 5})", {1}, "max_loops");
  bad(R"({"prompt": "a", "min_loops": 4, "max_loops": 3})", {1}, "min_loops");
  bad(R"({"prompt": "a", "exit_threshold": 0.5})", {1}, "exit_threshold", /*looped=*/false);
}

TEST(OpenAiApi, BuildsResponses) {
  ResponseMeta meta{"cmpl-1", 100, "tiny"};
  CompletionResult r;
  r.text = "hello";
  r.finish_reason = "length";
  r.prompt_tokens = 3;
  r.completion_tokens = 4;
  r.mean_exit_depth = 2.5;
  json c = CompletionResponse(Endpoint::kCompletions, meta, r);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["id"], "cmpl-1");
  EXPECT_EQ(c["created"], 100);
  EXPECT_EQ(c["model"], "tiny");
  EXPECT_EQ(c["choices"][0]["text"], "hello");
  EXPECT_EQ(c["choices"][0]["index"], 0);
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  EXPECT_EQ(c["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(c["usage"]["total_tokens"], 7);
  EXPECT_EQ(c["fathom"]["mean_exit_depth"], 2.5);
  json h = CompletionResponse(Endpoint::kChatCompletions, meta, r);
  EXPECT_EQ(h["object"], "chat.completion");
  EXPECT_EQ(h["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(h["choices"][0]["message"]["content"], "hello");

  json first = StreamChunk(Endpoint::kChatCompletions, meta, "", true, "", false);
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "");
  EXPECT_TRUE(first["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(first.contains("usage"));
  json mid = StreamChunk(Endpoint::kChatCompletions, meta, "lo", false, "", true);
  EXPECT_FALSE(mid["choices"][0]["delta"].contains("role"));
  EXPECT_EQ(mid["choices"][0]["delta"]["content"], "lo");
  EXPECT_TRUE(mid.contains("usage") && mid["usage"].is_null());
  json last = StreamChunk(Endpoint::kChatCompletions, meta, "", false, "stop", false);
  EXPECT_EQ(last["choices"][0]["delta"], json::object());
  EXPECT_EQ(last["choices"][0]["finish_reason"], "stop");
  json text = StreamChunk(Endpoint::kCompletions, meta, "ab", false, "", false);
  EXPECT_EQ(text["object"], "text_completion");
  EXPECT_EQ(text["choices"][0]["text"], "ab");
  json usage = UsageChunk(Endpoint::kCompletions, meta, r);
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);

  EXPECT_EQ(SseEvent(json{{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(std::string(kSseDone), "data: [DONE]\n\n");
  json models = ModelList("tiny", 5);
  EXPECT_EQ(models["object"], "list");
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  EXPECT_EQ(models["data"][0]["object"], "model");

  ApiError e = InvalidRequest("max_tokens", "too many");
  json eb = ErrorBody(e);
  EXPECT_EQ(eb["error"]["message"], "too many");
  EXPECT_EQ(eb["error"]["type"], "invalid_request_error");
  EXPECT_EQ(eb["error"]["param"], "max_tokens");
  EXPECT_TRUE(eb["error"]["code"].is_null());
  EXPECT_TRUE(ErrorBody(InvalidRequest("", "x"))["error"]["param"].is_null());
  // Invalid UTF-8 never throws out of Dump.
  EXPECT_FALSE(Dump(json("a\xff")).empty());
}

}  // namespace
}  // namespace fathom::serve
