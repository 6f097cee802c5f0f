// Backend: the contract between the engine and whatever executes its plans' stages. The
// engine (src/engine) and single-sequence generation (generate.h) talk only to this
// interface; the CPU implementation is StageRunner (stage_runner.h). A second backend (a
// GPU one: static buffers, graphs, padded batches; DESIGN.md §7) implements the same calls
// over the same plain inputs and results.
//
// Stages (model_spec.h): Prefill runs chunks of prompts through every stage; Prelude
// embeds new decode tokens and runs the prelude into their state slots; CoreStep runs one
// loop step for each item at its own depth and returns its exit signals; Coda applies the
// KV layout's exit rule, runs the coda and LM head, and samples. Items carry their state
// slot; the caller assigns slots (0 .. num_slots()-1) and KV (the KvManager it shares).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"
#include "exec/exit_policy.h"
#include "kernels/sampling.h"
#include "kv/kv_manager.h"

namespace fathom {

struct PrefillChunk {
  KvManager::SeqId seq = -1;
  const int32_t* ids = nullptr;
  int64_t pos0 = 0, n = 0;
  int32_t loops = 0;                    // loop steps (looped models); all rows run them all
  enum class Logits { kNone, kLast, kAll } logits = Logits::kNone;  // which rows get logits
  std::optional<uint64_t> random_init;  // Huginn's seeded initial state; default zero
  float budget = 1.f;  // the b its tokens' L2A routers read (docs/L2A_FORMAT.md); unused without gates
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
  bool kl = false;  // CoreStep: also compute this token's KL signal (coda + LM head, its row only)
  // Coda: sampling (greedy if sampler is null).
  Sampler* sampler = nullptr;
  SamplingParams sampling;
  // The budget b this token runs under (src/budget/budget.h). Prelude: the L2A routers of a
  // gate checkpoint read it (layer skip, head pruning; docs/L2A_FORMAT.md).
  float budget = 1.f;
};

struct CoreStepResult {
  std::vector<StepSignal> signals;  // per item
};

struct CodaResult {
  std::vector<float> logits;   // [items, V]
  std::vector<int32_t> tokens; // sampled, per item
};

// L2A gate checkpoints: what the gates ran, summed over every token and layer since the
// backend was built. Matmul flops count 2 M N K of each matmul as run (rows gathered),
// against the same tokens through the ungated block.
struct GateCounts {
  int64_t token_layers = 0;        // (token, layer) pairs through a gated block
  int64_t attention = 0, mlp = 0;  // of those, with the attention / MLP run
  int64_t heads = 0;               // query heads attended (of token_layers * n_heads)
  double matmul_flops = 0, dense_matmul_flops = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // Declares a sequence's loop count before its first prefill chunk; releases its state.
  virtual void AddSequence(KvManager::SeqId seq, int32_t loops) = 0;
  virtual void ReleaseSequence(KvManager::SeqId seq) = 0;

  // Errors: token ids outside the vocabulary, positions the KV manager has not allocated
  // or beyond the model's positions, loops outside the KV table's depth, bad slots.
  virtual Status Prefill(const std::vector<PrefillChunk>& chunks, bool record_signals,
                         PrefillResult* out) = 0;
  virtual Status Prelude(const std::vector<DecodeItem>& items) = 0;
  // Exit signals for every item; the KL signal only for the items with `kl` set.
  virtual Status CoreStep(const std::vector<DecodeItem>& items, CoreStepResult* out) = 0;
  virtual Status Coda(const std::vector<DecodeItem>& items, CodaResult* out) = 0;

  virtual int32_t num_slots() const = 0;
  // What the gates of an L2A checkpoint ran (all zero for other models).
  virtual const GateCounts& gate_counts() const = 0;
};

}  // namespace fathom
