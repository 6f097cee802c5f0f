#include "model/l2a.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "model/model.h"

namespace fathom {
namespace {

// The base weight name a LoRA target adapts, in Llama naming (dense.cc DenseLayerNames).
std::string TargetWeight(const LayerNames& n, const std::string& target) {
  if (target == "q_proj") return n.qkv.at(0);
  if (target == "k_proj") return n.qkv.at(1);
  if (target == "v_proj") return n.qkv.at(2);
  if (target == "o_proj") return n.o_proj;
  if (target == "gate_proj") return n.gate_up.at(0);
  if (target == "up_proj") return n.gate_up.at(1);
  return n.down;  // down_proj (checked by the caller)
}

// "model.layers.0.self_attn.q_proj.weight" -> "model.layers.0.self_attn.q_proj.lora_A.weight".
std::string LoraName(const std::string& weight, const char* which) {
  const std::string suffix = ".weight";
  return weight.substr(0, weight.size() - suffix.size()) + "." + which + ".weight";
}

Result<std::vector<std::string>> StringList(const JsonFields& c, const std::string& field,
                                            const std::vector<std::string>& allowed) {
  if (!c.Has(field)) return Status::Error(c.source() + ": missing field '" + field + "'");
  const nlohmann::json& v = c.json().at(field);
  if (!v.is_array() || v.empty())
    return Status::Error(c.source() + ": field '" + field + "': expected a non-empty list of strings, found " +
                         DescribeJsonValue(v));
  std::vector<std::string> out;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string where = c.source() + ": field '" + field + "[" + std::to_string(i) + "]'";
    if (!v[i].is_string()) return Status::Error(where + ": expected a string, found " + DescribeJsonValue(v[i]));
    const std::string s = v[i].get<std::string>();
    if (std::find(allowed.begin(), allowed.end(), s) == allowed.end()) {
      std::string known;
      for (const std::string& a : allowed) known += (known.empty() ? "" : ", ") + a;
      return Status::Error(where + ": unknown value '" + s + "' (known: " + known + ")");
    }
    if (std::find(out.begin(), out.end(), s) != out.end())
      return Status::Error(where + ": '" + s + "' is listed twice");
    out.push_back(s);
  }
  return out;
}

}  // namespace

