// The OpenAI HTTP API as pure functions (no sockets, no engine): parsing and validating the
// bodies of /v1/completions and /v1/chat/completions into a plain ApiRequest, turning one
// into the engine's RequestSpec once its prompt is tokenized, and building the response
// JSON (whole responses, SSE stream chunks, error bodies, the model list).
//
// Compatibility rules: unknown fields are ignored as OpenAI does; fields that fathom does
// not implement and that would change the result (n > 1, logprobs, echo, best_of > 1,
// suffix, penalties, logit_bias, tools) are a 400 naming the field rather than silently
// different output. fathom extensions: `exit_threshold` (the model's own exit signal),
// `max_loops` (loop steps at full depth), `min_loops` (the exit policy's minimum depth),
// `ignore_eos` (as vLLM), `deadline_ms`, `budget` (issue 14; `service_tier` is OpenAI's, and
// every response carries "fathom": {"mean_exit_depth", "mean_budget"}).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fathom::serve {

enum class Endpoint { kCompletions, kChatCompletions };

// An error as OpenAI reports it: the HTTP status and
// {"error": {"message", "type", "param", "code"}} (empty param / code print as null).
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};
ApiError InvalidRequest(std::string param, std::string message);
nlohmann::json ErrorBody(const ApiError& e);

struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                 // empty: not given
  // /v1/completions: the prompt as text, or as token ids when prompt_is_ids.
  std::string prompt;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  std::vector<ChatMessage> messages;  // /v1/chat/completions
  std::optional<int32_t> max_tokens;  // absent: 16 (completions) or the rest of the context (chat)
  double temperature = 1.0;           // OpenAI's default; 0 is greedy
  double top_p = 1.0;
  int32_t top_k = 0;                  // 0: off (-1 is accepted as off, as vLLM)
  std::optional<uint64_t> seed;       // absent: a fresh seed per request
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;         // stream_options.include_usage
  bool ignore_eos = false;
  std::optional<double> exit_threshold;
  int32_t max_loops = 0;              // 0: the engine's depth
  std::optional<int32_t> min_loops;
  // The budget (issue 14): `deadline_ms` from arrival, a fixed `budget` in [0, 1], OpenAI's
  // `service_tier` ("auto" is "default"), vLLM's `thinking_token_budget` (the reasoning
  // stop: that many tokens after <think>, then </think> is forced), and
  // `chat_template_kwargs.enable_thinking` (Qwen 3's template switch; chat only).
  std::optional<int64_t> deadline_ms;
  std::optional<double> budget;
  ServiceTier service_tier = ServiceTier::kDefault;
  std::optional<int64_t> thinking_token_budget;
  bool enable_thinking = true;
};

// Parses and validates a request body. On error returns it (400, naming the field).
// Bodies nested deeper than kMaxJsonDepth are refused before any JSON tree is built.
std::optional<ApiError> ParseApiRequest(Endpoint endpoint, std::string_view body, ApiRequest* out);

// The deepest nesting of arrays and objects accepted in client JSON. Every request fathom
// serves nests 4 levels at most ({"messages": [{"content": [{...}]}]}); the limit exists
// because building, copying, printing and destroying a JSON tree recurse once per level,
// and a 400 KB body of '[' (200,000 levels) exhausted the handler thread's stack.
inline constexpr int kMaxJsonDepth = 64;
// Scans `text` without recursion (brackets inside strings do not count). Returns an error
// message ("nests arrays and objects deeper than 64 levels (at byte N)") for the caller to
// prefix with what was read, or nullopt when `text` nests
// at most `max_depth` levels. Malformed JSON is left to the parser.
std::optional<std::string> JsonDepthError(std::string_view text, int max_depth = kMaxJsonDepth);

// What the served model allows, for the checks that need the tokenized prompt.
struct ModelLimits {
  int64_t max_positions = 0;  // prompt + max_tokens must fit (max_position_embeddings)
  bool looped = false;
  int32_t max_loops = 0;      // the engine's KV depth
  // The server's own limits (--max-prompt-tokens, --max-output-tokens); 0: none beyond
  // the context. A request beyond one is a 400 naming the field and the flag.
  int64_t max_prompt_tokens = 0;
  int64_t max_output_tokens = 0;
  int64_t default_deadline_ms = 0;  // --default-deadline-ms: for requests with none; 0: none
  // The reasoning stop: the tokenizer's <think> and </think> ids (-1: none, and a request
  // with thinking_token_budget is a 400), and --default-thinking-budget, the allowance of
  // a request without one, scaled by the budget b its tokens run under (-1: none).
  int32_t think_start_id = -1, think_end_id = -1;
  int64_t default_thinking_budget = -1;
};
// The limits of `engine` serving `model` (its KV depth, the model's positions).
ModelLimits LimitsOf(const Model& model, const Engine& engine);
// Error if the tokenizer can produce ids the model has no embedding for.
Status CheckVocabulary(const Tokenizer& tok, const ModelSpec& spec);

// The engine request for a parsed ApiRequest and its prompt ids. `stop_ids` are the
// tokenizer's end-of-generation ids (dropped with ignore_eos); `seed` is used when the
// request names none. Errors: empty or too long prompt, max_tokens beyond the context,
// loop counts out of range.
std::optional<ApiError> BuildRequestSpec(const ApiRequest& req, std::vector<int32_t> prompt,
                                         const ModelLimits& limits, const std::vector<int32_t>& stop_ids,
                                         uint64_t seed, RequestSpec* out);

// The end of one generation, for the response builders.
struct CompletionResult {
  std::string text;
  std::string finish_reason;  // "length", "stop"
  int64_t prompt_tokens = 0, completion_tokens = 0;
  double mean_exit_depth = 0;  // over this request's tokens (fathom extension)
  double mean_budget = 1;      // the mean budget b its tokens ran under (fathom extension)
};

struct ResponseMeta {
  std::string id;       // "cmpl-<n>" / "chatcmpl-<n>"
  int64_t created = 0;  // unix seconds
  std::string model;
};

nlohmann::json CompletionResponse(Endpoint endpoint, const ResponseMeta& meta, const CompletionResult& r);
// One stream chunk carrying `text`; chat's first chunk also carries the role. A non-empty
// finish_reason makes it the final chunk (chat: empty delta). `with_usage_null`: when the
// client asked for usage, every chunk carries "usage": null as OpenAI's do.
nlohmann::json StreamChunk(Endpoint endpoint, const ResponseMeta& meta, std::string_view text, bool first,
                           std::string_view finish_reason, bool with_usage_null);
// The usage chunk sent before [DONE] with include_usage (choices empty).
nlohmann::json UsageChunk(Endpoint endpoint, const ResponseMeta& meta, const CompletionResult& r);
// "data: <json>\n\n"
std::string SseEvent(const nlohmann::json& j);
inline constexpr std::string_view kSseDone = "data: [DONE]\n\n";
nlohmann::json ModelList(const std::string& model, int64_t created);
// Dumps JSON as UTF-8, replacing any invalid byte rather than throwing.
std::string Dump(const nlohmann::json& j);

}  // namespace fathom::serve
