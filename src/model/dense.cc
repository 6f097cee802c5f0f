// Dense decoder-only models with Llama naming: Llama, Qwen2 (q/k/v bias), Qwen3 (per-head
// q/k RMSNorm). Pre-norm blocks, SwiGLU, NeoX RoPE, grouped KV heads. All layers are prelude.
#include <cmath>

#include "model/family.h"
#include "model/l2a.h"

namespace fathom {

// Llama's tensor names of block i (also LCKV's, lckv.cc).
LayerNames DenseLayerNames(int32_t i, bool qkv_bias, bool qk_norm) {
  const std::string p = "model.layers." + std::to_string(i) + ".";
  LayerNames n;
  n.attn_in_norm = p + "input_layernorm.weight";
  n.mlp_in_norm = p + "post_attention_layernorm.weight";
  n.qkv = {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
           p + "self_attn.v_proj.weight"};
  if (qkv_bias)
    n.qkv_bias = {p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias",
                  p + "self_attn.v_proj.bias"};
  if (qk_norm) {
    n.q_norm = p + "self_attn.q_norm.weight";
    n.k_norm = p + "self_attn.k_norm.weight";
  }
  n.o_proj = p + "self_attn.o_proj.weight";
  n.gate_up = {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"};
  n.down = p + "mlp.down_proj.weight";
  return n;
}

namespace {

enum class DenseKind { kLlama, kQwen2, kQwen3 };

// config.json's RoPE scaling: `rope_scaling`, or transformers 5's `rope_parameters` (which
// also carries rope_theta). Absent, null or rope_type "default": none; "llama3": its four
// fields, required; any other type (linear, dynamic, yarn, longrope, ...) is refused by name.
Result<RopeScaling> ParseRopeScaling(const JsonFields& c) {
  RopeScaling r;
  const char* key = c.Has("rope_scaling")      ? "rope_scaling"
                    : c.Has("rope_parameters") ? "rope_parameters"
                                               : nullptr;
  if (!key) return r;
  FATHOM_ASSIGN_OR_RETURN(JsonFields f, c.Object(key));
  std::string type;
  if (f.Has("rope_type")) {
    FATHOM_ASSIGN_OR_RETURN(type, f.String("rope_type"));
  } else {
    FATHOM_ASSIGN_OR_RETURN(type, f.StringOr("type", "default"));  // older configs
  }
  if (type == "default") return r;
  if (type != "llama3")
    return Status::Error(f.source() + ": RoPE scaling type '" + type +
                         "' is not implemented (fathom implements 'llama3')");
  r.kind = RopeScaling::Kind::kLlama3;
  FATHOM_ASSIGN_OR_RETURN(r.factor, f.Number("factor"));
  FATHOM_ASSIGN_OR_RETURN(r.low_freq_factor, f.Number("low_freq_factor"));
  FATHOM_ASSIGN_OR_RETURN(r.high_freq_factor, f.Number("high_freq_factor"));
  FATHOM_ASSIGN_OR_RETURN(r.original_max_positions, f.Int("original_max_position_embeddings"));
  if (!(r.factor > 0) || !(r.low_freq_factor > 0) || !(r.high_freq_factor > r.low_freq_factor) ||
      r.original_max_positions <= 0)
    return Status::Error(
        f.source() + ": llama3 RoPE scaling needs factor > 0, 0 < low_freq_factor < " +
        "high_freq_factor and original_max_position_embeddings > 0 (got " + f.json().dump() + ")");
  return r;
}

}  // namespace

// Reads the Llama-style fields shared by dense models and Ouro. Leaves `layers` empty.
Result<ModelSpec> LlamaStyleSpec(const JsonFields& c) {
  ModelSpec s;
  FATHOM_ASSIGN_OR_RETURN(s.model_type, c.String("model_type"));
  FATHOM_ASSIGN_OR_RETURN(s.hidden, c.Int("hidden_size"));
  FATHOM_ASSIGN_OR_RETURN(s.intermediate, c.Int("intermediate_size"));
  FATHOM_ASSIGN_OR_RETURN(s.vocab, c.Int("vocab_size"));
  FATHOM_ASSIGN_OR_RETURN(s.n_heads, c.Int("num_attention_heads"));
  FATHOM_ASSIGN_OR_RETURN(s.n_kv_heads, c.IntOr("num_key_value_heads", s.n_heads));
  if (s.n_heads <= 0) return Status::Error(c.source() + ": num_attention_heads must be positive");
  FATHOM_ASSIGN_OR_RETURN(s.head_dim, c.IntOr("head_dim", s.hidden / s.n_heads));
  FATHOM_ASSIGN_OR_RETURN(double eps, c.NumberOr("rms_norm_eps", 1e-6));
  double theta_default = 10000.0;
  if (!c.Has("rope_theta") && c.Has("rope_parameters")) {
    FATHOM_ASSIGN_OR_RETURN(JsonFields rp, c.Object("rope_parameters"));
    FATHOM_ASSIGN_OR_RETURN(theta_default, rp.NumberOr("rope_theta", theta_default));
  }
  FATHOM_ASSIGN_OR_RETURN(double theta, c.NumberOr("rope_theta", theta_default));
  s.norm_eps = static_cast<float>(eps);
  s.rope_theta = static_cast<float>(theta);
  FATHOM_ASSIGN_OR_RETURN(s.max_positions, c.IntOr("max_position_embeddings", 2048));
  FATHOM_ASSIGN_OR_RETURN(s.tie_embeddings, c.BoolOr("tie_word_embeddings", false));
  FATHOM_ASSIGN_OR_RETURN(s.bos_id, family_util::TokenId(c, "bos_token_id"));
  FATHOM_ASSIGN_OR_RETURN(s.eos_id, family_util::TokenId(c, "eos_token_id"));
  FATHOM_ASSIGN_OR_RETURN(s.pad_id, family_util::TokenId(c, "pad_token_id"));
  FATHOM_ASSIGN_OR_RETURN(s.rope_scaling, ParseRopeScaling(c));
  s.rope_style = RopeStyle::kNeox;
  s.embed_name = "model.embed_tokens.weight";
  s.final_norm_name = "model.norm.weight";
  s.lm_head_name = "lm_head.weight";
  return s;
}

namespace {

Result<ModelSpec> DenseSpec(const JsonFields& c, DenseKind kind) {
  FATHOM_ASSIGN_OR_RETURN(ModelSpec s, LlamaStyleSpec(c));
  FATHOM_ASSIGN_OR_RETURN(int32_t n_layers, family_util::LayerCount(c, "num_hidden_layers"));
  FATHOM_ASSIGN_OR_RETURN(bool attention_bias, c.BoolOr("attention_bias", false));
  const bool qkv_bias = kind == DenseKind::kQwen2 || attention_bias;
  const bool qk_norm = kind == DenseKind::kQwen3;
  s.n_prelude = n_layers;
  family_util::AddLayers(s, StageKind::kPrelude, s.n_prelude,
                         [&](int32_t i) { return DenseLayerNames(i, qkv_bias, qk_norm); });
  if (c.Has("l2a")) FATHOM_RETURN_IF_ERROR(ReadL2aConfig(c, s));  // gates (docs/L2A_FORMAT.md)
  return s;
}

}  // namespace

// A Llama-style config.json (also the base of LCKV's presets, lckv.cc).
nlohmann::json DenseConfig(const std::string& model_type, const std::string& arch, int64_t hidden,
                           int64_t inter, int64_t layers, int64_t heads, int64_t kv_heads,
                           int64_t head_dim, int64_t vocab, double theta, double eps, bool tie,
                           int64_t max_pos) {
  return {{"model_type", model_type},
          {"architectures", {arch}},
          {"hidden_size", hidden},
          {"intermediate_size", inter},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", kv_heads},
          {"head_dim", head_dim},
          {"vocab_size", vocab},
          {"rope_theta", theta},
          {"rms_norm_eps", eps},
          {"tie_word_embeddings", tie},
          {"max_position_embeddings", max_pos},
          {"hidden_act", "silu"},
          {"bos_token_id", 1},
          {"eos_token_id", 2},
          {"torch_dtype", "bfloat16"}};
}

namespace {

Status UnknownPreset(std::string_view family, std::string_view preset, const char* known) {
  return Status::Error("unknown preset '" + std::string(preset) + "' for family " +
                       std::string(family) + " (known: " + known + ")");
}

Result<nlohmann::json> LlamaPreset(std::string_view preset) {
  if (preset == "tiny")
    return DenseConfig("llama", "LlamaForCausalLM", 64, 160, 2, 4, 2, 16, 256, 10000.0, 1e-5,
                       false, 512);
  if (preset == "tinyllama-1.1b")
    return DenseConfig("llama", "LlamaForCausalLM", 2048, 5632, 22, 32, 4, 64, 32000, 10000.0,
                       1e-5, false, 2048);
  if (preset == "llama-3.2-1b") {  // Llama 3.2 1B's shape: tied, GQA 32/8, llama3 RoPE scaling
    auto j = DenseConfig("llama", "LlamaForCausalLM", 2048, 8192, 16, 32, 8, 64, 128256, 500000.0,
                         1e-5, true, 131072);
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 32.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 8192}};
    j["bos_token_id"] = 128000;
    j["eos_token_id"] = 128001;
    return j;
  }
  return UnknownPreset("llama", preset, "tiny, tinyllama-1.1b, llama-3.2-1b");
}

Result<nlohmann::json> Qwen2Preset(std::string_view preset) {
  if (preset == "tiny") {
    auto j = DenseConfig("qwen2", "Qwen2ForCausalLM", 64, 160, 2, 4, 2, 16, 256, 1000000.0, 1e-6,
                         true, 512);
    j.erase("head_dim");  // Qwen2 configs carry no head_dim: hidden / heads
    return j;
  }
  return UnknownPreset("qwen2", preset, "tiny");
}

Result<nlohmann::json> Qwen3Preset(std::string_view preset) {
  if (preset == "tiny")  // head_dim deliberately != hidden / heads, as in real Qwen3 models
    return DenseConfig("qwen3", "Qwen3ForCausalLM", 64, 160, 2, 4, 2, 24, 256, 1000000.0, 1e-6,
                       true, 512);
  if (preset == "qwen3-0.6b")
    return DenseConfig("qwen3", "Qwen3ForCausalLM", 1024, 3072, 28, 16, 8, 128, 151936,
                       1000000.0, 1e-6, true, 40960);
  return UnknownPreset("qwen3", preset, "tiny, qwen3-0.6b");
}

}  // namespace

Family DenseLlamaFamily() {
  return {"llama",
          {"llama"},
          [](const JsonFields& c) { return DenseSpec(c, DenseKind::kLlama); },
          LlamaPreset,
          {"tiny", "tinyllama-1.1b", "llama-3.2-1b"}};
}
Family DenseQwen2Family() {
  return {"qwen2", {"qwen2"},
          [](const JsonFields& c) { return DenseSpec(c, DenseKind::kQwen2); },
          Qwen2Preset, {"tiny"}};
}
Family DenseQwen3Family() {
  return {"qwen3", {"qwen3"},
          [](const JsonFields& c) { return DenseSpec(c, DenseKind::kQwen3); },
          Qwen3Preset, {"tiny", "qwen3-0.6b"}};
}

}  // namespace fathom
