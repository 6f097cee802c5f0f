#include "exec/stage_runner.h"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/check.h"
#include "kernels/activation.h"
#include "kernels/norm.h"
#include "kernels/rope.h"
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

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

StageRunner::StageRunner(const Model& model, KvManager& kv, int32_t num_slots)
    : m_(model), s_(model.spec()), kv_(kv), table_(kv.table()), num_slots_(num_slots) {
  slot_x_.resize(static_cast<size_t>(num_slots * s_.hidden));
  slot_e_.resize(static_cast<size_t>(num_slots * s_.hidden));
}

void StageRunner::AddSequence(KvManager::SeqId seq, int32_t loops) { seqs_[seq].loops = loops; }
void StageRunner::ReleaseSequence(KvManager::SeqId seq) { seqs_.erase(seq); }

StageRunner::SeqInfo& StageRunner::Info(KvManager::SeqId seq) {
  auto it = seqs_.find(seq);
  FATHOM_CHECK_MSG(it != seqs_.end(), "sequence " << seq << " was not added to the runner");
  return it->second;
}

int32_t StageRunner::SlotDepth(int32_t step) const {
  return table_.layout() == KvLayout::kFirstThenShared ? std::min(step, table_.shared_after() - 1)
                                                       : step;
}

Status StageRunner::CheckRows(const std::vector<Row>& rows) const {
  for (const Row& r : rows) {
    if (!kv_.contains(r.seq) || !seqs_.count(r.seq))
      return Status::Error("sequence " + std::to_string(r.seq) + " is unknown");
    if (r.pos >= kv_.length(r.seq))
      return Status::Error("sequence " + std::to_string(r.seq) + ": position " +
                           std::to_string(r.pos) + " has no KV allocated (length " +
                           std::to_string(kv_.length(r.seq)) + ")");
    if (r.pos >= m_.rope().max_positions())
      return Status::Error("position " + std::to_string(r.pos) + " is beyond the model's " +
                           std::to_string(m_.rope().max_positions()) + " positions");
  }
  return Status::Ok();
}

Status StageRunner::CheckItems(const std::vector<DecodeItem>& items) const {
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].slot < 0 || items[i].slot >= num_slots_)
      return Status::Error("item " + std::to_string(i) + ": slot " + std::to_string(items[i].slot) +
                           " outside [0, " + std::to_string(num_slots_) + ")");
  return Status::Ok();
}

void StageRunner::Embed(const int32_t* ids, int64_t n, float* x) const {
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

void StageRunner::InitState(const std::optional<uint64_t>& seed, int64_t pos, float* x) const {
  const int64_t E = s_.hidden;
  if (!seed) {
    std::fill_n(x, E, 0.f);
    return;
  }
  // Huginn "like-init": truncated normal, std sqrt(2 / (5 E)), cut at 3 std, times the
  // embedding scale; seeded per position so that chunking and batching change nothing.
  const double std_dev = std::sqrt(2.0 / (5.0 * static_cast<double>(E)));
  std::mt19937_64 rng(SplitMix(*seed ^ SplitMix(static_cast<uint64_t>(pos))));
  std::normal_distribution<double> normal(0.0, std_dev);
  for (int64_t j = 0; j < E; ++j) {
    double v;
    do v = normal(rng);
    while (std::abs(v) > 3.0 * std_dev);
    x[j] = static_cast<float>(v) * s_.embed_scale;
  }
}

// Attention for all rows of one layer: per row, the KV segments its layout reads.
void StageRunner::Attend(int32_t layer, const std::vector<Row>& rows, const float* q, float* out) {
  const int64_t qd = s_.q_dim();
  const bool core = layer >= s_.n_prelude && layer < s_.n_prelude + s_.n_core;
  const bool masked = core && table_.HasHoles();
  segs_.clear();
  att_rows_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    kv_segs_.clear();
    table_.ReadSegments(layer, r.step, r.phase, kv_.prompt_len(r.seq), r.pos + 1, &kv_segs_);
    PagedAttentionRow a;
    a.q = q + static_cast<int64_t>(i) * qd;
    a.out = out + static_cast<int64_t>(i) * qd;
    a.seg_begin = static_cast<int32_t>(segs_.size());
    for (const KvSegment& g : kv_segs_) {
      KeySegment k;
      k.block_table = kv_.BlockTable(r.seq, g.physical_layer);
      k.begin = g.begin;
      k.end = g.end;
      if (masked) {
        k.key_steps = Info(r.seq).steps_run.data();
        k.min_step = static_cast<int16_t>(SlotDepth(r.step));
      }
      segs_.push_back(k);
    }
    a.seg_end = static_cast<int32_t>(segs_.size());
    att_rows_.push_back(a);
  }
  const BlockPool& pool = kv_.pool();
  const PagedKvView view{pool.k_base(), pool.v_base(), pool.block_stride_floats(),
                         pool.row_floats(), pool.block_size()};
  const AttentionShape shape{s_.n_heads, s_.n_kv_heads, s_.head_dim,
                             1.f / std::sqrt(static_cast<float>(s_.head_dim))};
  PagedAttention(shape, view, att_rows_.data(), static_cast<int64_t>(att_rows_.size()), segs_.data());
}

