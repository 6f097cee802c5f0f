#include "model/model.h"

#include <algorithm>
#include <filesystem>
#include <set>

#include "model/family.h"

namespace fathom {
namespace {

// Resolves names against the checkpoint with errors that name file, tensor, expected, found.
class TensorSource {
 public:
  TensorSource(const Checkpoint& c, std::string dir) : c_(c), dir_(std::move(dir)) {}

  Result<TensorView> Get(const std::string& name) const {
    const TensorEntry* e = c_.Find(name);
    if (!e) return Status::Error(dir_ + ": missing tensor '" + name + "'");
    return e->view;
  }
  Result<std::vector<float>> F32(const std::string& name) const {
    if (name.empty()) return std::vector<float>{};
    FATHOM_ASSIGN_OR_RETURN(TensorView v, Get(name));
    return v.ToF32();
  }
  // The weights of `names`, with LoRA adapters (L2A) merged: a part with an adapter becomes
  // an owned f32 W + scale * B A, and then every part of the fused Linear is converted to
  // f32 too (the parts of one Linear share a dtype). `owned` keeps those copies alive.
  Result<std::vector<TensorView>> Weights(const std::vector<std::string>& names,
                                          const std::vector<LayerNames::Lora>& lora, double scale,
                                          std::vector<std::vector<float>>& owned) const {
    std::vector<TensorView> ws;
    bool any = false;
    for (const std::string& n : names) {
      FATHOM_ASSIGN_OR_RETURN(TensorView v, Get(n));
      ws.push_back(v);
      for (const LayerNames::Lora& l : lora) any |= l.base == n;
    }
    if (!any) return ws;
    owned.reserve(names.size());  // views point into it
    for (size_t i = 0; i < names.size(); ++i) {
      std::vector<float>& w = owned.emplace_back(ws[i].ToF32());
      for (const LayerNames::Lora& l : lora) {
        if (l.base != names[i]) continue;
        FATHOM_ASSIGN_OR_RETURN(TensorView av, Get(l.a));  // [r, in]
        FATHOM_ASSIGN_OR_RETURN(TensorView bv, Get(l.b));  // [out, r]
        const std::vector<float> a = av.ToF32(), b = bv.ToF32();
        const int64_t out = ws[i].dim(0), in = ws[i].dim(1), r = av.dim(0);
        for (int64_t o = 0; o < out; ++o)
          for (int64_t k = 0; k < r; ++k) {
            const float s = static_cast<float>(scale) * b[static_cast<size_t>(o * r + k)];
            const float* ar = a.data() + k * in;
            float* wr = w.data() + o * in;
            for (int64_t j = 0; j < in; ++j) wr[j] += s * ar[j];
          }
      }
      ws[i] = TensorView{DType::kF32, ws[i].shape, w.data()};
    }
    return ws;
  }

  Result<Linear> MakeLinear(const std::vector<std::string>& names,
                            const std::vector<std::string>& bias_names = {},
                            WeightFormat format = WeightFormat::kCheckpoint,
                            const std::vector<LayerNames::Lora>& lora = {}, double lora_scale = 0) const {
    std::vector<std::vector<float>> owned;
    FATHOM_ASSIGN_OR_RETURN(std::vector<TensorView> ws, Weights(names, lora, lora_scale, owned));
    std::vector<TensorView> bs;
    for (const std::string& n : bias_names) {
      FATHOM_ASSIGN_OR_RETURN(TensorView v, Get(n));
      bs.push_back(v);
    }
    std::vector<const TensorView*> bias_ptrs;
    for (const TensorView& b : bs) bias_ptrs.push_back(&b);
    auto lin = Linear::Create(ws, bias_ptrs, format);
    if (!lin.ok()) return lin.status().WithContext(dir_ + ": tensor '" + names[0] + "'");
    return lin;
  }

