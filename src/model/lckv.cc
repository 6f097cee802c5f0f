// Layer-Condensed KV (Wu & Tu, ACL 2024; whyNLP/LCKV): Llama blocks whose attention reads
// the KV of another layer, possibly a later one. config.json is Llama's plus
//   layer_types      "0_1_2_..." entry i = the layer whose KV layer i attends to; an `s`
//                    suffix = sliding-window attention over `sliding_window` keys
//   forward_passes   m (default 7), backward_passes b (default 2): a prompt chunk longer
//                    than m + b runs each cyclic layer group m + b times (PromptIteration)
//   use_sequential   every prompt token by token
//   force_nodiag     every layer masks its own position (all published checkpoints)
// Layers whose KV nobody reads have no k_proj / v_proj. The same layer_types expresses
// CLA ("0_0_2_2_..."), YOCO-style and sandwich layouts. All layers are prelude layers.
#include <algorithm>
#include <limits>

#include "model/family.h"

namespace fathom {

Result<ModelSpec> LlamaStyleSpec(const JsonFields& c);                    // dense.cc
LayerNames DenseLayerNames(int32_t i, bool qkv_bias, bool qk_norm);       // dense.cc
nlohmann::json DenseConfig(const std::string& model_type, const std::string& arch,
                           int64_t hidden, int64_t inter, int64_t layers, int64_t heads,
                           int64_t kv_heads, int64_t head_dim, int64_t vocab, double theta,
                           double eps, bool tie, int64_t max_pos);         // dense.cc

namespace {

struct LayerType {
  int32_t reads_from = 0;
  bool sliding = false;
};

// "0_1_16s_..." -> one entry per layer; errors name the field and the entry.
Result<std::vector<LayerType>> ParseLayerTypes(const std::string& text, int64_t n_layers,
                                               const std::string& source) {
  std::vector<LayerType> out;
  size_t begin = 0;
  for (;;) {
    const size_t end = std::min(text.find('_', begin), text.size());
    const std::string tok = text.substr(begin, end - begin);
    const std::string where = source + ": layer_types entry " + std::to_string(out.size()) +
                              " ('" + tok + "')";
    LayerType t;
    size_t digits = 0;
    while (digits < tok.size() && tok[digits] >= '0' && tok[digits] <= '9') ++digits;
    const std::string suffix = tok.substr(digits);
    if (digits == 0 || digits > 9 || !(suffix.empty() || suffix == "s"))
      return Status::Error(where + " is not a layer index with an optional 's' suffix");
    t.reads_from = std::stoi(tok.substr(0, digits));
    t.sliding = suffix == "s";
    if (t.reads_from >= n_layers)
      return Status::Error(where + " names layer " + std::to_string(t.reads_from) +
                           ", outside [0, " + std::to_string(n_layers) + ")");
    out.push_back(t);
    if (end == text.size()) break;
    begin = end + 1;
  }
  if (static_cast<int64_t>(out.size()) != n_layers)
    return Status::Error(source + ": layer_types has " + std::to_string(out.size()) +
                         " entries, num_hidden_layers is " + std::to_string(n_layers));
  return out;
}

// Upstream's iteration plan (LayerTypeParser.iteration_plan): from a layer that reads a
// later layer, the group extends to the highest layer any of its members reads.
std::vector<IteratedGroup> CyclicGroups(const std::vector<LayerType>& types) {
  std::vector<IteratedGroup> groups;
  const auto L = static_cast<int32_t>(types.size());
  for (int32_t i = 0; i < L;) {
    if (types[static_cast<size_t>(i)].reads_from <= i) {
      ++i;
      continue;
    }
    int32_t top = types[static_cast<size_t>(i)].reads_from;
    for (bool grew = true; grew;) {
      grew = false;
      for (int32_t l = i; l <= top; ++l)
        if (types[static_cast<size_t>(l)].reads_from > top) top = types[static_cast<size_t>(l)].reads_from, grew = true;
    }
    IteratedGroup g;
    g.begin = i;
    g.end = top + 1;
    for (int32_t l = g.begin; l < g.end; ++l) {
      const int32_t src = types[static_cast<size_t>(l)].reads_from;
      if (src > l && std::find(g.zero_kv.begin(), g.zero_kv.end(), src) == g.zero_kv.end())
        g.zero_kv.push_back(src);
    }
    std::sort(g.zero_kv.begin(), g.zero_kv.end());
    groups.push_back(std::move(g));
    i = top + 1;
  }
  return groups;
}

Result<ModelSpec> LckvSpec(const JsonFields& c) {
  FATHOM_ASSIGN_OR_RETURN(ModelSpec s, LlamaStyleSpec(c));
  FATHOM_ASSIGN_OR_RETURN(int32_t n_layers, family_util::LayerCount(c, "num_hidden_layers"));
  if (n_layers <= 0) return Status::Error(c.source() + ": num_hidden_layers must be positive");
  if (!c.Has("layer_types") && (c.Has("target_layer") || c.Has("num_encoders")))
    return Status::Error(c.source() + ": fields 'target_layer' / 'num_encoders' are from an "
                         "older LCKV revision; fathom reads 'layer_types' (convert the config "
                         "with upstream's convert script)");
  std::string identity;
  for (int64_t i = 0; i < n_layers; ++i) identity += (i ? "_" : "") + std::to_string(i);
  FATHOM_ASSIGN_OR_RETURN(std::string text, c.StringOr("layer_types", identity));
  FATHOM_ASSIGN_OR_RETURN(std::vector<LayerType> types, ParseLayerTypes(text, n_layers, c.source()));
  FATHOM_ASSIGN_OR_RETURN(int64_t m, c.IntOr("forward_passes", 7));
  FATHOM_ASSIGN_OR_RETURN(int64_t b, c.IntOr("backward_passes", 2));
  FATHOM_ASSIGN_OR_RETURN(int64_t window, c.IntOr("sliding_window", 4096));
  FATHOM_ASSIGN_OR_RETURN(bool sequential, c.BoolOr("use_sequential", false));
  FATHOM_ASSIGN_OR_RETURN(bool force_nodiag, c.BoolOr("force_nodiag", false));
  if (m < 0 || m > 64) return Status::Error(c.source() + ": forward_passes must be in [0, 64], found " + std::to_string(m));
  if (b < 0 || b > 64) return Status::Error(c.source() + ": backward_passes must be in [0, 64], found " + std::to_string(b));
  const bool any_sliding = std::any_of(types.begin(), types.end(), [](const LayerType& t) { return t.sliding; });
  if (any_sliding && window <= 0)
    return Status::Error(c.source() + ": sliding_window must be positive when layer_types has "
                         "sliding-window layers, found " + std::to_string(window));

  s.n_prelude = static_cast<int32_t>(n_layers);
  family_util::AddLayers(s, StageKind::kPrelude, s.n_prelude,
                         [](int32_t i) { return DenseLayerNames(i, false, false); });
  for (int32_t i = 0; i < s.n_prelude; ++i) {
    LayerSpec& l = s.layers[static_cast<size_t>(i)];
    const LayerType& t = types[static_cast<size_t>(i)];
    l.attn.kv_source = t.reads_from;
    l.attn.produces_kv = std::any_of(types.begin(), types.end(),
                                     [&](const LayerType& u) { return u.reads_from == i; });
    // A layer reading a later layer cannot see the current token's KV there (it does
    // not exist yet), so its diagonal is masked whatever force_nodiag says.
    l.attn.no_diag = force_nodiag || t.reads_from > i;
    l.attn.window = t.sliding ? window : 0;
    if (!l.attn.produces_kv) l.names.qkv.resize(1);  // q_proj only
  }
  s.prompt_iteration.groups = CyclicGroups(types);
  // Upstream's plan: m passes, b - 1 more, then the one that is kept (so m + 1 when b = 0).
  s.prompt_iteration.passes = static_cast<int32_t>(m + std::max<int64_t>(b, 1));
  s.prompt_iteration.sequential_max = sequential ? std::numeric_limits<int64_t>::max() : m + b;
  return s;
}

nlohmann::json LckvConfig(nlohmann::json base, const std::string& layer_types) {
  base["model_type"] = "lckv-llama";
  base["architectures"] = {"LCKVLlamaForCausalLM"};
  base["layer_types"] = layer_types;
  base["forward_passes"] = 7;
  base["backward_passes"] = 2;
  base["sliding_window"] = 4096;
  base["use_sequential"] = false;
  base["force_nodiag"] = true;
  return base;
}

// layer_types with w warm-up layers (w/2 at the bottom and w/2 at the top read their own
// KV) and every middle layer reading the KV of the highest middle layer, as the published
// checkpoints: w=10 on 22 layers is "0_1_2_3_4_16 (x12)_17_18_19_20_21".
std::string WarmupLayerTypes(int32_t n_layers, int32_t warmup) {
  const int32_t bottom = warmup / 2, top_begin = n_layers - warmup / 2;
  std::string out;
  for (int32_t i = 0; i < n_layers; ++i) {
    const int32_t src = (i < bottom || i >= top_begin) ? i : top_begin - 1;
    out += (i ? "_" : "") + std::to_string(src);
  }
  return out;
}

Result<nlohmann::json> LckvPreset(std::string_view preset) {
  if (preset == "tiny")  // 4 layers: 0 | 1 2 read 2 | 3 (the w=2 shape in small)
    return LckvConfig(DenseConfig("lckv-llama", "LCKVLlamaForCausalLM", 64, 160, 4, 4, 2, 16,
                                  256, 10000.0, 1e-5, false, 512),
                      "0_2_2_3");
  const nlohmann::json tinyllama = DenseConfig("lckv-llama", "LCKVLlamaForCausalLM", 2048, 5632,
                                               22, 32, 4, 64, 32000, 10000.0, 1e-5, false, 2048);
  if (preset == "tinyllama-lckv-w10") return LckvConfig(tinyllama, WarmupLayerTypes(22, 10));
  if (preset == "tinyllama-lckv-w2") return LckvConfig(tinyllama, WarmupLayerTypes(22, 2));
  return Status::Error("unknown preset '" + std::string(preset) +
                       "' for family lckv (known: tiny, tinyllama-lckv-w10, tinyllama-lckv-w2)");
}

}  // namespace

Family LckvFamily() {
  return {"lckv", {"lckv-llama"}, LckvSpec, LckvPreset,
          {"tiny", "tinyllama-lckv-w10", "tinyllama-lckv-w2"}};
}

}  // namespace fathom
