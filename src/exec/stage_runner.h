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
//
// Every buffer is in a RunState (run_state.h) allocated at construction from RunLimits
// (rows per stage call, positions per sequence): a stage call allocates nothing, and a call
// beyond the limits is an error. Row metadata (block tables, prompt lengths, key steps) is
// resolved once per stage call, each stage's attention segments once before its layers.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "exec/backend.h"
#include "exec/run_state.h"
#include "kernels/paged_attention.h"
#include "model/model.h"

namespace fathom {

class StageRunner final : public Backend {
 public:
  // `num_slots`: state slots for decode tokens in flight; `limits`: the largest stage call
  // (rows) and sequence (positions) the caller will send.
  StageRunner(const Model& model, KvManager& kv, int32_t num_slots, const RunLimits& limits);
  // Limits no call can exceed (RunLimits::Covering): for tests and tools that do not know theirs.
  StageRunner(const Model& model, KvManager& kv, int32_t num_slots);

  void AddSequence(KvManager::SeqId seq, int32_t loops) override;
  void ReleaseSequence(KvManager::SeqId seq) override;
  Status Prefill(const std::vector<PrefillChunk>& chunks, bool record_signals,
                 PrefillResult* out) override;
  Status Prelude(const std::vector<DecodeItem>& items) override;
  Status CoreStep(const std::vector<DecodeItem>& items, CoreStepResult* out) override;
  Status Coda(const std::vector<DecodeItem>& items, CodaResult* out) override;
  int32_t num_slots() const override { return num_slots_; }
  const RunLimits& limits() const { return st_.limits; }

  // L2A gate checkpoints: what the gates ran (backend.h).
  using GateCounts = fathom::GateCounts;
  const GateCounts& gate_counts() const override { return gate_counts_; }

 private:
  using Rows = std::span<const StageRow>;
  struct SeqInfo {
    int32_t loops = 0;
    std::vector<int16_t> steps_run;  // per position: loop steps run (hole masking); reserved
                                     // to max_context at AddSequence
    // L2A `mask` checkpoints: [layer][position] 1 if the token ran attention there (its K/V
    // exist), else 0; each reserved to max_context. Empty otherwise.
    std::vector<std::vector<int16_t>> attn_ran;
  };

  // One transformer block over x [n, E] in place; row i writes its K/V where the table says.
  // Its attention segments must have been resolved (ResolveAttention) for these rows.
  void Block(int32_t layer, Rows rows, float* x);
  // Block of an L2A gate checkpoint (l2a_block.cc): the layer's router decides per row
  // whether attention and MLP run and which heads are kept; rows that run a sub-layer are
  // gathered into one matmul per weight and scattered back.
  void GatedBlock(int32_t layer, Rows rows, float* x);
  // Records, per row, positions' steps_run and (L2A mask) attn_ran entries up to r.pos.
  void GrowPositions(KvManager::SeqId seq, int64_t end);
  void PreludeLayers(Rows rows, float* x, bool iterate);
  void IterateGroup(const IteratedGroup& g, Rows rows, float* x);
  Status CheckChunks(const std::vector<PrefillChunk>& chunks) const;
  // Prefill of already checked chunks as one batch; `iterate`: cyclic groups iterated. Chunk
  // c's logits rows go to logits [.., V] from row logits_row[c] on.
  Status PrefillRows(std::span<const PrefillChunk> chunks, bool record_signals, bool iterate,
                     const int64_t* logits_row, float* logits, PrefillResult* out);
  Status PrefillIterated(const std::vector<PrefillChunk>& chunks, PrefillResult* out);
  void PrefillLoops(std::span<const PrefillChunk> chunks, int32_t max_loops, bool record_signals, float* x,
                    const float* e, PrefillResult* out);
  void PromptExitCopies(std::span<const PrefillChunk> chunks);
  // Key segments of every row at layers [first, first + count), into st_.att_rows / segs.
  void ResolveAttention(int32_t first, int32_t count, Rows rows);
  void Attend(int32_t layer, Rows rows);  // st_.q -> st_.attn
  // One loop step (adapter, core layers, step norm) over rows at their own steps:
  // x [n, E] the state, in and out; e [n, E] the injected embeddings (adapter models) or
  // null; signals [n] (null: not computed) from the state before and after.
  void LoopStep(Rows rows, float* x, const float* e, StepSignal* signals);
  void Embed(const int32_t* ids, int64_t n, float* x) const;
  void InitState(const std::optional<uint64_t>& seed, int64_t pos, float* x) const;
  void Signals(const float* x, const float* prev, int64_t n, StepSignal* out) const;
  void CodaAndHead(Rows rows, float* x, std::span<const int64_t> head_rows, std::span<const int64_t> head_dest,
                   float* logits);
  // KL(p_{r-1} || p_r) for the items listed in st_.kl_items (x [n, E] the step's states).
  void KlSignals(const std::vector<DecodeItem>& items, const float* x, CoreStepResult* out);
  // Errors for too many rows, rows of unknown sequences or positions without KV. ResolveRows
  // then fills the rows' resolved fields (valid until the next Grow, Release or steps_run
  // resize).
  Status CheckRows(Rows rows) const;
  void ResolveRows(std::span<StageRow> rows);
  // Stores row r.pos of physical layer p (K, or V when `value`) from kv_dim floats of src,
  // in the pool's dtype (src == nullptr: zeros).
  void WriteKvRow(const StageRow& r, int32_t physical_layer, bool value, const float* src);
  void HeadRows(int64_t n);  // head = 0 .. n-1
  Status CheckItems(const std::vector<DecodeItem>& items) const;
  SeqInfo& Info(KvManager::SeqId seq);

  const Model& m_;
  const ModelSpec& s_;
  // Row by row for a batch-invariant model (Model::batch_invariant), else tiles for prompts.
  const RowGrouping attention_grouping_;
  KvManager& kv_;
  const KvLayerTable& table_;
  int32_t num_slots_;
  std::unordered_map<KvManager::SeqId, SeqInfo> seqs_;
  RunState st_;  // every buffer, sized once (run_state.h)
  GateCounts gate_counts_;
};

}  // namespace fathom
