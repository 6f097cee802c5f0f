// Runs one prompt through the model at full depth and returns the logits of every
// position: `fathom logits` and the reference tests use it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "exec/stage_runner.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace fathom {

struct PromptOptions {
  int32_t loops = 0;                    // 0: the model's default
  std::optional<uint64_t> random_init;  // Huginn's seeded initial state; default zero
  bool record_signals = false;          // per-step exit signals of every position
  int64_t chunk = 0;                    // prefill chunk size; 0: the whole prompt at once
  KvLayout layout = KvLayout::kDepthIndexed;
  DType kv_dtype = DType::kBF16;  // K/V storage, as EngineOptions::kv_dtype
  float budget = 1.f;             // b of every token (L2A gate checkpoints)
  StageRunner::GateCounts* gate_counts = nullptr;  // L2A: if set, what the gates ran
};

// logits: [n, V]; with record_signals, gate_lambda / latent_diff: [loops, n].
Result<PrefillResult> RunPrompt(const Model& model, const std::vector<int32_t>& ids,
                                const PromptOptions& opt);

}  // namespace fathom
