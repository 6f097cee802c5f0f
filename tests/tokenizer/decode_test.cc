// Decoding: byte-level ids back to text, U+FFFD for ill-formed bytes, ids out of range,
// skip_special_tokens, and StreamDecoder against Decode.
#include <gtest/gtest.h>

#include <random>

#include "tokenizer/tokenizer_test_util.h"
#include "tokenizer/utf8.h"

namespace fathom {
namespace {

using Ids = std::vector<int32_t>;

// Ids 0..255 are the bytes themselves (no merges); 256 is a special token.
std::unique_ptr<Tokenizer> ByteTokenizer() {
  nlohmann::json j = testing::ByteLevelTokenizerJson({});
  j["added_tokens"] = {{{"id", 256}, {"content", "<|end|>"}, {"special", true}, {"normalized", false}}};
  return testing::MakeTokenizer(j);
}

Ids BytesOf(const std::string& s) {
  Ids ids;
  for (unsigned char c : s) ids.push_back(c);
  return ids;
}

std::string StreamAll(const Tokenizer& tok, const Ids& ids, bool skip, std::vector<std::string>* parts = nullptr) {
  StreamDecoder d(tok, skip);
  std::string out;
  for (int32_t id : ids) {
    std::string p = d.Push(id);
    if (parts) parts->push_back(p);
    out += p;
  }
  std::string tail = d.Finish();
  if (parts) parts->push_back(tail);
  return out + tail;
}

TEST(Decode, IllFormedBytesBecomeReplacementCharacters) {
  auto tok = ByteTokenizer();
  ASSERT_TRUE(tok);
  // One U+FFFD per maximal ill-formed subsequence, as Rust's from_utf8_lossy.
  auto r = tok->Decode(BytesOf("a\xFF" "b\xE4\xB8" "c\xF0\x9F\x98"), false);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value(), "a\xEF\xBF\xBD" "b\xEF\xBF\xBD" "c\xEF\xBF\xBD");
  EXPECT_EQ(utf8::Lossy("\xC0\xAF"), "\xEF\xBF\xBD\xEF\xBF\xBD");
}

TEST(Decode, IdOutOfRangeIsAnError) {
  auto tok = ByteTokenizer();
  ASSERT_TRUE(tok);
  auto r = tok->Decode({'a', 257}, false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "cannot decode id 257 (position 1): outside the vocabulary [0, 257)");
  EXPECT_FALSE(tok->Decode({-1}, false).ok());
}

TEST(Decode, SkipSpecialTokens) {
  auto tok = ByteTokenizer();
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->Decode({'h', 256, 'i'}, true).value(), "hi");
  EXPECT_EQ(tok->Decode({'h', 256, 'i'}, false).value(), "h<|end|>i");
  EXPECT_EQ(tok->TokenBytes(256), "<|end|>");
  EXPECT_EQ(tok->TokenBytes(' '), " ");
  EXPECT_EQ(tok->IdToToken(' '), "Ġ");
}

TEST(StreamDecoder, NeverEmitsHalfACharacter) {
  auto tok = ByteTokenizer();
  ASSERT_TRUE(tok);
  // 😀 is F0 9F 98 80; 中 is E4 B8 AD; a ZWJ family joins several emoji.
  std::vector<std::string> parts;
  const std::string text = "x\xF0\x9F\x98\x80\xE4\xB8\xAD" "y";
  EXPECT_EQ(StreamAll(*tok, BytesOf(text), false, &parts), text);
  EXPECT_EQ(parts, (std::vector<std::string>{"x", "", "", "", "\xF0\x9F\x98\x80", "", "", "\xE4\xB8\xAD", "y", ""}));
  const std::string family = "\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7";
  EXPECT_EQ(StreamAll(*tok, BytesOf(family), false), family);
}

TEST(StreamDecoder, FinishFlushesAnIncompleteCharacter) {
  auto tok = ByteTokenizer();
  ASSERT_TRUE(tok);
  StreamDecoder d(*tok, false);
  EXPECT_EQ(d.Push(0xE4), "");
  EXPECT_EQ(d.Push(0xB8), "");
  EXPECT_EQ(d.Finish(), "\xEF\xBF\xBD");
  EXPECT_EQ(tok->Decode({0xE4, 0xB8}, false).value(), "\xEF\xBF\xBD");
}

TEST(StreamDecoder, ConcatenationEqualsDecodeOnRandomIds) {
  auto tok = ByteTokenizer();
  ASSERT_TRUE(tok);
  std::mt19937 rng(7);
  // Mostly bytes that form or break UTF-8 sequences, some ASCII, some special tokens.
  const Ids pool = {0xF0, 0x9F, 0x98, 0x80, 0xE4, 0xB8, 0xAD, 0xC3, 0xA9, 0xED, 0xA0, 0xFF, 0xC0, 'a', ' ', 256};
  for (int trial = 0; trial < 2000; ++trial) {
    Ids ids(rng() % 12);
    for (int32_t& id : ids) id = pool[rng() % pool.size()];
    for (bool skip : {false, true}) {
      auto expected = tok->Decode(ids, skip);
      ASSERT_TRUE(expected.ok());
      ASSERT_EQ(StreamAll(*tok, ids, skip), expected.value()) << "trial " << trial;
    }
  }
}

}  // namespace
}  // namespace fathom
