#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace fathom::byte_level {

namespace {

struct Tables {
  std::array<std::string, 256> to_chars;
  std::array<int, 0x144> to_byte;  // every mapped character is below U+0144
  Tables() {
    to_byte.fill(-1);
    int next = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const char32_t cp = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
      utf8::Append(&to_chars[static_cast<size_t>(b)], cp);
      to_byte[cp] = b;
    }
  }
};

const Tables& GetTables() {
  static const Tables tables;
  return tables;
}

}  // namespace

const std::array<std::string, 256>& ByteToChars() { return GetTables().to_chars; }

std::string Encode(std::string_view bytes) {
  const auto& map = GetTables().to_chars;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) out += map[static_cast<unsigned char>(c)];
  return out;
}

bool Decode(std::string_view token, std::string* bytes) {
  const auto& to_byte = GetTables().to_byte;
  std::string out;
  size_t i = 0;
  while (i < token.size()) {
    const char32_t cp = utf8::Next(token, &i);
    if (cp >= to_byte.size() || to_byte[cp] < 0) return false;
    out.push_back(static_cast<char>(static_cast<unsigned char>(to_byte[cp])));
  }
  *bytes += out;
  return true;
}

}  // namespace fathom::byte_level
