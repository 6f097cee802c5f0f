// Single-sequence generation: prefill the prompt (in chunks, every loop step), then decode
// one token at a time through the stages (prelude, core steps until the exit policy fires,
// coda) of the StageRunner, each stage over a batch of one. This is the
// one-request-at-a-time path that batched schedules are checked against.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "exec/exit_policy.h"
#include "kernels/sampling.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace fathom {

enum class ExitCriterion { kAuto, kHazard, kLatentDiff, kKl };

struct GenerateOptions {
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;
  int32_t loops = 0;                      // 0: the model's default loop count
  // Looped models: loop steps of the prompt's tokens, in [1, loops] (0: loops), as the
  // engine runs prompts under EngineOptions::budget_prompts.
  int32_t prompt_loops = 0;
  std::optional<double> exit_threshold;   // looped models: exit early by this threshold
  ExitCriterion criterion = ExitCriterion::kAuto;  // auto: Ouro hazard, Huginn latent diff
  SamplingParams sampling;
  uint64_t seed = 0;
  std::optional<uint64_t> init_seed;      // Huginn: random initial state; default zero
  bool stop_at_eos = true;
  int64_t prefill_chunk = 512;
  // KV layout; last-exited fills the slots an early exit skipped with the token's last state.
  KvLayout layout = KvLayout::kLastExited;
  int32_t shared_after = 1;  // first-then-shared: S
  DType kv_dtype = DType::kBF16;  // K/V storage, as EngineOptions::kv_dtype
  // An external exit policy (e.g. ReplayExit, or the same policy kind a batched engine
  // uses); when set it replaces exit_threshold / criterion.
  std::shared_ptr<ExitPolicy> exit_policy;
  // Lookahead gate: a decision read after step r takes effect at r+2 (the token runs step
  // r+1 regardless), as the CDB schedulers do when EngineOptions::lookahead is set; the
  // minimum exit depth becomes 2. Off by default, as in the engine.
  bool exit_lookahead = false;
  // The budget b that L2A gate checkpoints' routers read (docs/L2A_FORMAT.md), as the
  // engine gives it to a request: the prompt at `budget` (default 1); decode token i at
  // budget_trace[i] (the last entry repeating) if given, else at `budget`.
  std::optional<double> budget;
  std::vector<float> budget_trace;
};

struct GenerateResult {
  std::vector<int32_t> ids;          // generated tokens
  std::vector<int32_t> exit_depths;  // loop steps run to produce each (looped models)
  std::string finish_reason;         // "length" or "stop"
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t decode_steps = 0;          // forwards of one token (ids.size() - 1 at most)
};

// Errors name the offending option (empty prompt, ids outside the vocabulary, a prompt plus
// max_tokens beyond the model's positions, loops out of range, a threshold for a dense model).
Result<GenerateResult> Generate(const Model& model, const GenerateOptions& opt);

// The loop count a request runs with (opt.loops or the model's default), validated.
Result<int32_t> ResolveLoops(const ModelSpec& spec, int32_t loops);

}  // namespace fathom
