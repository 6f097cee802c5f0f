#include "serve/prometheus_text.h"

#include <cerrno>
#include <cstdlib>
#include <sstream>

namespace fathom::serve {
namespace {

bool NameStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':'; }
bool NameChar(char c) { return NameStart(c) || (c >= '0' && c <= '9'); }
bool Blank(char c) { return c == ' ' || c == '\t'; }

std::string EscapeLabelValue(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '\\' || c == '"') o += '\\', o += c;
    else if (c == '\n') o += "\\n";
    else o += c;
  }
  return o;
}

// A cursor over one line; errors name the line number and the column.
class LineReader {
 public:
  LineReader(const std::string& line, int64_t number) : s_(line), number_(number) {}

  Status Error(const std::string& what) const {
    return Status::Error("line " + std::to_string(number_) + ", column " + std::to_string(i_ + 1) + ": " + what);
  }
  bool AtEnd() const { return i_ >= s_.size(); }
  char Peek() const { return AtEnd() ? '\0' : s_[i_]; }
  // Whether there was a blank to skip.
  bool SkipBlanks() {
    const size_t start = i_;
    while (!AtEnd() && Blank(s_[i_])) ++i_;
    return i_ > start;
  }
  // A metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), or a label name (no ':').
  Result<std::string> Name(bool label) {
    const size_t start = i_;
    while (!AtEnd() && (i_ == start ? NameStart(s_[i_]) : NameChar(s_[i_])) && !(label && s_[i_] == ':')) ++i_;
    if (i_ == start) return Error(std::string("expected a ") + (label ? "label" : "metric") + " name");
    return s_.substr(start, i_ - start);
  }
  // A token up to the next blank or the end of the line.
  std::string Token() {
    const size_t start = i_;
    while (!AtEnd() && !Blank(s_[i_])) ++i_;
    return s_.substr(start, i_ - start);
  }
  std::string Rest() { return AtEnd() ? "" : s_.substr(std::exchange(i_, s_.size())); }
  Result<std::string> QuotedValue(const std::string& label);
  Status Labels(std::vector<std::pair<std::string, std::string>>* out);

 private:
  const std::string& s_;
  int64_t number_;
  size_t i_ = 0;
};

// "..." with \\, \" and \n escapes; the cursor is on the opening quote.
Result<std::string> LineReader::QuotedValue(const std::string& label) {
  if (Peek() != '"') return Error("label '" + label + "': expected '\"' to open its value");
  ++i_;
  std::string v;
  while (!AtEnd() && s_[i_] != '"') {
    char c = s_[i_++];
    if (c == '\\') {
      if (AtEnd()) break;
      const char e = s_[i_++];
      if (e == 'n') c = '\n';
      else if (e == '\\' || e == '"') c = e;
      else return Error("label '" + label + "': unknown escape '\\" + std::string(1, e) + "' in its value");
    }
    v += c;
  }
  if (AtEnd()) return Error("label '" + label + "': unterminated value");
  ++i_;  // the closing quote
  return v;
}

// {a="x",b="y"} or {a="x",} or {}; the cursor is on '{'.
Status LineReader::Labels(std::vector<std::pair<std::string, std::string>>* out) {
  ++i_;
  for (;;) {
    SkipBlanks();
    if (Peek() == '}') break;
    FATHOM_ASSIGN_OR_RETURN(std::string name, Name(true));
    SkipBlanks();
    if (Peek() != '=') return Error("expected '=' after label '" + name + "'");
    ++i_;
    SkipBlanks();
    FATHOM_ASSIGN_OR_RETURN(std::string value, QuotedValue(name));
    for (const auto& [seen, v] : *out)
      if (seen == name) return Error("label '" + name + "' given twice");
    out->emplace_back(std::move(name), std::move(value));
    SkipBlanks();
    if (Peek() == ',') {
      ++i_;
      continue;
    }
    if (Peek() != '}') return Error("expected ',' or '}' after a label value");
  }
  ++i_;
  return Status::Ok();
}

