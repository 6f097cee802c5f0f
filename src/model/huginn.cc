// Huginn-0125 (seal-rg/recurrent-pretraining, arXiv 2502.05171), model_type "huginn_raven".
// prelude (2 layers) -> core block (4 layers) x R steps -> coda (2 layers), post-norm
// "sandwich" blocks:
//   x = norm_2(attn(norm_1(x)) + x);  x = norm_4(mlp(norm_3(x)) + x)
// e = prelude(wte(ids) * sqrt(n_embd)); each step x = core(adapter(cat[x, e]));
// then x = ln_f(x), coda, logits = lm_head(ln_f(x)). Attention: fused Wqkv (q | k | v),
// qk_bias added to q and k, interleaved RoPE. Exit signal: latent change
// ||x_r - x_{r-1}|| / ||x_r|| (and KL between successive steps' predictions, on request).
#include <cmath>

#include "model/family.h"

namespace fathom {
namespace {

LayerNames HuginnLayerNames(const std::string& stage, int32_t i) {
  const std::string p = "transformer." + stage + "." + std::to_string(i) + ".";
  LayerNames n;
  n.attn_in_norm = p + "norm_1.weight";
  n.attn_post_norm = p + "norm_2.weight";
  n.mlp_in_norm = p + "norm_3.weight";
  n.mlp_post_norm = p + "norm_4.weight";
  n.qkv = {p + "attn.Wqkv.weight"};
  n.qk_bias = p + "attn.qk_bias";
  n.o_proj = p + "attn.proj.weight";
  n.gate_up = {p + "mlp.fc.weight"};
  n.down = p + "mlp.proj.weight";
  return n;
}

Result<ModelSpec> HuginnSpec(const JsonFields& c) {
  ModelSpec s;
  FATHOM_ASSIGN_OR_RETURN(s.model_type, c.String("model_type"));
  FATHOM_ASSIGN_OR_RETURN(s.hidden, c.Int("n_embd"));
  // Upstream's config class reads n_heads; its JSON files may spell it num_attention_heads.
  FATHOM_ASSIGN_OR_RETURN(s.n_heads,
                          c.Int(c.Has("n_heads") || !c.Has("num_attention_heads")
                                    ? "n_heads"
                                    : "num_attention_heads"));
  // Derived, not read: upstream's RavenConfig sets num_key_value_heads = n_heads (MHA) and
  // head_dim = n_embd // n_heads whatever the JSON says.
  s.n_kv_heads = s.n_heads;
  if (s.n_heads <= 0) return Status::Error(c.source() + ": field 'n_heads' must be positive");
  s.head_dim = s.hidden / s.n_heads;
  if (s.head_dim * s.n_heads != s.hidden)
    return Status::Error(c.source() + ": n_embd (" + std::to_string(s.hidden) +
                         ") is not a multiple of n_heads (" + std::to_string(s.n_heads) + ")");
  FATHOM_ASSIGN_OR_RETURN(s.intermediate, c.Int("intermediate_size"));
  // Upstream sets vocab_size = padded_vocab_size = vocab_size: padding_multiple sizes no
  // tensor (wte and lm_head are [vocab_size, n_embd]), so it is not read.
  FATHOM_ASSIGN_OR_RETURN(s.vocab, c.Int("vocab_size"));
  FATHOM_ASSIGN_OR_RETURN(double eps, c.NumberOr("norm_eps", 1e-6));
  FATHOM_ASSIGN_OR_RETURN(double rope_base, c.NumberOr("rope_base", 50000.0));
  s.norm_eps = static_cast<float>(eps);
  s.rope_theta = static_cast<float>(rope_base);
  s.rope_style = RopeStyle::kInterleaved;
  FATHOM_ASSIGN_OR_RETURN(s.max_positions, c.IntOr("block_size", 4096));
  FATHOM_ASSIGN_OR_RETURN(s.tie_embeddings, c.BoolOr("tie_embeddings", true));
  FATHOM_ASSIGN_OR_RETURN(bool bias, c.BoolOr("bias", false));
  if (bias) return Status::Error(c.source() + ": field 'bias' is true; Huginn has no linear biases");
  FATHOM_ASSIGN_OR_RETURN(bool qk_bias, c.BoolOr("qk_bias", true));
  FATHOM_ASSIGN_OR_RETURN(std::string injection, c.StringOr("injection_type", "linear"));
  if (injection != "linear")
    return Status::Error(c.source() + ": field 'injection_type' is '" + injection +
                         "'; fathom implements 'linear' (the adapter on cat[state, embeddings])");
  FATHOM_ASSIGN_OR_RETURN(int64_t n_prelude, family_util::LayerCount(c, "n_layers_in_prelude"));
  FATHOM_ASSIGN_OR_RETURN(int64_t n_core, family_util::LayerCount(c, "n_layers_in_recurrent_block"));
  FATHOM_ASSIGN_OR_RETURN(int64_t n_coda, family_util::LayerCount(c, "n_layers_in_coda"));
  FATHOM_ASSIGN_OR_RETURN(int64_t mean_recurrence, c.Int("mean_recurrence"));
  // n_layers is the total of the three stages (upstream's serving config checks it).
  FATHOM_ASSIGN_OR_RETURN(int64_t n_layers, c.IntOr("n_layers", n_prelude + n_core + n_coda));
  if (n_layers != n_prelude + n_core + n_coda)
    return Status::Error(c.source() + ": field 'n_layers' is " + std::to_string(n_layers) +
                         ", but n_layers_in_prelude + n_layers_in_recurrent_block + "
                         "n_layers_in_coda = " + std::to_string(n_prelude + n_core + n_coda));
  s.embed_scale = std::sqrt(static_cast<float>(s.hidden));
  s.n_prelude = static_cast<int32_t>(n_prelude);
  s.n_core = static_cast<int32_t>(n_core);
  s.n_coda = static_cast<int32_t>(n_coda);
  auto names = [&](const char* stage) {
    return [&, stage](int32_t i) {
      LayerNames n = HuginnLayerNames(stage, i);
      if (!qk_bias) n.qk_bias.clear();
      return n;
    };
  };
  family_util::AddLayers(s, StageKind::kPrelude, s.n_prelude, names("prelude"));
  family_util::AddLayers(s, StageKind::kCore, s.n_core, names("core_block"));
  family_util::AddLayers(s, StageKind::kCoda, s.n_coda, names("coda"));
  s.loop.looped = true;
  s.loop.default_loops = static_cast<int32_t>(mean_recurrence);
  s.loop.max_loops = 256;
  s.loop.core_input = CoreInput::kAdapterOnConcat;
  s.loop.initial_state = InitialState::kZero;  // the runner may ask for kRandom with a seed
  s.loop.after_loop_norm = true;
  s.loop.exit_signal = ExitSignal::kLatentDiff;
  s.loop.adapter = "transformer.adapter.weight";
  s.before_head_norm = true;
  s.embed_name = "transformer.wte.weight";
  s.final_norm_name = "transformer.ln_f.weight";
  s.lm_head_name = "lm_head.weight";
  s.ignored_tensors = {"freqs_cis", "transformer.freqs_cis"};
  // Special ids from the config (PretrainedConfig kwargs; Huginn-0125's config.json has
  // 65504 <|begin_text|>, 65505 <|end_text|>, 65509 <|pad|>); absent or null: none.
  FATHOM_ASSIGN_OR_RETURN(s.bos_id, family_util::TokenId(c, "bos_token_id"));
  FATHOM_ASSIGN_OR_RETURN(s.eos_id, family_util::TokenId(c, "eos_token_id"));
  FATHOM_ASSIGN_OR_RETURN(s.pad_id, family_util::TokenId(c, "pad_token_id"));
  return s;
}

// bos / eos / pad ids: Huginn-0125's where the vocabulary holds them, null otherwise (the
// tiny and small presets' vocabularies are smaller; make-model --tokenizer fills them).
nlohmann::json HuginnConfig(int64_t n_embd, int64_t n_heads, int64_t inter, int64_t vocab,
                            int64_t block_size, int64_t mean_recurrence) {
  auto special = [&](int64_t id) { return id < vocab ? nlohmann::json(id) : nlohmann::json(nullptr); };
  return {{"model_type", "huginn_raven"},
          {"architectures", {"RavenForCausalLM"}},
          {"n_embd", n_embd},
          {"n_heads", n_heads},
          {"n_layers", 8},
          {"intermediate_size", inter},
          {"vocab_size", vocab},
          {"padding_multiple", 4096},  // upstream's default; sizes no tensor
          {"block_size", block_size},
          {"tie_embeddings", true},
          {"bias", false},
          {"norm_eps", 1e-6},
          {"rope_base", 50000.0},
          {"qk_bias", true},
          {"n_layers_in_prelude", 2},
          {"n_layers_in_recurrent_block", 4},
          {"n_layers_in_coda", 2},
          {"mean_recurrence", mean_recurrence},
          {"mean_backprop_depth", 8},
          {"state_init", "like-init"},
          {"injection_type", "linear"},
          {"norm_class_name", "RMSNorm_llama"},
          {"mlp_class_name", "GatedMLP"},
          {"nonlin_name", "SiLU"},
          {"bos_token_id", special(65504)},
          {"eos_token_id", special(65505)},
          {"pad_token_id", special(65509)},
          {"torch_dtype", "bfloat16"}};
}

Result<nlohmann::json> HuginnPreset(std::string_view preset) {
  if (preset == "tiny") return HuginnConfig(64, 4, 128, 256, 512, 4);
  if (preset == "huginn-0125") return HuginnConfig(5280, 55, 17920, 65536, 4096, 32);
  // Benchmarks on small machines: Huginn's 2-4-2 shape at width 512 (69 MB in bf16), the
  // vocabulary chosen to keep Huginn-0125's F_0/F_r = 1.18, a 16k context for arXiv.
  if (preset == "huginn-small") return HuginnConfig(512, 8, 1792, 6656, 16384, 32);
  return Status::Error("unknown preset '" + std::string(preset) +
                       "' for family huginn (known: tiny, huginn-small, huginn-0125)");
}

}  // namespace

Family HuginnFamily() {
  return {"huginn", {"huginn_raven"}, HuginnSpec, HuginnPreset, {"tiny", "huginn-small", "huginn-0125"}};
}

}  // namespace fathom
