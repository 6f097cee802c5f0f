// The encoding pipeline on small hand-written tokenizer.json documents: BPE merge order,
// ignore_merges, the GPT-2 ByteLevel split, a Qwen-style Split + ByteLevel, added tokens,
// NFC, the post-processor and the errors of each stage.
#include <gtest/gtest.h>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/tokenizer_test_util.h"

namespace fathom {
namespace {

using testing::ByteChars;
using testing::ByteLevelTokenizerJson;
using testing::MakeTokenizer;
using Ids = std::vector<int32_t>;

constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

Ids Encode(const Tokenizer& tok, const std::string& text, bool special = false) {
  auto r = tok.Encode(text, special);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? r.value() : Ids{};
}

int32_t Id(const Tokenizer& tok, const std::string& token) {
  auto id = tok.TokenToId(token);
  EXPECT_TRUE(id.has_value()) << token;
  return id.value_or(-1);
}

nlohmann::json Gpt2ByteLevel() {
  return {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
}

TEST(Bpe, MergesApplyInRankOrder) {
  // "abc": with (b,c) ranked first the result is a + bc; with (a,b) first, ab + c.
  auto tok = MakeTokenizer(ByteLevelTokenizerJson({{"b", "c"}, {"a", "b"}}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(Encode(*tok, "abc"), (Ids{'a', Id(*tok, "bc")}));
  auto tok2 = MakeTokenizer(ByteLevelTokenizerJson({{"a", "b"}, {"b", "c"}}));
  ASSERT_TRUE(tok2);
  EXPECT_EQ(Encode(*tok2, "abc"), (Ids{Id(*tok2, "ab"), 'c'}));
}

TEST(Bpe, LeftmostPairWinsTies) {
  // "aaa" with the single merge (a,a): the leftmost pair merges, then nothing is left.
  auto tok = MakeTokenizer(ByteLevelTokenizerJson({{"a", "a"}}));
  ASSERT_TRUE(tok);
  EXPECT_EQ(Encode(*tok, "aaa"), (Ids{Id(*tok, "aa"), 'a'}));
  EXPECT_EQ(Encode(*tok, "aaaa"), (Ids{Id(*tok, "aa"), Id(*tok, "aa")}));
}

TEST(Bpe, MergesInPairFormat) {
  nlohmann::json j = ByteLevelTokenizerJson({{"h", "e"}, {"he", "y"}});
  j["model"]["merges"] = nlohmann::json::array({nlohmann::json::array({"h", "e"}), nlohmann::json::array({"he", "y"})});
  auto tok = MakeTokenizer(j);
  ASSERT_TRUE(tok);
  EXPECT_EQ(Encode(*tok, "hey"), (Ids{Id(*tok, "hey")}));
}

TEST(Bpe, IgnoreMergesTakesWholePiecesFromTheVocabulary) {
  // "abc" is in the vocabulary but no merge builds it.
  nlohmann::json j = ByteLevelTokenizerJson({}, {"abc"});
  auto plain = MakeTokenizer(j);
  ASSERT_TRUE(plain);
  EXPECT_EQ(Encode(*plain, "abc"), (Ids{'a', 'b', 'c'}));
  j["model"]["ignore_merges"] = true;
  auto ignoring = MakeTokenizer(j);
  ASSERT_TRUE(ignoring);
  EXPECT_EQ(Encode(*ignoring, "abc"), (Ids{Id(*ignoring, "abc")}));
  EXPECT_EQ(Encode(*ignoring, "abcd"), (Ids{'a', 'b', 'c', 'd'}));
}

TEST(Bpe, MergeOfUnknownTokenIsAnError) {
  nlohmann::json j = ByteLevelTokenizerJson({{"a", "b"}});
  j["model"]["merges"].push_back("zz q");
  auto tok = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(tok.ok());
  EXPECT_EQ(tok.status().message(), "tokenizer.json: model.merges[1] uses token \"zz\", which is not in model.vocab");
}

TEST(ByteLevel, Gpt2RegexSplitsWordsSpacesAndContractions) {
  nlohmann::json j = ByteLevelTokenizerJson({{"h", "e"}, {"l", "l"}, {"he", "ll"}, {"hell", "o"},
                                             {"Ġ", "w"}, {"o", "r"}, {"Ġw", "or"}, {"l", "d"}, {"Ġwor", "ld"},
                                             {"'", "s"}});
  j["pre_tokenizer"] = Gpt2ByteLevel();
  auto tok = MakeTokenizer(j);
  ASSERT_TRUE(tok);
  const int32_t hello = Id(*tok, "hello"), world = Id(*tok, "Ġworld"), space = Id(*tok, "Ġ");
  EXPECT_EQ(Encode(*tok, "hello world"), (Ids{hello, world}));
  // Two spaces: \s+(?!\S) takes the first, the second starts " world".
  EXPECT_EQ(Encode(*tok, "hello  world"), (Ids{hello, space, world}));
  // Without the regex split, "o" and " " would be one piece; with it, "'s" is its own piece.
  EXPECT_EQ(Encode(*tok, "hello's"), (Ids{hello, Id(*tok, "'s")}));
  EXPECT_EQ(Encode(*tok, "hello\n"), (Ids{hello, Id(*tok, "Ċ")}));
  auto text = tok->Decode(Encode(*tok, "hello  world's\n"), false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), "hello  world's\n");
}

TEST(ByteLevel, AddPrefixSpace) {
  nlohmann::json j = ByteLevelTokenizerJson({{"Ġ", "w"}});
  j["pre_tokenizer"] = Gpt2ByteLevel();
  j["pre_tokenizer"]["add_prefix_space"] = true;
  auto tok = MakeTokenizer(j);
  ASSERT_TRUE(tok);
  EXPECT_EQ(Encode(*tok, "w"), (Ids{Id(*tok, "Ġw")}));
  EXPECT_EQ(Encode(*tok, " w"), (Ids{Id(*tok, "Ġw")}));
}

TEST(Split, QwenStyleSplitThenByteLevel) {
  nlohmann::json j = ByteLevelTokenizerJson({{"H", "i"}, {"Ġ", "t"}, {"Ġt", "o"}, {"1", "2"}});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers",
                         {{{"type", "Split"}, {"pattern", {{"Regex", kQwenPattern}}}, {"behavior", "Isolated"}, {"invert", false}},
                          {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
  auto tok = MakeTokenizer(j);
  ASSERT_TRUE(tok);
  // \p{N} takes single digits, so the merge "12" never applies; " to" is one piece.
  EXPECT_EQ(Encode(*tok, "Hi to 12"), (Ids{Id(*tok, "Hi"), Id(*tok, "Ġto"), Id(*tok, "Ġ"), '1', '2'}));
  // "DON'T": the case-insensitive contraction alternative splits off 'T.
  EXPECT_EQ(Encode(*tok, "DON'T"), (Ids{'D', 'O', 'N', '\'', 'T'}));
}

TEST(Split, BehavioursFollowTheTokenizersLibrary) {
  // The example of the `tokenizers` documentation for SplitDelimiterBehavior.
  auto re = Regex::Literal("-", "test");
  ASSERT_TRUE(re.ok());
  using V = std::vector<std::string>;
  const std::string text = "the-final--countdown";
  EXPECT_EQ(SplitByPattern(text, re.value(), SplitBehavior::kRemoved, false), (V{"the", "final", "countdown"}));
  EXPECT_EQ(SplitByPattern(text, re.value(), SplitBehavior::kIsolated, false),
            (V{"the", "-", "final", "-", "-", "countdown"}));
  EXPECT_EQ(SplitByPattern(text, re.value(), SplitBehavior::kMergedWithPrevious, false),
            (V{"the-", "final-", "-", "countdown"}));
  EXPECT_EQ(SplitByPattern(text, re.value(), SplitBehavior::kMergedWithNext, false),
            (V{"the", "-final", "-", "-countdown"}));
  EXPECT_EQ(SplitByPattern(text, re.value(), SplitBehavior::kContiguous, false),
            (V{"the", "-", "final", "--", "countdown"}));
  // invert: the matches are the content, the rest the delimiters.
  auto words = Regex::Compile(R"(\p{L}+)", "test");
  ASSERT_TRUE(words.ok());
  EXPECT_EQ(SplitByPattern(text, words.value(), SplitBehavior::kRemoved, true), (V{"the", "final", "countdown"}));
}

std::vector<std::string> PreTokenize(const nlohmann::json& config, const std::string& text, bool at_start = true) {
  const std::string origin = "tokenizer.json";
  auto p = PreTokenizer::FromJson(JsonNode(&config, &origin, "pre_tokenizer"));
  EXPECT_TRUE(p.ok()) << p.status().message();
  return p.ok() ? p.value().Apply(text, at_start) : std::vector<std::string>{};
}

// The expectations of the `tokenizers` library's own Metaspace tests (metaspace.rs: basic,
// multiple_spaces, no_split, non_legacy_meta_space, serialization_and_legacy).
TEST(PreTokenizer, MetaspaceAsTheTokenizersLibrary) {
  using V = std::vector<std::string>;
  const nlohmann::json always = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", "always"}, {"split", true}};
  EXPECT_EQ(PreTokenize(always, "Hey friend!"), (V{"\u2581Hey", "\u2581friend!"}));
  EXPECT_EQ(PreTokenize(always, "Hey   friend!"), (V{"\u2581Hey", "\u2581", "\u2581", "\u2581friend!"}));
  // "always" prepends after an added token as well; a leading '▁' is not doubled.
  EXPECT_EQ(PreTokenize(always, "how are", false), (V{"\u2581how", "\u2581are"}));
  EXPECT_EQ(PreTokenize(always, " x"), (V{"\u2581x"}));
  nlohmann::json no_split = always;
  no_split["split"] = false;
  EXPECT_EQ(PreTokenize(no_split, "Hey friend!"), (V{"\u2581Hey\u2581friend!"}));
  // "first": only where the text begins, not after an added token such as <s>.
  nlohmann::json first = always;
  first["prepend_scheme"] = "first";
  EXPECT_EQ(PreTokenize(first, "Hey my friend "), (V{"\u2581Hey", "\u2581my", "\u2581friend", "\u2581"}));
  EXPECT_EQ(PreTokenize(first, "how\u2581are you", false), (V{"how", "\u2581are", "\u2581you"}));
  // The older form: add_prefix_space false means never; split defaults to true.
  const nlohmann::json legacy_never = {{"type", "Metaspace"}, {"replacement", "_"}, {"add_prefix_space", false}};
  EXPECT_EQ(PreTokenize(legacy_never, "Hey friend"), (V{"Hey", "_friend"}));
  const nlohmann::json legacy = {{"type", "Metaspace"}, {"replacement", "_"}, {"str_rep", "_"}, {"add_prefix_space", true}};
  EXPECT_EQ(PreTokenize(legacy, "Hey friend"), (V{"_Hey", "_friend"}));
}

TEST(PreTokenizer, DigitsAndWhitespace) {
  using V = std::vector<std::string>;
  EXPECT_EQ(PreTokenize({{"type", "Digits"}, {"individual_digits", false}}, "ab123c4"), (V{"ab", "123", "c", "4"}));
  EXPECT_EQ(PreTokenize({{"type", "Digits"}, {"individual_digits", true}}, "ab12"), (V{"ab", "1", "2"}));
  EXPECT_EQ(PreTokenize({{"type", "Whitespace"}}, "Hey friend!  How?"), (V{"Hey", "friend", "!", "How", "?"}));
  EXPECT_EQ(PreTokenize({{"type", "WhitespaceSplit"}}, " a  b\tc "), (V{"a", "b", "c"}));
}

TEST(Regex, WhitespaceIsUnicodeWhiteSpace) {
  // U+0085 is White_Space (Oniguruma's \s) but not in PCRE2's UCP \s; U+200B is neither.
  auto re = Regex::Compile(R"(\s+)", "test");
  ASSERT_TRUE(re.ok());
  std::vector<std::pair<size_t, size_t>> m;
  const std::string text = "a\xC2\x85" "b\xE2\x80\x8B" "c\xE3\x80\x80" "d";
  re.value().ForEachMatch(text, [&](size_t b, size_t e) { m.push_back({b, e}); });
  EXPECT_EQ(m, (std::vector<std::pair<size_t, size_t>>{{1, 3}, {8, 11}}));
  EXPECT_EQ(RewriteWhitespaceClasses(R"([^\s\p{L}]\S)"),
            "[^\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}\\x{202f}\\x{205f}"
            "\\x{3000}\\p{L}][^\\x{9}-\\x{d}\\x{20}\\x{85}\\x{a0}\\x{1680}\\x{2000}-\\x{200a}\\x{2028}\\x{2029}"
            "\\x{202f}\\x{205f}\\x{3000}]");
}

TEST(AddedTokens, SplitFirstLongestMatchAndSpecialFlag) {
  nlohmann::json j = ByteLevelTokenizerJson({});
  j["pre_tokenizer"] = Gpt2ByteLevel();
  j["added_tokens"] = {{{"id", 300}, {"content", "<|a|>"}, {"special", true}, {"normalized", false}},
                       {{"id", 301}, {"content", "<|a|><|b|>"}, {"special", true}, {"normalized", false}},
                       {{"id", 302}, {"content", "<think>"}, {"special", false}, {"normalized", false}}};
  auto tok = MakeTokenizer(j);
  ASSERT_TRUE(tok);
  EXPECT_EQ(tok->vocab_size(), 303);
  EXPECT_EQ(Encode(*tok, "x<|a|><|b|>y<|a|> <think>"), (Ids{'x', 301, 'y', 300, Id(*tok, "Ġ"), 302}));
  EXPECT_TRUE(tok->IsSpecial(300));
  EXPECT_FALSE(tok->IsSpecial(302));
  auto text = tok->Decode({'x', 300, 'y', 302}, /*skip_special_tokens=*/true);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), "xy<think>");
  text = tok->Decode({'x', 300, 'y', 302}, false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.value(), "x<|a|>y<think>");
}

TEST(AddedTokens, LstripAndRstripSwallowWhitespace) {
  nlohmann::json j = ByteLevelTokenizerJson({});
  j["pre_tokenizer"] = Gpt2ByteLevel();
  j["added_tokens"] = {{{"id", 300}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}, {"normalized", false}},
                       {{"id", 301}, {"content", "<r>"}, {"special", true}, {"rstrip", true}, {"normalized", false}}};
  auto tok = MakeTokenizer(j);
  ASSERT_TRUE(tok);
  const int32_t sp = Id(*tok, "Ġ");
  EXPECT_EQ(Encode(*tok, "a  <mask> b"), (Ids{'a', 300, sp, 'b'}));
  EXPECT_EQ(Encode(*tok, "a <r>  b"), (Ids{'a', sp, 301, 'b'}));
}

TEST(AddedTokens, SingleWordNeedsWordBoundaries) {
  nlohmann::json j = ByteLevelTokenizerJson({});
  j["pre_tokenizer"] = Gpt2ByteLevel();
  j["added_tokens"] = {{{"id", 300}, {"content", "ab"}, {"special", false}, {"single_word", true}, {"normalized", false}}};
  auto tok = MakeTokenizer(j);
  ASSERT_TRUE(tok);
  EXPECT_EQ(Encode(*tok, "ab"), (Ids{300}));
  EXPECT_EQ(Encode(*tok, "x ab."), (Ids{'x', Id(*tok, "Ġ"), 300, '.'}));
  EXPECT_EQ(Encode(*tok, "cab"), (Ids{'c', 'a', 'b'}));
}

TEST(Normalizer, NfcComposesDecomposedInput) {
  // "é" is U+00E9, bytes C3 A9; the merge builds it from its two byte characters.
  const std::string e_acute = ByteChars("\xC3\xA9");
  nlohmann::json j = ByteLevelTokenizerJson({{ByteChars("\xC3"), ByteChars("\xA9")}});
  j["pre_tokenizer"] = Gpt2ByteLevel();
  const std::string decomposed = "e\xCC\x81";  // e + U+0301
  auto raw = MakeTokenizer(j);
  ASSERT_TRUE(raw);
  EXPECT_EQ(Encode(*raw, decomposed).size(), 3u);
  j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  auto nfc = MakeTokenizer(j);
  ASSERT_TRUE(nfc);
  EXPECT_EQ(Encode(*nfc, decomposed), (Ids{Id(*nfc, e_acute)}));
}

TEST(Normalizer, LowercaseReplaceAndPrepend) {
  nlohmann::json j = ByteLevelTokenizerJson({});
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers",
                      {{{"type", "Lowercase"}},
                       {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "_"}},
                       {{"type", "Prepend"}, {"prepend", "_"}}}}};
  auto tok = MakeTokenizer(j);
  ASSERT_TRUE(tok);
  EXPECT_EQ(Encode(*tok, "A B"), (Ids{'_', 'a', '_', 'b'}));
}

