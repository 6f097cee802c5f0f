#include "tokenizer/chat_template.h"

#include <cstddef>

#include "tokenizer/utf8.h"

namespace fathom {

namespace {

bool Contains(std::string_view s, std::string_view what) { return s.find(what) != std::string_view::npos; }

// Jinja's `trim` (Python's str.strip()): Unicode whitespace and the separators \x1c-\x1f.
bool IsPythonSpace(char32_t c) { return utf8::IsWhitespace(c) || (c >= 0x1C && c <= 0x1F); }

std::string Trim(std::string_view s) {
  size_t b = 0, e = s.size();
  // utf8::Next assumes valid UTF-8: a truncated sequence must not carry b past the end
  // (a lone 0x89 decoded as a tab and moved b past the end; found by chat_render_fuzz).
  while (b < e) {
    size_t j = b;
    const char32_t c = utf8::Next(s, &j);
    if (j > e || !IsPythonSpace(c)) break;
    b = j;
  }
  while (e > b) {
    size_t start = e - 1;
    while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    size_t j = start;
    const char32_t c = utf8::Next(s, &j);
    if (j != e || !IsPythonSpace(c)) break;
    e = start;
  }
  return std::string(s.substr(b, e - b));
}

// Python's str.strip(chars) / lstrip / rstrip for one ASCII character.
std::string_view LStripChar(std::string_view s, char c) {
  while (!s.empty() && s.front() == c) s.remove_prefix(1);
  return s;
}
std::string_view RStripChar(std::string_view s, char c) {
  while (!s.empty() && s.back() == c) s.remove_suffix(1);
  return s;
}

// The value of a Jinja string literal's body (\n, \t, \', \", \\ escapes).
std::string UnescapeJinja(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      const char e = s[++i];
      out += e == 'n' ? '\n' : e == 't' ? '\t' : e;
    } else {
      out += s[i];
    }
  }
  return out;
}

// A system prompt written as a literal inside the template, e.g. Qwen 2.5's
// '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n':
// the text between "<|im_start|>system\n" and "<|im_end|>" when it holds no quote or
// expression (a template that concatenates messages[0].content has a quote right there).
std::string FindDefaultSystem(std::string_view src) {
  const std::string_view head = "<|im_start|>system";
  for (size_t pos = src.find(head); pos != std::string_view::npos; pos = src.find(head, pos + 1)) {
    size_t body = pos + head.size();
    if (src.compare(body, 2, "\\n") == 0) {
      body += 2;
    } else if (body < src.size() && src[body] == '\n') {
      body += 1;
    } else {
      continue;
    }
    const size_t end = src.find("<|im_end|>", body);
    if (end == std::string_view::npos || end == body) continue;
    const std::string_view text = src.substr(body, end - body);
    if (Contains(text, "'") || Contains(text, "\"") || Contains(text, "{") || Contains(text, "}")) continue;
    return UnescapeJinja(text);
  }
  return "";
}

// The role between a header's tokens in a literal, e.g. '<|begin_header|>Huginn<|end_header|>'.
std::string FindLiteralRole(std::string_view src, std::string_view begin, std::string_view end,
                            const std::string& fallback) {
  for (size_t pos = src.find(begin); pos != std::string_view::npos; pos = src.find(begin, pos + 1)) {
    const size_t body = pos + begin.size();
    const size_t stop = src.find(end, body);
    if (stop == std::string_view::npos || stop == body) continue;
    const std::string_view role = src.substr(body, stop - body);
    bool word = true;
    for (char c : role) word = word && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_');
    if (word) return std::string(role);
  }
  return fallback;
}

// The body of the first Jinja string literal assigned as `set NAME = '...'`, unescaped;
// empty when there is none (e.g. `set system_message = false`).
std::string FindSetLiteral(std::string_view src, std::string_view name) {
  const std::string head = std::string(name) + " = '";
  const size_t pos = src.find(head);
  if (pos == std::string_view::npos) return "";
  const size_t body = pos + head.size();
  for (size_t i = body; i < src.size(); ++i) {
    if (src[i] == '\\') {
      ++i;
    } else if (src[i] == '\'') {
      return UnescapeJinja(src.substr(body, i - body));
    }
  }
  return "";
}