Status ReadL2aConfig(const JsonFields& config, ModelSpec& spec) {
  FATHOM_ASSIGN_OR_RETURN(JsonFields c, config.Object("l2a"));
  L2aSpec& l = spec.l2a;
  l.enabled = true;
  FATHOM_ASSIGN_OR_RETURN(int64_t version, c.Int("version"));
  if (version != 1)
    return Status::Error(c.source() + ": field 'version': " + std::to_string(version) +
                         " is not supported (fathom reads version 1)");
  FATHOM_ASSIGN_OR_RETURN(std::vector<std::string> gates, StringList(c, "gates", {"attention", "mlp", "heads"}));
  for (const std::string& g : gates) {
    if (g == "attention") l.gate_attention = true;
    if (g == "mlp") l.gate_mlp = true;
    if (g == "heads") l.gate_heads = true;
  }
  FATHOM_ASSIGN_OR_RETURN(int64_t hidden, c.Int("router_hidden"));
  if (hidden < 0 || hidden > 65536)
    return Status::Error(c.source() + ": field 'router_hidden': " + std::to_string(hidden) + " outside [0, 65536]");
  l.router_hidden = static_cast<int32_t>(hidden);
  FATHOM_ASSIGN_OR_RETURN(int64_t k, c.Int("budget_features"));
  if (k < 0 || k > 64)
    return Status::Error(c.source() + ": field 'budget_features': " + std::to_string(k) + " outside [0, 64]");
  l.budget_features = static_cast<int32_t>(k);
  if (l.gate_attention || c.Has("skipped_attention_kv")) {
    FATHOM_ASSIGN_OR_RETURN(std::string kv, c.String("skipped_attention_kv"));
    if (kv == "compute") {
      l.skipped_kv = SkippedKv::kCompute;
    } else if (kv == "mask") {
      l.skipped_kv = SkippedKv::kMask;
    } else {
      return Status::Error(c.source() + ": field 'skipped_attention_kv': unknown value '" + kv +
                           "' (known: compute, mask)");
    }
  }
  if (c.Has("lora")) {
    FATHOM_ASSIGN_OR_RETURN(JsonFields lora, c.Object("lora"));
    FATHOM_ASSIGN_OR_RETURN(int64_t rank, lora.Int("rank"));
    if (rank < 1 || rank > 4096)
      return Status::Error(lora.source() + ": field 'rank': " + std::to_string(rank) + " outside [1, 4096]");
    FATHOM_ASSIGN_OR_RETURN(double alpha, lora.Number("alpha"));
    if (!(alpha > 0) || !std::isfinite(alpha))
      return Status::Error(lora.source() + ": field 'alpha' must be a positive number");
    FATHOM_ASSIGN_OR_RETURN(l.lora_targets,
                            StringList(lora, "targets",
                                       {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"}));
    l.lora_rank = static_cast<int32_t>(rank);
    l.lora_alpha = alpha;
    if (lora.Has("budget_ramp")) {
      const nlohmann::json& v = lora.json().at("budget_ramp");
      const std::string where = lora.source() + ": field 'budget_ramp'";
      if (!v.is_array() || v.size() != 2 || !v[0].is_number() || !v[1].is_number())
        return Status::Error(where + ": expected [b_full, b_off], two numbers, found " + DescribeJsonValue(v));
      const double full = v[0].get<double>(), off = v[1].get<double>();
      if (!(full >= 0 && full < off && off <= 1))
        return Status::Error(where + ": expected 0 <= b_full < b_off <= 1, found [" + v[0].dump() + ", " +
                             v[1].dump() + "]");
      l.lora_ramp = true;
      l.lora_ramp_full = full;
      l.lora_ramp_off = off;
    }
  }

  for (size_t i = 0; i < spec.layers.size(); ++i) {
    LayerNames& n = spec.layers[i].names;
    const std::string p = "model.layers." + std::to_string(i) + ".l2a_router.";
    if (l.router_hidden > 0) {
      n.router_fc1 = p + "fc1.weight";
      n.router_fc1_bias = p + "fc1.bias";
      n.router_fc2 = p + "fc2.weight";
      n.router_fc2_bias = p + "fc2.bias";
    } else {
      n.router_fc1 = p + "fc.weight";
      n.router_fc1_bias = p + "fc.bias";
    }
    for (const std::string& t : l.lora_targets) {
      const std::string w = TargetWeight(n, t);
      n.lora.push_back({w, LoraName(w, "lora_A"), LoraName(w, "lora_B")});
    }
  }
  return Status::Ok();
}

void L2aBudgetFeatures(const L2aSpec& l2a, double b, double* phi) {
  phi[0] = b;
  for (int32_t k = 1; k <= l2a.budget_features; ++k) {
    phi[2 * k - 1] = std::sin(std::numbers::pi * k * b);
    phi[2 * k] = std::cos(std::numbers::pi * k * b);
  }
}

namespace {

// y [rows] = W [rows, cols] x + bias, in double. Four independent 4-lane partial sums per row
// (AVX2 FMA; a fixed order, so a row's result depends on its inputs only): the router runs
// for every token at every layer, and a one-accumulator scalar loop made it as slow as the
// decode attention on small models.
void Affine(const float* w, const float* bias, int64_t rows, int64_t cols, const double* x, double* y) {
  const int64_t vec = cols / 16 * 16;
  for (int64_t r = 0; r < rows; ++r) {
    const float* wr = w + r * cols;
    __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd()};
    for (int64_t c = 0; c < vec; c += 16)
      for (int j = 0; j < 4; ++j)
        acc[j] = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(wr + c + 4 * j)), _mm256_loadu_pd(x + c + 4 * j), acc[j]);
    const __m256d s = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
    alignas(32) double lanes[4];
    _mm256_store_pd(lanes, s);
    double tail = 0;
    for (int64_t c = vec; c < cols; ++c) tail += static_cast<double>(wr[c]) * x[c];
    y[r] = static_cast<double>(bias[r]) + ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + tail;
  }
}

}  // namespace

int64_t L2aRouterScratch(const ModelSpec& spec) {
  return spec.hidden + spec.l2a.features() + spec.l2a.router_hidden;
}

void L2aRouterLogits(const ModelSpec& spec, const LayerWeights& w, const float* h, double b, double* scratch,
                     double* z) {
  const L2aSpec& l = spec.l2a;
  const int64_t E = spec.hidden, in = E + l.features(), G = l.outputs(spec.n_heads), R = l.router_hidden;
  double* u = scratch;
  for (int64_t j = 0; j < E; ++j) u[j] = h[j];
  L2aBudgetFeatures(l, b, u + E);
  for (int64_t j = E; j < in; ++j) u[j] = static_cast<float>(u[j]);  // phi is rounded to f32 (the format)
  if (R == 0) {
    Affine(w.router_fc1.data(), w.router_fc1_bias.data(), G, in, u, z);
    return;
  }
  double* hid = scratch + in;
  Affine(w.router_fc1.data(), w.router_fc1_bias.data(), R, in, u, hid);
  for (int64_t j = 0; j < R; ++j) hid[j] = hid[j] / (1.0 + std::exp(-hid[j]));  // silu
  Affine(w.router_fc2.data(), w.router_fc2_bias.data(), G, R, hid, z);
}

}  // namespace fathom