// One transformer block over x [n, E] in place; row i writes its K/V where the layout says.
void StageRunner::Block(int32_t layer, const std::vector<Row>& rows, float* x) {
  const LayerWeights& w = m_.weights().layers[static_cast<size_t>(layer)];
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t E = s_.hidden, I = s_.intermediate, H = s_.n_heads, KVH = s_.n_kv_heads;
  const int64_t D = s_.head_dim, qd = s_.q_dim(), kvd = s_.kv_dim(), qkv_w = qd + 2 * kvd;
  const float eps = s_.norm_eps;
  float* h = Grow(h_, n * E);
  float* qkv = Grow(qkv_, n * qkv_w);
  float* q = Grow(q_, n * qd);
  float* k = Grow(k_, n * kvd);
  float* attn = Grow(attn_, n * qd);
  float* o = Grow(o_, n * E);
  int32_t* pos = Grow(pos_, n);

  RmsNorm(x, w.attn_in_norm.data(), eps, n, E, h);
  w.qkv.Forward(h, n, qkv);  // [n, q | k | v]
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(qkv + i * qkv_w, qd, q + i * qd);
    std::copy_n(qkv + i * qkv_w + qd, kvd, k + i * kvd);
    pos[i] = static_cast<int32_t>(rows[static_cast<size_t>(i)].pos);
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
  // Every row's K/V is stored before any row attends (rows of one prefill chunk see each other).
  for (int64_t i = 0; i < n; ++i) {
    const Row& r = rows[static_cast<size_t>(i)];
    const int32_t wl = table_.WriteLayer(layer, r.step, r.phase);
    if (wl < 0) continue;  // a layer whose KV no one reads
    std::copy_n(k + i * kvd, kvd, kv_.K(r.seq, wl, r.pos));
    std::copy_n(qkv + i * qkv_w + qd + kvd, kvd, kv_.V(r.seq, wl, r.pos));
  }
  Attend(layer, rows, q, attn);
  w.o.Forward(attn, n, o);
  if (!w.attn_out_norm.empty()) RmsNorm(o, w.attn_out_norm.data(), eps, n, E, o);
  AddInPlace(x, o, n * E);
  if (!w.attn_post_norm.empty()) RmsNorm(x, w.attn_post_norm.data(), eps, n, E, x);

  float* gate_up = Grow(gate_up_, n * 2 * I);
  float* act = Grow(act_, n * I);
  RmsNorm(x, w.mlp_in_norm.data(), eps, n, E, h);
  w.gate_up.Forward(h, n, gate_up);
  SwiGlu(gate_up, n, I, act);
  w.down.Forward(act, n, o);
  if (!w.mlp_out_norm.empty()) RmsNorm(o, w.mlp_out_norm.data(), eps, n, E, o);
  AddInPlace(x, o, n * E);
  if (!w.mlp_post_norm.empty()) RmsNorm(x, w.mlp_post_norm.data(), eps, n, E, x);
}