// "\n" when the expression whose last operand ends at `after` closes with `}}` followed by a
// newline: HF renders with trim_blocks, which removes the newline after a {% %} tag but not
// after a {{ }} expression, so that newline is part of the output.
std::string NewlineAfterExpression(std::string_view src, size_t after) {
  size_t i = after;
  while (i < src.size() && src[i] == ' ') ++i;
  if (src.compare(i, 2, "}}") != 0) return "";
  i += 2;
  return i < src.size() && src[i] == '\n' ? "\n" : "";
}

}  // namespace

ChatTemplate ChatTemplate::Detect(std::string_view jinja_source, std::string bos_token, std::string eos_token) {
  ChatTemplate t;
  const std::string_view src = jinja_source;
  const bool has_gen_flag = Contains(src, "add_generation_prompt");
  if (Contains(src, "<|im_start|>")) {
    t.format_ = Format::kChatMl;
    t.default_system_ = FindDefaultSystem(src);
    t.qwen3_reasoning_ = Contains(src, "reasoning_content") && Contains(src, "</think>");
    t.always_generation_prompt_ = !has_gen_flag && Contains(src, "<|im_start|>assistant");
  } else if (Contains(src, "<|start_header_id|>")) {
    t.format_ = Format::kLlama3;
    t.begin_header_ = "<|start_header_id|>";
    t.end_header_ = "<|end_header_id|>";
    t.end_turn_ = "<|eot_id|>";
    t.always_generation_prompt_ = !has_gen_flag && Contains(src, "<|start_header_id|>assistant<|end_header_id|>");
    t.dated_system_ = Contains(src, "Cutting Knowledge Date");
    if (t.dated_system_) {
      // Llama 3.1+: `set date_string = "26 Jul 2024"` when the caller gives none.
      t.date_string_ = "26 Jul 2024";
      const size_t p = src.find("date_string = \"");
      if (p != std::string_view::npos) {
        const size_t b = p + 15, e = src.find('"', b);
        if (e != std::string_view::npos) t.date_string_ = std::string(src.substr(b, e - b));
      }
    }
  } else if (Contains(src, "<|begin_header|>")) {
    t.format_ = Format::kHuginn;
    t.begin_header_ = "<|begin_header|>";
    t.end_header_ = "<|end_header|>";
    t.end_turn_ = "<|end_turn|>";
    t.generation_role_ = FindLiteralRole(src, t.begin_header_, t.end_header_, "Huginn");
    t.always_generation_prompt_ = !has_gen_flag;
    if (Contains(src, "'<|end_text|>'")) t.no_generation_suffix_ = "<|end_text|>";
  } else if (Contains(src, "[INST]") && Contains(src, "<<SYS>>")) {
    t.format_ = Format::kLlama2;
    t.bos_per_turn_ = Contains(src, "bos_token + '[INST]") || Contains(src, "'<s>' + '[INST]") ||
                      Contains(src, "'<s>[INST]");
    t.llama2_system_branch_ = Contains(src, "elif message['role'] == 'system'");
    t.default_system_ = FindSetLiteral(src, "system_message");
    // Templates that spell the special tokens out instead of using the variables; one with
    // neither emits no bos.
    t.bos_ = Contains(src, "bos_token") ? bos_token : Contains(src, "<s>") ? "<s>" : "";
    if (!Contains(src, "eos_token") && Contains(src, "</s>")) eos_token = "</s>";
  } else if (Contains(src, "<|user|>") && Contains(src, "<|assistant|>") && Contains(src, "eos_token") &&
             !Contains(src, "<|end|>")) {
    // (Phi-3 writes <|user|> / <|assistant|> too, but ends turns with <|end|>.)
    t.format_ = Format::kZephyr;
    const size_t eos_expr = src.find("eos_token", src.find("<|user|>"));
    t.turn_newline_ = NewlineAfterExpression(src, eos_expr + 9);
    // The generation prompt: the <|assistant|> literal after the add_generation_prompt test.
    const size_t gen_test = src.find("add_generation_prompt");
    const size_t gen = gen_test == std::string_view::npos ? gen_test : src.find("<|assistant|>", gen_test);
    if (gen != std::string_view::npos) {
      const size_t body = gen + 13;
      const size_t close = src.find('\'', body);
      if (close != std::string_view::npos) {
        t.generation_newline_ = UnescapeJinja(src.substr(body, close - body)) + NewlineAfterExpression(src, close + 1);
      }
    }
  } else {
    t.source_head_ = std::string(src.substr(0, 60));
  }
  // Only templates that emit bos_token get it in their prompt.
  if (t.format_ != Format::kLlama2 && Contains(src, "bos_token")) t.bos_ = std::move(bos_token);
  t.eos_ = std::move(eos_token);
  return t;
}

