// Bodies of /v1/completions and /v1/chat/completions (first byte: which) through
// ParseApiRequest and BuildRequestSpec, as the server runs them: errors are 4xx with a body
// that serializes, never crashes; an accepted request fits the limits.
#include <cstdint>

#include "fuzz_util.h"
#include "serve/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace fathom;
  using namespace fathom::serve;
  if (size == 0) return 0;
  const Endpoint ep = data[0] % 2 ? Endpoint::kChatCompletions : Endpoint::kCompletions;
  ApiRequest req;
  auto err = ParseApiRequest(ep, fuzz::AsView(data + 1, size - 1), &req);
  if (err) {
    FUZZ_CHECK(err->status >= 400 && err->status < 500, "status %d", err->status);
    (void)Dump(ErrorBody(*err));
    return 0;
  }
  // The prompt as the server would have it: the ids, or one id per byte of text.
  std::vector<int32_t> prompt = req.prompt_is_ids ? req.prompt_ids : std::vector<int32_t>(req.prompt.size(), 1);
  for (const ChatMessage& m : req.messages) prompt.resize(prompt.size() + m.content.size() + 1, 2);
  ModelLimits limits;
  limits.max_positions = 256;
  limits.looped = data[0] & 2;
  limits.max_loops = 4;
  limits.max_prompt_tokens = data[0] & 4 ? 64 : 0;
  limits.max_output_tokens = data[0] & 8 ? 32 : 0;
  RequestSpec spec;
  err = BuildRequestSpec(req, prompt, limits, {7}, 1234, &spec);
  if (err) {
    FUZZ_CHECK(err->status >= 400 && err->status < 500, "status %d", err->status);
    (void)Dump(ErrorBody(*err));
    return 0;
  }
  FUZZ_CHECK(!spec.prompt.empty() && spec.max_tokens >= 0, "empty prompt or negative max_tokens");
  FUZZ_CHECK(static_cast<int64_t>(spec.prompt.size()) + spec.max_tokens <= limits.max_positions,
             "prompt %zu + max_tokens %d past the context", spec.prompt.size(), spec.max_tokens);
  if (limits.max_output_tokens) FUZZ_CHECK(spec.max_tokens <= limits.max_output_tokens, "past --max-output-tokens");
  if (limits.max_prompt_tokens)
    FUZZ_CHECK(static_cast<int64_t>(spec.prompt.size()) <= limits.max_prompt_tokens, "past --max-prompt-tokens");
  const ResponseMeta meta{"cmpl-1", 0, req.model};
  (void)SseEvent(StreamChunk(ep, meta, req.prompt, true, "", req.include_usage));
  return 0;
}
