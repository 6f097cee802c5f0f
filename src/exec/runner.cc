#include "exec/runner.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/check.h"
#include "kernels/activation.h"
#include "kernels/attention.h"
#include "kernels/norm.h"
#include "kernels/softmax.h"

namespace fathom {
namespace {

template <typename T>
T* Grow(std::vector<T>& v, int64_t n) {
  if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  return v.data();
}

void AddInPlace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

double Dot(const float* a, const float* b, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

void Runner::Embed(const int32_t* ids, int64_t n, float* x) {
  const int64_t E = s_.hidden;
  const TensorView& table = m_.weights().embed;
  const auto* base = static_cast<const uint8_t*>(table.data);
  const size_t row_bytes = static_cast<size_t>(E) * DTypeSize(table.dtype);
  for (int64_t i = 0; i < n; ++i) {
    ConvertToF32(table.dtype, base + static_cast<size_t>(ids[i]) * row_bytes, x + i * E,
                 static_cast<size_t>(E));
    if (s_.embed_scale != 1.f)
      for (int64_t j = 0; j < E; ++j) x[i * E + j] *= s_.embed_scale;
  }
}

void Runner::Block(int32_t layer, int32_t kv_layer, SequenceKv& kv, int64_t pos0, int64_t n,
                   float* x) {
  const LayerWeights& w = m_.weights().layers[static_cast<size_t>(layer)];
  const int64_t E = s_.hidden, I = s_.intermediate, H = s_.n_heads, KVH = s_.n_kv_heads;
  const int64_t D = s_.head_dim, qd = s_.q_dim(), kvd = s_.kv_dim(), qkv_w = qd + 2 * kvd;
  const float eps = s_.norm_eps;
  float* h = Grow(sc_.h, n * E);
  float* qkv = Grow(sc_.qkv, n * qkv_w);
  float* q = Grow(sc_.q, n * qd);
  float* attn = Grow(sc_.attn, n * qd);
  float* o = Grow(sc_.o, n * E);
  int32_t* pos = Grow(sc_.pos, n);
  int32_t* visible = Grow(sc_.visible, n);

  // Attention: h = norm(x); q | k | v = h W_qkv^T; K/V go straight into the cache rows.
  RmsNorm(x, w.attn_in_norm.data(), eps, n, E, h);
  w.qkv.Forward(h, n, qkv);
  float* k = kv.k(kv_layer, pos0);  // [n, KVH, D]
  float* v = kv.v(kv_layer, pos0);
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(qkv + i * qkv_w, qd, q + i * qd);
    std::copy_n(qkv + i * qkv_w + qd, kvd, k + i * kvd);
    std::copy_n(qkv + i * qkv_w + qd + kvd, kvd, v + i * kvd);
    pos[i] = static_cast<int32_t>(pos0 + i);
    visible[i] = static_cast<int32_t>(pos0 + i + 1);
  }
  if (!w.q_norm.empty()) {  // Qwen3: RMSNorm over each head's D values
    RmsNorm(q, w.q_norm.data(), eps, n * H, D, q);
    RmsNorm(k, w.k_norm.data(), eps, n * KVH, D, k);
  }
  if (!w.q_bias.empty()) {  // Huginn: qk_bias before RoPE
    for (int64_t i = 0; i < n; ++i) {
      AddInPlace(q + i * qd, w.q_bias.data(), qd);
      AddInPlace(k + i * kvd, w.k_bias.data(), kvd);
    }
  }
  ApplyRope(m_.rope(), s_.rope_style, pos, n, H, q);
  ApplyRope(m_.rope(), s_.rope_style, pos, n, KVH, k);
  const AttentionShape shape{H, KVH, D, 1.f / std::sqrt(static_cast<float>(D))};
  Attention(shape, q, n, visible, kv.k(kv_layer, 0), kv.v(kv_layer, 0), kvd, attn);
  w.o.Forward(attn, n, o);
  if (!w.attn_out_norm.empty()) RmsNorm(o, w.attn_out_norm.data(), eps, n, E, o);
  AddInPlace(x, o, n * E);
  if (!w.attn_post_norm.empty()) RmsNorm(x, w.attn_post_norm.data(), eps, n, E, x);

  // MLP: x += down(silu(gate(h)) * up(h)), h = norm(x).
  float* gate_up = Grow(sc_.gate_up, n * 2 * I);
  float* act = Grow(sc_.act, n * I);
  RmsNorm(x, w.mlp_in_norm.data(), eps, n, E, h);
  w.gate_up.Forward(h, n, gate_up);
  SwiGlu(gate_up, n, I, act);
  w.down.Forward(act, n, o);
  if (!w.mlp_out_norm.empty()) RmsNorm(o, w.mlp_out_norm.data(), eps, n, E, o);
  AddInPlace(x, o, n * E);
  if (!w.mlp_post_norm.empty()) RmsNorm(x, w.mlp_post_norm.data(), eps, n, E, x);
}

void Runner::InitialState(const ForwardRequest& req, int64_t n, float* x) const {
  const int64_t E = s_.hidden;
  if (!req.random_init) {
    std::fill_n(x, n * E, 0.f);
    return;
  }
  // Huginn "like-init": truncated normal, std sqrt(2 / (5 E)), cut at 3 std, times the
  // embedding scale. Seeded per position so that chunking does not change the state.
  const double std_dev = std::sqrt(2.0 / (5.0 * static_cast<double>(E)));
  for (int64_t i = 0; i < n; ++i) {
    std::mt19937_64 rng(SplitMix(*req.random_init ^ SplitMix(static_cast<uint64_t>(req.pos0 + i))));
    std::normal_distribution<double> normal(0.0, std_dev);
    for (int64_t j = 0; j < E; ++j) {
      double v;
      do v = normal(rng);
      while (std::abs(v) > 3.0 * std_dev);
      x[i * E + j] = static_cast<float>(v) * s_.embed_scale;
    }
  }
}

void Runner::CodaAndHead(SequenceKv& kv, int64_t pos0, int64_t n, const float* x, bool all,
                         std::vector<float>* logits) {
  const int64_t E = s_.hidden;
  float* y = Grow(sc_.coda, n * E);
  std::copy_n(x, n * E, y);
  const int32_t first_coda = s_.n_prelude + s_.n_core;
  for (int32_t j = 0; j < s_.n_coda; ++j)
    Block(first_coda + j, kv.KvLayer(first_coda + j, 0), kv, pos0, n, y);
  const int64_t rows = all ? n : 1;
  float* head_in = y + (n - rows) * E;
  if (s_.before_head_norm)
    RmsNorm(head_in, m_.weights().final_norm.data(), s_.norm_eps, rows, E, head_in);
  logits->resize(static_cast<size_t>(rows * s_.vocab));
  m_.weights().lm_head.Forward(head_in, rows, logits->data());
}

void Runner::Signals(const ForwardRequest& req, SequenceKv& kv, int64_t n, int32_t step,
                     const float* state, const float* prev, ForwardResult* out, StepSignal* last) {
  const int64_t E = s_.hidden;
  const ModelWeights& w = m_.weights();
  for (int64_t i = 0; i < n; ++i) {
    StepSignal sig;
    const float* xi = state + i * E;
    if (s_.loop.exit_signal == ExitSignal::kGateHazard) {
      const double z = Dot(w.exit_gate.data(), xi, E) + w.exit_gate_bias;
      sig.gate_lambda = static_cast<float>(1.0 / (1.0 + std::exp(-z)));
    }
    if (s_.loop.exit_signal == ExitSignal::kLatentDiff) {
      double diff = 0, norm = 0;
      for (int64_t j = 0; j < E; ++j) {
        const double d = static_cast<double>(xi[j]) - prev[i * E + j];
        diff += d * d;
        norm += static_cast<double>(xi[j]) * xi[j];
      }
      sig.latent_diff = static_cast<float>(std::sqrt(diff) / std::max(std::sqrt(norm), 1e-30));
    }
    if (out && req.record_signals) {
      out->gate_lambda.push_back(sig.gate_lambda);
      out->latent_diff.push_back(sig.latent_diff);
    }
    if (i == n - 1) *last = sig;
  }
  if (!req.compute_kl) return;
  // KL(p_{r-1} || p_r) of the predictions made from the states after steps r-1 and r. The
  // coda writes its KV at these positions; the final pass after the loop overwrites it.
  const int64_t V = s_.vocab;
  float* y = Grow(sc_.cat, n * E);
  std::copy_n(state, n * E, y);
  if (s_.loop.after_loop_norm) RmsNorm(y, w.final_norm.data(), s_.norm_eps, n, E, y);
  std::vector<float> logits;
  CodaAndHead(kv, req.pos0, n, y, true, &logits);
  float* logp = Grow(sc_.logp, n * V);
  float* prev_logp = Grow(sc_.prev_logp, n * V);
  for (int64_t i = 0; i < n; ++i) {
    LogSoftmax(logits.data() + i * V, V, logp + i * V);
    // Before step 1 the prediction is uniform (upstream's p_0), so step 1 reports
    // KL(uniform || p_1).
    if (step == 1) std::fill_n(prev_logp + i * V, V, -std::log(static_cast<float>(V)));
    double kl = 0;
    for (int64_t t = 0; t < V; ++t) {
      const double lp = prev_logp[i * V + t];
      kl += std::exp(lp) * (lp - logp[i * V + t]);
    }
    if (out && req.record_signals) out->kl.push_back(static_cast<float>(kl));
    if (i == n - 1) last->kl = static_cast<float>(kl);
  }
  std::copy_n(logp, n * V, prev_logp);
}

Status Runner::Forward(SequenceKv& kv, const ForwardRequest& req, ForwardResult* out) {
  const int64_t n = req.n, E = s_.hidden;
  if (n <= 0) return Status::Error("forward: no tokens");
  for (int64_t i = 0; i < n; ++i)
    if (req.ids[i] < 0 || req.ids[i] >= s_.vocab)
      return Status::Error("token " + std::to_string(i) + ": id " + std::to_string(req.ids[i]) +
                           " is outside the vocabulary [0, " + std::to_string(s_.vocab) + ")");
  if (req.pos0 + n > kv.capacity())
    return Status::Error("position " + std::to_string(req.pos0 + n - 1) +
                         " is beyond the KV cache capacity of " + std::to_string(kv.capacity()));
  if (req.pos0 + n > m_.rope().max_positions())
    return Status::Error("position " + std::to_string(req.pos0 + n - 1) +
                         " is beyond the model's maximum of " +
                         std::to_string(m_.rope().max_positions()) + " positions");
  if (s_.loop.looped && (req.loops < 1 || req.loops > kv.loops()))
    return Status::Error("loops must be in [1, " + std::to_string(kv.loops()) + "], found " +
                         std::to_string(req.loops));
  if (req.exit_policy && n != 1)
    return Status::Error("an exit policy applies to one decode token at a time");
  *out = ForwardResult{};

  float* x = Grow(sc_.x, n * E);
  Embed(req.ids, n, x);
  for (int32_t l = 0; l < s_.n_prelude; ++l) Block(l, kv.KvLayer(l, 0), kv, req.pos0, n, x);

  if (s_.loop.looped) {
    const LoopSpec& loop = s_.loop;
    float* e = Grow(sc_.e, n * E);  // the prelude's output, injected every step (Huginn)
    float* prev = Grow(sc_.prev, n * E);
    std::copy_n(x, n * E, e);
    if (loop.initial_state != InitialState::kPreludeOutput) InitialState(req, n, x);
    if (req.exit_policy) req.exit_policy->Reset();
    for (int32_t r = 0; r < req.loops; ++r) {
      std::copy_n(x, n * E, prev);
      if (loop.core_input == CoreInput::kAdapterOnConcat) {
        float* cat = Grow(sc_.cat, n * 2 * E);  // [n, 2E] = [x | e]
        for (int64_t i = 0; i < n; ++i) {
          std::copy_n(x + i * E, E, cat + i * 2 * E);
          std::copy_n(e + i * E, E, cat + i * 2 * E + E);
        }
        m_.weights().adapter.Forward(cat, n, x);
      }
      for (int32_t j = 0; j < s_.n_core; ++j) {
        const int32_t layer = s_.n_prelude + j;
        Block(layer, kv.KvLayer(layer, r), kv, req.pos0, n, x);
      }
      if (loop.step_norm) RmsNorm(x, m_.weights().final_norm.data(), s_.norm_eps, n, E, x);
      out->steps_run = r + 1;
      StepSignal last;
      Signals(req, kv, n, r + 1, x, prev, out, &last);
      if (req.exit_policy && req.exit_policy->ShouldExit(r + 1, last) && r + 1 < req.loops) {
        kv.CopyToDeeperSteps(req.pos0, r + 1);
        break;
      }
    }
    if (loop.after_loop_norm) RmsNorm(x, m_.weights().final_norm.data(), s_.norm_eps, n, E, x);
  }
  CodaAndHead(kv, req.pos0, n, x, req.all_logits, &out->logits);
  return Status::Ok();
}

}  // namespace fathom
