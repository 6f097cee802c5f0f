#include "tokenizer/added_tokens.h"

#include <algorithm>
#include <utf8proc.h>

#include "tokenizer/utf8.h"

namespace fathom {

namespace {

// The `tokenizers` library's word character for single_word: alphanumeric or '_'.
bool IsWordChar(char32_t c) {
  if (c == '_') return true;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU: case UTF8PROC_CATEGORY_LL: case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM: case UTF8PROC_CATEGORY_LO: case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL: case UTF8PROC_CATEGORY_NO:
      return true;
    default:
      return false;
  }
}

// The code point that ends at `end` (exclusive) in valid UTF-8, and where it starts.
char32_t PrevChar(std::string_view s, size_t end, size_t* start) {
  size_t b = end - 1;
  while (b > 0 && (static_cast<unsigned char>(s[b]) & 0xC0) == 0x80) --b;
  *start = b;
  size_t i = b;
  return utf8::Next(s, &i);
}

}  // namespace

Result<AddedVocabulary> AddedVocabulary::FromJson(const JsonNode& list, size_t vocab_entries) {
  AddedVocabulary v;
  if (!list.present()) return v;
  FATHOM_RETURN_IF_ERROR(list.ExpectArray());
  for (size_t i = 0; i < list.size(); ++i) {
    const JsonNode t = list.At(i);
    FATHOM_RETURN_IF_ERROR(t.ExpectObject());
    AddedToken tok;
    FATHOM_ASSIGN_OR_RETURN(int64_t id, t.Get("id").Int());
    if (id < 0 || id > INT32_MAX - 1) return t.Get("id").Error("should be a non-negative id");
    const int64_t entries = static_cast<int64_t>(vocab_entries + list.size());
    if (id >= entries + kMaxUnusedIds) {
      return t.Get("id").Error("is " + std::to_string(id) + ", more than " + std::to_string(kMaxUnusedIds) +
                               " past the tokenizer's " + std::to_string(entries) +
                               " entries (model.vocab and added_tokens)");
    }
    tok.id = static_cast<int32_t>(id);
    FATHOM_ASSIGN_OR_RETURN(tok.content, t.Get("content").String());
    if (tok.content.empty()) return t.Get("content").Error("is empty");
    FATHOM_RETURN_IF_ERROR(utf8::Validate(tok.content, list.origin() + ": " + t.path() + ".content"));
    FATHOM_ASSIGN_OR_RETURN(tok.special, t.Get("special").BoolOr(false));
    FATHOM_ASSIGN_OR_RETURN(tok.lstrip, t.Get("lstrip").BoolOr(false));
    FATHOM_ASSIGN_OR_RETURN(tok.rstrip, t.Get("rstrip").BoolOr(false));
    FATHOM_ASSIGN_OR_RETURN(tok.single_word, t.Get("single_word").BoolOr(false));
    // The library's default: special tokens are matched in the raw text.
    FATHOM_ASSIGN_OR_RETURN(tok.normalized, t.Get("normalized").BoolOr(!tok.special));
    v.tokens_.push_back(std::move(tok));
  }
  for (size_t k = 0; k < v.tokens_.size(); ++k)
    v.by_first_byte_[static_cast<unsigned char>(v.tokens_[k].content[0])].push_back(k);
  for (auto& bucket : v.by_first_byte_) {
    std::stable_sort(bucket.begin(), bucket.end(), [&](size_t a, size_t b) {
      return v.tokens_[a].content.size() > v.tokens_[b].content.size();
    });
  }
  return v;
}

const AddedToken* AddedVocabulary::Find(std::string_view content) const {
  if (content.empty()) return nullptr;
  for (size_t k : by_first_byte_[static_cast<unsigned char>(content[0])])
    if (tokens_[k].content == content) return &tokens_[k];
  return nullptr;
}

std::vector<AddedVocabulary::Segment> AddedVocabulary::Split(std::string_view text,
                                                             bool normalized) const {
  std::vector<Segment> out;
  size_t plain_start = 0;  // start of the text not yet emitted
  size_t i = 0;
  while (i < text.size()) {
    const AddedToken* match = nullptr;
    for (size_t k : by_first_byte_[static_cast<unsigned char>(text[i])]) {
      const AddedToken& t = tokens_[k];
      if (t.normalized != normalized || text.compare(i, t.content.size(), t.content) != 0) continue;
      match = &t;  // the longest at this position (buckets are sorted longest first)
      break;
    }
    if (match == nullptr) {
      ++i;
      continue;
    }
    size_t start = i, stop = i + match->content.size();
    if (match->single_word) {
      size_t unused;
      const bool left_ok = start == 0 || !IsWordChar(PrevChar(text, start, &unused));
      size_t j = stop;
      const bool right_ok = stop == text.size() || !IsWordChar(utf8::Next(text, &j));
      if (!left_ok || !right_ok) {
        // The longest match is rejected; the text it covers stays ordinary text.
        i = stop;
        continue;
      }
    }
    if (match->lstrip) {
      while (start > plain_start) {
        size_t prev;
        if (!utf8::IsWhitespace(PrevChar(text, start, &prev))) break;
        start = prev;
      }
    }
    if (match->rstrip) {
      while (stop < text.size()) {
        size_t j = stop;
        if (!utf8::IsWhitespace(utf8::Next(text, &j))) break;
        stop = j;
      }
    }
    if (start > plain_start) out.push_back({text.substr(plain_start, start - plain_start), -1});
    out.push_back({text.substr(start, stop - start), match->id});
    plain_start = i = stop;
  }
  if (plain_start < text.size()) out.push_back({text.substr(plain_start), -1});
  return out;
}

}  // namespace fathom
