// StageRunner::GatedBlock: one transformer block of an L2A gate checkpoint
// (docs/L2A_FORMAT.md). Per row, the layer's router reads h = RMSNorm(x) and the row's
// budget b and decides: attention on/off, MLP on/off, and which query heads are kept. Rows
// that run a sub-layer are gathered into one matmul per weight and scattered back, so the
// compute a gate saves is not spent:
//
//   K/V:       every row (`compute`) or the attending rows (`mask`): qkv, norms, RoPE, writes
//   attention: the attending rows, pruned heads neither computed nor read (head_keep)
//   o_proj:    the attending rows; with head gates one [E, D] matmul per head over the rows
//              that keep it, summed in head order
//   MLP:       the rows whose MLP gate is on
//
// Under `mask` a row that skips attention writes no K/V at this layer and its position is
// recorded as not ran (attn_ran), which ResolveAttention turns into a key mask for every
// later query, rows of the same prefill chunk included (recorded before any row attends).
//
// LoRA with a budget ramp (l2a.lora.budget_ramp) is not merged into W: after each adapted
// matmul over its gathered rows, every row adds its share s(b) of B (A x) (AddLora).
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "exec/stage_runner.h"
#include "kernels/activation.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
#include "model/l2a.h"

namespace fathom {
namespace {

// y [m, ld] += share[j] * B (A x_j) for every adapter, at its column offset, for the m rows of
// x [m, in]. A row whose share is 0 gains exactly 0; a call where every share is 0 does no work.
void AddLora(const std::vector<LoraAdapter>& adapters, const float* x, int64_t m, const float* share,
             FixedVector<float>& t_buf, FixedVector<float>& u_buf, float* y, int64_t ld) {
  if (adapters.empty() || std::all_of(share, share + m, [](float s) { return s == 0.f; })) return;
  for (const LoraAdapter& ad : adapters) {
    const int64_t r = ad.a.out_features(), out = ad.b.out_features();
    float* t = t_buf.First(m * r);
    float* u = u_buf.First(m * out);
    ad.a.Forward(x, m, t);
    for (int64_t j = 0; j < m; ++j)
      for (int64_t k = 0; k < r; ++k) t[j * r + k] *= share[j];
    ad.b.Forward(t, m, u);
    for (int64_t j = 0; j < m; ++j)
      for (int64_t o = 0; o < out; ++o) y[j * ld + ad.offset + o] += u[j * out + o];
  }
}

}  // namespace

void StageRunner::GatedBlock(int32_t layer, Rows rows, float* x) {
  const LayerWeights& w = m_.weights().layers[static_cast<size_t>(layer)];
  const L2aSpec& l2a = s_.l2a;
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t E = s_.hidden, I = s_.intermediate, H = s_.n_heads, KVH = s_.n_kv_heads;
  const int64_t D = s_.head_dim, qd = s_.q_dim(), kvd = s_.kv_dim(), qkv_w = qd + 2 * kvd;
  const float eps = s_.norm_eps;
  FATHOM_CHECK_MSG(w.attn_out_norm.empty() && w.attn_post_norm.empty() && w.mlp_out_norm.empty() &&
                       w.mlp_post_norm.empty() && s_.layers[static_cast<size_t>(layer)].attn.produces_kv,
                   "L2A gates on a block that is not a plain pre-norm dense block (layer " << layer << ")");

  // Decisions. h [n, E]: the attention's normed input, which the router reads too.
  float* h = st_.h.First(n * E);
  RmsNorm(x, w.attn_in_norm.data(), eps, n, E, h);
  uint8_t* attn_on = st_.attn_on.First(n);
  uint8_t* mlp_on = st_.mlp_on.First(n);
  uint8_t* keep = st_.head_keep.First(n * H);
  double* z = st_.router_z.data();
  for (int64_t i = 0; i < n; ++i) {
    L2aRouterLogits(s_, w, h + i * E, rows[static_cast<size_t>(i)].budget, st_.router_scratch.data(), z);
    int64_t g = 0;
    attn_on[i] = !l2a.gate_attention || z[g++] > 0;
    mlp_on[i] = !l2a.gate_mlp || z[g++] > 0;
    for (int64_t hh = 0; hh < H; ++hh) keep[i * H + hh] = !l2a.gate_heads || z[g + hh] > 0;
  }
  const bool mask = l2a.gate_attention && l2a.skipped_kv == SkippedKv::kMask;
  FixedVector<int64_t>& kv_rows = st_.kv_rows;  // rows that project q/k/v and write K/V
  FixedVector<int64_t>& att = st_.att_sub;      // rows that attend
  kv_rows.clear();
  att.clear();
  for (int64_t i = 0; i < n; ++i) {
    if (attn_on[i]) att.push_back(i);
    if (attn_on[i] || !mask) kv_rows.push_back(i);
    if (mask) rows[static_cast<size_t>(i)].attn_ran[layer][static_cast<size_t>(rows[static_cast<size_t>(i)].pos)] = attn_on[i];
  }

  // q/k/v of kv_rows: qkv row j is kv_rows[j]'s.
  const int64_t m = kv_rows.size();
  GateCounts& gc = gate_counts_;
  const auto f = [](int64_t v) { return static_cast<double>(v); };
  const double qkv_flops = 2 * f(E) * f(qkv_w), o_flops = 2 * f(qd) * f(E), mlp_flops = 6 * f(E) * f(I);
  gc.token_layers += n;
  gc.dense_matmul_flops += f(n) * (qkv_flops + o_flops + mlp_flops);
  gc.matmul_flops += f(m) * qkv_flops;
  const bool all_kv = m == n;
  const float* hk = h;
  if (!all_kv) {
    float* g = st_.sub_x.First(m * E);
    for (int64_t j = 0; j < m; ++j) std::copy_n(h + kv_rows[j] * E, E, g + j * E);
    hk = g;
  }
  float* qkv = st_.qkv.First(m * qkv_w);
  float* q = st_.q.First(m * qd);
  float* k = st_.k.First(m * kvd);
  int32_t* pos = st_.pos.First(m);
  // Each row's LoRA share, by the rows of the sub-layer at hand (only with a budget ramp).
  const bool ramp = l2a.lora_ramp;
  float* share = ramp ? st_.lora_share.First(n) : nullptr;
  const auto shares_of = [&](const FixedVector<int64_t>& sub, int64_t count) {
    for (int64_t j = 0; j < count; ++j)
      share[j] = static_cast<float>(l2a.lora_share(rows[static_cast<size_t>(sub[j])].budget));
    return share;
  };
  if (m > 0) w.qkv.Forward(hk, m, qkv);
  if (ramp && m > 0) AddLora(w.qkv_lora, hk, m, shares_of(kv_rows, m), st_.lora_t, st_.lora_u, qkv, qkv_w);
  for (int64_t j = 0; j < m; ++j) {
    std::copy_n(qkv + j * qkv_w, qd, q + j * qd);
    std::copy_n(qkv + j * qkv_w + qd, kvd, k + j * kvd);
    pos[j] = static_cast<int32_t>(rows[static_cast<size_t>(kv_rows[j])].pos);
  }
  if (!w.q_norm.empty()) {  // Qwen3
    RmsNorm(q, w.q_norm.data(), eps, m * H, D, q);
    RmsNorm(k, w.k_norm.data(), eps, m * KVH, D, k);
  }
  ApplyRope(m_.rope(), s_.rope_style, pos, m, H, q);
  ApplyRope(m_.rope(), s_.rope_style, pos, m, KVH, k);
  for (int64_t j = 0; j < m; ++j) {
    const StageRow& r = rows[static_cast<size_t>(kv_rows[j])];
    const int32_t wl = table_.WriteLayer(layer, r.step, r.phase);
    if (wl < 0) continue;
    WriteKvRow(r, wl, false, k + j * kvd);
    WriteKvRow(r, wl, true, qkv + j * qkv_w + qd + kvd);
  }

  // Attention of the attending rows (a of them), their output attn [a, qd].
  const int64_t a = att.size();
  float* attn = st_.attn.First(a * qd);
  float* o = st_.o.First(a * E);
  if (a > 0) {
    FATHOM_CHECK(layer >= st_.att_first_layer && layer < st_.att_first_layer + st_.att_layers &&
                 n * st_.att_layers == st_.att_rows.size());
    FixedVector<PagedAttentionRow>& sub = st_.sub_att;
    sub.clear();
    for (int64_t j = 0, c = 0; j < a; ++j) {
      const int64_t i = att[j];
      while (kv_rows[c] != i) ++c;  // att is a subsequence of kv_rows
      gc.heads += std::count(keep + i * H, keep + (i + 1) * H, uint8_t{1});
      PagedAttentionRow r = st_.att_rows[(layer - st_.att_first_layer) * n + i];
      r.q = q + c * qd;
      r.out = attn + j * qd;
      if (l2a.gate_heads) r.head_keep = keep + i * H;
      sub.push_back(r);
    }
    const BlockPool& pool = kv_.pool();
    const PagedKvView view{pool.k_data(),     pool.v_data(),     pool.block_stride(),
                           pool.row_stride(), pool.block_size(), pool.dtype()};
    const AttentionShape shape{H, KVH, D, 1.f / std::sqrt(static_cast<float>(D))};
    PagedAttention(shape, view, sub.data(), a, st_.segs.data(), attention_grouping_);

    gc.attention += a;
    if (!l2a.gate_heads) {
      gc.matmul_flops += f(a) * o_flops;
      w.o.Forward(attn, a, o);
    } else {  // o = sum over kept heads of o_proj[:, head] attn_head, in head order
      std::fill_n(o, a * E, 0.f);
      FixedVector<int64_t>& hr = st_.mlp_sub;  // scratch: the attending rows keeping head hh
      for (int64_t hh = 0; hh < H; ++hh) {
        hr.clear();
        for (int64_t j = 0; j < a; ++j)
          if (keep[att[j] * H + hh]) hr.push_back(j);
        const int64_t c = hr.size();
        if (c == 0) continue;
        float* in = st_.head_in.First(c * D);
        float* out = st_.head_out.First(c * E);
        for (int64_t t = 0; t < c; ++t) std::copy_n(attn + hr[t] * qd + hh * D, D, in + t * D);
        w.o_heads[static_cast<size_t>(hh)].Forward(in, c, out);
        gc.matmul_flops += f(c) * o_flops / f(H);
        for (int64_t t = 0; t < c; ++t)
          for (int64_t e = 0; e < E; ++e) o[hr[t] * E + e] += out[t * E + e];
      }
    }
    // attn holds zeros for pruned heads, so the o_proj adapters see what o_proj saw.
    if (ramp) AddLora(w.o_lora, attn, a, shares_of(att, a), st_.lora_t, st_.lora_u, o, E);
    for (int64_t j = 0; j < a; ++j)
      for (int64_t e = 0; e < E; ++e) x[att[j] * E + e] += o[j * E + e];
  }

  // MLP of the rows whose gate is on, gathered: xm [c, E] -> h2 -> gate_up -> act -> down.
  FixedVector<int64_t>& mr = st_.mlp_sub;
  mr.clear();
  for (int64_t i = 0; i < n; ++i)
    if (mlp_on[i]) mr.push_back(i);
  const int64_t c = mr.size();
  gc.mlp += c;
  gc.matmul_flops += f(c) * mlp_flops;
  if (c == 0) return;
  float* h2 = st_.h.First(c * E);
  if (c == n) {
    RmsNorm(x, w.mlp_in_norm.data(), eps, n, E, h2);
  } else {
    float* xm = st_.sub_x.First(c * E);
    for (int64_t t = 0; t < c; ++t) std::copy_n(x + mr[t] * E, E, xm + t * E);
    RmsNorm(xm, w.mlp_in_norm.data(), eps, c, E, h2);
  }
  float* gate_up = st_.gate_up.First(c * 2 * I);
  float* act = st_.act.First(c * I);
  float* out = st_.o.First(c * E);
  const float* mlp_share = ramp ? shares_of(mr, c) : nullptr;  // for gate/up and down alike
  w.gate_up.Forward(h2, c, gate_up);
  if (ramp) AddLora(w.gate_up_lora, h2, c, mlp_share, st_.lora_t, st_.lora_u, gate_up, 2 * I);
  SwiGlu(gate_up, c, I, act);
  w.down.Forward(act, c, out);
  if (ramp) AddLora(w.down_lora, act, c, mlp_share, st_.lora_t, st_.lora_u, out, E);
  for (int64_t t = 0; t < c; ++t)
    for (int64_t e = 0; e < E; ++e) x[mr[t] * E + e] += out[t * E + e];
}

}  // namespace fathom
