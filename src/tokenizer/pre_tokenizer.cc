#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <utility>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fathom {

namespace {

// GPT-2's pattern, used by ByteLevel with use_regex.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

struct Span {
  size_t begin, end;
  bool is_match;
};

}  // namespace

std::vector<std::string> SplitByPattern(std::string_view text, const Regex& pattern,
                                        SplitBehavior behavior, bool invert) {
  // Matches and the gaps between them, in order, covering the text.
  std::vector<Span> spans;
  size_t prev = 0;
  pattern.ForEachMatch(text, [&](size_t b, size_t e) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  });
  if (prev < text.size()) spans.push_back({prev, text.size(), invert});

  // The folds of the `tokenizers` library's SplitDelimiterBehavior, span for span.
  std::vector<Span> out;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Span& s : spans)
        if (!s.is_match) out.push_back(s);
      break;
    case SplitBehavior::kIsolated:
      out = spans;
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& s : spans) {
        if (s.is_match && !previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t k = spans.size(); k-- > 0;) {
        const Span& s = spans[k];
        if (s.is_match && !previous_match && !out.empty())
          out.back().begin = s.begin;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      std::reverse(out.begin(), out.end());
      break;
    case SplitBehavior::kContiguous:
      for (const Span& s : spans) {
        if (s.is_match == previous_match && !out.empty())
          out.back().end = s.end;
        else
          out.push_back(s);
        previous_match = s.is_match;
      }
      break;
  }
  std::vector<std::string> pieces;
  pieces.reserve(out.size());
  for (const Span& s : out)
    if (s.end > s.begin) pieces.emplace_back(text.substr(s.begin, s.end - s.begin));
  return pieces;
}

Status PreTokenizer::AddSteps(const JsonNode& node, std::vector<Step>* steps) {
  if (!node.present()) return Status::Ok();
  FATHOM_RETURN_IF_ERROR(node.ExpectObject());
  const JsonNode type_node = node.Get("type");
  FATHOM_ASSIGN_OR_RETURN(std::string type, type_node.String());
  const std::string where = node.origin() + ": " + node.path();
  Step step;
  if (type == "Sequence") {
    const JsonNode list = node.Get("pretokenizers");
    FATHOM_RETURN_IF_ERROR(list.ExpectArray());
    for (size_t i = 0; i < list.size(); ++i) FATHOM_RETURN_IF_ERROR(AddSteps(list.At(i), steps));
    return Status::Ok();
  } else if (type == "Split") {
    step.kind = Kind::kSplit;
    const JsonNode pattern = node.Get("pattern");
    if (pattern.Get("String").present()) {
      FATHOM_ASSIGN_OR_RETURN(std::string lit, pattern.Get("String").String());
      FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Literal(lit, where + ".pattern"));
      step.pattern = std::make_shared<Regex>(std::move(re));
    } else if (pattern.Get("Regex").present()) {
      FATHOM_ASSIGN_OR_RETURN(std::string src, pattern.Get("Regex").String());
      FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Compile(src, where + ".pattern.Regex"));
      step.pattern = std::make_shared<Regex>(std::move(re));
    } else {
      return pattern.Error("should be {\"String\": ...} or {\"Regex\": ...}");
    }
    const JsonNode behavior_node = node.Get("behavior");
    FATHOM_ASSIGN_OR_RETURN(std::string behavior, behavior_node.String());
    if (behavior == "Removed") {
      step.behavior = SplitBehavior::kRemoved;
    } else if (behavior == "Isolated") {
      step.behavior = SplitBehavior::kIsolated;
    } else if (behavior == "MergedWithPrevious") {
      step.behavior = SplitBehavior::kMergedWithPrevious;
    } else if (behavior == "MergedWithNext") {
      step.behavior = SplitBehavior::kMergedWithNext;
    } else if (behavior == "Contiguous") {
      step.behavior = SplitBehavior::kContiguous;
    } else {
      return behavior_node.Unsupported();
    }
    FATHOM_ASSIGN_OR_RETURN(step.invert, node.Get("invert").BoolOr(false));
  } else if (type == "ByteLevel") {
    step.kind = Kind::kByteLevel;
    FATHOM_ASSIGN_OR_RETURN(step.add_prefix_space, node.Get("add_prefix_space").BoolOr(true));
    FATHOM_ASSIGN_OR_RETURN(bool use_regex, node.Get("use_regex").BoolOr(true));
    if (use_regex) {
      FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Compile(kGpt2Pattern, where + " (GPT-2 pattern)"));
      step.pattern = std::make_shared<Regex>(std::move(re));
    }
  } else if (type == "Metaspace") {
    FATHOM_RETURN_IF_ERROR(AddMetaspace(node, &step));
  } else if (type == "Digits") {
    // Each numeric character is a match; runs of them stay together unless individual.
    step.kind = Kind::kSplit;
    FATHOM_ASSIGN_OR_RETURN(bool individual, node.Get("individual_digits").BoolOr(false));
    FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Compile(R"(\p{N})", where));
    step.pattern = std::make_shared<Regex>(std::move(re));
    step.behavior = individual ? SplitBehavior::kIsolated : SplitBehavior::kContiguous;
  } else if (type == "Whitespace") {
    step.kind = Kind::kSplit;
    FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Compile(R"(\w+|[^\w\s]+)", where));
    step.pattern = std::make_shared<Regex>(std::move(re));
    step.behavior = SplitBehavior::kRemoved;
    step.invert = true;
  } else if (type == "WhitespaceSplit") {
    step.kind = Kind::kSplit;
    FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Compile(R"(\s)", where));
    step.pattern = std::make_shared<Regex>(std::move(re));
    step.behavior = SplitBehavior::kRemoved;
  } else {
    return type_node.Unsupported();
  }
  steps->push_back(std::move(step));
  return Status::Ok();
}

