// AddedVocabulary: the `added_tokens` of tokenizer.json (special tokens such as
// <|im_start|>, and non-special ones such as <think>). Before normalization and
// pre-tokenization the text is split on them, as the `tokenizers` library does: at the
// leftmost position where one occurs, the longest one matches; `lstrip` / `rstrip` widen the
// match over whitespace on that side (the whitespace disappears into the token);
// `single_word` matches only when no word character touches either end. Tokens with
// `normalized: false` are matched in the raw text, those with `normalized: true` in the
// normalized text of the stretches between the first ones.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_node.h"

namespace fathom {

// How many ids past its entry count (model.vocab + added_tokens) a tokenizer may use: holes
// from removed tokens are real (and our tests use them), but an id that leaves more than a
// million unused is a corrupt file, and would size the id tables at up to 64 GB.
inline constexpr int64_t kMaxUnusedIds = int64_t{1} << 20;

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false, lstrip = false, rstrip = false, single_word = false, normalized = false;
};

class AddedVocabulary {
 public:
  // `vocab_entries`: the entries of model.vocab. Every id must be below vocab_entries +
  // list.size() (the tokenizer's entry count) plus kMaxUnusedIds, so that a corrupt id cannot
  // size the id tables.
  static Result<AddedVocabulary> FromJson(const JsonNode& list, size_t vocab_entries);

  // A stretch of text: an added token's id, or -1 for text between tokens.
  struct Segment {
    std::string_view text;
    int32_t id;
  };
  // `text` cut on the tokens whose `normalized` flag equals `normalized`.
  std::vector<Segment> Split(std::string_view text, bool normalized) const;

  const std::vector<AddedToken>& tokens() const { return tokens_; }
  const AddedToken* Find(std::string_view content) const;

 private:
  std::vector<AddedToken> tokens_;
  // Indices into tokens_ by first byte of content, longest first.
  std::vector<std::vector<size_t>> by_first_byte_ = std::vector<std::vector<size_t>>(256);
};

}  // namespace fathom