  // The LoRA adapters of the parts `names` of one Linear (parts without one are skipped), kept
  // apart from W: A [r, in] as is, B [out, r] times `scale`, both f32, at the part's offset.
  Result<std::vector<LoraAdapter>> Adapters(const std::vector<std::string>& names,
                                            const std::vector<LayerNames::Lora>& lora, double scale) const {
    std::vector<LoraAdapter> out;
    int64_t offset = 0;
    for (const std::string& n : names) {
      FATHOM_ASSIGN_OR_RETURN(TensorView base, Get(n));
      for (const LayerNames::Lora& l : lora) {
        if (l.base != n) continue;
        FATHOM_ASSIGN_OR_RETURN(TensorView av, Get(l.a));  // [r, in]
        FATHOM_ASSIGN_OR_RETURN(TensorView bv, Get(l.b));  // [out, r]
        std::vector<float> a = av.ToF32(), b = bv.ToF32();
        for (float& v : b) v = static_cast<float>(scale * v);
        LoraAdapter ad;
        ad.offset = offset;
        auto la = Linear::Create({TensorView{DType::kF32, av.shape, a.data()}});
        if (!la.ok()) return la.status().WithContext(dir_ + ": tensor '" + l.a + "'");
        auto lb = Linear::Create({TensorView{DType::kF32, bv.shape, b.data()}});
        if (!lb.ok()) return lb.status().WithContext(dir_ + ": tensor '" + l.b + "'");
        ad.a = std::move(la).value();
        ad.b = std::move(lb).value();
        out.push_back(std::move(ad));
      }
      offset += base.dim(0);
    }
    return out;
  }

  // o_proj [E, H D] as H Linears [E, D], one per query head (L2A head gates).
  Result<std::vector<Linear>> PerHeadLinears(const std::string& name, int64_t heads, WeightFormat format,
                                             const std::vector<LayerNames::Lora>& lora, double lora_scale) const {
    std::vector<std::vector<float>> owned;
    FATHOM_ASSIGN_OR_RETURN(std::vector<TensorView> ws, Weights({name}, lora, lora_scale, owned));
    const TensorView& w = ws[0];
    const int64_t rows = w.dim(0), cols = w.dim(1), d = cols / heads;
    const size_t es = DTypeSize(w.dtype);
    std::vector<Linear> out;
    std::vector<uint8_t> slice(static_cast<size_t>(rows * d) * es);
    for (int64_t h = 0; h < heads; ++h) {
      const auto* src = static_cast<const uint8_t*>(w.data);
      for (int64_t r = 0; r < rows; ++r)
        std::copy_n(src + static_cast<size_t>(r * cols + h * d) * es, static_cast<size_t>(d) * es,
                    slice.data() + static_cast<size_t>(r * d) * es);
      auto lin = Linear::Create({TensorView{w.dtype, {rows, d}, slice.data()}}, {}, format);
      if (!lin.ok()) return lin.status().WithContext(dir_ + ": tensor '" + name + "', head " + std::to_string(h));
      out.push_back(std::move(lin).value());
    }
    return out;
  }

