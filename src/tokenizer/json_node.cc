#include "tokenizer/json_node.h"

namespace fathom {

std::string DescribeJson(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null: return "null";
    case nlohmann::json::value_t::boolean: return "boolean " + v.dump();
    case nlohmann::json::value_t::string: return "string " + v.dump();
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: return "integer " + v.dump();
    case nlohmann::json::value_t::number_float: return "float " + v.dump();
    case nlohmann::json::value_t::array: return "array";
    case nlohmann::json::value_t::object: return "object";
    default: return v.type_name();
  }
}

const nlohmann::json& JsonNode::json() const {
  static const nlohmann::json kNull;
  return v_ != nullptr ? *v_ : kNull;
}

JsonNode JsonNode::Get(std::string_view field) const {
  std::string path = path_.empty() ? std::string(field) : path_ + "." + std::string(field);
  if (!present() || !v_->is_object()) return JsonNode(nullptr, origin_, std::move(path));
  auto it = v_->find(field);
  return JsonNode(it == v_->end() ? nullptr : &*it, origin_, std::move(path));
}

JsonNode JsonNode::At(size_t i) const {
  std::string path = path_ + "[" + std::to_string(i) + "]";
  if (!present() || !v_->is_array() || i >= v_->size()) return JsonNode(nullptr, origin_, path);
  return JsonNode(&(*v_)[i], origin_, std::move(path));
}

Status JsonNode::Error(const std::string& what) const {
  return Status::Error(*origin_ + ": " + path_ + " " + what);
}

Status JsonNode::Unsupported() const { return Error(json().dump() + " is not supported"); }

Status JsonNode::WrongType(const char* expected) const {
  if (!present()) return Status::Error(*origin_ + ": missing field " + path_);
  return Error(std::string("should be ") + expected + ", found " + DescribeJson(*v_));
}

Result<std::string> JsonNode::String() const {
  if (!present() || !v_->is_string()) return WrongType("a string");
  return v_->get<std::string>();
}

Result<std::string> JsonNode::StringOr(const std::string& def) const {
  if (!present()) return def;
  return String();
}

Result<int64_t> JsonNode::Int() const {
  if (!present() || !v_->is_number_integer()) return WrongType("an integer");
  return v_->get<int64_t>();
}

Result<bool> JsonNode::BoolOr(bool def) const {
  if (!present()) return def;
  if (!v_->is_boolean()) return WrongType("a boolean");
  return v_->get<bool>();
}

Status JsonNode::ExpectArray() const {
  if (!present() || !v_->is_array()) return WrongType("an array");
  return Status::Ok();
}

Status JsonNode::ExpectObject() const {
  if (!present() || !v_->is_object()) return WrongType("an object");
  return Status::Ok();
}

}  // namespace fathom
