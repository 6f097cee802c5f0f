#include "tokenizer/utf8.h"

#include <cstdio>

namespace fathom::utf8 {

Scan ScanAt(std::string_view s, size_t i, size_t* len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  *len = 1;
  if (b0 < 0x80) return Scan::kComplete;
  // The ranges of Unicode Table 3-7: the second byte's range excludes overlong forms,
  // surrogates and code points past U+10FFFF.
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return Scan::kInvalid;
  }
  for (size_t k = 0; k < need; ++k) {
    if (i + *len >= s.size()) return Scan::kTruncated;
    const auto b = static_cast<unsigned char>(s[i + *len]);
    if (b < lo || b > hi) return Scan::kInvalid;
    lo = 0x80;
    hi = 0xBF;
    ++*len;
  }
  return Scan::kComplete;
}

Status Validate(std::string_view s, const std::string& what) {
  size_t i = 0, len = 0;
  while (i < s.size()) {
    const Scan scan = ScanAt(s, i, &len);
    if (scan != Scan::kComplete) {
      char buf[160];
      std::snprintf(buf, sizeof buf, " is not valid UTF-8: byte %zu (0x%02X) %s", i,
                    static_cast<unsigned>(static_cast<unsigned char>(s[i])),
                    scan == Scan::kTruncated ? "starts a sequence the text ends inside"
                                             : "starts an ill-formed sequence");
      return Status::Error(what + buf);
    }
    i += len;
  }
  return Status::Ok();
}

char32_t Next(std::string_view s, size_t* i) {
  const auto b0 = static_cast<unsigned char>(s[*i]);
  size_t n;
  char32_t cp;
  if (b0 < 0x80) {
    n = 1;
    cp = b0;
  } else if (b0 < 0xE0) {
    n = 2;
    cp = b0 & 0x1Fu;
  } else if (b0 < 0xF0) {
    n = 3;
    cp = b0 & 0x0Fu;
  } else {
    n = 4;
    cp = b0 & 0x07u;
  }
  for (size_t k = 1; k < n && *i + k < s.size(); ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[*i + k]) & 0x3Fu);
  *i += n;
  return cp;
}

void Append(std::string* out, char32_t cp) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string Lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  size_t i = 0, len = 0;
  while (i < bytes.size()) {
    if (ScanAt(bytes, i, &len) == Scan::kComplete)
      out.append(bytes.substr(i, len));
    else
      out.append("\xEF\xBF\xBD");  // U+FFFD
    i += len;
  }
  return out;
}

size_t CompletePrefix(std::string_view bytes) {
  size_t i = 0, len = 0;
  while (i < bytes.size()) {
    if (ScanAt(bytes, i, &len) == Scan::kTruncated) return i;
    i += len;
  }
  return bytes.size();
}

bool IsWhitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

}  // namespace fathom::utf8
