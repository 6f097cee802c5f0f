#include "io/json_fields.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

namespace fathom {

namespace {

// Reads a whole file; errors name the path and the errno text.
Result<std::string> ReadWholeFile(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return Status::Error("cannot open " + path + ": " + std::strerror(errno));
  std::string text;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) return Status::Error("cannot read " + path + ": " + std::strerror(err));
  return text;
}

}  // namespace

std::string JsonParseErrorText(const nlohmann::json::parse_error& e) {
  // The exception id means nothing to a user; the rest names the line and column.
  const std::string what = e.what();
  if (!what.empty() && what[0] == '[') {
    size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

std::string DescribeJsonValue(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::boolean:
      return std::string("boolean ") + v.dump();
    case nlohmann::json::value_t::string:
      return "string " + v.dump();
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "integer " + v.dump();
    case nlohmann::json::value_t::number_float:
      return "float " + v.dump();
    case nlohmann::json::value_t::array:
      return "array";
    case nlohmann::json::value_t::object:
      return "object";
    default:
      return v.type_name();
  }
}

Result<JsonFields> JsonFields::ParseFile(const std::string& path) {
  FATHOM_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  return ParseText(text, path);
}

Result<JsonFields> JsonFields::ParseText(const std::string& text, const std::string& source) {
  nlohmann::json obj;
  try {
    obj = nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    return Status::Error(source + ": malformed JSON: " + JsonParseErrorText(e));
  } catch (const nlohmann::json::exception& e) {  // out_of_range 406: a number past double's range (1e309)
    return Status::Error(source + ": malformed JSON: " + e.what());
  }
  if (!obj.is_object()) {
    return Status::Error(source + ": expected a JSON object at the top level, found " +
                         DescribeJsonValue(obj));
  }
  return JsonFields(std::move(obj), source);
}

JsonFields::JsonFields(nlohmann::json obj, std::string source)
    : obj_(std::move(obj)), source_(std::move(source)) {}

const nlohmann::json* JsonFields::Get(const std::string& field) const {
  if (!obj_.is_object()) return nullptr;
  auto it = obj_.find(field);
  if (it == obj_.end() || it->is_null()) return nullptr;
  return &*it;
}

bool JsonFields::Has(const std::string& field) const { return Get(field) != nullptr; }

Status JsonFields::Missing(const std::string& field) const {
  return Status::Error(source_ + ": missing required field '" + field + "'");
}

Status JsonFields::WrongType(const std::string& field, const char* expected,
                             const nlohmann::json& v) const {
  return Status::Error(source_ + ": field '" + field + "': expected " + expected + ", found " +
                       DescribeJsonValue(v));
}

Result<int64_t> JsonFields::Int(const std::string& field) const {
  const nlohmann::json* v = Get(field);
  if (v == nullptr) return Missing(field);
  if (v->is_number_unsigned()) {
    // nlohmann stores non-negative integers as uint64; above int64's range is not ours.
    uint64_t u = v->get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return WrongType(field, "an integer that fits in int64", *v);
    }
    return static_cast<int64_t>(u);
  }
  if (v->is_number_integer()) return v->get<int64_t>();
  return WrongType(field, "an integer", *v);
}

Result<double> JsonFields::Number(const std::string& field) const {
  const nlohmann::json* v = Get(field);
  if (v == nullptr) return Missing(field);
  if (!v->is_number()) return WrongType(field, "a number", *v);
  return v->get<double>();
}

Result<bool> JsonFields::Bool(const std::string& field) const {
  const nlohmann::json* v = Get(field);
  if (v == nullptr) return Missing(field);
  if (!v->is_boolean()) return WrongType(field, "a boolean", *v);
  return v->get<bool>();
}

Result<std::string> JsonFields::String(const std::string& field) const {
  const nlohmann::json* v = Get(field);
  if (v == nullptr) return Missing(field);
  if (!v->is_string()) return WrongType(field, "a string", *v);
  return v->get<std::string>();
}

Result<JsonFields> JsonFields::Object(const std::string& field) const {
  const nlohmann::json* v = Get(field);
  if (v == nullptr) return Missing(field);
  if (!v->is_object()) return WrongType(field, "an object", *v);
  return JsonFields(*v, source_ + ": " + field);
}

Result<int64_t> JsonFields::IntOr(const std::string& field, int64_t def) const {
  if (!Has(field)) return def;
  return Int(field);
}

Result<double> JsonFields::NumberOr(const std::string& field, double def) const {
  if (!Has(field)) return def;
  return Number(field);
}

Result<bool> JsonFields::BoolOr(const std::string& field, bool def) const {
  if (!Has(field)) return def;
  return Bool(field);
}

Result<std::string> JsonFields::StringOr(const std::string& field, const std::string& def) const {
  if (!Has(field)) return def;
  return String(field);
}

}  // namespace fathom
