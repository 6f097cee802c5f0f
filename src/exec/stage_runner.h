// StageRunner: executes one stage of the model's stage structure (model_spec.h) over a batch
// of work items from any number of sequences, positions and loop depths.
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
#include "exec/exit_policy.h"
#include "kernels/paged_attention.h"
#include "kernels/sampling.h"
#include "kv/kv_manager.h"
#include "model/model.h"

namespace fathom {

struct PrefillChunk {
  KvManager::SeqId seq = -1;
  const int32_t* ids = nullptr;
  int64_t pos0 = 0, n = 0;
  int32_t loops = 0;                    // loop steps (looped models); all rows run them all
  enum class Logits { kNone, kLast, kAll } logits = Logits::kNone;  // which rows get logits
  std::optional<uint64_t> random_init;  // Huginn's seeded initial state; default zero
};

struct PrefillResult {
  std::vector<float> logits;  // [rows asked for, V], in row order
  // With record_signals, per step and row (rows in chunk order): [max loops, total rows].
  std::vector<float> gate_lambda, latent_diff;
};

struct DecodeItem {
  int32_t slot = -1;  // state slot (x, e) of this token
  KvManager::SeqId seq = -1;
  int64_t pos = 0;
  int32_t token = 0;                    // Prelude: the input token id
  int32_t step = 0;                     // CoreStep: the 0-based step to run; Coda: steps run
  std::optional<uint64_t> random_init;  // Prelude (Huginn)
  // Coda: sampling (greedy if sampler is null).
  Sampler* sampler = nullptr;
  SamplingParams sampling;
};

struct CoreStepResult {
  std::vector<StepSignal> signals;  // per item
};

struct CodaResult {
  std::vector<float> logits;   // [items, V]
  std::vector<int32_t> tokens; // sampled, per item
};

class StageRunner {
 public:
  // `num_slots`: state slots for decode tokens in flight.
  StageRunner(const Model& model, KvManager& kv, int32_t num_slots);

  // Declares a sequence's prompt length and loop count before its first prefill chunk.
  void AddSequence(KvManager::SeqId seq, int32_t loops);
  void ReleaseSequence(KvManager::SeqId seq);

  // Errors: token ids outside the vocabulary, positions the KV manager has not allocated
  // or beyond the model's positions, loops outside the KV table's depth, bad slots.
  Status Prefill(const std::vector<PrefillChunk>& chunks, bool record_signals, PrefillResult* out);
  Status Prelude(const std::vector<DecodeItem>& items);
  Status CoreStep(const std::vector<DecodeItem>& items, bool compute_kl, CoreStepResult* out);
  Status Coda(const std::vector<DecodeItem>& items, CodaResult* out);

  int32_t num_slots() const { return num_slots_; }

 private:
  struct Row {  // one token in one stage: where its KV goes and what it reads
    KvManager::SeqId seq;
    int64_t pos;
    int32_t step;
    TokenPhase phase;
  };
  struct SeqInfo {
    int32_t loops = 0;
    std::vector<int16_t> steps_run;  // per position: loop steps run (hole masking)
  };

  void Block(int32_t layer, const std::vector<Row>& rows, float* x);
  void Attend(int32_t layer, const std::vector<Row>& rows, const float* q, float* out);
  void Embed(const int32_t* ids, int64_t n, float* x) const;
  void InitState(const std::optional<uint64_t>& seed, int64_t pos, float* x) const;
  void Signals(const float* x, const float* prev, int64_t n, StepSignal* out) const;
  void CodaAndHead(const std::vector<Row>& rows, float* x, const std::vector<int64_t>& head_rows,
                   float* logits);
  Status CheckRows(const std::vector<Row>& rows) const;
  void HeadRows(int64_t n);  // head_ = 0 .. n-1
  Status CheckItems(const std::vector<DecodeItem>& items) const;
  SeqInfo& Info(KvManager::SeqId seq);
  int32_t SlotDepth(int32_t step) const;  // the depth index a core slot at `step` stores

  const Model& m_;
  const ModelSpec& s_;
  KvManager& kv_;
  const KvLayerTable& table_;
  int32_t num_slots_;
  std::vector<float> slot_x_, slot_e_;  // [num_slots, E]
  std::vector<float> slot_logp_;        // [num_slots, V], allocated on the first KL request
  std::unordered_map<KvManager::SeqId, SeqInfo> seqs_;
  // Scratch, grown on demand and kept (no allocation in the steady state).
  std::vector<float> x_, e_, prev_, h_, qkv_, q_, k_, attn_, o_, gate_up_, act_, cat_, logits_, logp_;
  std::vector<int32_t> pos_;
  std::vector<KeySegment> segs_;
  std::vector<KvSegment> kv_segs_;
  std::vector<PagedAttentionRow> att_rows_;
  std::vector<Row> rows_;
  std::vector<int32_t> ids_;
  std::vector<int64_t> head_;
  std::vector<std::pair<int32_t, int32_t>> copies_;
};

}  // namespace fathom
