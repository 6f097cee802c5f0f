// Random checkpoints with the exact upstream tensor names and config fields, for tests and
// benchmarks (`fathom make-model`). Weights are uniform with the standard deviation of a
// fan-in scaled init (embeddings std 1, norms around 1, biases small), generated from a
// seed in parallel: the same seed gives the same checkpoint.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"

namespace fathom {

// A tokenizer to ship with the checkpoint. The model layer does not read tokenizers (the
// CLI loads it with fathom_tokenizer and fills in its sizes); MakeRandomModel copies the
// files and makes config.json agree with them.
struct TokenizerFiles {
  std::string dir;          // holds tokenizer.json and, optionally, tokenizer_config.json
  int64_t vocab_size = 0;   // the tokenizer's: one past its largest id
  std::optional<int32_t> bos_id, eos_id;
};

struct MakeModelOptions {
  std::string family;         // llama, qwen2, qwen3, ouro, huginn
  std::string preset = "tiny";
  std::string out_dir;
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  size_t max_shard_bytes = size_t{4} << 30;  // larger checkpoints are index-sharded
  // Applied on top of the preset's config.json (e.g. {"num_hidden_layers": 3}); optional.
  nlohmann::json config_overrides = nlohmann::json::object();
  // When set: config.json's vocab_size becomes the tokenizer's (families that pad the
  // vocabulary, Huginn's padding_multiple, pad it as upstream does), bos_token_id /
  // eos_token_id the tokenizer's where the family's config has those fields (null when
  // the tokenizer has none), and the tokenizer files are copied into out_dir. Applied
  // before config_overrides.
  std::optional<TokenizerFiles> tokenizer;
};

Status MakeRandomModel(const MakeModelOptions& opt);

}  // namespace fathom
