// Model families: each turns a config.json into a ModelSpec (model_spec.h) and knows its
// presets for `fathom make-model`. One file per family: dense.cc (llama, qwen2, qwen3),
// ouro.cc, huginn.cc. Adding a family = one file + one line in family.cc.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "core/tensor.h"
#include "io/json_fields.h"
#include "model/model_spec.h"

namespace fathom {

struct Family {
  std::string name;                     // CLI name: llama, qwen2, qwen3, ouro, huginn
  std::vector<std::string> model_types;  // config.json model_type values it reads
  Result<ModelSpec> (*spec_from_config)(const JsonFields& config);
  // The config.json of a preset ("tiny", or a real shape such as "tinyllama-1.1b").
  Result<nlohmann::json> (*preset_config)(std::string_view preset);
  std::vector<std::string> presets;
};

const std::vector<Family>& AllFamilies();
const Family* FindFamilyByName(std::string_view name);
const Family* FindFamilyByModelType(std::string_view model_type);

// Parses a config.json into a ModelSpec; errors name the file and the field, or list the
// supported model types.
Result<ModelSpec> SpecFromConfigFile(const std::string& config_path);

struct ExpectedTensor {
  std::string name;
  Shape shape;
};
// Every tensor the spec reads, with its shape (a checkpoint must hold exactly these, plus
// the spec's ignored tensors and, for tied embeddings, an optional copy of the LM head).
std::vector<ExpectedTensor> ExpectedTensors(const ModelSpec& spec);

// Family helpers shared by the family files.
namespace family_util {
// Fills spec.layers with `n` blocks of `stage`, naming each with `names(global_index)`.
template <typename F>
void AddLayers(ModelSpec& spec, StageKind stage, int32_t n, F names) {
  for (int32_t i = 0; i < n; ++i) {
    LayerSpec l;
    l.stage = stage;
    l.index_in_stage = i;
    l.names = names(i);
    spec.layers.push_back(std::move(l));
  }
}
// Layers one stage of a config may declare: 1024, several times any released model's
// (Llama 3.1 405B has 126). The bound keeps a few bytes of config.json from asking for
// millions of layer specs (a fuzzed config with 49,857 layers took 3.6 s to list its tensors).
inline constexpr int64_t kMaxLayers = 1024;
// The integer `field` as a layer count in [0, kMaxLayers]; errors name the field.
Result<int32_t> LayerCount(const JsonFields& c, const std::string& field);
// eos_token_id may be an int or a list of ints (first one wins); absent -> -1.
Result<int32_t> TokenId(const JsonFields& c, const std::string& field);
// Checks the shape fields every family shares (positive, heads divide, ...).
Status ValidateSpec(const ModelSpec& spec, const std::string& source);
}  // namespace family_util

}  // namespace fathom
