// Runner: runs tokens of one sequence through the model's stage structure (model_spec.h),
// reading and writing that sequence's KV cache. The structure is data: the runner has no
// per-family branches, only the switches a ModelSpec sets.
//
// A call processes n new tokens at positions pos0 .. pos0+n-1 (a prompt chunk, or one decode
// token). Prompt tokens run every loop step. A single decode token may leave the loop early
// under an ExitPolicy; its skipped KV slots are then filled with its last state
// (SequenceKv::CopyToDeeperSteps). The batched, paged stage runner (issue 3) replaces this
// per-sequence path.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/status.h"
#include "exec/exit_policy.h"
#include "exec/sequence_kv.h"
#include "model/model.h"

namespace fathom {

struct ForwardRequest {
  const int32_t* ids = nullptr;
  int64_t n = 0;
  int64_t pos0 = 0;
  int32_t loops = 0;                     // loop steps for a looped model (<= kv.loops())
  std::optional<uint64_t> random_init;   // Huginn: seeded random initial state, else zero
  bool all_logits = false;               // logits of every row, else of the last row only
  bool record_signals = false;           // fill ForwardResult signals
  bool compute_kl = false;               // Huginn KL signal (runs the coda and head per step)
  ExitPolicy* exit_policy = nullptr;     // only with n == 1
};

struct ForwardResult {
  std::vector<float> logits;       // [rows, V], rows = n or 1
  int32_t steps_run = 0;           // loop steps actually run (exit depth of a decode token)
  // Signals per step and row, [steps_run, n], when record_signals:
  std::vector<float> gate_lambda;  // Ouro
  std::vector<float> latent_diff;  // Huginn
  std::vector<float> kl;           // Huginn with compute_kl: KL(p_{r-1} || p_r), p_0 uniform
};

class Runner {
 public:
  explicit Runner(const Model& model) : m_(model), s_(model.spec()) {}

  // Errors: ids outside the vocabulary (names the index and value), positions beyond the
  // KV capacity or the model's max positions, an exit policy with n > 1.
  Status Forward(SequenceKv& kv, const ForwardRequest& req, ForwardResult* out);

 private:
  // Buffers, grown on demand and kept between calls (no allocation in the steady state).
  struct Scratch {
    std::vector<float> x, e, u, prev, h, qkv, q, attn, o, gate_up, act, cat, coda, logp, prev_logp;
    std::vector<int32_t> pos, visible;
  };

  void Embed(const int32_t* ids, int64_t n, float* x);
  // One transformer block over x [n, E] in place.
  void Block(int32_t layer, int32_t kv_layer, SequenceKv& kv, int64_t pos0, int64_t n, float* x);
  void InitialState(const ForwardRequest& req, int64_t n, float* x) const;
  // Coda layers, head norm and LM head over x [n, E] (copied); rows selected by `all`.
  void CodaAndHead(SequenceKv& kv, int64_t pos0, int64_t n, const float* x, bool all,
                   std::vector<float>* logits);
  void Signals(const ForwardRequest& req, SequenceKv& kv, int64_t n, int32_t step,
               const float* state, const float* prev, ForwardResult* out, StepSignal* last);

  const Model& m_;
  const ModelSpec& s_;
  Scratch sc_;
};

}  // namespace fathom