TEST(PostProcessor, TemplateProcessingAddsBos) {
  nlohmann::json j = ByteLevelTokenizerJson({});
  j["added_tokens"] = {{{"id", 256}, {"content", "<s>"}, {"special", true}, {"normalized", false}}};
  j["post_processor"] = {
      {"type", "Sequence"},
      {"processors",
       {{{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", false}, {"use_regex", true}},
        {{"type", "TemplateProcessing"},
         {"single", {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
         {"pair", nlohmann::json::array()},
         {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {256}}, {"tokens", {"<s>"}}}}}}}}}};
  auto tok = MakeTokenizer(j, R"({"bos_token": {"content": "<s>", "__type": "AddedToken"}, "eos_token": null})");
  ASSERT_TRUE(tok);
  EXPECT_EQ(Encode(*tok, "hi", true), (Ids{256, 'h', 'i'}));
  EXPECT_EQ(Encode(*tok, "hi", false), (Ids{'h', 'i'}));
  EXPECT_EQ(tok->bos_id(), 256);
  EXPECT_EQ(tok->eos_id(), std::nullopt);
}

TEST(Config, AddBosTokenPrependsBos) {
  nlohmann::json j = ByteLevelTokenizerJson({});
  j["added_tokens"] = {{{"id", 256}, {"content", "<s>"}, {"special", true}, {"normalized", false}},
                       {{"id", 257}, {"content", "<|im_end|>"}, {"special", true}, {"normalized", false}},
                       {{"id", 258}, {"content", "</s>"}, {"special", true}, {"normalized", false}}};
  auto tok = MakeTokenizer(j, R"({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": true})");
  ASSERT_TRUE(tok);
  EXPECT_EQ(Encode(*tok, "a", true), (Ids{256, 'a'}));
  EXPECT_EQ(tok->stop_ids(), (Ids{258, 257}));
}

