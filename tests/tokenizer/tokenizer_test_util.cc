#include "tokenizer/tokenizer_test_util.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "tokenizer/byte_level.h"

namespace fathom::testing {

std::string ByteChars(const std::string& text) { return byte_level::Encode(text); }

nlohmann::json ByteLevelTokenizerJson(const std::vector<std::pair<std::string, std::string>>& merges,
                                      const std::vector<std::string>& extra_tokens) {
  nlohmann::json vocab = nlohmann::json::object();
  int id = 0;
  for (const std::string& c : byte_level::ByteToChars()) vocab[c] = id++;
  nlohmann::json merge_list = nlohmann::json::array();
  for (const auto& [a, b] : merges) {
    merge_list.push_back(a + " " + b);
    if (!vocab.contains(a + b)) vocab[a + b] = id++;
  }
  for (const std::string& t : extra_tokens) vocab[t] = id++;
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", nlohmann::json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
          {"model",
           {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr}, {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr}, {"fuse_unk", false}, {"byte_fallback", false},
            {"ignore_merges", false}, {"vocab", vocab}, {"merges", merge_list}}}};
}

std::unique_ptr<Tokenizer> MakeTokenizer(const nlohmann::json& tokenizer_json, const std::string& config_json) {
  auto tok = Tokenizer::FromJson(tokenizer_json.dump(), config_json, "tokenizer.json");
  EXPECT_TRUE(tok.ok()) << tok.status().message();
  if (!tok.ok()) return nullptr;
  return std::move(tok).value();
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  ASSERT_TRUE(f.good()) << "cannot write " << path;
}

}  // namespace fathom::testing