void StageRunner::Signals(const float* x, const float* prev, int64_t n, StepSignal* out) const {
  const int64_t E = s_.hidden;
  const ModelWeights& w = m_.weights();
  for (int64_t i = 0; i < n; ++i) {
    StepSignal& sig = out[i];
    const float* xi = x + i * E;
    if (s_.loop.exit_signal == ExitSignal::kGateHazard) {
      double z = w.exit_gate_bias;
      for (int64_t j = 0; j < E; ++j) z += static_cast<double>(w.exit_gate[j]) * xi[j];
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
  }
}

// x [n, E]: states after the loop (or the prelude of a dense model). Runs the after-loop
// norm and the coda over every row (their coda KV is needed), then the head norm and LM
// head over `head_rows` only, into logits [head_rows, V].
void StageRunner::CodaAndHead(const std::vector<Row>& rows, float* x,
                              const std::vector<int64_t>& head_rows, float* logits) {
  const int64_t E = s_.hidden;
  const auto n = static_cast<int64_t>(rows.size());
  const std::vector<float>& fn = m_.weights().final_norm;
  if (s_.loop.looped && s_.loop.after_loop_norm) RmsNorm(x, fn.data(), s_.norm_eps, n, E, x);
  const int32_t first_coda = s_.n_prelude + s_.n_core;
  for (int32_t j = 0; j < s_.n_coda; ++j) Block(first_coda + j, rows, x);
  if (head_rows.empty()) return;
  const auto m = static_cast<int64_t>(head_rows.size());
  float* hx = Grow(h_, m * E);
  for (int64_t i = 0; i < m; ++i) std::copy_n(x + head_rows[static_cast<size_t>(i)] * E, E, hx + i * E);
  if (s_.before_head_norm) RmsNorm(hx, fn.data(), s_.norm_eps, m, E, hx);
  m_.weights().lm_head.Forward(hx, m, logits);
}

Status StageRunner::Prefill(const std::vector<PrefillChunk>& chunks, bool record_signals,
                            PrefillResult* out) {
  *out = PrefillResult{};
  const int64_t E = s_.hidden, V = s_.vocab;
  rows_.clear();
  std::vector<int32_t> ids;
  int32_t max_loops = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const PrefillChunk& ch = chunks[c];
    if (!seqs_.count(ch.seq)) return Status::Error("prefill chunk " + std::to_string(c) + ": unknown sequence");
    for (int64_t i = 0; i < ch.n; ++i) {
      const int32_t id = ch.ids[i];
      if (id < 0 || id >= V)
        return Status::Error("prefill chunk " + std::to_string(c) + ": token " + std::to_string(i) +
                             " has id " + std::to_string(id) + ", outside the vocabulary [0, " +
                             std::to_string(V) + ")");
      if (ch.pos0 + i >= kv_.prompt_len(ch.seq))
        return Status::Error("prefill chunk " + std::to_string(c) + " runs past the prompt");
      rows_.push_back({ch.seq, ch.pos0 + i, 0, TokenPhase::kPrompt});
      ids.push_back(id);
    }
    if (s_.loop.looped && (ch.loops < 1 || ch.loops > table_.shape().max_depth))
      return Status::Error("prefill chunk " + std::to_string(c) + ": loops " + std::to_string(ch.loops) +
                           " outside [1, " + std::to_string(table_.shape().max_depth) + "]");
    max_loops = std::max(max_loops, ch.loops);
  }
  FATHOM_RETURN_IF_ERROR(CheckRows(rows_));
  const std::vector<Row> all = rows_;
  const auto n = static_cast<int64_t>(all.size());
  // Row ranges of the chunks within the batch.
  std::vector<int64_t> chunk_begin;
  for (int64_t b = 0; const PrefillChunk& ch : chunks) chunk_begin.push_back(b), b += ch.n;
  for (const PrefillChunk& ch : chunks) {  // prompt tokens run every step: no holes
    SeqInfo& info = Info(ch.seq);
    if (static_cast<int64_t>(info.steps_run.size()) < ch.pos0 + ch.n)
      info.steps_run.resize(static_cast<size_t>(ch.pos0 + ch.n), 0);
    std::fill_n(info.steps_run.begin() + ch.pos0, ch.n, static_cast<int16_t>(s_.loop.looped ? ch.loops : 0));
  }

  float* x = Grow(x_, n * E);
  Embed(ids.data(), n, x);
  for (int32_t l = 0; l < s_.n_prelude; ++l) Block(l, all, x);
  if (s_.loop.looped) {
    float* e = Grow(e_, n * E);
    std::copy_n(x, n * E, e);
    if (s_.loop.initial_state != InitialState::kPreludeOutput)
      for (size_t c = 0; c < chunks.size(); ++c)
        for (int64_t i = 0; i < chunks[c].n; ++i)
          InitState(chunks[c].random_init, chunks[c].pos0 + i, x + (chunk_begin[c] + i) * E);
    if (record_signals) {
      out->gate_lambda.assign(static_cast<size_t>(max_loops * n), 0.f);
      out->latent_diff.assign(static_cast<size_t>(max_loops * n), 0.f);
    }
    // Step r runs the rows whose chunk has more than r loops, gathered contiguously.
    std::vector<StepSignal> sig;
    for (int32_t r = 0; r < max_loops; ++r) {
      std::vector<int64_t> active;
      std::vector<Row> step_rows;
      for (size_t c = 0; c < chunks.size(); ++c)
        if (chunks[c].loops > r)
          for (int64_t i = 0; i < chunks[c].n; ++i) {
            active.push_back(chunk_begin[c] + i);
            step_rows.push_back({all[static_cast<size_t>(chunk_begin[c] + i)].seq,
                                 chunks[c].pos0 + i, r, TokenPhase::kPrompt});
          }
      const auto m = static_cast<int64_t>(active.size());
      float* xs = Grow(prev_, m * E);  // gathered state
      for (int64_t i = 0; i < m; ++i) std::copy_n(x + active[static_cast<size_t>(i)] * E, E, xs + i * E);
      std::vector<float> before;
      if (record_signals) before.assign(xs, xs + m * E);
      if (s_.loop.core_input == CoreInput::kAdapterOnConcat) {
        float* cat = Grow(cat_, m * 2 * E);
        for (int64_t i = 0; i < m; ++i) {
          std::copy_n(xs + i * E, E, cat + i * 2 * E);
          std::copy_n(e + active[static_cast<size_t>(i)] * E, E, cat + i * 2 * E + E);
        }
        m_.weights().adapter.Forward(cat, m, xs);
      }
      for (int32_t j = 0; j < s_.n_core; ++j) Block(s_.n_prelude + j, step_rows, xs);
      if (s_.loop.step_norm)
        RmsNorm(xs, m_.weights().final_norm.data(), s_.norm_eps, m, E, xs);
      if (record_signals) {
        sig.assign(static_cast<size_t>(m), StepSignal{});
        Signals(xs, before.data(), m, sig.data());
        for (int64_t i = 0; i < m; ++i) {
          const size_t at = static_cast<size_t>(r * n + active[static_cast<size_t>(i)]);
          out->gate_lambda[at] = sig[static_cast<size_t>(i)].gate_lambda;
          out->latent_diff[at] = sig[static_cast<size_t>(i)].latent_diff;
        }
      }
      for (int64_t i = 0; i < m; ++i) std::copy_n(xs + i * E, E, x + active[static_cast<size_t>(i)] * E);
    }
  }
  std::vector<int64_t> head_rows;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const int64_t first = chunks[c].logits == PrefillChunk::Logits::kAll ? 0 : chunks[c].n - 1;
    if (chunks[c].logits != PrefillChunk::Logits::kNone)
      for (int64_t i = std::max<int64_t>(first, 0); i < chunks[c].n; ++i)
        head_rows.push_back(chunk_begin[c] + i);
  }
  out->logits.resize(head_rows.size() * static_cast<size_t>(V));
  CodaAndHead(all, x, head_rows, out->logits.data());
  return Status::Ok();
}

