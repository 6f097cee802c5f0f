// Ouro (ByteDance, arXiv 2510.25741): a looped model. All layers form the core, run
// total_ut_steps times; each layer is a sandwich block
//   x = x + input_layernorm_2(attn(input_layernorm(x)))
//   x = x + post_attention_layernorm_2(mlp(post_attention_layernorm(x)))
// After every loop step the state is normed with model.norm, and that normed state is both
// the next step's input and the exit gate's input: lambda_t = sigmoid(early_exit_gate(h_t)).
// Logits are lm_head of the exit step's normed state (no further norm).
#include "model/family.h"

namespace fathom {

Result<ModelSpec> LlamaStyleSpec(const JsonFields& c);  // dense.cc

namespace {

LayerNames OuroLayerNames(int32_t i) {
  const std::string p = "model.layers." + std::to_string(i) + ".";
  LayerNames n;
  n.attn_in_norm = p + "input_layernorm.weight";
  n.attn_out_norm = p + "input_layernorm_2.weight";
  n.mlp_in_norm = p + "post_attention_layernorm.weight";
  n.mlp_out_norm = p + "post_attention_layernorm_2.weight";
  n.qkv = {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight",
           p + "self_attn.v_proj.weight"};
  n.o_proj = p + "self_attn.o_proj.weight";
  n.gate_up = {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"};
  n.down = p + "mlp.down_proj.weight";
  return n;
}

Result<ModelSpec> OuroSpec(const JsonFields& c) {
  FATHOM_ASSIGN_OR_RETURN(ModelSpec s, LlamaStyleSpec(c));
  FATHOM_ASSIGN_OR_RETURN(int32_t n_layers, family_util::LayerCount(c, "num_hidden_layers"));
  FATHOM_ASSIGN_OR_RETURN(int64_t ut_steps, c.Int("total_ut_steps"));
  if (ut_steps <= 0)
    return Status::Error(c.source() + ": field 'total_ut_steps' must be positive, found " +
                         std::to_string(ut_steps));
  s.n_core = n_layers;
  family_util::AddLayers(s, StageKind::kCore, s.n_core, OuroLayerNames);
  s.loop.looped = true;
  s.loop.default_loops = static_cast<int32_t>(ut_steps);
  s.loop.max_loops = static_cast<int32_t>(ut_steps);  // quality falls past the trained depth
  s.loop.core_input = CoreInput::kState;
  s.loop.initial_state = InitialState::kPreludeOutput;
  s.loop.step_norm = true;
  s.loop.exit_signal = ExitSignal::kGateHazard;
  s.loop.exit_gate = "model.early_exit_gate.weight";
  s.loop.exit_gate_bias = "model.early_exit_gate.bias";
  s.before_head_norm = false;
  return s;
}

nlohmann::json OuroConfig(int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                          int64_t kv_heads, int64_t head_dim, int64_t vocab, int64_t max_pos) {
  return {{"model_type", "ouro"},
          {"architectures", {"OuroForCausalLM"}},
          {"hidden_size", hidden},
          {"intermediate_size", inter},
          {"num_hidden_layers", layers},
          {"num_attention_heads", heads},
          {"num_key_value_heads", kv_heads},
          {"head_dim", head_dim},
          {"vocab_size", vocab},
          {"rope_theta", 1000000.0},
          {"rms_norm_eps", 1e-6},
          {"max_position_embeddings", max_pos},
          {"tie_word_embeddings", false},
          {"hidden_act", "silu"},
          {"total_ut_steps", 4},
          {"early_exit_threshold", 1.0},
          {"bos_token_id", 0},
          {"eos_token_id", 0},
          {"torch_dtype", "bfloat16"}};
}

Result<nlohmann::json> OuroPreset(std::string_view preset) {
  if (preset == "tiny") return OuroConfig(64, 160, 2, 4, 2, 16, 256, 512);
  if (preset == "ouro-1.4b") return OuroConfig(2048, 5632, 24, 16, 16, 128, 49152, 65536);
  // Benchmarks on small machines: Ouro's 0-24-0 shape scaled down (8 layers of 512, 60 MB
  // in bf16) with the vocabulary chosen to keep Ouro-1.4B's F_0/F_r = 0.082.
  if (preset == "ouro-small") return OuroConfig(512, 1408, 8, 8, 8, 64, 4096, 65536);
  return Status::Error("unknown preset '" + std::string(preset) +
                       "' for family ouro (known: tiny, ouro-small, ouro-1.4b)");
}

}  // namespace

Family OuroFamily() { return {"ouro", {"ouro"}, OuroSpec, OuroPreset, {"tiny", "ouro-small", "ouro-1.4b"}}; }

}  // namespace fathom
