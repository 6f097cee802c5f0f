// RunState: every buffer the CPU backend (stage_runner.h) works in, allocated once when the
// runner is built, from RunLimits and the model's shapes (the llama2.c pattern: one struct
// of activation buffers, each with its shape). No stage call allocates: a call beyond the
// limits is an error before any work (StageRunner checks), and the buffers themselves
// CHECK-fail rather than grow (fixed_vector.h).
//
// Shapes, with n = RunLimits::max_rows, S = state slots, E = hidden, I = intermediate,
// V = vocab, qd = q_dim, kvd = kv_dim, P = physical KV layers, G = the most layers of one
// stage (prelude, core or coda), and kMaxSegments = 2 (KvLayerTable::ReadSegments).
#pragma once

#include <cstdint>
#include <vector>

#include "exec/backend.h"
#include "exec/exit_policy.h"
#include "exec/fixed_vector.h"
#include "kernels/paged_attention.h"
#include "kv/kv_layout.h"
#include "kv/kv_manager.h"
#include "model/model_spec.h"

namespace fathom {

struct RunLimits {
  // Rows (tokens) of one stage call: the prompt tokens of all chunks of one Prefill call,
  // the items of one Prelude, CoreStep or Coda. The engine's is max(width, prefill budget).
  int64_t max_rows = 0;
  // Positions of one sequence (prompt + output): the runner's per-position record of the
  // loop steps each token ran (hole masking) is reserved to this at AddSequence.
  int64_t max_context = 0;

  // Limits no valid call can exceed, for callers that do not know theirs: every row of a
  // call is a distinct position holding KV, and each position occupies at least
  // min(LayersPerToken(prompt), LayersPerToken(decode)) block rows of the pool, so
  // max_rows = max(num_slots, pool rows / that); max_context = the model's positions.
  // Pages are touched only as far as calls reach (fixed_vector.h), so a loose bound costs
  // address space, not memory.
  static RunLimits Covering(const KvManager& kv, int32_t num_slots, int64_t max_positions);
};

// One token in one stage call: where its KV goes and what it reads.
struct StageRow {
  KvManager::SeqId seq = -1;
  int64_t pos = 0;
  int32_t step = 0;
  TokenPhase phase = TokenPhase::kPrompt;
  float budget = 1.f;  // b of the L2A routers (docs/L2A_FORMAT.md); unused without gates
  // Resolved once per stage call (StageRunner::ResolveRows), not per layer:
  int64_t prompt_len = 0;
  const int16_t* key_steps = nullptr;  // its sequence's steps_run (hole masking)
  int32_t tables = 0;                  // offset into RunState::row_tables of its sequence's
                                       // [P] block tables
  std::vector<int16_t>* attn_ran = nullptr;  // L2A `mask`: its sequence's per-layer record of
                                             // the positions that ran attention ([layers])
};

struct RunState {
  static constexpr int64_t kMaxSegments = 2;  // key segments of one row at one layer

  RunState(const ModelSpec& s, const KvLayerTable& table, int32_t num_slots, const RunLimits& limits);

  RunLimits limits;
  int32_t num_slots = 0;

  // Per-token state between stages, indexed by slot.
  FixedVector<float> slot_x, slot_e;  // [S, E] the loop state; the injected embeddings
  FixedVector<float> slot_logp;       // [S, V] log p of the previous step (KL); looped models