void StageRunner::HeadRows(int64_t n) {
  head_.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) head_[static_cast<size_t>(i)] = i;
}

Status StageRunner::Prelude(const std::vector<DecodeItem>& items) {
  FATHOM_RETURN_IF_ERROR(CheckItems(items));
  const int64_t E = s_.hidden;
  const auto n = static_cast<int64_t>(items.size());
  rows_.clear();
  std::vector<int32_t>& ids = ids_;
  ids.clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const DecodeItem& it = items[i];
    if (it.token < 0 || it.token >= s_.vocab)
      return Status::Error("item " + std::to_string(i) + ": token id " + std::to_string(it.token) +
                           " outside the vocabulary [0, " + std::to_string(s_.vocab) + ")");
    rows_.push_back({it.seq, it.pos, 0, TokenPhase::kDecode});
    ids.push_back(it.token);
  }
  FATHOM_RETURN_IF_ERROR(CheckRows(rows_));
  for (const DecodeItem& it : items) {  // not yet in the loop: no depth slot written
    SeqInfo& info = Info(it.seq);
    if (static_cast<int64_t>(info.steps_run.size()) <= it.pos)
      info.steps_run.resize(static_cast<size_t>(it.pos + 1), 0);
    info.steps_run[static_cast<size_t>(it.pos)] = 0;
  }
  float* x = Grow(x_, n * E);
  Embed(ids.data(), n, x);
  for (int32_t l = 0; l < s_.n_prelude; ++l) Block(l, rows_, x);
  for (int64_t i = 0; i < n; ++i) {
    const DecodeItem& it = items[static_cast<size_t>(i)];
    float* sx = slot_x_.data() + it.slot * E;
    float* se = slot_e_.data() + it.slot * E;
    std::copy_n(x + i * E, E, se);
    if (!s_.loop.looped || s_.loop.initial_state == InitialState::kPreludeOutput)
      std::copy_n(x + i * E, E, sx);
    else
      InitState(it.random_init, it.pos, sx);
  }
  return Status::Ok();
}