std::string_view ChatTemplate::FormatName() const {
  switch (format_) {
    case Format::kChatMl: return "chatml";
    case Format::kLlama3: return "llama3";
    case Format::kHuginn: return "huginn";
    case Format::kLlama2: return "llama2";
    case Format::kZephyr: return "zephyr";
    case Format::kUnknown: break;
  }
  return "unknown";
}

Result<std::string> ChatTemplate::Render(const std::vector<ChatMessage>& messages,
                                         bool add_generation_prompt, bool enable_thinking) const {
  if (format_ == Format::kUnknown) {
    return Status::Error("chat template not recognised (fathom renders ChatML, Llama 3, Huginn, Llama 2 and "
                         "Zephyr templates natively): \"" + source_head_ + "...\"");
  }
  if (messages.empty()) return Status::Error("chat template: no messages to render");
  for (size_t i = 0; i < messages.size(); ++i)
    if (messages[i].role.empty()) return Status::Error("chat message " + std::to_string(i) + " has an empty role");
  if (format_ == Format::kLlama2) return RenderLlama2(messages);
  if (format_ == Format::kZephyr) return RenderZephyr(messages, add_generation_prompt);
  const bool gen = add_generation_prompt || always_generation_prompt_;
  std::string out;

  if (format_ == Format::kChatMl) {
    if (!default_system_.empty() && messages[0].role != "system")
      out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
    // Qwen 3: the index of the last real user query (tool responses sent as user messages
    // do not count).
    size_t last_query = messages.size() - 1;
    if (qwen3_reasoning_) {
      for (size_t k = messages.size(); k-- > 0;) {
        const std::string& c = messages[k].content;
        const bool tool_response = c.rfind("<tool_response>", 0) == 0 && c.size() >= 16 &&
                                   c.compare(c.size() - 16, 16, "</tool_response>") == 0;
        if (messages[k].role == "user" && !tool_response) {
          last_query = k;
          break;
        }
      }
    }
    for (size_t i = 0; i < messages.size(); ++i) {
      const ChatMessage& m = messages[i];
      if (qwen3_reasoning_ && m.role == "tool") {
        if (i == 0 || messages[i - 1].role != "tool") out += "<|im_start|>user";
        out += "\n<tool_response>\n" + m.content + "\n</tool_response>";
        if (i + 1 == messages.size() || messages[i + 1].role != "tool") out += "<|im_end|>\n";
        continue;
      }
      if (qwen3_reasoning_ && m.role == "assistant") {
        std::string_view content = m.content, reasoning;
        const size_t close = m.content.rfind("</think>");
        if (close != std::string::npos) {
          content = LStripChar(std::string_view(m.content).substr(close + 8), '\n');
          std::string_view before = RStripChar(std::string_view(m.content).substr(0, m.content.find("</think>")), '\n');
          const size_t open = before.rfind("<think>");
          if (open != std::string_view::npos) before = before.substr(open + 7);
          reasoning = LStripChar(before, '\n');
        }
        const bool after_query = i > last_query;
        if (after_query && (i + 1 == messages.size() || !reasoning.empty())) {
          out += "<|im_start|>assistant\n<think>\n" + std::string(RStripChar(LStripChar(reasoning, '\n'), '\n')) +
                 "\n</think>\n\n" + std::string(LStripChar(content, '\n'));
        } else {
          out += "<|im_start|>assistant\n" + std::string(content);
        }
        out += "<|im_end|>\n";
        continue;
      }
      out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
    }
    // Qwen 3 with thinking enabled (its default) adds nothing after the header; disabled,
    // an empty thinking block.
    if (gen) out += "<|im_start|>assistant\n";
    if (gen && qwen3_reasoning_ && !enable_thinking) out += "<think>\n\n</think>\n\n";
    return out;
  }

  // Llama 3 and Huginn: header, trimmed content, end of turn; bos before the first turn.
  auto turn = [&](const std::string& role, const std::string& content) {
    return begin_header_ + role + end_header_ + "\n\n" + content + end_turn_;
  };
  out += bos_;
  size_t first = 0;
  if (dated_system_) {
    std::string system;
    if (messages[0].role == "system") {
      system = Trim(messages[0].content);
      first = 1;
    }
    out += turn("system", "Cutting Knowledge Date: December 2023\nToday Date: " + date_string_ + "\n\n" + system);
  }
  for (size_t i = first; i < messages.size(); ++i) out += turn(messages[i].role, Trim(messages[i].content));
  if (gen)
    out += begin_header_ + generation_role_ + end_header_ + "\n\n";
  else
    out += no_generation_suffix_;
  return out;
}

