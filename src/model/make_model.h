// Random checkpoints with the exact upstream tensor names and config fields, for tests and
// benchmarks (`fathom make-model`). Weights are uniform with the standard deviation of a
// fan-in scaled init (embeddings std 1, norms around 1, biases small), generated from a
// seed in parallel: the same seed gives the same checkpoint.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/status.h"

namespace fathom {

struct MakeModelOptions {
  std::string family;         // llama, qwen2, qwen3, ouro, huginn
  std::string preset = "tiny";
  std::string out_dir;
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  size_t max_shard_bytes = size_t{4} << 30;  // larger checkpoints are index-sharded
  // Applied on top of the preset's config.json (e.g. {"num_hidden_layers": 3}); optional.
  nlohmann::json config_overrides = nlohmann::json::object();
};

Status MakeRandomModel(const MakeModelOptions& opt);

}  // namespace fathom