Status StageRunner::CoreStep(const std::vector<DecodeItem>& items, bool compute_kl,
                             CoreStepResult* out) {
  FATHOM_RETURN_IF_ERROR(CheckItems(items));
  if (!s_.loop.looped) return Status::Error("core step: model_type '" + s_.model_type + "' has no loop");
  const int64_t E = s_.hidden, V = s_.vocab;
  const auto n = static_cast<int64_t>(items.size());
  rows_.clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const DecodeItem& it = items[i];
    if (!seqs_.count(it.seq)) return Status::Error("item " + std::to_string(i) + ": unknown sequence");
    if (it.step < 0 || it.step >= Info(it.seq).loops)
      return Status::Error("item " + std::to_string(i) + ": step " + std::to_string(it.step) +
                           " outside [0, " + std::to_string(Info(it.seq).loops) + ")");
    rows_.push_back({it.seq, it.pos, it.step, TokenPhase::kDecode});
  }
  FATHOM_RETURN_IF_ERROR(CheckRows(rows_));
  for (const DecodeItem& it : items)  // its own K/V at this step is written before it attends
    Info(it.seq).steps_run[static_cast<size_t>(it.pos)] = static_cast<int16_t>(it.step + 1);

  float* x = Grow(x_, n * E);
  float* prev = Grow(prev_, n * E);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(slot_x_.data() + items[static_cast<size_t>(i)].slot * E, E, x + i * E);
  std::copy_n(x, n * E, prev);
  if (s_.loop.core_input == CoreInput::kAdapterOnConcat) {
    float* cat = Grow(cat_, n * 2 * E);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(x + i * E, E, cat + i * 2 * E);
      std::copy_n(slot_e_.data() + items[static_cast<size_t>(i)].slot * E, E, cat + i * 2 * E + E);
    }
    m_.weights().adapter.Forward(cat, n, x);
  }
  for (int32_t j = 0; j < s_.n_core; ++j) Block(s_.n_prelude + j, rows_, x);
  if (s_.loop.step_norm) RmsNorm(x, m_.weights().final_norm.data(), s_.norm_eps, n, E, x);
  out->signals.assign(static_cast<size_t>(n), StepSignal{});
  Signals(x, prev, n, out->signals.data());
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(x + i * E, E, slot_x_.data() + items[static_cast<size_t>(i)].slot * E);

  if (compute_kl) {
    // KL(p_{r-1} || p_r) of the predictions from successive states (p_0 uniform). The coda
    // writes its KV at these positions; the token's final coda overwrites it.
    if (slot_logp_.empty()) slot_logp_.resize(static_cast<size_t>(num_slots_ * V));
    for (Row& r : rows_) r.step = 0;  // the coda has one step
    HeadRows(n);
    float* logits = Grow(logits_, n * V);
    CodaAndHead(rows_, x, head_, logits);
    float* logp = Grow(logp_, V);
    for (int64_t i = 0; i < n; ++i) {
      const DecodeItem& it = items[static_cast<size_t>(i)];
      float* prev_logp = slot_logp_.data() + it.slot * V;
      if (it.step == 0) std::fill_n(prev_logp, V, -std::log(static_cast<float>(V)));
      LogSoftmax(logits + i * V, V, logp);
      double kl = 0;
      for (int64_t t = 0; t < V; ++t)
        kl += std::exp(static_cast<double>(prev_logp[t])) * (prev_logp[t] - logp[t]);
      out->signals[static_cast<size_t>(i)].kl = static_cast<float>(kl);
      std::copy_n(logp, V, prev_logp);
    }
  }
  return Status::Ok();
}

