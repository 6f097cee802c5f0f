// The token ids `fathom eval` scores: a text file encoded with the model directory's
// tokenizer (tokenizer.json + tokenizer_config.json, src/tokenizer/), or the ids themselves
// from a file, for checkpoints without a tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"

namespace fathom {

// Reads `path` and encodes its bytes with the tokenizer of `model_dir`; `add_special_tokens`
// applies the post-processor (e.g. a bos id first, as HF's tokenizer(text) does). Errors name
// the flag and file: an unreadable or empty file, a directory without tokenizer.json (use
// --ids-file), text that is not UTF-8, fewer than 2 tokens.
Result<std::vector<int32_t>> ReadTextIds(const std::string& model_dir, const std::string& path,
                                         bool add_special_tokens);

// Reads ids separated by whitespace and/or commas from `path`. Errors name --ids-file, the
// file and the bad item; fewer than 2 ids is an error.
Result<std::vector<int32_t>> ReadIdsFile(const std::string& path);

}  // namespace fathom
