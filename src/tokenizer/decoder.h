// Decoder: the `decoder` of tokenizer.json, reduced to what fathom needs: the bytes each
// token stands for. Supported: ByteLevel (GPT-2's character -> byte map; a token holding a
// character outside the map, such as an added token with a space, keeps its own UTF-8
// bytes, as the `tokenizers` library does), and a Sequence holding one ByteLevel.
// Decoders that change text across token boundaries (WordPiece, Metaspace, Strip, ...) and
// a null decoder (which joins tokens with spaces) are errors at load.
// No clean_up_tokenization_spaces: fathom never rewrites " ." / " n't" after decoding
// (transformers does when a config asks for it; it would break streaming).
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"
#include "tokenizer/json_node.h"

namespace fathom {

class Decoder {
 public:
  static Result<Decoder> FromJson(const JsonNode& node);
  // The bytes of one token string (vocabulary form, or an added token's content).
  std::string TokenBytes(std::string_view token) const;
};

}  // namespace fathom