TEST(Errors, InvalidUtf8NamesTheByte) {
  auto tok = MakeTokenizer(ByteLevelTokenizerJson({}));
  ASSERT_TRUE(tok);
  auto r = tok->Encode("ab\xFF" "c", false);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "text to encode is not valid UTF-8: byte 2 (0xFF) starts an ill-formed sequence");
  r = tok->Encode("ok\xE4\xB8", false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("byte 2 (0xE4)"), std::string::npos) << r.status().message();
  // An overlong encoding of '/' and a surrogate are ill-formed too.
  EXPECT_FALSE(tok->Encode("\xC0\xAF", false).ok());
  EXPECT_FALSE(tok->Encode("\xED\xA0\x80", false).ok());
}

TEST(Errors, UnsupportedPartsNameTheField) {
  nlohmann::json j = ByteLevelTokenizerJson({});
  j["pre_tokenizer"] = {{"type", "Sequence"},
                        {"pretokenizers", {Gpt2ByteLevel(), {{"type", "Metaspace"}, {"replacement", "__"}}}}};
  auto r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "tokenizer.json: pre_tokenizer.pretokenizers[1].replacement should be one character, found string \"__\"");
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "_"}, {"prepend_scheme", "sometimes"}};
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tokenizer.json: pre_tokenizer.prepend_scheme \"sometimes\" is not supported");
  j["pre_tokenizer"] = {{"type", "UnicodeScripts"}};
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tokenizer.json: pre_tokenizer.type \"UnicodeScripts\" is not supported");

  j = ByteLevelTokenizerJson({});
  j["model"]["type"] = "WordPiece";
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tokenizer.json: model.type \"WordPiece\" is not supported");

  j = ByteLevelTokenizerJson({});
  j["normalizer"] = {{"type", "BertNormalizer"}};
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tokenizer.json: normalizer.type \"BertNormalizer\" is not supported");

  j = ByteLevelTokenizerJson({});
  j["decoder"] = {{"type", "WordPiece"}};
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tokenizer.json: decoder.type \"WordPiece\" is not supported");
  j["decoder"] = {{"type", "Metaspace"}};
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tokenizer.json: missing field decoder.replacement");
  j["decoder"] = nullptr;
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tokenizer.json: decoder null is not supported (it joins tokens with spaces)");

  // Llama 2's decoder with the parts fathom cannot stream or order.
  auto llama_decoder = [](const nlohmann::json& strip) {
    return nlohmann::json{{"type", "Sequence"},
                          {"decoders",
                           {{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                            {{"type", "ByteFallback"}},
                            {{"type", "Fuse"}},
                            strip}}};
  };
  j["decoder"] = llama_decoder({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 1}});
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "tokenizer.json: decoder.decoders[3].stop other than 0 is not supported (a streamed decode cannot know the "
            "text's end)");
  j["decoder"] = llama_decoder({{"type", "ByteLevel"}});
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "tokenizer.json: decoder.decoders[3] type \"ByteLevel\" after Fuse is not supported");
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", {{{"type", "ByteFallback"}}, {{"type", "Replace"}, {"pattern", {{"Regex", "_+"}}}, {"content", " "}}}}};
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "tokenizer.json: decoder.decoders[1].pattern should be {\"String\": ...} (a Regex pattern is not supported in "
            "decoders)");
  j["decoder"] = {{"type", "Sequence"}, {"decoders", {{{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "tokenizer.json: decoder.decoders[0] Strip before Fuse is not supported (it would strip every token)");

  j = ByteLevelTokenizerJson({});
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  r = Tokenizer::FromJson(j.dump(), "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.json: pre_tokenizer.pattern.Regex: cannot compile regex"),
            std::string::npos)
      << r.status().message();

  r = Tokenizer::FromJson("{\"model\": ", "", "tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("tokenizer.json: malformed JSON"), std::string::npos);

  r = Tokenizer::FromJson(ByteLevelTokenizerJson({}).dump(),
                          R"({"tokenizer_class": "LlamaTokenizer", "add_prefix_space": false})", "d/tokenizer.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("d/tokenizer_config.json: add_prefix_space is set for LlamaTokenizer"),
            std::string::npos)
      << r.status().message();
  EXPECT_TRUE(Tokenizer::FromJson(ByteLevelTokenizerJson({}).dump(),
                                  R"({"tokenizer_class": "LlamaTokenizer", "add_prefix_space": null})", "t.json")
                  .ok());

  auto cfg = Tokenizer::FromJson(ByteLevelTokenizerJson({}).dump(), R"({"bos_token": "<nope>"})", "d/tokenizer.json");
  ASSERT_FALSE(cfg.ok());
  EXPECT_EQ(cfg.status().message(), "d/tokenizer_config.json: bos_token \"<nope>\" is not in the vocabulary");
}

TEST(Errors, LoadNamesTheMissingFile) {
  auto r = Tokenizer::Load("/nonexistent-dir");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), "cannot open /nonexistent-dir/tokenizer.json: no such file");
}

}  // namespace
}  // namespace fathom
