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

StageRunner::StageRunner(const Model& model, KvManager& kv, int32_t num_slots,
                         const RunLimits& limits)
    : m_(model),
      s_(model.spec()),
      attention_grouping_(model.batch_invariant() ? RowGrouping::kRowByRow : RowGrouping::kTiles),
      kv_(kv),
      table_(kv.table()),
      num_slots_(num_slots),
      st_(model.spec(), kv.table(), num_slots, limits) {}

StageRunner::StageRunner(const Model& model, KvManager& kv, int32_t num_slots)
    : StageRunner(model, kv, num_slots, RunLimits::Covering(kv, num_slots, model.rope().max_positions())) {}

// The sequence's per-position record is reserved whole here, so that stage calls never grow it.
void StageRunner::AddSequence(KvManager::SeqId seq, int32_t loops) {
  SeqInfo& info = seqs_[seq];
  info.loops = loops;
  info.steps_run.reserve(static_cast<size_t>(st_.limits.max_context));
  if (s_.l2a.enabled && s_.l2a.gate_attention && s_.l2a.skipped_kv == SkippedKv::kMask) {
    info.attn_ran.assign(s_.layers.size(), {});
    for (std::vector<int16_t>& v : info.attn_ran) v.reserve(static_cast<size_t>(st_.limits.max_context));
  }
}

// Within max_context: reserved at AddSequence, so the pointers ResolveRows hands out stay valid.
void StageRunner::GrowPositions(KvManager::SeqId seq, int64_t end) {
  SeqInfo& info = Info(seq);
  if (static_cast<int64_t>(info.steps_run.size()) < end) info.steps_run.resize(static_cast<size_t>(end), 0);
  for (std::vector<int16_t>& v : info.attn_ran)
    if (static_cast<int64_t>(v.size()) < end) v.resize(static_cast<size_t>(end), 0);
}
void StageRunner::ReleaseSequence(KvManager::SeqId seq) { seqs_.erase(seq); }

StageRunner::SeqInfo& StageRunner::Info(KvManager::SeqId seq) {
  auto it = seqs_.find(seq);
  FATHOM_CHECK_MSG(it != seqs_.end(), "sequence " << seq << " was not added to the runner");
  return it->second;
}

Status StageRunner::CheckRows(Rows rows) const {
  for (const StageRow& r : rows) {
    if (!kv_.contains(r.seq) || !seqs_.count(r.seq))
      return Status::Error("sequence " + std::to_string(r.seq) + " is unknown");
    if (r.pos >= kv_.length(r.seq))
      return Status::Error("sequence " + std::to_string(r.seq) + ": position " +
                           std::to_string(r.pos) + " has no KV allocated (length " +
                           std::to_string(kv_.length(r.seq)) + ")");
    if (r.pos >= m_.rope().max_positions())
      return Status::Error("position " + std::to_string(r.pos) + " is beyond the model's " +
                           std::to_string(m_.rope().max_positions()) + " positions");
    if (s_.l2a.enabled && !(r.budget >= 0.f && r.budget <= 1.f))
      return Status::Error("sequence " + std::to_string(r.seq) + ": position " + std::to_string(r.pos) +
                           ": budget " + std::to_string(r.budget) + " outside [0, 1]");
    if (r.pos >= st_.limits.max_context)
      return Status::Error("position " + std::to_string(r.pos) + " is beyond the runner's max_context " +
                           std::to_string(st_.limits.max_context) + " (RunLimits)");
  }
  return Status::Ok();
}

void StageRunner::ResolveRows(std::span<StageRow> rows) {
  const int32_t P = table_.num_physical_layers();
  st_.row_tables.clear();
  KvManager::SeqId last = -1;
  int32_t last_tables = 0;
  for (StageRow& r : rows) {
    if (r.seq != last) {  // rows of one sequence are usually adjacent: resolve it once
      last = r.seq;
      last_tables = static_cast<int32_t>(st_.row_tables.size());
      for (int32_t p = 0; p < P; ++p) st_.row_tables.push_back(kv_.BlockTable(r.seq, p));
    }
    r.tables = last_tables;
    r.prompt_len = kv_.prompt_len(r.seq);
    SeqInfo& info = Info(r.seq);
    r.key_steps = info.steps_run.data();
    r.attn_ran = info.attn_ran.empty() ? nullptr : info.attn_ran.data();
  }
}

// Through the resolved block table.
void StageRunner::WriteKvRow(const StageRow& r, int32_t physical_layer, bool value, const float* src) {
  BlockPool& pool = kv_.pool();
  const int32_t bs = pool.block_size();
  const int32_t block = st_.row_tables[r.tables + physical_layer][r.pos / bs];
  FATHOM_CHECK_MSG(block >= 0, "physical layer " << physical_layer << " stores no position " << r.pos);
  pool.WriteRow(block, static_cast<int32_t>(r.pos % bs), value, src);
}