Status PreTokenizer::AddMetaspace(const JsonNode& node, Step* step) {
  step->kind = Kind::kMetaspace;
  const JsonNode rep = node.Get("replacement");
  FATHOM_ASSIGN_OR_RETURN(step->replacement, rep.String());
  size_t end = 0;
  if (step->replacement.empty() || !utf8::Validate(step->replacement, "").ok() ||
      (utf8::Next(step->replacement, &end), end != step->replacement.size()))
    return rep.Error("should be one character, found " + DescribeJson(rep.json()));
  // As `tokenizers` reads it: prepend_scheme defaults to "always"; the older
  // add_prefix_space false means "never"; split defaults to true.
  const JsonNode scheme = node.Get("prepend_scheme");
  FATHOM_ASSIGN_OR_RETURN(std::string s, scheme.StringOr("always"));
  if (s == "always") {
    step->prepend = Prepend::kAlways;
  } else if (s == "first") {
    step->prepend = Prepend::kFirst;
  } else if (s == "never") {
    step->prepend = Prepend::kNever;
  } else {
    return scheme.Unsupported();
  }
  FATHOM_ASSIGN_OR_RETURN(bool add_prefix_space, node.Get("add_prefix_space").BoolOr(true));
  if (!add_prefix_space) step->prepend = Prepend::kNever;
  FATHOM_ASSIGN_OR_RETURN(bool split, node.Get("split").BoolOr(true));
  if (split) {
    // Each '▁' starts a piece (SplitDelimiterBehavior::MergedWithNext).
    FATHOM_ASSIGN_OR_RETURN(Regex re, Regex::Literal(step->replacement, node.origin() + ": " + node.path()));
    step->pattern = std::make_shared<Regex>(std::move(re));
    step->behavior = SplitBehavior::kMergedWithNext;
  }
  return Status::Ok();
}

Result<PreTokenizer> PreTokenizer::FromJson(const JsonNode& node) {
  PreTokenizer p;
  FATHOM_RETURN_IF_ERROR(AddSteps(node, &p.steps_));
  for (const Step& s : p.steps_) p.byte_level_ = p.byte_level_ || s.kind == Kind::kByteLevel;
  return p;
}

std::vector<std::string> PreTokenizer::Apply(std::string_view text, bool at_start) const {
  std::vector<std::string> pieces;
  if (!text.empty()) pieces.emplace_back(text);
  for (const Step& step : steps_) {
    std::vector<std::string> next;
    for (size_t k = 0; k < pieces.size(); ++k) {
      std::string& piece = pieces[k];
      if (step.kind == Kind::kMetaspace) {
        std::string s;
        for (const char c : piece) {
          if (c == ' ')
            s += step.replacement;
          else
            s += c;
        }
        // An earlier step's first piece begins the stretch; later pieces begin inside it.
        const bool prepend = step.prepend == Prepend::kAlways ||
                             (step.prepend == Prepend::kFirst && at_start && k == 0);
        if (prepend && s.compare(0, step.replacement.size(), step.replacement) != 0) s.insert(0, step.replacement);
        if (!step.pattern) {
          next.push_back(std::move(s));
          continue;
        }
        for (std::string& p : SplitByPattern(s, *step.pattern, step.behavior, false)) next.push_back(std::move(p));
        continue;
      }
      if (step.kind == Kind::kSplit) {
        for (std::string& p : SplitByPattern(piece, *step.pattern, step.behavior, step.invert))
          next.push_back(std::move(p));
        continue;
      }
      // ByteLevel: optional prefix space, the GPT-2 split, then bytes -> characters.
      if (step.add_prefix_space && piece[0] != ' ') piece.insert(piece.begin(), ' ');
      if (step.pattern) {
        for (const std::string& p :
             SplitByPattern(piece, *step.pattern, SplitBehavior::kIsolated, false))
          next.push_back(byte_level::Encode(p));
      } else {
        next.push_back(byte_level::Encode(piece));
      }
    }
    pieces = std::move(next);
  }
  return pieces;
}

}  // namespace fathom
