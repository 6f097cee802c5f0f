// Regex: the patterns of tokenizer.json (Split pre-tokenizers, Replace normalizers, the
// GPT-2 pattern of ByteLevel) through PCRE2 in UTF + UCP mode, JIT-compiled when the library
// has a JIT. Hugging Face runs these patterns with Oniguruma, whose \s is Unicode White_Space;
// PCRE2's \s under UCP is "Z or tab/LF/VT/FF/CR" and misses U+0085, so \s and \S are
// rewritten into explicit White_Space classes before compiling.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom {

class Regex {
 public:
  // `what` names the pattern's JSON field in compile errors.
  static Result<Regex> Compile(const std::string& pattern, const std::string& what);
  // A pattern matching `literal` exactly (Split / Replace with {"String": ...}).
  static Result<Regex> Literal(const std::string& literal, const std::string& what);

  // Calls on_match(begin, end) for each successive non-overlapping, non-empty match, the
  // way Oniguruma's and Rust's find_iter see them (after an empty match the search moves on
  // by one character).
  void ForEachMatch(std::string_view text,
                    const std::function<void(size_t, size_t)>& on_match) const;

 private:
  struct Code;
  std::shared_ptr<const Code> code_;
};

// The pattern with \s / \S replaced by explicit Unicode White_Space classes (exposed for tests).
std::string RewriteWhitespaceClasses(const std::string& pattern);

}  // namespace fathom