Status StageRunner::CheckItems(const std::vector<DecodeItem>& items) const {
  if (static_cast<int64_t>(items.size()) > st_.limits.max_rows)
    return Status::Error(std::to_string(items.size()) + " items in one stage call exceed the runner's max_rows " +
                         std::to_string(st_.limits.max_rows) + " (RunLimits)");
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

// Every row's key segments at each layer of [first, first + count), before the first of
// those layers runs: per layer, the KV segments its layout reads for the row, cut by the
// layer's own mask (model_spec.h LayerAttention: keys j <= p, or j < p without the diagonal;
// j > p - window for sliding-window layers) and, under the layouts with holes, the depth its
// core keys must have run. Layer l's rows are att_rows[(l - first) * n ..], reading st_.q
// and writing st_.attn.
void StageRunner::ResolveAttention(int32_t first, int32_t count, Rows rows) {
  const int64_t qd = s_.q_dim();
  const auto n = static_cast<int64_t>(rows.size());
  st_.att_first_layer = first;
  st_.att_layers = count;
  st_.att_rows.resize(count * n);
  st_.segs.clear();
  for (int32_t layer = first; layer < first + count; ++layer) {
    const bool core = layer >= s_.n_prelude && layer < s_.n_prelude + s_.n_core;
    const bool masked = core && table_.HasHoles();
    const LayerAttention& la = s_.layers[static_cast<size_t>(layer)].attn;
    const int64_t diag = la.no_diag ? 0 : 1;
    for (int64_t i = 0; i < n; ++i) {
      const StageRow& r = rows[static_cast<size_t>(i)];
      st_.kv_segs.clear();
      table_.ReadSegments(layer, r.step, r.phase, r.prompt_len, r.pos + diag, &st_.kv_segs);
      FATHOM_CHECK(static_cast<int64_t>(st_.kv_segs.size()) <= RunState::kMaxSegments);
      const int64_t first_key = la.window > 0 ? std::max<int64_t>(0, r.pos - la.window + 1) : 0;
      PagedAttentionRow& a = st_.att_rows[(layer - first) * n + i];
      a.q = st_.q.data() + i * qd;
      a.out = st_.attn.data() + i * qd;  // zeros if no key is visible
      a.seg_begin = static_cast<int32_t>(st_.segs.size());
      for (const KvSegment& g : st_.kv_segs) {
        if (g.end <= first_key) continue;
        KeySegment k;
        k.block_table = st_.row_tables[r.tables + g.physical_layer];
        k.begin = std::max(g.begin, first_key);
        k.end = g.end;
        if (masked) {
          k.key_steps = r.key_steps;
          k.min_step = static_cast<int16_t>(table_.MaskStep(r.step));
        }
        if (r.attn_ran) {  // L2A mask: only the positions that ran attention at this layer
          k.key_steps = r.attn_ran[layer].data();
          k.min_step = 0;
        }
        st_.segs.push_back(k);
      }
      a.seg_end = static_cast<int32_t>(st_.segs.size());
    }
  }
}

// Attention for all rows of one layer, over the segments ResolveAttention gave them.
void StageRunner::Attend(int32_t layer, Rows rows) {
  const auto n = static_cast<int64_t>(rows.size());
  FATHOM_CHECK_MSG(layer >= st_.att_first_layer && layer < st_.att_first_layer + st_.att_layers &&
                       n * st_.att_layers == st_.att_rows.size(),
                   "layer " << layer << " (" << n << " rows) was not resolved: layers " << st_.att_first_layer
                            << " + " << st_.att_layers << ", " << st_.att_rows.size() << " row entries");
  const BlockPool& pool = kv_.pool();
  const PagedKvView view{pool.k_data(),     pool.v_data(),     pool.block_stride(),
                         pool.row_stride(), pool.block_size(), pool.dtype()};
  const AttentionShape shape{s_.n_heads, s_.n_kv_heads, s_.head_dim,
                             1.f / std::sqrt(static_cast<float>(s_.head_dim))};
  PagedAttention(shape, view, st_.att_rows.data() + (layer - st_.att_first_layer) * n, n,
                 st_.segs.data(), attention_grouping_);
}

void StageRunner::Block(int32_t layer, Rows rows, float* x) {
  if (s_.l2a.enabled) return GatedBlock(layer, rows, x);
  const LayerWeights& w = m_.weights().layers[static_cast<size_t>(layer)];
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t E = s_.hidden, I = s_.intermediate, H = s_.n_heads, KVH = s_.n_kv_heads;
  // A layer whose KV nobody reads (LCKV) projects q only: qkv is [n, q_dim].
  const bool has_kv = s_.layers[static_cast<size_t>(layer)].attn.produces_kv;
  const int64_t D = s_.head_dim, qd = s_.q_dim(), kvd = s_.kv_dim();
  const int64_t qkv_w = qd + (has_kv ? 2 * kvd : 0);
  const float eps = s_.norm_eps;
  float* h = st_.h.First(n * E);
  float* qkv = st_.qkv.First(n * qkv_w);
  float* q = st_.q.First(n * qd);
  float* k = st_.k.First(n * kvd);
  float* attn = st_.attn.First(n * qd);
  float* o = st_.o.First(n * E);
  int32_t* pos = st_.pos.First(n);

  RmsNorm(x, w.attn_in_norm.data(), eps, n, E, h);
  w.qkv.Forward(h, n, qkv);  // [n, q | k | v], or [n, q]
  for (int64_t i = 0; i < n; ++i) {
    std::copy_n(qkv + i * qkv_w, qd, q + i * qd);
    if (has_kv) std::copy_n(qkv + i * qkv_w + qd, kvd, k + i * kvd);
    pos[i] = static_cast<int32_t>(rows[static_cast<size_t>(i)].pos);
  }
  const int64_t nk = has_kv ? n : 0;  // rows of k to transform
  if (!w.q_norm.empty()) {  // Qwen3: RMSNorm over each head's D values
    RmsNorm(q, w.q_norm.data(), eps, n * H, D, q);
    if (nk) RmsNorm(k, w.k_norm.data(), eps, nk * KVH, D, k);
  }
  if (!w.q_bias.empty()) {  // Huginn: qk_bias before RoPE
    for (int64_t i = 0; i < n; ++i) AddInPlace(q + i * qd, w.q_bias.data(), qd);
    for (int64_t i = 0; i < nk; ++i) AddInPlace(k + i * kvd, w.k_bias.data(), kvd);
  }
  ApplyRope(m_.rope(), s_.rope_style, pos, n, H, q);
  if (nk) ApplyRope(m_.rope(), s_.rope_style, pos, nk, KVH, k);
  // Every row's K/V is stored before any row attends (rows of one prefill chunk see each other).
  for (int64_t i = 0; i < nk; ++i) {
    const StageRow& r = rows[static_cast<size_t>(i)];
    const int32_t wl = table_.WriteLayer(layer, r.step, r.phase);
    if (wl < 0) continue;  // a layer whose KV no one reads
    WriteKvRow(r, wl, false, k + i * kvd);
    WriteKvRow(r, wl, true, qkv + i * qkv_w + qd + kvd);
  }
  Attend(layer, rows);  // q -> attn
  w.o.Forward(attn, n, o);
  if (!w.attn_out_norm.empty()) RmsNorm(o, w.attn_out_norm.data(), eps, n, E, o);
  AddInPlace(x, o, n * E);
  if (!w.attn_post_norm.empty()) RmsNorm(x, w.attn_post_norm.data(), eps, n, E, x);

  float* gate_up = st_.gate_up.First(n * 2 * I);
  float* act = st_.act.First(n * I);
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
// head over `head_rows` only: head row i into logits row head_dest[i] ([.., V]), one matmul
// per run of consecutive destinations (one in all but LCKV's split prefill).
void StageRunner::CodaAndHead(Rows rows, float* x, std::span<const int64_t> head_rows,
                              std::span<const int64_t> head_dest, float* logits) {
  const int64_t E = s_.hidden, V = s_.vocab;
  const auto n = static_cast<int64_t>(rows.size());
  const std::vector<float>& fn = m_.weights().final_norm;
  if (s_.loop.looped && s_.loop.after_loop_norm) RmsNorm(x, fn.data(), s_.norm_eps, n, E, x);
  const int32_t first_coda = s_.n_prelude + s_.n_core;
  ResolveAttention(first_coda, s_.n_coda, rows);
  for (int32_t j = 0; j < s_.n_coda; ++j) Block(first_coda + j, rows, x);
  if (head_rows.empty()) return;
  const auto m = static_cast<int64_t>(head_rows.size());
  float* hx = st_.h.First(m * E);
  for (int64_t i = 0; i < m; ++i) std::copy_n(x + head_rows[static_cast<size_t>(i)] * E, E, hx + i * E);
  if (s_.before_head_norm) RmsNorm(hx, fn.data(), s_.norm_eps, m, E, hx);
  for (int64_t i = 0; i < m;) {
    int64_t j = i + 1;
    while (j < m && head_dest[static_cast<size_t>(j)] == head_dest[static_cast<size_t>(j - 1)] + 1) ++j;
    m_.weights().lm_head.Forward(hx + i * E, j - i, logits + head_dest[static_cast<size_t>(i)] * V);
    i = j;
  }
}

// One loop step: the adapter on cat[x, e] (Huginn) or the state itself (Ouro), every core
// layer, the step norm (Ouro), then the exit signals from the state before and after.
void StageRunner::LoopStep(Rows rows, float* x, const float* e, StepSignal* signals) {
  const int64_t E = s_.hidden;
  const auto n = static_cast<int64_t>(rows.size());
  float* prev = nullptr;
  if (signals) {
    prev = st_.prev.First(n * E);
    std::copy_n(x, n * E, prev);
  }
  if (s_.loop.core_input == CoreInput::kAdapterOnConcat) {
    float* cat = st_.cat.First(n * 2 * E);
    for (int64_t i = 0; i < n; ++i) {
      std::copy_n(x + i * E, E, cat + i * 2 * E);
      std::copy_n(e + i * E, E, cat + i * 2 * E + E);
    }
    m_.weights().adapter.Forward(cat, n, x);
  }
  ResolveAttention(s_.n_prelude, s_.n_core, rows);
  for (int32_t j = 0; j < s_.n_core; ++j) Block(s_.n_prelude + j, rows, x);
  if (s_.loop.step_norm) RmsNorm(x, m_.weights().final_norm.data(), s_.norm_eps, n, E, x);
  if (signals) Signals(x, prev, n, signals);
}

Status StageRunner::CheckChunks(const std::vector<PrefillChunk>& chunks) const {
  const int64_t V = s_.vocab;
  int64_t rows = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    const PrefillChunk& ch = chunks[c];
    if (!seqs_.count(ch.seq) || !kv_.contains(ch.seq))
      return Status::Error("prefill chunk " + std::to_string(c) + ": unknown sequence");
    for (int64_t i = 0; i < ch.n; ++i) {
      const int32_t id = ch.ids[i];
      if (id < 0 || id >= V)
        return Status::Error("prefill chunk " + std::to_string(c) + ": token " + std::to_string(i) +
                             " has id " + std::to_string(id) + ", outside the vocabulary [0, " +
                             std::to_string(V) + ")");
    }
    if (ch.pos0 < 0 || ch.n < 0 || ch.pos0 + ch.n > kv_.prompt_len(ch.seq))
      return Status::Error("prefill chunk " + std::to_string(c) + " runs past the prompt");
    if (s_.loop.looped && (ch.loops < 1 || ch.loops > table_.shape().max_depth))
      return Status::Error("prefill chunk " + std::to_string(c) + ": loops " + std::to_string(ch.loops) +
                           " outside [1, " + std::to_string(table_.shape().max_depth) + "]");
    rows += ch.n;
  }
  if (rows > st_.limits.max_rows || static_cast<int64_t>(chunks.size()) > st_.limits.max_rows)
    return Status::Error("prefill: " + std::to_string(rows) + " prompt tokens in " + std::to_string(chunks.size()) +
                         " chunks exceed the runner's max_rows " + std::to_string(st_.limits.max_rows) +
                         " (RunLimits)");
  return Status::Ok();
}

Status StageRunner::Prefill(const std::vector<PrefillChunk>& chunks, bool record_signals,
                            PrefillResult* out) {
  FATHOM_RETURN_IF_ERROR(CheckChunks(chunks));
  out->logits.clear();  // cleared, not reassigned: a caller's result keeps its capacity
  out->gate_lambda.clear();
  out->latent_diff.clear();
  // Chunk c's logits rows start at chunk_logits[c] (chunk order).
  int64_t heads = 0;
  st_.chunk_logits.clear();
  for (const PrefillChunk& ch : chunks) {
    st_.chunk_logits.push_back(heads);
    heads += ch.logits == PrefillChunk::Logits::kAll    ? ch.n
             : ch.logits == PrefillChunk::Logits::kLast ? std::min<int64_t>(ch.n, 1)
                                                        : 0;
  }
  out->logits.resize(static_cast<size_t>(heads * s_.vocab));
  if (s_.prompt_iteration.active()) return PrefillIterated(chunks, out);
  return PrefillRows(chunks, record_signals, false, st_.chunk_logits.data(), out->logits.data(), out);
}

// LCKV: chunks longer than sequential_max run in parallel, their cyclic groups iterated;
// the others token by token (one call per token index, batched over those chunks), which
// is what decode does and is exact. Each sub-call writes its logits rows in place.
Status StageRunner::PrefillIterated(const std::vector<PrefillChunk>& chunks, PrefillResult* out) {
  const PromptIteration& iter = s_.prompt_iteration;
  FATHOM_CHECK_MSG(!s_.loop.looped, "prompt iteration in a looped model");
  float* logits = out->logits.data();
  FixedVector<PrefillChunk>& sub = st_.sub_chunks;
  FixedVector<int64_t>& dest = st_.sub_logits;  // first logits row of each sub-chunk
  sub.clear();
  dest.clear();
  int64_t longest_sequential = 0;
  for (size_t c = 0; c < chunks.size(); ++c) {
    if (chunks[c].n > iter.sequential_max) {
      sub.push_back(chunks[c]);
      dest.push_back(st_.chunk_logits[static_cast<int64_t>(c)]);
    } else {
      longest_sequential = std::max(longest_sequential, chunks[c].n);
    }
  }
  if (!sub.empty()) FATHOM_RETURN_IF_ERROR(PrefillRows(sub.span(), false, true, dest.data(), logits, out));
  for (int64_t t = 0; t < longest_sequential; ++t) {
    sub.clear();
    dest.clear();
    for (size_t c = 0; c < chunks.size(); ++c) {
      const PrefillChunk& ch = chunks[c];
      if (ch.n > iter.sequential_max || t >= ch.n) continue;
      PrefillChunk one = ch;
      one.ids = ch.ids + t;
      one.pos0 = ch.pos0 + t;
      one.n = 1;
      const bool wants = ch.logits == PrefillChunk::Logits::kAll ||
                         (ch.logits == PrefillChunk::Logits::kLast && t == ch.n - 1);
      one.logits = wants ? PrefillChunk::Logits::kLast : PrefillChunk::Logits::kNone;
      sub.push_back(one);
      dest.push_back(st_.chunk_logits[static_cast<int64_t>(c)] + (ch.logits == PrefillChunk::Logits::kAll ? t : 0));
    }
    FATHOM_RETURN_IF_ERROR(PrefillRows(sub.span(), false, false, dest.data(), logits, out));
  }
  return Status::Ok();
}

// Layers [begin, end) of a cyclic group (model_spec.h PromptIteration) over prompt rows:
// the group's later sources start at zero KV for these positions, then `passes` runs of the
// group from the same input x, each rewriting the KV it produces; the last run's output
// and KV are kept. After k passes the first k positions of the chunk are exact.
void StageRunner::IterateGroup(const IteratedGroup& g, Rows rows, float* x) {
  const int64_t E = s_.hidden;
  const auto n = static_cast<int64_t>(rows.size());
  for (int32_t src : g.zero_kv)
    for (const StageRow& r : rows) {
      const int32_t wl = table_.WriteLayer(src, r.step, r.phase);
      WriteKvRow(r, wl, false, nullptr);
      WriteKvRow(r, wl, true, nullptr);
    }
  float* in = st_.group_in.First(n * E);
  std::copy_n(x, n * E, in);
  for (int32_t pass = 0; pass < s_.prompt_iteration.passes; ++pass) {
    if (pass > 0) std::copy_n(in, n * E, x);
    for (int32_t l = g.begin; l < g.end; ++l) Block(l, rows, x);
  }
}

// The prelude layers over x [n, E] (every layer of a dense or LCKV model); with `iterate`,
// cyclic groups run as IterateGroup, else every layer once (token-by-token rows).
void StageRunner::PreludeLayers(Rows rows, float* x, bool iterate) {
  const std::vector<IteratedGroup>& groups = s_.prompt_iteration.groups;
  ResolveAttention(0, s_.n_prelude, rows);
  size_t g = 0;
  for (int32_t l = 0; l < s_.n_prelude;) {
    if (iterate && g < groups.size() && groups[g].begin == l) {
      IterateGroup(groups[g], rows, x);
      l = groups[g++].end;
    } else {
      Block(l++, rows, x);
    }
  }
}

// The loop steps of a prefill: x [n, E] the rows' states after InitState, e [n, E] the
// prelude output. Step r runs the rows whose chunk has more than r loops, gathered
// contiguously; with record_signals, their signals go to out [max_loops, n].
void StageRunner::PrefillLoops(std::span<const PrefillChunk> chunks, int32_t max_loops, bool record_signals,
                               float* x, const float* e, PrefillResult* out) {
  const int64_t E = s_.hidden;
  const int64_t n = st_.rows.size();
  if (record_signals) {
    out->gate_lambda.assign(static_cast<size_t>(max_loops * n), 0.f);
    out->latent_diff.assign(static_cast<size_t>(max_loops * n), 0.f);
  }
  for (int32_t r = 0; r < max_loops; ++r) {
    st_.active.clear();
    st_.step_rows.clear();
    for (size_t c = 0; c < chunks.size(); ++c)
      if (chunks[c].loops > r)
        for (int64_t i = 0; i < chunks[c].n; ++i) {
          st_.active.push_back(st_.chunk_begin[static_cast<int64_t>(c)] + i);
          st_.step_rows.push_back(st_.rows[st_.active.back()]);
          st_.step_rows.back().step = r;
        }
    const int64_t m = st_.active.size();
    float* xs = st_.loop_x.First(m * E);
    float* es = st_.loop_e.First(m * E);
    for (int64_t i = 0; i < m; ++i) {
      std::copy_n(x + st_.active[i] * E, E, xs + i * E);
      std::copy_n(e + st_.active[i] * E, E, es + i * E);
    }
    StepSignal* sig = nullptr;
    if (record_signals) sig = st_.sig.First(m), std::fill_n(sig, m, StepSignal{});
    LoopStep(st_.step_rows.span(), xs, es, sig);
    for (int64_t i = 0; i < m; ++i) {
      const int64_t row = st_.active[i];
      std::copy_n(xs + i * E, E, x + row * E);
      if (record_signals) {
        const size_t at = static_cast<size_t>(r * n + row);
        out->gate_lambda[at] = sig[i].gate_lambda;
        out->latent_diff[at] = sig[i].latent_diff;
      }
    }
  }
}

Status StageRunner::PrefillRows(std::span<const PrefillChunk> chunks, bool record_signals, bool iterate,
                                const int64_t* logits_row, float* logits, PrefillResult* out) {
  const int64_t E = s_.hidden;
  st_.rows.clear();
  st_.ids.clear();
  st_.chunk_begin.clear();  // row ranges of the chunks within the batch
  int32_t max_loops = 0;
  for (const PrefillChunk& ch : chunks) {
    st_.chunk_begin.push_back(st_.rows.size());
    for (int64_t i = 0; i < ch.n; ++i) {
      st_.rows.push_back({ch.seq, ch.pos0 + i, 0, TokenPhase::kPrompt, ch.budget});
      st_.ids.push_back(ch.ids[i]);
    }
    max_loops = std::max(max_loops, ch.loops);
  }
  FATHOM_RETURN_IF_ERROR(CheckRows(st_.rows.span()));
  const int64_t n = st_.rows.size();
  for (const PrefillChunk& ch : chunks) {  // a prompt token runs ch.loops steps (PromptExitCopies)
    GrowPositions(ch.seq, ch.pos0 + ch.n);
    SeqInfo& info = Info(ch.seq);
    std::fill_n(info.steps_run.begin() + ch.pos0, ch.n, static_cast<int16_t>(s_.loop.looped ? ch.loops : 0));
  }
  ResolveRows({st_.rows.begin(), st_.rows.end()});

  float* x = st_.x.First(n * E);
  Embed(st_.ids.data(), n, x);
  PreludeLayers(st_.rows.span(), x, iterate);
  if (s_.loop.looped) {
    float* e = st_.e.First(n * E);
    std::copy_n(x, n * E, e);
    if (s_.loop.initial_state != InitialState::kPreludeOutput)
      for (size_t c = 0; c < chunks.size(); ++c)
        for (int64_t i = 0; i < chunks[c].n; ++i)
          InitState(chunks[c].random_init, chunks[c].pos0 + i,
                    x + (st_.chunk_begin[static_cast<int64_t>(c)] + i) * E);
    PrefillLoops(chunks, max_loops, record_signals, x, e, out);
    PromptExitCopies(chunks);
  }
  st_.head.clear();
  st_.head_dest.clear();
  for (size_t c = 0; c < chunks.size(); ++c) {
    const PrefillChunk& ch = chunks[c];
    if (ch.logits == PrefillChunk::Logits::kNone) continue;
    const int64_t first = ch.logits == PrefillChunk::Logits::kAll ? 0 : std::max<int64_t>(ch.n - 1, 0);
    for (int64_t i = first; i < ch.n; ++i) {
      st_.head.push_back(st_.chunk_begin[static_cast<int64_t>(c)] + i);
      st_.head_dest.push_back(logits_row[c] + (i - first));
    }
  }
  CodaAndHead(st_.rows.span(), x, st_.head.span(), st_.head_dest.span(), logits);
  return Status::Ok();
}

// Prompt chunks prefilled at fewer loop steps than their sequence may run (prompts that
// follow the budget): the layout's rule for the steps they skipped, as Prelude applies it
// to an early-exited decode token (KvLayerTable::PromptExitCopies).
void StageRunner::PromptExitCopies(std::span<const PrefillChunk> chunks) {
  for (const PrefillChunk& ch : chunks) {
    if (ch.loops >= table_.shape().max_depth) continue;
    st_.copies.clear();
    const size_t reserved = st_.copies.capacity();
    table_.PromptExitCopies(ch.loops, &st_.copies);
    FATHOM_CHECK(st_.copies.capacity() == reserved);
    if (st_.copies.empty()) continue;
    SeqInfo& info = Info(ch.seq);
    for (int64_t p = ch.pos0; p < ch.pos0 + ch.n; ++p) {
      for (const auto& [from, to] : st_.copies) kv_.CopyRow(ch.seq, p, from, to);
      info.steps_run[static_cast<size_t>(p)] = static_cast<int16_t>(table_.shape().max_depth);
    }
  }
}

void StageRunner::HeadRows(int64_t n) {
  st_.head.resize(n);
  st_.head_dest.resize(n);
  for (int64_t i = 0; i < n; ++i) st_.head[i] = st_.head_dest[i] = i;
}

Status StageRunner::Prelude(const std::vector<DecodeItem>& items) {
  FATHOM_RETURN_IF_ERROR(CheckItems(items));
  const int64_t E = s_.hidden;
  const auto n = static_cast<int64_t>(items.size());
  st_.rows.clear();
  st_.ids.clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const DecodeItem& it = items[i];
    if (it.token < 0 || it.token >= s_.vocab)
      return Status::Error("item " + std::to_string(i) + ": token id " + std::to_string(it.token) +
                           " outside the vocabulary [0, " + std::to_string(s_.vocab) + ")");
    st_.rows.push_back({it.seq, it.pos, 0, TokenPhase::kDecode, it.budget});
    st_.ids.push_back(it.token);
  }
  FATHOM_RETURN_IF_ERROR(CheckRows(st_.rows.span()));
  for (const DecodeItem& it : items) {  // not yet in the loop: no depth slot written
    GrowPositions(it.seq, it.pos + 1);
    Info(it.seq).steps_run[static_cast<size_t>(it.pos)] = 0;
  }
  ResolveRows({st_.rows.begin(), st_.rows.end()});
  float* x = st_.x.First(n * E);
  Embed(st_.ids.data(), n, x);
  PreludeLayers(st_.rows.span(), x, false);
  for (int64_t i = 0; i < n; ++i) {
    const DecodeItem& it = items[static_cast<size_t>(i)];
    float* sx = st_.slot_x.data() + it.slot * E;
    float* se = st_.slot_e.data() + it.slot * E;
    std::copy_n(x + i * E, E, se);
    if (!s_.loop.looped || s_.loop.initial_state == InitialState::kPreludeOutput)
      std::copy_n(x + i * E, E, sx);
    else
      InitState(it.random_init, it.pos, sx);
  }
  return Status::Ok();
}

