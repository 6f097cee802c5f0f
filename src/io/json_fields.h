// JsonFields: typed access to the fields of one JSON object (a model's config.json, a
// safetensors index, ...) with errors that name the file and the field, so that a bad or
// unexpected config fails with "config.json: missing required field 'hidden_size'" rather
// than an exception from deep inside the JSON library.
//
// Conventions:
//  - Unknown fields are ignored: configs carry many fields a given model does not use.
//  - A field whose value is `null` counts as absent (Has() is false, the *Or variants return
//    the default, the required getters report it as missing): Hugging Face configs write
//    `null` for "not set".
//  - A field present with the wrong type is an error even for the *Or variants, since a
//    silently ignored value would make the model run with a setting the user did not ask for.
//  - Int() is strict: 4096.0 is not an integer (configs that mean an integer write one).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace fathom {

class JsonFields {
 public:
  // Errors: missing/unreadable file, malformed JSON (with the parser's line and column),
  // top level not an object.
  static Result<JsonFields> ParseFile(const std::string& path);
  // Parses `text` as if read from `source` (used for messages only).
  static Result<JsonFields> ParseText(const std::string& text, const std::string& source);

  // `obj` should be an object; anything else behaves as an object with no fields.
  JsonFields(nlohmann::json obj, std::string source);

  // True if `field` is present and not null.
  bool Has(const std::string& field) const;

  // Required fields: an error if absent (or null) or of the wrong type.
  Result<int64_t> Int(const std::string& field) const;
  Result<double> Number(const std::string& field) const;  // integer or float
  Result<bool> Bool(const std::string& field) const;
  Result<std::string> String(const std::string& field) const;
  // A nested object, e.g. "rope_scaling"; its source reads "config.json: rope_scaling" so
  // that its errors name the path to the field.
  Result<JsonFields> Object(const std::string& field) const;

  // Optional fields: `def` if absent or null, an error if present with the wrong type.
  Result<int64_t> IntOr(const std::string& field, int64_t def) const;
  Result<double> NumberOr(const std::string& field, double def) const;
  Result<bool> BoolOr(const std::string& field, bool def) const;
  Result<std::string> StringOr(const std::string& field, const std::string& def) const;

  const nlohmann::json& json() const { return obj_; }
  const std::string& source() const { return source_; }

 private:
  // The field's value, or nullptr if absent or null.
  const nlohmann::json* Get(const std::string& field) const;
  Status Missing(const std::string& field) const;
  Status WrongType(const std::string& field, const char* expected, const nlohmann::json& v) const;

  nlohmann::json obj_;
  std::string source_;
};

// "string \"abc\"", "float 1.5", "array", ...: what a JSON value is, for error messages.
std::string DescribeJsonValue(const nlohmann::json& v);
// A JSON parse error as a user should see it: "parse error at line 3, column 7: ...",
// without nlohmann's "[json.exception.parse_error.101]" prefix.
std::string JsonParseErrorText(const nlohmann::json::parse_error& e);

}  // namespace fathom
