// BpeModel: the `model` of tokenizer.json when its type is "BPE". Merging follows the
// `tokenizers` library: the word starts as one symbol per character; repeatedly the adjacent
// pair with the lowest merge rank is merged (ties: leftmost first), through a priority queue
// over a linked list of symbols with a hash map from (left id, right id) to (rank, merged
// id), so a word of n characters costs O(n log n), not O(n^2) string concatenations.
// Results per piece are cached (pieces repeat a lot in text).
//
// Supported options: merges as "a b" strings or ["a", "b"] pairs; ignore_merges (a piece
// that is itself in the vocabulary is one token, as Llama 3 sets); continuing_subword_prefix
// and end_of_word_suffix empty or null; dropout null; byte_fallback (SentencePiece's trick,
// as Llama 2 / Mistral / TinyLlama set: a character missing from the vocabulary becomes the
// tokens <0xNN> of its UTF-8 bytes when all of them exist); unk_token (a character that is
// neither in the vocabulary nor byte-fallback-able becomes unk, or is dropped when unk_token
// is null, as the `tokenizers` library does); fuse_unk (consecutive such characters become
// one unk).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_node.h"

namespace fathom {

// Hash for heterogeneous lookup of std::string keys by string_view.
struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  // `added_count`: the entries of the tokenizer's added_tokens. Every vocabulary id must be
  // below the tokenizer's entry count (vocab + added_tokens) plus kMaxUnusedIds: a real
  // vocabulary is dense or nearly, and the bound keeps a corrupt id from sizing the id tables
  // (an id of 2^31 would be 64 GB).
  static Result<std::unique_ptr<BpeModel>> FromJson(const JsonNode& model, size_t added_count);

  // One past the largest id of the vocabulary.
  int32_t vocab_size() const { return static_cast<int32_t>(id_to_token_.size()); }
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token string, or null for an id the vocabulary does not use.
  const std::string* IdToToken(int32_t id) const;

  // Appends the ids of one pre-tokenized piece.
  void Encode(std::string_view piece, std::vector<int32_t>* ids) const;

 private:
  struct MergeRule {
    int32_t rank, new_id;
  };
  static uint64_t PairKey(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  void MergeWord(std::string_view piece, std::vector<int32_t>* ids) const;

  std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>> vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> id_used_;
  std::unordered_map<uint64_t, MergeRule> merges_;
  std::optional<int32_t> unk_id_;
  bool ignore_merges_ = false;
  bool fuse_unk_ = false;
  // byte_fallback: the id of <0xNN> per byte, -1 where the vocabulary lacks it; empty when off.
  std::vector<int32_t> byte_ids_;

  static constexpr size_t kCacheMaxEntries = 1 << 18;
  static constexpr size_t kCacheMaxPieceBytes = 256;
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace fathom
