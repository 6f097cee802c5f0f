#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fathom {

namespace {

// A JSON string holding exactly one character.
Result<std::string> OneCharacter(const JsonNode& node) {
  FATHOM_ASSIGN_OR_RETURN(std::string s, node.String());
  size_t end = 0;
  if (s.empty() || !utf8::Validate(s, "").ok() || (utf8::Next(s, &end), end != s.size()))
    return node.Error("should be one character, found " + DescribeJson(node.json()));
  return s;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

void ReplaceAll(std::string* s, const std::string& from, const std::string& to) {
  std::string out;
  size_t prev = 0;
  for (size_t p = s->find(from); p != std::string::npos; p = s->find(from, prev)) {
    out.append(*s, prev, p - prev).append(to);
    prev = p + from.size();
  }
  out.append(*s, prev, std::string::npos);
  *s = std::move(out);
}

}  // namespace

Status Decoder::Add(const JsonNode& node) {
  FATHOM_RETURN_IF_ERROR(node.ExpectObject());
  const JsonNode type_node = node.Get("type");
  // Kept in its Result: moving it out trips g++ 12's -Wmaybe-uninitialized here.
  const Result<std::string> type_result = type_node.String();
  if (!type_result.ok()) return type_result.status();
  const std::string& type = type_result.value();
  if (type == "Sequence") {
    const JsonNode list = node.Get("decoders");
    FATHOM_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.size(); ++i) FATHOM_RETURN_IF_ERROR(Add(list.At(i)));
    return Status::Ok();
  }
  // After Fuse there is one token, the whole text: only a leading Strip keeps the
  // per-token bytes (and so streaming) exact.
  if (fused_ && type != "Strip") return node.Error("type \"" + type + "\" after Fuse is not supported");
  if (type == "Fuse") {
    fused_ = true;
    return Status::Ok();
  }
  if (type == "Strip") {
    if (!fused_) return node.Error("Strip before Fuse is not supported (it would strip every token)");
    if (strip_count_ > 0) return node.Error("a second Strip is not supported");
    FATHOM_ASSIGN_OR_RETURN(strip_content_, OneCharacter(node.Get("content")));
    FATHOM_ASSIGN_OR_RETURN(int64_t start, node.Get("start").Int());
    FATHOM_ASSIGN_OR_RETURN(int64_t stop, node.Get("stop").Int());
    if (start < 0) return node.Get("start").Error("should be >= 0");
    if (stop != 0) return node.Get("stop").Error("other than 0 is not supported (a streamed decode cannot know the text's end)");
    strip_count_ = static_cast<size_t>(start);
    return Status::Ok();
  }
  Step step;
  if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
  } else if (type == "ByteFallback") {
    step.kind = Kind::kByteFallback;
  } else if (type == "Replace") {
    step.kind = Kind::kReplace;
    const JsonNode pattern = node.Get("pattern");
    if (!pattern.Get("String").present())
      return pattern.Error("should be {\"String\": ...} (a Regex pattern is not supported in decoders)");
    FATHOM_ASSIGN_OR_RETURN(step.from, pattern.Get("String").String());
    if (step.from.empty()) return pattern.Get("String").Error("should not be empty");
    FATHOM_ASSIGN_OR_RETURN(step.to, node.Get("content").String());
  } else if (type == "Metaspace") {
    step.kind = Kind::kMetaspace;
    FATHOM_ASSIGN_OR_RETURN(step.from, OneCharacter(node.Get("replacement")));
    step.to = " ";
    // Read as `tokenizers` does: prepend_scheme defaults to "always", the older
    // add_prefix_space false means "never".
    const JsonNode scheme = node.Get("prepend_scheme");
    FATHOM_ASSIGN_OR_RETURN(std::string s, scheme.StringOr("always"));
    if (s != "always" && s != "first" && s != "never") return scheme.Unsupported();
    FATHOM_ASSIGN_OR_RETURN(bool add_prefix_space, node.Get("add_prefix_space").BoolOr(true));
    step.drop_in_first = s != "never" && add_prefix_space;
    first_token_differs_ = first_token_differs_ || step.drop_in_first;
  } else {
    return type_node.Unsupported();
  }
  steps_.push_back(std::move(step));
  return Status::Ok();
}

Result<Decoder> Decoder::FromJson(const JsonNode& node) {
  if (!node.present()) return node.Error("null is not supported (it joins tokens with spaces)");
  Decoder d;
  FATHOM_RETURN_IF_ERROR(d.Add(node));
  int byte_level = 0;
  for (const Step& s : d.steps_) byte_level += s.kind == Kind::kByteLevel ? 1 : 0;
  if (byte_level > 1) return node.Error("should hold at most one ByteLevel decoder");
  return d;
}

std::string Decoder::Apply(std::string_view token, bool first) const {
  std::string s(token);
  for (const Step& step : steps_) {
    switch (step.kind) {
      case Kind::kByteLevel: {
        std::string bytes;
        if (byte_level::Decode(s, &bytes)) s = std::move(bytes);
        break;
      }
      case Kind::kByteFallback:
        // `tokenizers`: a 6-byte token "<0x" hex hex ">" is that byte.
        if (s.size() == 6 && s.compare(0, 3, "<0x") == 0 && s[5] == '>' && HexDigit(s[3]) >= 0 && HexDigit(s[4]) >= 0)
          s.assign(1, static_cast<char>(HexDigit(s[3]) * 16 + HexDigit(s[4])));
        break;
      case Kind::kReplace:
        ReplaceAll(&s, step.from, step.to);
        break;
      case Kind::kMetaspace:
        ReplaceAll(&s, step.from, first && step.drop_in_first ? std::string() : step.to);
        break;
    }
  }
  return s;
}

}  // namespace fathom