Result<std::string> ChatTemplate::RenderLlama2(const std::vector<ChatMessage>& messages) const {
  // Meta's template: the first message may be the system prompt, merged into the first
  // user turn; then user and assistant alternate (raise_exception otherwise).
  size_t first = 0;
  std::string system;
  bool has_system = false;
  if (messages[0].role == "system") {
    system = messages[0].content;
    has_system = true;
    first = 1;
  } else if (!default_system_.empty() && !Contains(messages[0].content, "<<SYS>>")) {
    system = default_system_;
    has_system = true;
  }
  std::string out;
  if (!bos_per_turn_) out += bos_;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const size_t index = i - first;
    if ((m.role == "user") != (index % 2 == 0))
      return Status::Error("chat template (Llama 2): conversation roles must alternate user/assistant/user/"
                           "assistant/... (message " + std::to_string(i) + " is \"" + m.role + "\")");
    std::string content = m.content;
    if (index == 0 && has_system) content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
    if (m.role == "user") {
      out += (bos_per_turn_ ? bos_ : std::string()) + "[INST] " + Trim(content) + " [/INST]";
    } else if (m.role == "system" && llama2_system_branch_) {
      out += "<<SYS>>\n" + Trim(content) + "\n<</SYS>>\n\n";
    } else if (m.role == "assistant") {
      out += " " + Trim(content) + " " + eos_;
    }
    // Other roles at odd positions pass the alternation test and render nothing.
  }
  if (out.empty() || out == bos_) return Status::Error("chat template (Llama 2): no user message to render");
  return out;
}

Result<std::string> ChatTemplate::RenderZephyr(const std::vector<ChatMessage>& messages,
                                               bool add_generation_prompt) const {
  std::string out = bos_;
  for (const ChatMessage& m : messages) {
    if (m.role == "user" || m.role == "system" || m.role == "assistant")
      out += "<|" + m.role + "|>\n" + m.content + eos_ + turn_newline_;
  }
  if (add_generation_prompt) out += "<|assistant|>" + generation_newline_;
  return out;
}

}  // namespace fathom
