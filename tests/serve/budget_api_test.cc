// The budget's request fields (issue 14): deadline_ms, budget, service_tier and
// thinking_token_budget parsed, validated (a 400 naming the field) and carried into the
// engine's RequestSpec; --default-deadline-ms for requests without one; the response's
// "fathom" extension carries the mean budget.
#include <gtest/gtest.h>

#include "serve/openai_api.h"

namespace fathom::serve {
namespace {

using nlohmann::json;

ModelLimits Limits() {
  ModelLimits l;
  l.max_positions = 32;
  l.looped = true;
  l.max_loops = 4;
  return l;
}

void ExpectBad(const std::string& body, const std::string& param) {
  ApiRequest r;
  auto e = ParseApiRequest(Endpoint::kCompletions, body, &r);
  ASSERT_TRUE(e.has_value()) << body;
  EXPECT_EQ(e->status, 400) << body;
  EXPECT_EQ(e->param, param) << body << ": " << e->message;
  EXPECT_NE(e->message.find(param), std::string::npos) << e->message;
}

TEST(BudgetApi, BadBudgetFieldsAre400sNamingTheField) {
  ExpectBad(R"({"prompt": "a", "deadline_ms": "soon"})", "deadline_ms");
  ExpectBad(R"({"prompt": "a", "deadline_ms": 0})", "deadline_ms");
  ExpectBad(R"({"prompt": "a", "deadline_ms": -5})", "deadline_ms");
  ExpectBad(R"({"prompt": "a", "deadline_ms": 2.5})", "deadline_ms");
  ExpectBad(R"({"prompt": "a", "budget": "half"})", "budget");
  ExpectBad(R"({"prompt": "a", "budget": 1.5})", "budget");
  ExpectBad(R"({"prompt": "a", "budget": -0.1})", "budget");
  ExpectBad(R"({"prompt": "a", "service_tier": 1})", "service_tier");
  ExpectBad(R"({"prompt": "a", "service_tier": "gold"})", "service_tier");
  ExpectBad(R"({"prompt": "a", "thinking_token_budget": "many"})", "thinking_token_budget");
  ExpectBad(R"({"prompt": "a", "thinking_token_budget": -1})", "thinking_token_budget");
}

TEST(BudgetApi, FieldsReachTheEngineRequest) {
  ApiRequest r;
  ASSERT_FALSE(ParseApiRequest(Endpoint::kCompletions,
                               R"({"prompt": "a", "deadline_ms": 1500, "budget": 0.25, "service_tier": "flex"})", &r));
  RequestSpec spec;
  ASSERT_FALSE(BuildRequestSpec(r, {1, 2}, Limits(), {}, 1, &spec).has_value());
  EXPECT_DOUBLE_EQ(spec.deadline_s, 1.5);
  ASSERT_TRUE(spec.budget.has_value());
  EXPECT_DOUBLE_EQ(*spec.budget, 0.25);
  EXPECT_EQ(spec.tier, ServiceTier::kFlex);

  // Nothing given: no deadline, no fixed budget, the default tier ("auto" is "default");
  // the server's --default-deadline-ms applies to requests that name none.
  ApiRequest d;
  ASSERT_FALSE(ParseApiRequest(Endpoint::kCompletions, R"({"prompt": "a", "service_tier": "auto"})", &d));
  ASSERT_FALSE(BuildRequestSpec(d, {1, 2}, Limits(), {}, 1, &spec).has_value());
  EXPECT_EQ(spec.deadline_s, 0.0);
  EXPECT_FALSE(spec.budget.has_value());
  EXPECT_EQ(spec.tier, ServiceTier::kDefault);
  ModelLimits l = Limits();
  l.default_deadline_ms = 2000;
  ASSERT_FALSE(BuildRequestSpec(d, {1, 2}, l, {}, 1, &spec).has_value());
  EXPECT_DOUBLE_EQ(spec.deadline_s, 2.0);
  ASSERT_FALSE(BuildRequestSpec(r, {1, 2}, l, {}, 1, &spec).has_value());
  EXPECT_DOUBLE_EQ(spec.deadline_s, 1.5);  // the request's own wins

  // The reasoning stop needs the tokenizer's <think> and </think>: without them the field
  // is refused by name; with them it is the request's allowance, fixed; a request without
  // one gets the server's default, scaled by b.
  ApiRequest t;
  ASSERT_FALSE(ParseApiRequest(Endpoint::kCompletions, R"({"prompt": "a", "thinking_token_budget": 64})", &t));
  auto e = BuildRequestSpec(t, {1, 2}, Limits(), {}, 1, &spec);
  ASSERT_TRUE(e.has_value());
  EXPECT_EQ(e->param, "thinking_token_budget");
  ModelLimits th = Limits();
  th.think_start_id = 5, th.think_end_id = 6;
  ASSERT_FALSE(BuildRequestSpec(t, {1, 2}, th, {}, 1, &spec).has_value());
  EXPECT_EQ(spec.thinking_budget, 64);
  EXPECT_FALSE(spec.thinking_scales);
  EXPECT_EQ(spec.think_start_id, 5);
  EXPECT_EQ(spec.think_end_id, 6);
  ASSERT_FALSE(BuildRequestSpec(d, {1, 2}, th, {}, 1, &spec).has_value());
  EXPECT_EQ(spec.thinking_budget, -1);  // no server default
  th.default_thinking_budget = 100;
  ASSERT_FALSE(BuildRequestSpec(d, {1, 2}, th, {}, 1, &spec).has_value());
  EXPECT_EQ(spec.thinking_budget, 100);
  EXPECT_TRUE(spec.thinking_scales);
  ASSERT_FALSE(BuildRequestSpec(t, {1, 2}, th, {}, 1, &spec).has_value());
  EXPECT_EQ(spec.thinking_budget, 64);  // the request's own wins, unscaled
  EXPECT_FALSE(spec.thinking_scales);
}

TEST(BudgetApi, ChatTemplateKwargs) {
  ApiRequest r;
  ASSERT_FALSE(ParseApiRequest(Endpoint::kChatCompletions,
                               R"({"messages": [{"role": "user", "content": "a"}],
                                   "chat_template_kwargs": {"enable_thinking": false, "other": 1}})",
                               &r));
  EXPECT_FALSE(r.enable_thinking);
  ASSERT_FALSE(ParseApiRequest(Endpoint::kChatCompletions, R"({"messages": [{"role": "user", "content": "a"}]})", &r));
  EXPECT_TRUE(r.enable_thinking);
  ExpectBad(R"({"prompt": "a", "chat_template_kwargs": [1]})", "chat_template_kwargs");
  ExpectBad(R"({"prompt": "a", "chat_template_kwargs": {"enable_thinking": 1}})", "chat_template_kwargs.enable_thinking");
}

TEST(BudgetApi, ResponsesCarryTheMeanBudget) {
  CompletionResult c;
  c.mean_budget = 0.625;
  ResponseMeta meta;
  EXPECT_EQ(CompletionResponse(Endpoint::kCompletions, meta, c)["fathom"]["mean_budget"], 0.625);
  EXPECT_EQ(UsageChunk(Endpoint::kChatCompletions, meta, c)["fathom"]["mean_budget"], 0.625);
}

}  // namespace
}  // namespace fathom::serve
