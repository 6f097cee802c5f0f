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

// A vocabulary of whole '▁' tokens with a given decoder.
std::unique_ptr<Tokenizer> MetaspaceTokenizer(const nlohmann::json& decoder) {
  const nlohmann::json j = {
      {"added_tokens", {{{"id", 4}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", decoder},
      {"model",
       {{"type", "BPE"},
        {"vocab", {{"\u2581Hey", 0}, {"\u2581friend!", 1}, {"\u2581\u2581", 2}, {"a", 3}, {"<s>", 4}}},
        {"merges", nlohmann::json::array()}}}};
  return testing::MakeTokenizer(j);
}

TEST(Decode, MetaspaceDecoderAsTheTokenizersLibrary) {
  // metaspace.rs's decode test: ["▁Hey", "▁friend!"] -> "Hey" + " friend!"; with
  // prepend_scheme "never" the first token keeps its space. Its decode_chain drops every '▁'
  // of the first token (not only a leading one), so "▁▁" first decodes to nothing.
  auto tok = MetaspaceTokenizer({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}});
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->Decode({0, 1}, false).value(), "Hey friend!");
  EXPECT_EQ(tok->Decode({2, 3, 2}, false).value(), "a  ");
  EXPECT_EQ(tok->Decode({4, 0}, false).value(), "<s> Hey");
  EXPECT_EQ(tok->Decode({4, 0}, true).value(), "Hey");
  for (const Ids& ids : {Ids{0, 1}, Ids{2, 3, 2}, Ids{4, 0}}) {
    EXPECT_EQ(StreamAll(*tok, ids, false), tok->Decode(ids, false).value());
    EXPECT_EQ(StreamAll(*tok, ids, true), tok->Decode(ids, true).value());
  }
  auto never = MetaspaceTokenizer({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "never"}});
  ASSERT_TRUE(never);
  EXPECT_EQ(never->Decode({0}, false).value(), " Hey");
  auto legacy = MetaspaceTokenizer({{"type", "Metaspace"}, {"replacement", "\u2581"}, {"add_prefix_space", false}});
  ASSERT_TRUE(legacy);
  EXPECT_EQ(legacy->Decode({0}, false).value(), " Hey");
}

TEST(StreamDecoder, LeadingStripWaitsForTheFirstCharacter) {
  // Llama 2's decoder: the first token's '▁' becomes a space that Strip removes, also when
  // that space arrives as the byte token <0x20>, and only once (the texts are what
  // @lenml/tokenizers decodes for this file).
  const nlohmann::json decoder = {
      {"type", "Sequence"},
      {"decoders",
       {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
        {{"type", "ByteFallback"}},
        {{"type", "Fuse"}},
        {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  const nlohmann::json j = {
      {"added_tokens", {{{"id", 3}, {"content", "<s>"}, {"special", true}, {"normalized", false}}}},
      {"normalizer", nullptr},
      {"pre_tokenizer", nullptr},
      {"post_processor", nullptr},
      {"decoder", decoder},
      {"model",
       {{"type", "BPE"}, {"byte_fallback", true},
        {"vocab", {{"<0x20>", 0}, {"\u2581a", 1}, {"b", 2}, {"<s>", 3}}},
        {"merges", nlohmann::json::array()}}}};
  auto tok = testing::MakeTokenizer(j);
  ASSERT_TRUE(tok);
  std::vector<std::string> parts;
  EXPECT_EQ(StreamAll(*tok, {0, 0, 1}, false, &parts), " " " a");
  EXPECT_EQ(tok->Decode({0, 0, 1}, false).value(), "  a");
  EXPECT_EQ(parts.front(), "");  // the first space is stripped
  EXPECT_EQ(tok->Decode({3, 1}, false).value(), "<s> a");
  EXPECT_EQ(tok->Decode({3, 1}, true).value(), "a");
  EXPECT_EQ(StreamAll(*tok, {3, 1}, true), "a");
  EXPECT_EQ(StreamAll(*tok, {3, 1}, false), "<s> a");
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