Status StageRunner::CoreStep(const std::vector<DecodeItem>& items, CoreStepResult* out) {
  FATHOM_RETURN_IF_ERROR(CheckItems(items));
  if (!s_.loop.looped) return Status::Error("core step: model_type '" + s_.model_type + "' has no loop");
  const int64_t E = s_.hidden;
  const auto n = static_cast<int64_t>(items.size());
  st_.rows.clear();
  st_.kl_items.clear();
  for (size_t i = 0; i < items.size(); ++i) {
    const DecodeItem& it = items[i];
    if (!seqs_.count(it.seq)) return Status::Error("item " + std::to_string(i) + ": unknown sequence");
    if (it.step < 0 || it.step >= Info(it.seq).loops)
      return Status::Error("item " + std::to_string(i) + ": step " + std::to_string(it.step) +
                           " outside [0, " + std::to_string(Info(it.seq).loops) + ")");
    st_.rows.push_back({it.seq, it.pos, it.step, TokenPhase::kDecode});
    if (it.kl) st_.kl_items.push_back(static_cast<int64_t>(i));
  }
  if (st_.kl_items.size() > num_slots_)  // each keeps its previous distribution in its slot
    return Status::Error(std::to_string(st_.kl_items.size()) + " items ask for the KL signal, more than the " +
                         std::to_string(num_slots_) + " state slots");
  FATHOM_RETURN_IF_ERROR(CheckRows(st_.rows.span()));
  for (const DecodeItem& it : items)  // its own K/V at this step is written before it attends
    Info(it.seq).steps_run[static_cast<size_t>(it.pos)] = static_cast<int16_t>(it.step + 1);
  ResolveRows({st_.rows.begin(), st_.rows.end()});

  float* x = st_.x.First(n * E);
  const bool inject = s_.loop.core_input == CoreInput::kAdapterOnConcat;
  float* e = inject ? st_.e.First(n * E) : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t slot = items[static_cast<size_t>(i)].slot;
    std::copy_n(st_.slot_x.data() + slot * E, E, x + i * E);
    if (inject) std::copy_n(st_.slot_e.data() + slot * E, E, e + i * E);
  }
  out->signals.assign(static_cast<size_t>(n), StepSignal{});
  LoopStep(st_.rows.span(), x, e, out->signals.data());
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(x + i * E, E, st_.slot_x.data() + items[static_cast<size_t>(i)].slot * E);
  if (!st_.kl_items.empty()) KlSignals(items, x, out);
  return Status::Ok();
}

