// TokenizerConfig: the fields fathom reads from tokenizer_config.json. bos_token / eos_token
// may be a string, an AddedToken object {"content": ...} or null; chat_template a string or
// a list of {name, template} (the one named "default" is used).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "core/status.h"

namespace fathom {

struct TokenizerConfig {
  std::optional<std::string> bos_token, eos_token;
  std::string chat_template;  // empty when absent
  std::optional<bool> add_bos_token, add_eos_token;
  std::optional<bool> add_prefix_space;  // null and absent: not set
  std::string tokenizer_class;           // empty when absent
};

// An empty `json` gives the empty config. `origin` names the file in errors.
Result<TokenizerConfig> ParseTokenizerConfig(std::string_view json, const std::string& origin);

}  // namespace fathom
