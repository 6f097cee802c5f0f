// Helpers for the tokenizer tests: small hand-written tokenizer.json documents built on
// GPT-2's byte-level alphabet, and files (temporary directories and commands: model/test_util.h).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/test_util.h"  // TempDir, RunCommand
#include "tokenizer/tokenizer.h"

namespace fathom::testing {

// A byte-level BPE tokenizer.json: ids 0..255 are GPT-2's byte characters (id = byte), then
// each merge's result in order (ids 256, 257, ...), then `extra_tokens`. The pre-tokenizer,
// normalizer, post-processor and added tokens are the caller's (null by default).
nlohmann::json ByteLevelTokenizerJson(const std::vector<std::pair<std::string, std::string>>& merges,
                                      const std::vector<std::string>& extra_tokens = {});
// The byte-level form of text ("a b" -> "aĠb").
std::string ByteChars(const std::string& text);

// Builds a tokenizer (fails the test and returns null on error).
std::unique_ptr<Tokenizer> MakeTokenizer(const nlohmann::json& tokenizer_json,
                                         const std::string& config_json = "");

std::string ReadFile(const std::string& path);
void WriteFile(const std::string& path, const std::string& text);


}  // namespace fathom::testing
