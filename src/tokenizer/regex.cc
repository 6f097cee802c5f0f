#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

namespace fathom {

namespace {

// Unicode White_Space, as the contents of a character class.
constexpr const char* kWhiteSpace =
    "\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
    "\\x{202f}\\x{205f}\\x{3000}";

std::string PcreErrorText(int code) {
  PCRE2_UCHAR buf[256];
  pcre2_get_error_message(code, buf, sizeof buf);
  return reinterpret_cast<const char*>(buf);
}

}  // namespace

struct Regex::Code {
  pcre2_code* code = nullptr;
  ~Code() { pcre2_code_free(code); }
};

std::string RewriteWhitespaceClasses(const std::string& pattern) {
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char c = pattern[i];
    if (c == '\\' && i + 1 < pattern.size()) {
      const char e = pattern[i + 1];
      if (e == 's') {
        out += in_class ? std::string(kWhiteSpace) : "[" + std::string(kWhiteSpace) + "]";
      } else if (e == 'S' && !in_class) {
        out += "[^" + std::string(kWhiteSpace) + "]";
      } else {
        // \S inside a class has no simple rewrite; no tokenizer we know uses it.
        out += c;
        out += e;
      }
      ++i;
      continue;
    }
    if (c == '[' && !in_class) {
      in_class = true;
      out += c;
      // A ']' right after '[' or '[^' is a literal member, not the end of the class.
      if (i + 1 < pattern.size() && pattern[i + 1] == '^') out += pattern[++i];
      if (i + 1 < pattern.size() && pattern[i + 1] == ']') out += pattern[++i];
      continue;
    }
    if (c == ']' && in_class) in_class = false;
    out += c;
  }
  return out;
}

Result<Regex> Regex::Compile(const std::string& pattern, const std::string& what) {
  const std::string rewritten = RewriteWhitespaceClasses(pattern);
  int err = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(rewritten.data()),
                                   rewritten.size(), PCRE2_UTF | PCRE2_UCP, &err, &offset,
                                   nullptr);
  if (code == nullptr) {
    return Status::Error(what + ": cannot compile regex " + "\"" + pattern + "\"" + ": " +
                         PcreErrorText(err));
  }
  // JIT is an optimisation: without it (no JIT in this build) matching still works.
  (void)pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  Regex r;
  auto holder = std::make_shared<Code>();
  holder->code = code;
  r.code_ = std::move(holder);
  return r;
}

Result<Regex> Regex::Literal(const std::string& literal, const std::string& what) {
  std::string quoted;
  for (char c : literal) {
    if (std::string_view("\\^$.|?*+()[]{}").find(c) != std::string_view::npos) quoted += '\\';
    quoted += c;
  }
  // Escaped literals contain no \s; compile directly (the rewrite would see "\\s" as an
  // escaped backslash followed by 's' anyway).
  return Compile(quoted, what);
}

void Regex::ForEachMatch(std::string_view text,
                         const std::function<void(size_t, size_t)>& on_match) const {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code_->code, nullptr);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    int rc = pcre2_match(code_->code, subject, text.size(), start, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      // Very long runs can exhaust the JIT's stack; the interpreter uses the heap.
      rc = pcre2_match(code_->code, subject, text.size(), start, PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;  // no match (other errors are limits this input cannot reach)
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t b = ov[0], e = ov[1];
    if (e > b) {
      on_match(b, e);
      start = e;
    } else {
      // An empty match: move on by one character.
      if (b >= text.size()) break;
      size_t next = b + 1;
      while (next < text.size() && (static_cast<unsigned char>(text[next]) & 0xC0) == 0x80) ++next;
      start = next;
    }
  }
  pcre2_match_data_free(md);
}

}  // namespace fathom