// KL(p_{r-1} || p_r) of the predictions from successive states (p_0 uniform), for the items
// st_.kl_items lists only: their states go through the after-loop norm, the coda and the LM
// head. The coda writes its KV at these positions; the token's final coda overwrites it.
void StageRunner::KlSignals(const std::vector<DecodeItem>& items, const float* x, CoreStepResult* out) {
  const int64_t E = s_.hidden, V = s_.vocab;
  const int64_t m = st_.kl_items.size();
  st_.kl_rows.clear();
  float* xs = st_.loop_x.First(m * E);
  for (int64_t i = 0; i < m; ++i) {
    const int64_t item = st_.kl_items[i];
    st_.kl_rows.push_back(st_.rows[item]);
    st_.kl_rows.back().step = 0;  // the coda has one step
    std::copy_n(x + item * E, E, xs + i * E);
  }
  HeadRows(m);
  float* logits = st_.kl_logits.First(m * V);
  CodaAndHead(st_.kl_rows.span(), xs, st_.head.span(), st_.head_dest.span(), logits);
  float* logp = st_.logp.First(V);
  for (int64_t i = 0; i < m; ++i) {
    const auto item = static_cast<size_t>(st_.kl_items[i]);
    const DecodeItem& it = items[item];
    float* prev_logp = st_.slot_logp.data() + it.slot * V;
    if (it.step == 0) std::fill_n(prev_logp, V, -std::log(static_cast<float>(V)));
    LogSoftmax(logits + i * V, V, logp);
    double kl = 0;
    for (int64_t t = 0; t < V; ++t)
      kl += std::exp(static_cast<double>(prev_logp[t])) * (prev_logp[t] - logp[t]);
    out->signals[item].kl = static_cast<float>(kl);
    std::copy_n(logp, V, prev_logp);
  }
}