  // Activations of one stage call (m <= n: the rows of one prefill loop step, or head rows).
  FixedVector<float> x;         // [n, E] the rows' hidden states
  FixedVector<float> e;         // [n, E] injected embeddings: prefill's prelude output, or a
                                // core step's gathered from the slots
  FixedVector<float> loop_x, loop_e;  // [m, E] one prefill loop step's rows, gathered; KL rows
  FixedVector<float> prev;      // [m, E] the state before a loop step (exit signals)
  FixedVector<float> h;         // [n, E] normed input of a sub-layer; head rows
  FixedVector<float> qkv;       // [n, qd + 2 kvd] (a q-only LCKV layer: [n, qd])
  FixedVector<float> q;         // [n, qd] after norms, bias, RoPE
  FixedVector<float> k;         // [n, kvd] after norms, bias, RoPE
  FixedVector<float> attn;      // [n, qd] attention output
  FixedVector<float> o;         // [n, E] sub-layer output
  FixedVector<float> gate_up;   // [n, 2 I]
  FixedVector<float> act;       // [n, I]
  FixedVector<float> cat;       // [n, 2 E] adapter input cat[x, e] (adapter models; else empty)
  FixedVector<float> group_in;  // [n, E] a cyclic group's input (prompt iteration; else empty)
  FixedVector<float> kl_logits; // [S, V] the KL rows' logits (looped models; else empty)
  FixedVector<float> logp;      // [V] one KL row's log-softmax
  FixedVector<int32_t> pos;     // [n] positions (RoPE)

  // Row metadata, resolved once per stage call (rows, tables) or once per stage of a call
  // (attention: every layer of the stage, before its first layer runs).
  FixedVector<StageRow> rows, step_rows, kl_rows;  // [n] the call's rows; one loop step's; KL rows
  FixedVector<const int32_t*> row_tables;          // [n, P] block tables of the call's sequences
  FixedVector<PagedAttentionRow> att_rows;         // [G, n] per layer of the stage, per row
  FixedVector<KeySegment> segs;                    // [G, n, kMaxSegments] their key segments
  int32_t att_first_layer = -1, att_layers = 0;    // the layers att_rows / segs hold
  std::vector<KvSegment> kv_segs;                  // [kMaxSegments] one row's, from the table
  std::vector<std::pair<int32_t, int32_t>> copies; // [n_core * max_depth] one token's exit copies

  FixedVector<int32_t> ids;       // [n] token ids
  FixedVector<int64_t> head;      // [n] rows that get logits
  FixedVector<int64_t> head_dest; // [n] the logits row each of them goes to
  FixedVector<int64_t> active;    // [n] rows of one prefill loop step
  FixedVector<int64_t> chunk_begin;   // [n] first row of each chunk (chunks <= rows)
  FixedVector<int64_t> chunk_logits;  // [n] first logits row of each chunk in the result
  FixedVector<int64_t> kl_items;  // [n] items that asked for the KL signal
  FixedVector<StepSignal> sig;    // [n] one prefill loop step's exit signals
  // Prompt iteration (LCKV): the chunks of one Prefill call run in parallel or token by
  // token, and where each sub-call's logits go.
  FixedVector<PrefillChunk> sub_chunks;  // [n]
  FixedVector<int64_t> sub_logits;       // [n]

  // L2A gates (docs/L2A_FORMAT.md; sized only for gate checkpoints). One layer's decisions
  // and the rows that run each sub-layer, gathered.
  FixedVector<uint8_t> attn_on, mlp_on;    // [n]
  FixedVector<uint8_t> head_keep;          // [n, H]
  FixedVector<int64_t> kv_rows, att_sub, mlp_sub;  // [n] rows that project K/V, attend, run the MLP
  FixedVector<StageRow> sub_rows;          // [n] the rows that project K/V
  FixedVector<PagedAttentionRow> sub_att;  // [n] the attending rows' attention
  FixedVector<float> sub_x;                // [n, E] gathered sub-layer input / output
  FixedVector<float> head_in, head_out;    // [n, D] one head's attention output; [n, E] its o_proj
  std::vector<double> router_scratch, router_z;  // [E + F + R], [G] one row's router
  // LoRA kept apart by a budget ramp (LoraAdapter): each row's share, A x and B (A x).
  FixedVector<float> lora_share;  // [n]
  FixedVector<float> lora_t;      // [n, r]
  FixedVector<float> lora_u;      // [n, max(q_dim + 2 kv_dim, 2 I, E)]
};

}  // namespace fathom