Result<double> ParseValue(LineReader& r, const std::string& text) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || (errno == ERANGE && v != 0))
    return r.Error("the value '" + text + "' is not a number (a float, NaN, +Inf or -Inf)");
  return v;
}

Result<PrometheusSample> ParseSample(LineReader& r) {
  PrometheusSample s;
  FATHOM_ASSIGN_OR_RETURN(s.name, r.Name(false));
  bool blank = r.SkipBlanks();
  if (r.Peek() == '{') {
    FATHOM_RETURN_IF_ERROR(r.Labels(&s.labels));
    blank = r.SkipBlanks();
  }
  if (!blank || r.AtEnd()) return r.Error("expected a blank and a value after '" + s.Key() + "'");
  FATHOM_ASSIGN_OR_RETURN(s.value, ParseValue(r, r.Token()));
  r.SkipBlanks();
  if (r.AtEnd()) return s;
  const std::string ts = r.Token();
  errno = 0;
  char* end = nullptr;
  const long long t = std::strtoll(ts.c_str(), &end, 10);
  if (*end != '\0' || errno == ERANGE) return r.Error("the timestamp '" + ts + "' is not an integer (ms)");
  s.timestamp_ms = t;
  r.SkipBlanks();
  if (!r.AtEnd()) return r.Error("unexpected text after the timestamp: '" + r.Rest() + "'");
  return s;
}

std::string UnescapeHelp(const std::string& s) {
  std::string o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size() && (s[i + 1] == 'n' || s[i + 1] == '\\')) {
      o += s[i + 1] == 'n' ? '\n' : '\\';
      ++i;
    } else {
      o += s[i];
    }
  }
  return o;
}

// "# HELP name text", "# TYPE name type" or another comment (ignored).
Status ParseComment(LineReader& r, PrometheusText* out) {
  r.Token();  // "#"
  r.SkipBlanks();
  const std::string keyword = r.Token();
  if (keyword != "HELP" && keyword != "TYPE") return Status::Ok();
  r.SkipBlanks();
  FATHOM_ASSIGN_OR_RETURN(std::string name, r.Name(false));
  if (!r.AtEnd() && !Blank(r.Peek())) return r.Error("unexpected character after the metric name '" + name + "'");
  r.SkipBlanks();
  if (keyword == "HELP") {
    out->help[name] = UnescapeHelp(r.Rest());
    return Status::Ok();
  }
  const std::string type = r.Token();
  if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped")
    return r.Error("unknown metric type '" + type + "' for '" + name + "'");
  if (out->type.count(name)) return r.Error("a second TYPE line for '" + name + "'");
  out->type[name] = type;
  return Status::Ok();
}

}  // namespace

std::string PrometheusSample::Key() const {
  if (labels.empty()) return name;
  std::string k = name + "{";
  for (size_t i = 0; i < labels.size(); ++i)
    k += (i ? "," : "") + labels[i].first + "=\"" + EscapeLabelValue(labels[i].second) + "\"";
  return k + "}";
}

std::optional<double> PrometheusText::Find(const std::string& key) const {
  for (const PrometheusSample& s : samples)
    if (s.Key() == key) return s.value;
  return std::nullopt;
}

Result<PrometheusText> ParsePrometheusText(const std::string& text) {
  PrometheusText out;
  std::map<std::string, int64_t> first_line;  // sample key -> the line it was on
  std::istringstream in(text);
  std::string line;
  for (int64_t n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    LineReader r(line, n);
    r.SkipBlanks();
    if (r.AtEnd()) continue;
    if (r.Peek() == '#') {
      FATHOM_RETURN_IF_ERROR(ParseComment(r, &out));
      continue;
    }
    FATHOM_ASSIGN_OR_RETURN(PrometheusSample s, ParseSample(r));
    const auto [it, fresh] = first_line.emplace(s.Key(), n);
    if (!fresh)
      return Status::Error("line " + std::to_string(n) + ": the sample '" + s.Key() + "' again (first on line " +
                           std::to_string(it->second) + ")");
    out.samples.push_back(std::move(s));
  }
  return out;
}

}  // namespace fathom::serve
