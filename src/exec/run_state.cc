#include "exec/run_state.h"

#include <algorithm>

#include "model/l2a.h"

namespace fathom {

RunLimits RunLimits::Covering(const KvManager& kv, int32_t num_slots, int64_t max_positions) {
  const KvLayerTable& t = kv.table();
  const int64_t per_position =
      std::max(1, std::min(t.LayersPerToken(TokenPhase::kPrompt), t.LayersPerToken(TokenPhase::kDecode)));
  const int64_t pool_rows = kv.pool().num_blocks() * kv.block_size();
  RunLimits l;
  l.max_rows = std::max<int64_t>(num_slots, pool_rows / per_position);
  l.max_context = max_positions;
  return l;
}

RunState::RunState(const ModelSpec& s, const KvLayerTable& table, int32_t slots, const RunLimits& lim)
    : limits(lim), num_slots(slots) {
  FATHOM_CHECK_MSG(lim.max_rows >= 1 && lim.max_context >= 1 && slots >= 1,
                   "max_rows=" << lim.max_rows << " max_context=" << lim.max_context << " slots=" << slots);
  const int64_t n = lim.max_rows, S = slots, E = s.hidden, I = s.intermediate, V = s.vocab;
  const int64_t qd = s.q_dim(), kvd = s.kv_dim(), P = table.num_physical_layers();
  const int64_t G = std::max({s.n_prelude, s.n_core, s.n_coda});
  const bool looped = s.loop.looped;
  slot_x = FixedVector<float>(S * E);
  slot_e = FixedVector<float>(S * E);
  slot_logp = FixedVector<float>(looped ? S * V : 0);
  // Zeros, as a slot read before its first write would have been (the rest is scratch).
  std::fill_n(slot_x.First(S * E), S * E, 0.f);
  std::fill_n(slot_e.First(S * E), S * E, 0.f);
  std::fill_n(slot_logp.First(slot_logp.capacity()), slot_logp.capacity(), 0.f);
  x = FixedVector<float>(n * E);
  e = FixedVector<float>(n * E);
  loop_x = FixedVector<float>(n * E);
  loop_e = FixedVector<float>(n * E);
  prev = FixedVector<float>(n * E);
  h = FixedVector<float>(n * E);
  qkv = FixedVector<float>(n * (qd + 2 * kvd));
  q = FixedVector<float>(n * qd);
  k = FixedVector<float>(n * kvd);
  attn = FixedVector<float>(n * qd);
  o = FixedVector<float>(n * E);
  gate_up = FixedVector<float>(n * 2 * I);
  act = FixedVector<float>(n * I);
  cat = FixedVector<float>(s.loop.core_input == CoreInput::kAdapterOnConcat ? n * 2 * E : 0);
  group_in = FixedVector<float>(s.prompt_iteration.active() ? n * E : 0);
  kl_logits = FixedVector<float>(looped ? S * V : 0);
  logp = FixedVector<float>(looped ? V : 0);
  pos = FixedVector<int32_t>(n);
  rows = FixedVector<StageRow>(n);
  step_rows = FixedVector<StageRow>(n);
  kl_rows = FixedVector<StageRow>(n);
  row_tables = FixedVector<const int32_t*>(n * P);
  att_rows = FixedVector<PagedAttentionRow>(G * n);
  segs = FixedVector<KeySegment>(G * n * kMaxSegments);
  kv_segs.reserve(kMaxSegments);
  copies.reserve(static_cast<size_t>(std::max(1, s.n_core * table.shape().max_depth)));
  ids = FixedVector<int32_t>(n);
  head = FixedVector<int64_t>(n);
  head_dest = FixedVector<int64_t>(n);
  active = FixedVector<int64_t>(n);
  chunk_begin = FixedVector<int64_t>(n);
  chunk_logits = FixedVector<int64_t>(n);
  kl_items = FixedVector<int64_t>(n);
  sig = FixedVector<StepSignal>(n);
  sub_chunks = FixedVector<PrefillChunk>(s.prompt_iteration.active() ? n : 0);
  sub_logits = FixedVector<int64_t>(s.prompt_iteration.active() ? n : 0);
  if (s.l2a.enabled) {
    attn_on = FixedVector<uint8_t>(n);
    mlp_on = FixedVector<uint8_t>(n);
    head_keep = FixedVector<uint8_t>(n * s.n_heads);
    kv_rows = FixedVector<int64_t>(n);
    att_sub = FixedVector<int64_t>(n);
    mlp_sub = FixedVector<int64_t>(n);
    sub_rows = FixedVector<StageRow>(n);
    sub_att = FixedVector<PagedAttentionRow>(n);
    sub_x = FixedVector<float>(n * E);
    head_in = FixedVector<float>(n * s.head_dim);
    head_out = FixedVector<float>(n * E);
    router_scratch.resize(static_cast<size_t>(L2aRouterScratch(s)));
    router_z.resize(static_cast<size_t>(s.l2a.outputs(s.n_heads)));
    if (s.l2a.lora_ramp) {
      lora_share = FixedVector<float>(n);
      lora_t = FixedVector<float>(n * s.l2a.lora_rank);
      lora_u = FixedVector<float>(n * std::max({s.q_dim() + 2 * s.kv_dim(), 2 * s.intermediate, E}));
    }
  }
}

}  // namespace fathom
