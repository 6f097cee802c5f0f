// Decoder: the `decoder` of tokenizer.json, reduced to what fathom needs: the bytes each
// token stands for, plus the two rules that depend on a token's place in the decoded
// sequence. Supported, as a single decoder or in a Sequence:
//   ByteLevel    GPT-2's character -> byte map (a token holding a character outside the map,
//                such as an added token with a space, keeps its own UTF-8 bytes, as the
//                `tokenizers` library does);
//   Replace      a String pattern replaced in each token (Llama 2: '▁' -> ' ');
//   ByteFallback a token spelled <0xNN> is the byte NN;
//   Metaspace    '▁' -> ' ', except that in the first token of the sequence every '▁' is
//                dropped when its prepend_scheme is not "never" (`tokenizers`' rule);
//   Fuse         joins the tokens; after it only
//   Strip        with stop 0: up to `start` leading `content` characters of the decoded
//                text are removed (Llama 2: the space of the first token's '▁').
// Bytes that do not form UTF-8 are replaced by U+FFFD after joining (utf8::Lossy), which is
// what ByteFallback gives in transformers.js (TextDecoder per run of byte tokens). The
// `tokenizers` library's ByteFallback instead writes one U+FFFD per byte of a run that is
// not valid as a whole; the two agree on every run that is valid UTF-8.
// Not supported (errors at load): a null decoder (which joins tokens with spaces), decoders
// that change text across token boundaries (WordPiece, CTC, ...), a Regex Replace, anything
// but Strip after Fuse, Strip before Fuse, and Strip with stop > 0 (a streamed decode cannot
// know which characters end the text). A Replace or Metaspace after ByteFallback applies to
// each token, not to the text a run of byte tokens spells: the two differ only for a run that
// spells the replaced character itself, which no encoding produces while that character is
// in the vocabulary.
// No clean_up_tokenization_spaces: fathom never rewrites " ." / " n't" after decoding
// (transformers does when a config asks for it; it would break streaming).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/json_node.h"

namespace fathom {

class Decoder {
 public:
  static Result<Decoder> FromJson(const JsonNode& node);
  // The bytes of one token string (vocabulary form, or an added token's content) in the
  // middle of a sequence, and as the sequence's first token.
  std::string TokenBytes(std::string_view token) const { return Apply(token, false); }
  std::string FirstTokenBytes(std::string_view token) const { return Apply(token, true); }
  // True when FirstTokenBytes can differ from TokenBytes.
  bool first_token_differs() const { return first_token_differs_; }
  // Strip after Fuse: remove up to strip_count() leading copies of strip_content() from the
  // decoded bytes.
  const std::string& strip_content() const { return strip_content_; }
  size_t strip_count() const { return strip_count_; }

 private:
  enum class Kind { kByteLevel, kReplace, kByteFallback, kMetaspace };
  struct Step {
    Kind kind;
    std::string from, to;           // kReplace; kMetaspace: the replacement character, " "
    bool drop_in_first = false;     // kMetaspace: prepend_scheme is not "never"
  };
  Status Add(const JsonNode& node);
  std::string Apply(std::string_view token, bool first) const;

  std::vector<Step> steps_;
  bool fused_ = false;
  bool first_token_differs_ = false;
  std::string strip_content_;
  size_t strip_count_ = 0;
};

}  // namespace fathom
