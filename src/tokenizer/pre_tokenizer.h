// PreTokenizer: the `pre_tokenizer` of tokenizer.json, which cuts normalized text into the
// pieces BPE merges within. Supported: null, Sequence, Split (pattern String or Regex;
// behaviours Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert),
// ByteLevel (add_prefix_space; use_regex with the GPT-2 pattern; maps bytes to GPT-2's
// characters), Metaspace (SentencePiece's ' ' -> '▁' with prepend_scheme always / first /
// never, the older add_prefix_space, and split), Digits, Whitespace and WhitespaceSplit.
// Each step applies to every piece the previous steps produced, as in the `tokenizers`
// library; empty pieces are dropped.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_node.h"
#include "tokenizer/regex.h"

namespace fathom {

// How a Split step treats what its pattern matches (SplitDelimiterBehavior).
enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// `text` cut by `pattern`'s matches with `behavior` (the semantics of the `tokenizers`
// library's NormalizedString::split); with `invert` the matches are the gaps.
std::vector<std::string> SplitByPattern(std::string_view text, const Regex& pattern,
                                        SplitBehavior behavior, bool invert);

class PreTokenizer {
 public:
  static Result<PreTokenizer> FromJson(const JsonNode& node);
  // The pieces of one stretch of text (between added tokens, normalized). `at_start`: the
  // stretch begins the text being encoded (Metaspace's prepend_scheme "first" prepends '▁'
  // there only, where `tokenizers` sees an original offset of 0).
  std::vector<std::string> Apply(std::string_view text, bool at_start) const;
  // True when some step maps bytes to GPT-2's characters (the BPE vocabulary is byte-level).
  bool byte_level() const { return byte_level_; }

 private:
  enum class Kind { kSplit, kByteLevel, kMetaspace };
  enum class Prepend { kAlways, kFirst, kNever };
  struct Step {
    Kind kind;
    std::shared_ptr<Regex> pattern;  // kSplit; kByteLevel with use_regex; kMetaspace with split
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
    bool add_prefix_space = false;  // kByteLevel
    std::string replacement;        // kMetaspace: one character, UTF-8
    Prepend prepend = Prepend::kAlways;  // kMetaspace
  };
  static Status AddMetaspace(const JsonNode& node, Step* step);
  static Status AddSteps(const JsonNode& node, std::vector<Step>* steps);
  std::vector<Step> steps_;
  bool byte_level_ = false;
};

}  // namespace fathom