Status StageRunner::Coda(const std::vector<DecodeItem>& items, CodaResult* out) {
  FATHOM_RETURN_IF_ERROR(CheckItems(items));
  const int64_t E = s_.hidden, V = s_.vocab;
  const auto n = static_cast<int64_t>(items.size());
  st_.rows.clear();
  for (const DecodeItem& it : items) st_.rows.push_back({it.seq, it.pos, 0, TokenPhase::kDecode});
  FATHOM_RETURN_IF_ERROR(CheckRows(st_.rows.span()));
  // The layout's rule for the loop steps an early exit skipped (last-exited: copy).
  for (const DecodeItem& it : items) {
    if (!s_.loop.looped || it.step >= Info(it.seq).loops) continue;
    st_.copies.clear();
    const size_t reserved = st_.copies.capacity();
    table_.ExitCopies(it.step, &st_.copies);
    FATHOM_CHECK(st_.copies.capacity() == reserved);
    for (const auto& [from, to] : st_.copies) kv_.CopyRow(it.seq, it.pos, from, to);
    if (!st_.copies.empty())
      Info(it.seq).steps_run[static_cast<size_t>(it.pos)] = static_cast<int16_t>(table_.shape().max_depth);
  }
  ResolveRows({st_.rows.begin(), st_.rows.end()});
  float* x = st_.x.First(n * E);
  for (int64_t i = 0; i < n; ++i)
    std::copy_n(st_.slot_x.data() + items[static_cast<size_t>(i)].slot * E, E, x + i * E);
  HeadRows(n);
  out->logits.resize(static_cast<size_t>(n * V));
  CodaAndHead(st_.rows.span(), x, st_.head.span(), st_.head_dest.span(), out->logits.data());
  out->tokens.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    const DecodeItem& it = items[static_cast<size_t>(i)];
    const float* row = out->logits.data() + i * V;
    out->tokens[static_cast<size_t>(i)] = it.sampler ? it.sampler->Sample(row, V, it.sampling) : Argmax(row, V);
  }
  return Status::Ok();
}

}  // namespace fathom
