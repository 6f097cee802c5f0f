// JsonNode: one value inside a tokenizer file with its path ("pre_tokenizer.pretokenizers[1]
// .type"), so that every error names the file and the field. The tokenizer layer does not
// link fathom_io (JsonFields); this is the small part of it the tokenizer files need, with
// paths into nested arrays, which those files use heavily.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom {

class JsonNode {
 public:
  // `v` may be null (an absent field). `origin` must outlive the node.
  JsonNode(const nlohmann::json* v, const std::string* origin, std::string path)
      : v_(v), origin_(origin), path_(std::move(path)) {}

  // False when absent or JSON null (Hugging Face writes null for "not set").
  bool present() const { return v_ != nullptr && !v_->is_null(); }
  const nlohmann::json& json() const;
  const std::string& path() const { return path_; }
  const std::string& origin() const { return *origin_; }

  JsonNode Get(std::string_view field) const;  // absent when this is not an object
  JsonNode At(size_t i) const;
  size_t size() const { return present() && v_->is_array() ? v_->size() : 0; }

  Result<std::string> String() const;
  Result<std::string> StringOr(const std::string& def) const;
  Result<int64_t> Int() const;
  Result<bool> BoolOr(bool def) const;
  // Ok if the value is an array / object, else an error naming what it is.
  Status ExpectArray() const;
  Status ExpectObject() const;

  // "<origin>: <path> <what>".
  Status Error(const std::string& what) const;
  // `<origin>: <path> "<value>" is not supported` (for "type" fields and the like).
  Status Unsupported() const;

 private:
  Status WrongType(const char* expected) const;
  const nlohmann::json* v_;
  const std::string* origin_;
  std::string path_;
};

// "string \"abc\"", "integer 3", "array", ...: what a JSON value is, for error messages.
std::string DescribeJson(const nlohmann::json& v);

}  // namespace fathom
