// Inputs that the fuzz targets (tests/fuzz, scripts/fuzz.sh) found crashing fathom, kept as
// regression tests. A number literal past double's range makes nlohmann::json throw
// out_of_range (406), which ParseTokenizerConfig and Tokenizer::FromJson did not catch
// (found by tokenizer_config_fuzz in its first 13,000 inputs).
#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_config.h"

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

}  // namespace
}  // namespace fathom
