// Tokenizer: a Hugging Face `tokenizer.json` plus `tokenizer_config.json` (bos/eos, chat
// template), for the two BPE families: byte-level (GPT-2, Llama 3, Qwen 2/3) and
// SentencePiece-style (Llama 2, Mistral, TinyLlama: '▁' for spaces, byte_fallback to <0xNN>
// tokens). Encoding follows the `tokenizers` library's pipeline:
//
//   text -> split on added tokens (special tokens are matched in the text, as HF does with
//           split_special_tokens=false) -> normalizer per stretch between them (NFC,
//           Llama 2's Prepend('▁') + Replace(' ', '▁'), ...) -> pre-tokenizer (Split by
//           regex through PCRE2 with Unicode classes, ByteLevel, Metaspace) -> BPE merges by
//           rank, byte fallback -> post-processor (TemplateProcessing adds bos)
//
// Decoding maps ids back to bytes (ByteLevel, or Replace / ByteFallback / Metaspace, then a
// leading Strip); StreamDecoder emits text one token at a time, never half a UTF-8
// character, and always the same text as Decode.
//
// Anything a tokenizer.json asks for that fathom does not implement (another model type, a
// normalizer or pre-tokenizer it does not know) is an error at load that names the field.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/chat_template.h"

namespace fathom {

class TokenizerImpl;  // the pipeline's parts; tokenizer.cc

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, when present, DIR/tokenizer_config.json. Errors name the
  // file and the JSON field.
  static Result<std::unique_ptr<Tokenizer>> Load(const std::string& dir);
  // The same from the two files' contents; `config_json` may be empty. `origin` names the
  // source in error messages.
  static Result<std::unique_ptr<Tokenizer>> FromJson(std::string_view tokenizer_json,
                                                     std::string_view config_json,
                                                     const std::string& origin);
  ~Tokenizer();

  // Text -> ids. Invalid UTF-8 is an error (naming the byte offset). `add_special_tokens`
  // applies the post-processor (e.g. Llama 3's bos); chat prompts rendered by the chat
  // template already hold their special tokens and are encoded with false.
  Result<std::vector<int32_t>> Encode(std::string_view text, bool add_special_tokens) const;
  // Ids -> text. An id outside [0, vocab_size) is an error. Bytes that do not form valid
  // UTF-8 become U+FFFD (as HF's errors="replace"). No clean_up_tokenization_spaces: the
  // text is exactly the tokens' bytes, so that streamed and whole decodes agree.
  Result<std::string> Decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  // One past the largest id of the vocabulary and the added tokens.
  int32_t vocab_size() const;
  std::optional<int32_t> TokenToId(std::string_view token) const;
  // The token's string as stored in the vocabulary (byte-level form, e.g. "Ġthe").
  std::optional<std::string> IdToToken(int32_t id) const;
  bool IsSpecial(int32_t id) const;
  // The bytes a token decodes to after another token (special tokens: their content). As the
  // first token of a decode it may differ: SentencePiece decoders drop its leading space.
  std::string TokenBytes(int32_t id) const;

  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // Ids that end a generation: eos plus the end-of-turn tokens of the chat format
  // (<|im_end|>, <|endoftext|>, <|eot_id|>, <|end_of_text|>, <|end_turn|>) found in the vocabulary.
  const std::vector<int32_t>& stop_ids() const;
  // Null when tokenizer_config.json has no chat template.
  const ChatTemplate* chat_template() const;

 private:
  Tokenizer();
  friend class StreamDecoder;  // reads the first-token bytes and the decoder's Strip
  std::unique_ptr<TokenizerImpl> impl_;
};

// Incremental detokenizer for streaming: Push(id) returns the text completed by that token
// (possibly empty while a multi-byte character is still partial); Finish() returns what
// is left (incomplete bytes as U+FFFD). The concatenation of all outputs equals
// Decode(all ids). An id outside the vocabulary adds nothing (Decode reports it).
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tok, bool skip_special_tokens);
  std::string Push(int32_t id);
  std::string Finish();

 private:
  const Tokenizer& tok_;
  bool skip_special_;
  std::string pending_;    // bytes of an incomplete UTF-8 sequence (or of a possible strip)
  bool started_ = false;   // a token has been pushed (the next is not the first)
  size_t stripped_ = 0;    // leading Strip characters removed, or the Strip's count once done
};

}  // namespace fathom
