// GPT-2's reversible byte <-> character map used by ByteLevel pre-tokenizers and decoders:
// printable bytes (! .. ~, ¡ .. ¬, ® .. ÿ) map to the character with the same code point,
// the other 68 bytes to U+0100, U+0101, ... in byte order (so ' ' becomes 'Ġ' U+0120).
#pragma once

#include <array>
#include <string>
#include <string_view>

namespace fathom::byte_level {

// Each byte's character as UTF-8.
const std::array<std::string, 256>& ByteToChars();
// `bytes` mapped character by character (the ByteLevel pre-tokenizer's output).
std::string Encode(std::string_view bytes);
// The inverse for a token string (valid UTF-8): false if some character is not in the map,
// in which case Hugging Face's ByteLevel decoder keeps the token's own UTF-8 bytes.
bool Decode(std::string_view token, std::string* bytes);

}  // namespace fathom::byte_level