 private:
  const Checkpoint& c_;
  std::string dir_;
};

// Exactly the declared tensors, with the declared shapes; errors name file and tensor.
Status CheckTensors(const ModelSpec& spec, const Checkpoint& ckpt) {
  std::set<std::string> expected;
  for (const ExpectedTensor& t : ExpectedTensors(spec)) {
    expected.insert(t.name);
    const TensorEntry* e = ckpt.Find(t.name);
    if (!e)
      return Status::Error("missing tensor '" + t.name + "' (expected shape " +
                           ShapeToString(t.shape) + ")");
    if (e->view.shape != t.shape)
      return Status::Error(e->file + ": tensor '" + t.name + "': expected shape " +
                           ShapeToString(t.shape) + ", found " + ShapeToString(e->view.shape) +
                           " (dtype " + std::string(DTypeName(e->view.dtype)) + ")");
  }
  for (const auto& [name, entry] : ckpt.tensors()) {
    if (expected.count(name)) continue;
    if (std::find(spec.ignored_tensors.begin(), spec.ignored_tensors.end(), name) !=
        spec.ignored_tensors.end())
      continue;
    if (spec.tie_embeddings && name == spec.lm_head_name) {
      if (entry.view.shape != Shape{spec.vocab, spec.hidden})
        return Status::Error(entry.file + ": tensor '" + name + "': expected shape " +
                             ShapeToString({spec.vocab, spec.hidden}) + ", found " +
                             ShapeToString(entry.view.shape));
      continue;  // a stored copy of the tied embedding (Huginn ships both); the embedding wins
    }
    return Status::Error(entry.file + ": unexpected tensor '" + name + "' (shape " +
                         ShapeToString(entry.view.shape) + ") for model_type '" +
                         spec.model_type + "'");
  }
  return Status::Ok();
}

Result<LayerWeights> LoadLayer(const ModelSpec& spec, const LayerNames& n, const TensorSource& src,
                               WeightFormat format) {
  LayerWeights w;
  FATHOM_ASSIGN_OR_RETURN(w.attn_in_norm, src.F32(n.attn_in_norm));
  FATHOM_ASSIGN_OR_RETURN(w.attn_out_norm, src.F32(n.attn_out_norm));
  FATHOM_ASSIGN_OR_RETURN(w.attn_post_norm, src.F32(n.attn_post_norm));
  FATHOM_ASSIGN_OR_RETURN(w.mlp_in_norm, src.F32(n.mlp_in_norm));
  FATHOM_ASSIGN_OR_RETURN(w.mlp_out_norm, src.F32(n.mlp_out_norm));
  FATHOM_ASSIGN_OR_RETURN(w.mlp_post_norm, src.F32(n.mlp_post_norm));
  const double lora_scale = spec.l2a.lora_rank > 0 ? spec.l2a.lora_alpha / spec.l2a.lora_rank : 0.0;
  // A budget ramp keeps the LoRA apart (LoraAdapter); without one it is merged into W.
  const std::vector<LayerNames::Lora> no_lora;
  const std::vector<LayerNames::Lora>& merged = spec.l2a.lora_ramp ? no_lora : n.lora;
  if (spec.l2a.lora_ramp) {
    FATHOM_ASSIGN_OR_RETURN(w.qkv_lora, src.Adapters(n.qkv, n.lora, lora_scale));
    FATHOM_ASSIGN_OR_RETURN(w.o_lora, src.Adapters({n.o_proj}, n.lora, lora_scale));
    FATHOM_ASSIGN_OR_RETURN(w.gate_up_lora, src.Adapters(n.gate_up, n.lora, lora_scale));
    FATHOM_ASSIGN_OR_RETURN(w.down_lora, src.Adapters({n.down}, n.lora, lora_scale));
  }
  FATHOM_ASSIGN_OR_RETURN(w.qkv, src.MakeLinear(n.qkv, n.qkv_bias, format, merged, lora_scale));
  FATHOM_ASSIGN_OR_RETURN(w.q_norm, src.F32(n.q_norm));
  FATHOM_ASSIGN_OR_RETURN(w.k_norm, src.F32(n.k_norm));
  if (!n.qk_bias.empty()) {
    // [2, 1, H, D]: q bias then k bias.
    FATHOM_ASSIGN_OR_RETURN(std::vector<float> qk, src.F32(n.qk_bias));
    const size_t half = qk.size() / 2;
    w.q_bias.assign(qk.begin(), qk.begin() + static_cast<std::ptrdiff_t>(half));
    w.k_bias.assign(qk.begin() + static_cast<std::ptrdiff_t>(half), qk.end());
    if (spec.n_kv_heads != spec.n_heads)
      return Status::Error("tensor '" + n.qk_bias + "': qk_bias needs as many key/value heads " +
                           "as attention heads");
  }
  if (spec.l2a.gate_heads) {
    FATHOM_ASSIGN_OR_RETURN(w.o_heads, src.PerHeadLinears(n.o_proj, spec.n_heads, format, merged, lora_scale));
  } else {
    FATHOM_ASSIGN_OR_RETURN(w.o, src.MakeLinear({n.o_proj}, {}, format, merged, lora_scale));
  }
  FATHOM_ASSIGN_OR_RETURN(w.gate_up, src.MakeLinear(n.gate_up, {}, format, merged, lora_scale));
  FATHOM_ASSIGN_OR_RETURN(w.down, src.MakeLinear({n.down}, {}, format, merged, lora_scale));
  FATHOM_ASSIGN_OR_RETURN(w.router_fc1, src.F32(n.router_fc1));
  FATHOM_ASSIGN_OR_RETURN(w.router_fc1_bias, src.F32(n.router_fc1_bias));
  FATHOM_ASSIGN_OR_RETURN(w.router_fc2, src.F32(n.router_fc2));
  FATHOM_ASSIGN_OR_RETURN(w.router_fc2_bias, src.F32(n.router_fc2_bias));
  return w;
}

}  // namespace

std::vector<Linear*> LayerWeights::linears() {
  std::vector<Linear*> out = {&qkv, &gate_up, &down};
  if (o_heads.empty()) out.push_back(&o);
  for (Linear& h : o_heads) out.push_back(&h);
  for (auto* adapters : {&qkv_lora, &o_lora, &gate_up_lora, &down_lora})
    for (LoraAdapter& ad : *adapters) out.insert(out.end(), {&ad.a, &ad.b});
  return out;
}

Result<std::unique_ptr<Model>> Model::Load(const std::string& dir, const LoadOptions& opt) {
  auto m = std::make_unique<Model>();
  m->dir_ = dir;
  const std::string config_path = (std::filesystem::path(dir) / "config.json").string();
  FATHOM_ASSIGN_OR_RETURN(m->spec_, SpecFromConfigFile(config_path));
  FATHOM_ASSIGN_OR_RETURN(m->checkpoint_, Checkpoint::Open(dir));
  const ModelSpec& spec = m->spec_;
  FATHOM_RETURN_IF_ERROR(CheckTensors(spec, m->checkpoint_).WithContext(dir));

  TensorSource src(m->checkpoint_, dir);
  ModelWeights& w = m->weights_;
  FATHOM_ASSIGN_OR_RETURN(w.embed, src.Get(spec.embed_name));
  for (const LayerSpec& l : spec.layers) {
    FATHOM_ASSIGN_OR_RETURN(LayerWeights lw, LoadLayer(spec, l.names, src, opt.weights));
    w.layers.push_back(std::move(lw));
  }
  FATHOM_ASSIGN_OR_RETURN(w.final_norm, src.F32(spec.final_norm_name));
  // The LM head has its own format, apart from the layers' (LoadOptions::lm_head).
  FATHOM_ASSIGN_OR_RETURN(
      w.lm_head,
      src.MakeLinear({spec.tie_embeddings ? spec.embed_name : spec.lm_head_name}, {}, opt.lm_head));
  if (!spec.loop.adapter.empty()) {
    FATHOM_ASSIGN_OR_RETURN(w.adapter, src.MakeLinear({spec.loop.adapter}, {}, opt.weights));
  }
  if (!spec.loop.exit_gate.empty()) {
    FATHOM_ASSIGN_OR_RETURN(w.exit_gate, src.F32(spec.loop.exit_gate));
    FATHOM_ASSIGN_OR_RETURN(std::vector<float> b, src.F32(spec.loop.exit_gate_bias));
    w.exit_gate_bias = b.at(0);
  }
  if (opt.split_bf16_activations) {
    for (LayerWeights& l : w.layers)
      for (Linear* lin : l.linears()) lin->set_split_bf16_activations(true);
    w.lm_head.set_split_bf16_activations(true);
    w.adapter.set_split_bf16_activations(true);
  }
  if (opt.batch_invariant) {
    std::vector<Linear*> all = {&w.lm_head};
    if (!spec.loop.adapter.empty()) all.push_back(&w.adapter);
    for (LayerWeights& l : w.layers)
      for (Linear* lin : l.linears()) all.push_back(lin);
    for (Linear* lin : all) FATHOM_RETURN_IF_ERROR(lin->MakeBatchInvariant().WithContext(dir));
    m->batch_invariant_ = true;
  }
  m->rope_ = RopeTable(spec.head_dim, spec.rope_theta, std::min<int64_t>(spec.max_positions, 65536),
                       spec.rope_scaling);
  return m;
}

namespace {
size_t LayerBytes(const LayerWeights& l) {
  size_t b = l.qkv.weight_bytes() + l.o.weight_bytes() + l.gate_up.weight_bytes() + l.down.weight_bytes();
  for (const Linear& h : l.o_heads) b += h.weight_bytes();
  for (const auto* adapters : {&l.qkv_lora, &l.o_lora, &l.gate_up_lora, &l.down_lora})
    for (const LoraAdapter& ad : *adapters) b += ad.a.weight_bytes() + ad.b.weight_bytes();
  return b;
}
}  // namespace

size_t Model::prelude_weight_bytes() const {
  size_t b = 0;
  for (int32_t i = 0; i < spec_.n_prelude; ++i) b += LayerBytes(weights_.layers[i]);
  return b;
}

size_t Model::core_step_weight_bytes() const {
  size_t b = weights_.adapter.weight_bytes();
  for (int32_t i = 0; i < spec_.n_core; ++i) b += LayerBytes(weights_.layers[spec_.n_prelude + i]);
  return b;
}

size_t Model::coda_weight_bytes() const {
  size_t b = weights_.lm_head.weight_bytes();
  for (int32_t i = 0; i < spec_.n_coda; ++i)
    b += LayerBytes(weights_.layers[spec_.n_prelude + spec_.n_core + i]);
  return b;
}

}  // namespace fathom
