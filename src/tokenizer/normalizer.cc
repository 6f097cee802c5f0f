#include "tokenizer/normalizer.h"

#include <cstdlib>
#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace fathom {

namespace {

std::string Utf8procMap(std::string_view text, int options) {
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  // The input is validated UTF-8, so utf8proc cannot fail on it; keep it unchanged if it does.
  if (n < 0) return std::string(text);
  std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
  std::free(out);
  return result;
}

}  // namespace

Status Normalizer::AddSteps(const JsonNode& node, std::vector<Step>* steps) {
  if (!node.present()) return Status::Ok();
  FATHOM_RETURN_IF_ERROR(node.ExpectObject());
  const JsonNode type_node = node.Get("type");
  // Kept in its Result: moving it out trips g++ 12's -Wmaybe-uninitialized here.
  const Result<std::string> type_result = type_node.String();
  if (!type_result.ok()) return type_result.status();
  const std::string& type = type_result.value();
  if (type == "Sequence") {
    const JsonNode list = node.Get("normalizers");
    FATHOM_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.size(); ++i) FATHOM_RETURN_IF_ERROR(AddSteps(list.At(i), steps));
    return Status::Ok();
  }
  Step step;
  if (type == "NFC") {
    step.kind = Kind::kNfc;
  } else if (type == "NFD") {
    step.kind = Kind::kNfd;
  } else if (type == "NFKC") {
    step.kind = Kind::kNfkc;
  } else if (type == "NFKD") {
    step.kind = Kind::kNfkd;
  } else if (type == "Lowercase") {
    step.kind = Kind::kLowercase;
  } else if (type == "Prepend") {
    step.kind = Kind::kPrepend;
    FATHOM_ASSIGN_OR_RETURN(step.content, node.Get("prepend").String());
  } else if (type == "Strip") {
    step.kind = Kind::kStrip;
    FATHOM_ASSIGN_OR_RETURN(step.left, node.Get("strip_left").BoolOr(true));
    FATHOM_ASSIGN_OR_RETURN(step.right, node.Get("strip_right").BoolOr(true));
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    FATHOM_ASSIGN_OR_RETURN(step.content, node.Get("content").String());
    const JsonNode pattern = node.Get("pattern");
    if (pattern.Get("String").present()) {
      FATHOM_ASSIGN_OR_RETURN(std::string lit, pattern.Get("String").String());
      FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Literal(lit, node.origin() + ": " + pattern.path()));
      step.pattern = std::make_shared<Regex>(std::move(re));
    } else if (pattern.Get("Regex").present()) {
      FATHOM_ASSIGN_OR_RETURN(std::string src, pattern.Get("Regex").String());
      FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Compile(src, node.origin() + ": " + pattern.path()));
      step.pattern = std::make_shared<Regex>(std::move(re));
    } else {
      return pattern.Error("should be {\"String\": ...} or {\"Regex\": ...}");
    }
  } else {
    return type_node.Unsupported();
  }
  steps->push_back(std::move(step));
  return Status::Ok();
}

Result<Normalizer> Normalizer::FromJson(const JsonNode& node) {
  Normalizer n;
  FATHOM_RETURN_IF_ERROR(AddSteps(node, &n.steps_));
  return n;
}

std::string Normalizer::Apply(std::string_view text) const {
  std::string s(text);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kNfc: s = Utf8procMap(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE); break;
      case Kind::kNfd: s = Utf8procMap(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE); break;
      case Kind::kNfkc:
        s = Utf8procMap(s, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::kNfkd:
        s = Utf8procMap(s, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
        break;
      case Kind::kLowercase: {
        // Simple case mapping per code point (Rust's to_lowercase differs only for the
        // few characters whose lowercase is more than one code point, e.g. U+0130).
        std::string out;
        size_t i = 0;
        while (i < s.size()) utf8::Append(&out, static_cast<char32_t>(utf8proc_tolower(
                                                    static_cast<utf8proc_int32_t>(utf8::Next(s, &i)))));
        s = std::move(out);
        break;
      }
      case Kind::kPrepend:
        if (!s.empty()) s = step.content + s;
        break;
      case Kind::kStrip: {
        size_t b = 0, e = s.size();
        if (step.left) {
          while (b < e) {
            size_t j = b;
            if (!utf8::IsWhitespace(utf8::Next(s, &j))) break;
            b = j;
          }
        }
        if (step.right) {
          while (e > b) {
            size_t start = e - 1;
            while (start > b && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
            size_t j = start;
            if (!utf8::IsWhitespace(utf8::Next(s, &j))) break;
            e = start;
          }
        }
        s = s.substr(b, e - b);
        break;
      }
      case Kind::kReplace: {
        std::string out;
        size_t prev = 0;
        step.pattern->ForEachMatch(s, [&](size_t b, size_t e) {
          out.append(s, prev, b - prev);
          out += step.content;
          prev = e;
        });
        out.append(s, prev, std::string::npos);
        s = std::move(out);
        break;
      }
    }
  }
  return s;
}

}  // namespace fathom
