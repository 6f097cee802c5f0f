#include "serve/openai_api.h"

#include <cmath>
#include <initializer_list>
#include <limits>

namespace fathom::serve {

using nlohmann::json;

namespace {

std::string TypeName(const json& v) {
  if (v.is_string()) return "a string";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

// Built with append: g++ 12 at -O3 reports a false -Wrestrict on `"literal" + std::string`
// once this is inlined into a caller that passes a literal.
ApiError WrongType(const std::string& param, const std::string& expected, const json& v) {
  std::string m = "'";
  m.append(param).append("' must be ").append(expected).append(", found ").append(TypeName(v));
  return InvalidRequest(param, std::move(m));
}

// OpenAI clients send explicit nulls for unset optional fields: null means "not given".
std::string Cat(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s.append(p);
  return s;
}

const json* Field(const json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<ApiError> GetNumber(const json& body, const char* name, double lo, double hi, double* out) {
  const json* v = Field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) return WrongType(name, "a number", *v);
  const double x = v->get<double>();
  if (!(x >= lo && x <= hi))
    return InvalidRequest(name, Cat({"'", name, "' must be in [", Dump(lo), ", ", Dump(hi), "], found ", Dump(*v)}));
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> GetInt(const json& body, const char* name, int64_t lo, int64_t hi,
                               std::optional<int64_t>* out) {
  const json* v = Field(body, name);
  if (!v) return std::nullopt;
  // 16.0 is an integer to Python clients; accept integral floats.
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::floor(d) != d || std::abs(d) > 9e15) return WrongType(name, "an integer", *v);
  } else if (!v->is_number_integer()) {
    return WrongType(name, "an integer", *v);
  }
  const int64_t x = v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : (v->is_number_float() ? static_cast<int64_t>(v->get<double>()) : v->get<int64_t>());
  if (x < lo || x > hi)
    return InvalidRequest(name, Cat({"'", name, "' must be in [", std::to_string(lo), ", ", std::to_string(hi),
                                     "], found ", Dump(*v)}));
  *out = x;
  return std::nullopt;
}

std::optional<ApiError> GetBool(const json& body, const char* name, bool* out) {
  const json* v = Field(body, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return WrongType(name, "a boolean", *v);
  *out = v->get<bool>();
  return std::nullopt;
}

// A value quoted in an error message, cut short: the body may hold megabytes of it.
std::string Shown(const json& v) {
  std::string s = Dump(v);
  if (s.size() > 64) {
    s.resize(64);
    s += "...";
  }
  return s;
}

std::optional<ApiError> TokenIds(const json& arr, const std::string& param, std::vector<int32_t>* out) {
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& e = arr[i];
    if (!e.is_number_integer() || e.get<int64_t>() < 0 || e.get<int64_t>() > INT32_MAX)
      return InvalidRequest(param, "'" + param + "' token " + std::to_string(i) +
                                       " must be a non-negative integer id, found " + Shown(e));
    out->push_back(static_cast<int32_t>(e.get<int64_t>()));
  }
  return std::nullopt;
}

std::optional<ApiError> ParsePrompt(const json& body, ApiRequest* out) {
  const json* p = Field(body, "prompt");
  if (!p) return InvalidRequest("prompt", "'prompt' is required");
  if (p->is_string()) {
    out->prompt = p->get<std::string>();
    if (out->prompt.empty()) return InvalidRequest("prompt", "'prompt' is empty");
    return std::nullopt;
  }
  if (!p->is_array()) return WrongType("prompt", "a string, an array of token ids or a one-element array", *p);
  if (p->empty()) return InvalidRequest("prompt", "'prompt' is empty");
  const json& first = (*p)[0];
  if (first.is_string() || first.is_array()) {
    // A batch of prompts: OpenAI returns one choice per prompt; fathom serves one.
    if (p->size() > 1) return InvalidRequest("prompt", "only one prompt per request");
    if (first.is_string()) {
      out->prompt = first.get<std::string>();
      if (out->prompt.empty()) return InvalidRequest("prompt", "'prompt' is empty");
      return std::nullopt;
    }
    if (first.empty()) return InvalidRequest("prompt", "'prompt' is empty");
    out->prompt_is_ids = true;
    return TokenIds(first, "prompt", &out->prompt_ids);
  }
  out->prompt_is_ids = true;
  return TokenIds(*p, "prompt", &out->prompt_ids);
}

std::optional<ApiError> ParseMessages(const json& body, ApiRequest* out) {
  const json* m = Field(body, "messages");
  if (!m) return InvalidRequest("messages", "'messages' is required");
  if (!m->is_array()) return WrongType("messages", "an array", *m);
  if (m->empty()) return InvalidRequest("messages", "'messages' is empty");
  for (size_t i = 0; i < m->size(); ++i) {
    const json& msg = (*m)[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!msg.is_object()) return WrongType(at, "an object", msg);
    ChatMessage cm;
    const json* role = Field(msg, "role");
    if (!role || !role->is_string() || role->get<std::string>().empty())
      return InvalidRequest(at + ".role", "'" + at + ".role' must be a non-empty string");
    cm.role = role->get<std::string>();
    const json* content = Field(msg, "content");
    if (!content) {
      // Assistant turns that only called tools have no content.
      if (cm.role != "assistant") return InvalidRequest(at + ".content", "'" + at + ".content' is required");
    } else if (content->is_string()) {
      cm.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t j = 0; j < content->size(); ++j) {
        const json& part = (*content)[j];
        const std::string pat = at + ".content[" + std::to_string(j) + "]";
        if (!part.is_object()) return WrongType(pat, "an object", part);
        const json* type = Field(part, "type");
        if (!type || !type->is_string() || type->get<std::string>() != "text")
          return InvalidRequest(pat + ".type", "'" + pat + ".type': only \"text\" content parts are supported");
        const json* text = Field(part, "text");
        if (!text || !text->is_string()) return InvalidRequest(pat + ".text", "'" + pat + ".text' must be a string");
        cm.content += text->get<std::string>();
      }
    } else {
      return WrongType(at + ".content", "a string or an array of content parts", *content);
    }
    out->messages.push_back(std::move(cm));
  }
  return std::nullopt;
}

std::optional<ApiError> ParseStop(const json& body, ApiRequest* out) {
  const json* s = Field(body, "stop");
  if (!s) return std::nullopt;
  if (s->is_string()) {
    out->stop.push_back(s->get<std::string>());
    return std::nullopt;
  }
  if (!s->is_array()) return WrongType("stop", "a string or an array of strings", *s);
  if (s->size() > 4) return InvalidRequest("stop", "'stop' holds at most 4 strings, found " + std::to_string(s->size()));
  for (const json& e : *s) {
    if (!e.is_string()) return WrongType("stop", "a string or an array of strings", e);
    out->stop.push_back(e.get<std::string>());
  }
  return std::nullopt;
}

// Features that would change the output: refused by name instead of ignored.
std::optional<ApiError> RefuseUnsupported(const json& body, Endpoint endpoint) {
  std::optional<int64_t> n;
  if (auto e = GetInt(body, "n", 1, INT32_MAX, &n)) return e;
  if (n && *n != 1) return InvalidRequest("n", "'n' must be 1: fathom returns one choice per request");
  if (const json* v = Field(body, "best_of")) {
    if (!v->is_number_integer() || v->get<int64_t>() != 1)
      return InvalidRequest("best_of", "'best_of' other than 1 is not supported");
  }
  if (const json* v = Field(body, "logprobs")) {
    const bool off = (v->is_boolean() && !v->get<bool>()) ||
                     (endpoint == Endpoint::kCompletions && v->is_number_integer() && v->get<int64_t>() == 0);
    if (!off) return InvalidRequest("logprobs", "'logprobs' is not supported");
  }
  if (const json* v = Field(body, "top_logprobs"))
    if (!(v->is_number_integer() && v->get<int64_t>() == 0))
      return InvalidRequest("top_logprobs", "'top_logprobs' is not supported");
  if (const json* v = Field(body, "echo"))
    if (!(v->is_boolean() && !v->get<bool>())) return InvalidRequest("echo", "'echo' is not supported");
  if (const json* v = Field(body, "suffix"))
    if (!(v->is_string() && v->get<std::string>().empty()))
      return InvalidRequest("suffix", "'suffix' is not supported");
  for (const char* pen : {"presence_penalty", "frequency_penalty", "repetition_penalty"})
    if (const json* v = Field(body, pen))
      if (!(v->is_number() && v->get<double>() == (std::string(pen) == "repetition_penalty" ? 1.0 : 0.0)))
        return InvalidRequest(pen, "'" + std::string(pen) + "' is not supported");
  if (const json* v = Field(body, "logit_bias"))
    if (!(v->is_object() && v->empty())) return InvalidRequest("logit_bias", "'logit_bias' is not supported");
  if (const json* v = Field(body, "tools"))
    if (!(v->is_array() && v->empty())) return InvalidRequest("tools", "'tools' is not supported");
  if (const json* v = Field(body, "response_format"))
    if (!(v->is_object() && v->value("type", "") == "text"))
      return InvalidRequest("response_format", "'response_format' other than {\"type\": \"text\"} is not supported");
  return std::nullopt;
}

}  // namespace

