// Normalizer: the `normalizer` of tokenizer.json, applied to the text between added tokens
// before pre-tokenization. Supported: null, NFC, NFD, NFKC, NFKD (utf8proc), Lowercase,
// Replace (String or Regex pattern), Prepend, Strip, and Sequence of these. Offsets are
// not tracked: fathom only needs the normalized text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_node.h"
#include "tokenizer/regex.h"

namespace fathom {

class Normalizer {
 public:
  // A null node is the identity.
  static Result<Normalizer> FromJson(const JsonNode& node);
  bool empty() const { return steps_.empty(); }
  // `text` is valid UTF-8.
  std::string Apply(std::string_view text) const;

 private:
  enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend, kStrip };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> pattern;  // kReplace
    std::string content;             // kReplace, kPrepend
    bool left = false, right = false;  // kStrip
  };
  static Status AddSteps(const JsonNode& node, std::vector<Step>* steps);
  std::vector<Step> steps_;
};

}  // namespace fathom
