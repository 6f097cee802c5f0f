// PostProcessor: what `add_special_tokens` adds around the ids of one sequence. Supported:
// null, ByteLevel (adds nothing; offsets only), TemplateProcessing (its `single` template,
// e.g. [<|begin_of_text|>, $A]), RobertaProcessing / BertProcessing (cls + A + sep), and
// Sequence of these.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_node.h"

namespace fathom {

class PostProcessor {
 public:
  static Result<PostProcessor> FromJson(const JsonNode& node);
  // ids -> prefix + ids + suffix.
  std::vector<int32_t> Apply(std::vector<int32_t> ids) const;
  const std::vector<int32_t>& prefix() const { return prefix_; }
  const std::vector<int32_t>& suffix() const { return suffix_; }
  void set_prefix(std::vector<int32_t> p) { prefix_ = std::move(p); }

 private:
  static Status Add(const JsonNode& node, PostProcessor* p);
  std::vector<int32_t> prefix_, suffix_;
};

}  // namespace fathom