ApiError InvalidRequest(std::string param, std::string message) {
  ApiError e;
  e.status = 400;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

json ErrorBody(const ApiError& e) {
  return {{"error",
           {{"message", e.message},
            {"type", e.type},
            {"param", e.param.empty() ? json(nullptr) : json(e.param)},
            {"code", e.code.empty() ? json(nullptr) : json(e.code)}}}};
}

std::optional<std::string> JsonDepthError(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;  // the escaped byte cannot end the string
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return "nests arrays and objects deeper than " + std::to_string(max_depth) +
               " levels (at byte " + std::to_string(i) + ")";
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

namespace {

// deadline_ms, budget, service_tier, thinking_token_budget (ApiRequest).
std::optional<ApiError> ParseBudgetFields(const json& j, ApiRequest* out) {
  std::optional<int64_t> n;
  if (auto e = GetInt(j, "deadline_ms", 1, int64_t{1} << 40, &n)) return e;
  out->deadline_ms = n;
  if (Field(j, "budget")) {
    double b = 0;
    if (auto e = GetNumber(j, "budget", 0, 1, &b)) return e;
    out->budget = b;
  }
  if (const json* t = Field(j, "service_tier")) {
    if (!t->is_string()) return WrongType("service_tier", "a string", *t);
    auto tier = ParseServiceTier(t->get<std::string>());
    if (!tier.ok()) return InvalidRequest("service_tier", tier.status().message());
    out->service_tier = tier.value();
  }
  n.reset();
  if (auto e = GetInt(j, "thinking_token_budget", 0, INT32_MAX, &n)) return e;
  out->thinking_token_budget = n;
  if (const json* k = Field(j, "chat_template_kwargs")) {
    if (!k->is_object()) return WrongType("chat_template_kwargs", "an object", *k);
    if (const auto it = k->find("enable_thinking"); it != k->end() && !it->is_null()) {
      if (!it->is_boolean()) return WrongType("chat_template_kwargs.enable_thinking", "a boolean", *it);
      out->enable_thinking = it->get<bool>();
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseApiRequest(Endpoint endpoint, std::string_view body, ApiRequest* out) {
  *out = ApiRequest();
  out->endpoint = endpoint;
  if (auto deep = JsonDepthError(body)) return InvalidRequest("", "the request body " + *deep);
  json j;
  try {
    j = json::parse(body);
  } catch (const json::parse_error& e) {
    const std::string what = e.what();
    // nlohmann reports bad bytes inside strings as "ill-formed UTF-8 byte"; say so plainly.
    if (what.find("UTF-8") != std::string::npos)
      return InvalidRequest("", "the request body is not valid UTF-8 (at byte " + std::to_string(e.byte) + ")");
    return InvalidRequest("", "the request body is not valid JSON: " + what);
  } catch (const json::exception& e) {
    // E.g. out_of_range 406: a number literal beyond double's range (1e309).
    return InvalidRequest("", std::string("the request body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) return InvalidRequest("", "the request body must be a JSON object, found " + TypeName(j));

  if (const json* m = Field(j, "model")) {
    if (!m->is_string()) return WrongType("model", "a string", *m);
    out->model = m->get<std::string>();
  }
  if (endpoint == Endpoint::kCompletions) {
    if (auto e = ParsePrompt(j, out)) return e;
  } else {
    if (auto e = ParseMessages(j, out)) return e;
  }
  if (auto e = RefuseUnsupported(j, endpoint)) return e;

  std::optional<int64_t> n;
  const char* max_name = "max_tokens";
  if (endpoint == Endpoint::kChatCompletions && Field(j, "max_completion_tokens")) max_name = "max_completion_tokens";
  if (auto e = GetInt(j, max_name, 1, INT32_MAX, &n)) return e;
  if (n) out->max_tokens = static_cast<int32_t>(*n);
  if (auto e = GetNumber(j, "temperature", 0, 2, &out->temperature)) return e;
  if (auto e = GetNumber(j, "top_p", 0, 1, &out->top_p)) return e;
  if (out->top_p <= 0) return InvalidRequest("top_p", "'top_p' must be greater than 0");
  n.reset();
  if (auto e = GetInt(j, "top_k", -1, INT32_MAX, &n)) return e;
  if (n) out->top_k = *n < 0 ? 0 : static_cast<int32_t>(*n);
  if (const json* s = Field(j, "seed")) {
    if (!s->is_number_integer()) return WrongType("seed", "an integer", *s);
    out->seed = s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
  }
  if (auto e = ParseStop(j, out)) return e;
  if (auto e = GetBool(j, "stream", &out->stream)) return e;
  if (const json* so = Field(j, "stream_options")) {
    if (!so->is_object()) return WrongType("stream_options", "an object", *so);
    if (const json* iu = Field(*so, "include_usage")) {
      if (!iu->is_boolean()) return WrongType("stream_options.include_usage", "a boolean", *iu);
      out->include_usage = iu->get<bool>();
    }
  }
  if (auto e = GetBool(j, "ignore_eos", &out->ignore_eos)) return e;
  if (Field(j, "exit_threshold")) {
    double t = 0;
    if (auto e = GetNumber(j, "exit_threshold", 0, 1e9, &t)) return e;
    out->exit_threshold = t;
  }
  n.reset();
  if (auto e = GetInt(j, "max_loops", 1, 4096, &n)) return e;
  if (n) out->max_loops = static_cast<int32_t>(*n);
  n.reset();
  if (auto e = GetInt(j, "min_loops", 1, 4096, &n)) return e;
  if (n) out->min_loops = static_cast<int32_t>(*n);
  return ParseBudgetFields(j, out);
}

ModelLimits LimitsOf(const Model& model, const Engine& engine) {
  ModelLimits l;
  l.max_positions = model.rope().max_positions();
  l.looped = model.spec().loop.looped;
  l.max_loops = engine.max_depth();
  return l;
}

Status CheckVocabulary(const Tokenizer& tok, const ModelSpec& spec) {
  if (tok.vocab_size() <= spec.vocab) return Status::Ok();
  return Status::Error("the tokenizer has " + std::to_string(tok.vocab_size()) +
                       " tokens but the model's vocab_size is " + std::to_string(spec.vocab));
}

std::optional<ApiError> BuildRequestSpec(const ApiRequest& req, std::vector<int32_t> prompt,
                                         const ModelLimits& limits, const std::vector<int32_t>& stop_ids,
                                         uint64_t seed, RequestSpec* out) {
  const std::string prompt_param = req.endpoint == Endpoint::kCompletions ? "prompt" : "messages";
  if (prompt.empty()) return InvalidRequest(prompt_param, "the prompt has no tokens");
  const auto n_prompt = static_cast<int64_t>(prompt.size());
  // One position must remain for at least one generated token.
  if (n_prompt >= limits.max_positions)
    return InvalidRequest(prompt_param, "the prompt has " + std::to_string(n_prompt) +
                                            " tokens; this model's context is " +
                                            std::to_string(limits.max_positions) + " tokens");
  if (limits.max_prompt_tokens > 0 && n_prompt > limits.max_prompt_tokens)
    return InvalidRequest(prompt_param, "the prompt has " + std::to_string(n_prompt) +
                                            " tokens; this server accepts at most " +
                                            std::to_string(limits.max_prompt_tokens) + " (--max-prompt-tokens)");
  const char* max_name = req.endpoint == Endpoint::kChatCompletions ? "max_completion_tokens" : "max_tokens";
  int64_t max_tokens = 0;
  if (req.max_tokens) {
    max_tokens = *req.max_tokens;
    if (limits.max_output_tokens > 0 && max_tokens > limits.max_output_tokens)
      return InvalidRequest("max_tokens", "'max_tokens' is " + std::to_string(max_tokens) +
                                              "; this server generates at most " +
                                              std::to_string(limits.max_output_tokens) +
                                              " tokens per request (--max-output-tokens)");
    if (n_prompt + max_tokens > limits.max_positions)
      return InvalidRequest(req.endpoint == Endpoint::kChatCompletions ? "max_tokens" : max_name,
                            "this model's maximum context length is " + std::to_string(limits.max_positions) +
                                " tokens; the prompt has " + std::to_string(n_prompt) + " and max_tokens is " +
                                std::to_string(max_tokens));
  } else {
    max_tokens = req.endpoint == Endpoint::kCompletions ? std::min<int64_t>(16, limits.max_positions - n_prompt)
                                                        : limits.max_positions - n_prompt;
    if (limits.max_output_tokens > 0) max_tokens = std::min(max_tokens, limits.max_output_tokens);
  }
  RequestSpec r;
  r.prompt = std::move(prompt);
  r.max_tokens = static_cast<int32_t>(max_tokens);
  r.sampling.temperature = static_cast<float>(req.temperature);
  r.sampling.top_p = static_cast<float>(req.top_p);
  r.sampling.top_k = req.top_k;
  r.seed = req.seed ? *req.seed : seed;
  r.stop_at_eos = !req.ignore_eos;
  if (!req.ignore_eos) r.stop_ids = stop_ids;
  if (!limits.looped && (req.max_loops > 0 || req.min_loops || req.exit_threshold)) {
    const char* p = req.max_loops > 0 ? "max_loops" : req.min_loops ? "min_loops" : "exit_threshold";
    return InvalidRequest(p, std::string("'") + p + "' applies to looped models only");
  }
  if (req.max_loops > limits.max_loops)
    return InvalidRequest("max_loops", "'max_loops' is " + std::to_string(req.max_loops) +
                                           "; this server runs at most " + std::to_string(limits.max_loops) +
                                           " loop steps");
  r.loops = req.max_loops;
  const int32_t loops = req.max_loops > 0 ? req.max_loops : limits.max_loops;
  if (req.min_loops && *req.min_loops > loops)
    return InvalidRequest("min_loops", "'min_loops' (" + std::to_string(*req.min_loops) +
                                           ") exceeds the loop count " + std::to_string(loops));
  if (req.exit_threshold) {
    r.exit.kind = ExitSpec::Kind::kThreshold;
    r.exit.threshold = *req.exit_threshold;
  }
  if (req.min_loops) r.exit.min_depth = *req.min_loops;
  const bool can_think = limits.think_start_id >= 0 && limits.think_end_id >= 0;
  if (req.thinking_token_budget) {
    if (!can_think)
      return InvalidRequest("thinking_token_budget",
                            "'thinking_token_budget' needs <think> and </think> tokens; this model's tokenizer has none");
    r.thinking_budget = static_cast<int32_t>(*req.thinking_token_budget);
  } else if (can_think && limits.default_thinking_budget >= 0) {
    r.thinking_budget = static_cast<int32_t>(limits.default_thinking_budget);
    r.thinking_scales = true;  // the server's default shrinks with b
  }
  r.think_start_id = limits.think_start_id;
  r.think_end_id = limits.think_end_id;
  r.budget = req.budget;
  r.tier = req.service_tier;
  const int64_t deadline_ms = req.deadline_ms ? *req.deadline_ms : limits.default_deadline_ms;
  r.deadline_s = static_cast<double>(deadline_ms) / 1000.0;
  *out = std::move(r);
  return std::nullopt;
}

namespace {

json Base(Endpoint endpoint, const ResponseMeta& meta, bool chunk) {
  const char* object = endpoint == Endpoint::kCompletions ? "text_completion"
                       : chunk                             ? "chat.completion.chunk"
                                                           : "chat.completion";
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

json Usage(const CompletionResult& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens}};
}

}  // namespace

json CompletionResponse(Endpoint endpoint, const ResponseMeta& meta, const CompletionResult& r) {
  json j = Base(endpoint, meta, false);
  json choice = {{"index", 0}, {"logprobs", nullptr}, {"finish_reason", r.finish_reason}};
  if (endpoint == Endpoint::kCompletions)
    choice["text"] = r.text;
  else
    choice["message"] = {{"role", "assistant"}, {"content", r.text}};
  j["choices"] = json::array({choice});
  j["usage"] = Usage(r);
  j["fathom"] = {{"mean_exit_depth", r.mean_exit_depth}, {"mean_budget", r.mean_budget}};
  return j;
}

json StreamChunk(Endpoint endpoint, const ResponseMeta& meta, std::string_view text, bool first,
                 std::string_view finish_reason, bool with_usage_null) {
  json j = Base(endpoint, meta, true);
  json choice = {{"index", 0}, {"logprobs", nullptr}};
  choice["finish_reason"] = finish_reason.empty() ? json(nullptr) : json(std::string(finish_reason));
  if (endpoint == Endpoint::kCompletions) {
    choice["text"] = std::string(text);
  } else {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (!text.empty() || (first && finish_reason.empty())) delta["content"] = std::string(text);
    choice["delta"] = delta;
  }
  j["choices"] = json::array({choice});
  if (with_usage_null) j["usage"] = nullptr;
  return j;
}

json UsageChunk(Endpoint endpoint, const ResponseMeta& meta, const CompletionResult& r) {
  json j = Base(endpoint, meta, true);
  j["choices"] = json::array();
  j["usage"] = Usage(r);
  j["fathom"] = {{"mean_exit_depth", r.mean_exit_depth}, {"mean_budget", r.mean_budget}};
  return j;
}

std::string SseEvent(const json& j) { return "data: " + Dump(j) + "\n\n"; }

json ModelList(const std::string& model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "fathom"}}})}};
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace fathom::serve
