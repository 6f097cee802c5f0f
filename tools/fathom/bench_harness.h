// Benchmark harnesses over the StageRunner, shared by `fathom bench` subcommands.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace fathom::cli {

struct BatchDecodeResult {
  int32_t batch = 0;
  double prompt_tok_s = 0, decode_tok_s = 0;
  double decode_step_s = 0;  // one token for every sequence: prelude, R core steps, coda
  double decode_matmul_fraction = 1;  // L2A: layer matmul flops the gates ran in decode, of dense
};

// `batch` sequences of `prompt` tokens each are prefilled (packed into calls of up to
// `prefill_tokens` tokens), then decode `gen` tokens each in lockstep: every decode step
// runs the prelude, `loops` core steps and the coda over the whole batch (no exits). Every
// token runs at `budget` (L2A gate checkpoints' routers).
Result<BatchDecodeResult> RunBatchDecode(const Model& model, int32_t batch, int64_t prompt,
                                         int64_t gen, int32_t loops, KvLayout layout,
                                         int64_t prefill_tokens, DType kv_dtype, float budget = 1.f);

struct StepLatency {
  int32_t batch = 0;
  int64_t context = 0;
  double seconds = 0;  // median of the repetitions; 0 if skipped
  bool skipped = false;
  double kv_gb = 0;    // KV the configuration needs
};

// Latency of one core step (loop step 0) over `batch` decode tokens, each attending to
// `context` earlier positions, K/V stored as kv_dtype. Configurations whose KV exceeds
// kv_budget_bytes are skipped.
Result<StepLatency> MeasureCoreStep(const Model& model, int32_t batch, int64_t context,
                                    size_t kv_budget_bytes, int reps, DType kv_dtype);

}  // namespace fathom::cli
