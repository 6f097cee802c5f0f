// StageRunner: the CPU Backend (backend.h). Executes one stage of the model's stage
// structure (model_spec.h) over a batch of work items from any number of sequences,
// positions and loop depths.
//
//   Prefill   chunks of one or more sequences: embed, prelude, every loop step, coda; the
//             logits of each chunk that ends its prompt.
//   Prelude   new decode tokens: embed and prelude; leaves x0 (and Huginn's injected e) in
//             the token's state slot.
//   CoreStep  one loop step for each item at its own depth; returns each item's exit signal.
//   Coda      exited tokens: the layout's exit copies, coda, head norm, LM head, sampling.
//
// Every stage is one matmul per weight over all its rows (weights streamed once per stage).
// Attention addresses KV per row (paged_attention.h): each row reads its own sequence's
// block tables at the physical KV layers that the KV layer table (kv_layout.h) gives for
// its (layer, step, phase), so a batch can mix depths under every layout. Per-token state
// lives in a preallocated pool of slots between stages; the caller owns slot assignment.
// The runner keeps, per sequence, how many loop steps each position ran, to mask the holes
// of the depth-indexed layouts.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "exec/backend.h"
#include "kernels/paged_attention.h"
#include "model/model.h"

namespace fathom {

class StageRunner final : public Backend {
 public:
  // `num_slots`: state slots for decode tokens in flight.
  StageRunner(const Model& model, KvManager& kv, int32_t num_slots);

  void AddSequence(KvManager::SeqId seq, int32_t loops) override;
  void ReleaseSequence(KvManager::SeqId seq) override;
  Status Prefill(const std::vector<PrefillChunk>& chunks, bool record_signals,
                 PrefillResult* out) override;
  Status Prelude(const std::vector<DecodeItem>& items) override;
  Status CoreStep(const std::vector<DecodeItem>& items, CoreStepResult* out) override;
  Status Coda(const std::vector<DecodeItem>& items, CodaResult* out) override;
  int32_t num_slots() const override { return num_slots_; }

 private:
  struct Row {  // one token in one stage: where its KV goes and what it reads
    KvManager::SeqId seq;
    int64_t pos;
    int32_t step;
    TokenPhase phase;
    // Resolved once per stage call (ResolveRows), not per layer:
    int64_t prompt_len = 0;
    const int16_t* key_steps = nullptr;  // its sequence's steps_run (hole masking)
    int32_t tables = 0;                  // offset into row_tables_ of its sequence's
                                         // [num_physical] block tables
  };
  struct SeqInfo {
    int32_t loops = 0;
    std::vector<int16_t> steps_run;  // per position: loop steps run (hole masking)
  };

  // One transformer block over x [n, E] in place; row i writes its K/V where the table says.
  void Block(int32_t layer, const std::vector<Row>& rows, float* x);
  void PreludeLayers(const std::vector<Row>& rows, float* x, bool iterate);
  void IterateGroup(const IteratedGroup& g, const std::vector<Row>& rows, float* x);
  Status CheckChunks(const std::vector<PrefillChunk>& chunks) const;
  // Prefill of already checked chunks as one batch; `iterate`: cyclic groups iterated.
  Status PrefillRows(const std::vector<PrefillChunk>& chunks, bool record_signals, bool iterate,
                     PrefillResult* out);
  void Attend(int32_t layer, const std::vector<Row>& rows, const float* q, float* out);
  // One loop step (adapter, core layers, step norm) over rows at their own steps:
  // x [n, E] the state, in and out; e [n, E] the injected embeddings (adapter models) or
  // null; signals [n] (null: not computed) from the state before and after.
  void LoopStep(const std::vector<Row>& rows, float* x, const float* e, StepSignal* signals);
  void Embed(const int32_t* ids, int64_t n, float* x) const;
  void InitState(const std::optional<uint64_t>& seed, int64_t pos, float* x) const;
  void Signals(const float* x, const float* prev, int64_t n, StepSignal* out) const;
  void CodaAndHead(const std::vector<Row>& rows, float* x, const std::vector<int64_t>& head_rows,
                   float* logits);
  // KL(p_{r-1} || p_r) for the items listed in kl_items_ (x [n, E] the step's states).
  void KlSignals(const std::vector<DecodeItem>& items, const float* x, CoreStepResult* out);
  // Errors for rows of unknown sequences or positions without KV. ResolveRows then fills the
  // rows' resolved fields (valid until the next Grow, Release or steps_run resize).
  Status CheckRows(const std::vector<Row>& rows) const;
  void ResolveRows(std::vector<Row>& rows);
  // Stores row r.pos of physical layer p (K, or V when `value`) from kv_dim floats of src,
  // in the pool's dtype (src == nullptr: zeros).
  void WriteKvRow(const Row& r, int32_t physical_layer, bool value, const float* src);
  void HeadRows(int64_t n);  // head_ = 0 .. n-1
  Status CheckItems(const std::vector<DecodeItem>& items) const;
  SeqInfo& Info(KvManager::SeqId seq);

  const Model& m_;
  const ModelSpec& s_;
  KvManager& kv_;
  const KvLayerTable& table_;
  int32_t num_slots_;
  std::vector<float> slot_x_, slot_e_;  // [num_slots, E]
  std::vector<float> slot_logp_;        // [num_slots, V], allocated on the first KL request
  std::unordered_map<KvManager::SeqId, SeqInfo> seqs_;
  // Scratch, grown on demand and kept (no allocation once the largest batch has run).
  // n = rows of the stage call, m = rows of one prefill loop step (<= n).
  std::vector<float> x_;              // [n, E] the rows' hidden states
  std::vector<float> e_;              // [n, E] injected embeddings (prelude output): prefill's,
                                      // or a core step's gathered from the slots
  std::vector<float> loop_x_, loop_e_;  // [m, E] one loop step's rows, gathered
  std::vector<float> prev_;           // [m, E] the state before a loop step (signals)
  std::vector<float> h_;              // [n, E] normed input of a sub-layer / head rows
  std::vector<float> qkv_;            // [n, q_dim + 2 kv_dim]
  std::vector<float> q_, k_;          // [n, q_dim], [n, kv_dim] after norms, bias, RoPE
  std::vector<float> attn_;           // [n, q_dim] attention output
  std::vector<float> o_;              // [n, E] sub-layer output
  std::vector<float> gate_up_, act_;  // [n, 2 I], [n, I]
  std::vector<float> cat_;            // [m, 2 E] adapter input cat[x, e]
  std::vector<float> group_in_;       // [n, E] a cyclic group's input (IterateGroup)
  std::vector<float> logits_;         // [kl rows, V]
  std::vector<float> logp_;           // [V]
  std::vector<int32_t> pos_;          // [n] positions (RoPE)
  std::vector<KeySegment> segs_;      // attention: every row's key segments
  std::vector<KvSegment> kv_segs_;    // one row's segments from the table
  std::vector<PagedAttentionRow> att_rows_;
  std::vector<const int32_t*> row_tables_;  // [distinct sequences of the call, num_physical]
  std::vector<Row> rows_, step_rows_, kl_rows_;
  std::vector<int32_t> ids_;
  std::vector<int64_t> head_, active_, chunk_begin_, kl_items_;
  std::vector<StepSignal> sig_;
  std::vector<std::pair<int32_t, int32_t>> copies_;
};

}  // namespace fathom
