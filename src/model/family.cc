#include "model/family.h"

#include <algorithm>

namespace fathom {

// Defined in the family files.
Family DenseLlamaFamily();
Family DenseQwen2Family();
Family DenseQwen3Family();
Family OuroFamily();
Family HuginnFamily();
Family LckvFamily();

const std::vector<Family>& AllFamilies() {
  static const std::vector<Family> kFamilies = {DenseLlamaFamily(), DenseQwen2Family(),
                                                DenseQwen3Family(), LckvFamily(), OuroFamily(),
                                                HuginnFamily()};
  return kFamilies;
}

const Family* FindFamilyByName(std::string_view name) {
  for (const Family& f : AllFamilies())
    if (f.name == name) return &f;
  return nullptr;
}

const Family* FindFamilyByModelType(std::string_view model_type) {
  for (const Family& f : AllFamilies())
    for (const std::string& t : f.model_types)
      if (t == model_type) return &f;
  return nullptr;
}

Result<ModelSpec> SpecFromConfigFile(const std::string& config_path) {
  FATHOM_ASSIGN_OR_RETURN(JsonFields config, JsonFields::ParseFile(config_path));
  FATHOM_ASSIGN_OR_RETURN(std::string model_type, config.String("model_type"));
  const Family* family = FindFamilyByModelType(model_type);
  if (!family) {
    std::string known;
    for (const Family& f : AllFamilies())
      for (const std::string& t : f.model_types) known += (known.empty() ? "" : ", ") + t;
    return Status::Error(config_path + ": unknown model_type '" + model_type +
                         "' (supported: " + known + ")");
  }
  FATHOM_ASSIGN_OR_RETURN(ModelSpec spec, family->spec_from_config(config));
  if (config.Has("l2a") && !spec.l2a.enabled)
    return Status::Error(config_path + ": field 'l2a': L2A gates are defined for the dense model types " +
                         "llama, qwen2 and qwen3 only, not '" + model_type + "' (docs/L2A_FORMAT.md)");
  FATHOM_RETURN_IF_ERROR(family_util::ValidateSpec(spec, config_path));
  return spec;
}

std::vector<ExpectedTensor> ExpectedTensors(const ModelSpec& s) {
  const int64_t E = s.hidden, I = s.intermediate, D = s.head_dim;
  std::vector<ExpectedTensor> out;
  auto add = [&](const std::string& name, Shape shape) {
    if (!name.empty()) out.push_back({name, std::move(shape)});
  };
  add(s.embed_name, {s.vocab, E});
  for (const LayerSpec& l : s.layers) {
    const LayerNames& n = l.names;
    for (const std::string* norm : {&n.attn_in_norm, &n.attn_out_norm, &n.attn_post_norm,
                                    &n.mlp_in_norm, &n.mlp_out_norm, &n.mlp_post_norm})
      add(*norm, {E});
    // {q, k, v}, one fused {Wqkv}, or {q} alone for a layer that produces no KV (LCKV).
    const std::vector<int64_t> qkv_rows =
        !l.attn.produces_kv ? std::vector<int64_t>{s.q_dim()}
        : n.qkv.size() == 1 ? std::vector<int64_t>{s.q_dim() + 2 * s.kv_dim()}
                            : std::vector<int64_t>{s.q_dim(), s.kv_dim(), s.kv_dim()};
    for (size_t i = 0; i < n.qkv.size(); ++i) add(n.qkv[i], {qkv_rows[i], E});
    for (size_t i = 0; i < n.qkv_bias.size(); ++i) add(n.qkv_bias[i], {qkv_rows[i]});
    add(n.q_norm, {D});
    add(n.k_norm, {D});
    add(n.qk_bias, {2, 1, s.n_heads, D});
    add(n.o_proj, {E, s.q_dim()});
    if (n.gate_up.size() == 1) {
      add(n.gate_up[0], {2 * I, E});
    } else {
      for (const std::string& g : n.gate_up) add(g, {I, E});
    }
    add(n.down, {E, I});
    // L2A router and LoRA (docs/L2A_FORMAT.md).
    const int64_t in = E + s.l2a.features(), G = s.l2a.outputs(s.n_heads), R = s.l2a.router_hidden;
    add(n.router_fc1, {R > 0 ? R : G, in});
    add(n.router_fc1_bias, {R > 0 ? R : G});
    add(n.router_fc2, {G, R});
    add(n.router_fc2_bias, {G});
    for (const LayerNames::Lora& lora : n.lora) {
      const auto base = std::find_if(out.begin(), out.end(), [&](const ExpectedTensor& t) { return t.name == lora.base; });
      const Shape w = base->shape;  // [out, in], declared above (a copy: add() grows `out`)
      add(lora.a, {s.l2a.lora_rank, w[1]});
      add(lora.b, {w[0], s.l2a.lora_rank});
    }
  }
  add(s.loop.adapter, {E, 2 * E});
  add(s.loop.exit_gate, {1, E});
  add(s.loop.exit_gate_bias, {1});
  add(s.final_norm_name, {E});
  if (!s.tie_embeddings) add(s.lm_head_name, {s.vocab, E});
  return out;
}

namespace family_util {

Result<int32_t> LayerCount(const JsonFields& c, const std::string& field) {
  FATHOM_ASSIGN_OR_RETURN(int64_t n, c.Int(field));
  if (n < 0 || n > kMaxLayers)
    return Status::Error(c.source() + ": field '" + field + "' is " + std::to_string(n) +
                         "; fathom reads 0 to " + std::to_string(kMaxLayers) + " layers");
  return static_cast<int32_t>(n);
}

Result<int32_t> TokenId(const JsonFields& c, const std::string& field) {
  if (!c.Has(field) || c.json().at(field).is_null()) return -1;
  const nlohmann::json& v = c.json().at(field);
  const nlohmann::json* id = &v;
  if (v.is_array() && !v.empty()) id = &v[0];
  if (!id->is_number_integer())
    return Status::Error(c.source() + ": field '" + field +
                         "': expected an integer or a list of integers, found " + v.dump());
  const int64_t x = id->get<int64_t>();
  if (x < 0 || x > INT32_MAX)
    return Status::Error(c.source() + ": field '" + field + "': token id " + std::to_string(x) +
                         " is out of range");
  return static_cast<int32_t>(x);
}

Status ValidateSpec(const ModelSpec& s, const std::string& source) {
  auto positive = [&](int64_t v, const char* what) -> Status {
    if (v <= 0)
      return Status::Error(source + ": " + what + " must be positive, found " + std::to_string(v));
    return Status::Ok();
  };
  FATHOM_RETURN_IF_ERROR(positive(s.hidden, "hidden size"));
  FATHOM_RETURN_IF_ERROR(positive(s.intermediate, "intermediate size"));
  FATHOM_RETURN_IF_ERROR(positive(s.vocab, "vocab size"));
  FATHOM_RETURN_IF_ERROR(positive(s.n_heads, "number of attention heads"));
  FATHOM_RETURN_IF_ERROR(positive(s.n_kv_heads, "number of key/value heads"));
  FATHOM_RETURN_IF_ERROR(positive(s.head_dim, "head_dim"));
  FATHOM_RETURN_IF_ERROR(positive(s.max_positions, "max positions"));
  if (s.n_heads % s.n_kv_heads != 0)
    return Status::Error(source + ": number of attention heads (" + std::to_string(s.n_heads) +
                         ") is not a multiple of the key/value heads (" +
                         std::to_string(s.n_kv_heads) + ")");
  if (s.head_dim % 2 != 0)
    return Status::Error(source + ": head_dim must be even for RoPE, found " +
                         std::to_string(s.head_dim));
  if (s.layers.empty()) return Status::Error(source + ": the model has no layers");
  if (s.loop.looped) {
    FATHOM_RETURN_IF_ERROR(positive(s.n_core, "number of core (recurrent) layers"));
    FATHOM_RETURN_IF_ERROR(positive(s.loop.default_loops, "default loop count"));
  }
  if (!(s.norm_eps > 0.f)) return Status::Error(source + ": norm epsilon must be positive");
  for (size_t i = 0; i < s.layers.size(); ++i) {
    const LayerAttention& a = s.layers[i].attn;
    if (a.kv_source >= static_cast<int32_t>(s.layers.size()) ||
        (a.kv_source >= 0 && !s.layers[static_cast<size_t>(a.kv_source)].attn.produces_kv))
      return Status::Error(source + ": layer " + std::to_string(i) + " reads the KV of layer " +
                           std::to_string(a.kv_source) + ", which produces none");
    if (s.loop.looped && a.kv_source >= 0 && a.kv_source != static_cast<int32_t>(i))
      return Status::Error(source + ": cross-layer KV (layer " + std::to_string(i) +
                           " reads layer " + std::to_string(a.kv_source) +
                           ") is not supported in looped models");
  }
  for (auto [id, field] : {std::pair{s.bos_id, "bos_token_id"}, std::pair{s.eos_id, "eos_token_id"},
                           std::pair{s.pad_id, "pad_token_id"}})
    if (id >= s.vocab)
      return Status::Error(source + ": field '" + field + "' is " + std::to_string(id) +
                           ", outside the vocabulary of " + std::to_string(s.vocab) + " tokens");
  return Status::Ok();
}

}  // namespace family_util
}  // namespace fathom
