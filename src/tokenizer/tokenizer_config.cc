#include "tokenizer/tokenizer_config.h"

#include <nlohmann/json.hpp>

#include "tokenizer/json_node.h"

namespace fathom {

namespace {

Result<std::optional<std::string>> TokenField(const JsonNode& node) {
  if (!node.present()) return std::optional<std::string>();
  if (node.json().is_string()) return std::optional<std::string>(node.json().get<std::string>());
  if (node.json().is_object()) {
    FATHOM_ASSIGN_OR_RETURN(std::string content, node.Get("content").String());
    return std::optional<std::string>(content);
  }
  return node.Error("should be a string, {\"content\": ...} or null, found " +
                    DescribeJson(node.json()));
}

Result<std::optional<bool>> OptionalBool(const JsonNode& node) {
  if (!node.present()) return std::optional<bool>();
  FATHOM_ASSIGN_OR_RETURN(bool v, node.BoolOr(false));
  return std::optional<bool>(v);
}

}  // namespace

Result<TokenizerConfig> ParseTokenizerConfig(std::string_view json, const std::string& origin) {
  TokenizerConfig c;
  if (json.empty()) return c;
  nlohmann::json root;
  try {
    root = nlohmann::json::parse(json);
  } catch (const nlohmann::json::exception& e) {  // parse_error, or out_of_range for 1e309
    return Status::Error(origin + ": malformed JSON: " + e.what());
  }
  if (!root.is_object()) return Status::Error(origin + ": expected a JSON object at the top level");
  const JsonNode top(&root, &origin, "");
  FATHOM_ASSIGN_OR_RETURN(c.bos_token, TokenField(top.Get("bos_token")));
  FATHOM_ASSIGN_OR_RETURN(c.eos_token, TokenField(top.Get("eos_token")));
  FATHOM_ASSIGN_OR_RETURN(c.add_bos_token, OptionalBool(top.Get("add_bos_token")));
  FATHOM_ASSIGN_OR_RETURN(c.add_eos_token, OptionalBool(top.Get("add_eos_token")));
  FATHOM_ASSIGN_OR_RETURN(c.add_prefix_space, OptionalBool(top.Get("add_prefix_space")));
  FATHOM_ASSIGN_OR_RETURN(c.tokenizer_class, top.Get("tokenizer_class").StringOr(""));
  const JsonNode tmpl = top.Get("chat_template");
  if (tmpl.present()) {
    if (tmpl.json().is_string()) {
      c.chat_template = tmpl.json().get<std::string>();
    } else if (tmpl.json().is_array()) {
      for (size_t i = 0; i < tmpl.size(); ++i) {
        FATHOM_ASSIGN_OR_RETURN(std::string name, tmpl.At(i).Get("name").String());
        if (name != "default") continue;
        FATHOM_ASSIGN_OR_RETURN(c.chat_template, tmpl.At(i).Get("template").String());
      }
      if (c.chat_template.empty()) return tmpl.Error("has no template named \"default\"");
    } else {
      return tmpl.Error("should be a string or a list of {name, template}, found " +
                        DescribeJson(tmpl.json()));
    }
  }
  return c;
}

}  // namespace fathom
