// UTF-8 helpers for the tokenizer: validation with the byte offset of the first bad byte,
// code point iteration, and the lossy decoding that Hugging Face's decoders use (Rust's
// String::from_utf8_lossy: each maximal ill-formed subsequence becomes one U+FFFD), which
// StreamDecoder relies on to emit text incrementally with the same result.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom::utf8 {

// What starts at a byte offset: a complete well-formed sequence, the start of one that the
// text ends before completing, or an ill-formed subsequence.
enum class Scan { kComplete, kTruncated, kInvalid };
// Classifies the sequence at s[i] (i < s.size()) and sets *len to the bytes it spans: the
// whole sequence, or the maximal prefix of a well-formed one (at least 1).
Scan ScanAt(std::string_view s, size_t i, size_t* len);

// Ok, or an error "<what> is not valid UTF-8: byte N (0xXX) ...".
Status Validate(std::string_view s, const std::string& what);

// The code point at s[*i] of valid UTF-8; advances *i past it.
char32_t Next(std::string_view s, size_t* i);
void Append(std::string* out, char32_t cp);

// Ill-formed subsequences replaced by U+FFFD (from_utf8_lossy).
std::string Lossy(std::string_view bytes);
// The longest prefix after which no byte can change how the prefix decodes: everything but
// a trailing, still incomplete, well-formed sequence.
size_t CompletePrefix(std::string_view bytes);

// Unicode White_Space (Rust's char::is_whitespace, Oniguruma's \s).
bool IsWhitespace(char32_t c);

}  // namespace fathom::utf8