Status StageRunner::Coda(const std::vector<DecodeItem>& items, CodaResult* out) {
  FATHOM_RETURN_IF_ERROR(CheckItems(items));
  const int64_t E = s_.hidden, V = s_.vocab;
  const auto n = static_cast<int64_t>(items.size());
  rows_.clear();
  for (const DecodeItem& it : items) rows_.push_back({it.seq, it.pos, 0, TokenPhase::kDecode});
  FATHOM_RETURN_IF_ERROR(CheckRows(rows_));
  // The layout's rule for the loop steps an early exit skipped (last-exited: copy).
  std::vector<std::pair<int32_t, int32_t>>& copies = copies_;
  for (const DecodeItem& it : items) {
    if (!s_.loop.looped || it.step >= Info(it.seq).loops) continue;
    copies.clear();
    table_.ExitCopies(it.step, &copies);
    for (const auto& [from, to] : copies) kv_.CopyRow(it.seq, it.pos, from, to);
    if (!copies.empty()) Info(it.seq).steps_run[static_cast<size_t>(it.pos)] = static_cast<int16_t>(table_.shape().max_depth);
  }
  float* x = Grow(x_, n * E);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(slot_x_.data() + items[static_cast<size_t>(i)].slot * E, E, x + i * E);
  HeadRows(n);
  out->logits.resize(static_cast<size_t>(n * V));
  CodaAndHead(rows_, x, head_, out->logits.data());
  out->tokens.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const DecodeItem& it = items[static_cast<size_t>(i)];
    const float* row = out->logits.data() + i * V;
    out->tokens[static_cast<size_t>(i)] = it.sampler ? it.sampler->Sample(row, V, it.sampling) : Argmax(row, V);
  }
  return Status::Ok();
}

}  // namespace fathom
