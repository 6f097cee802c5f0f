// Perplexity of a model on a token sequence under an exit policy, as served: teacher-forced,
// token by token through the paged KV cache of the serving path (the StageRunner backend, the
// KV manager and layer table of the chosen layout), each token leaving the loop at its own
// exit depth exactly as a decode token of `fathom serve` would.
//
// Windows. The ids are cut into non-overlapping windows of `context` tokens (the last one
// shorter); each window is its own sequence with an empty KV cache, so no prediction sees a
// token of an earlier window. In a window of n tokens, token 0 is the prompt (prefilled, every
// loop step) and its logits predict token 1; tokens 1 .. n-2 are decode tokens (prelude, core
// steps until the exit policy fires, coda) whose logits predict the next token; token n-1 is
// only a target. So a window scores n-1 predictions, the first of each window has no
// prediction of its own, and a final window of one token scores nothing.
//
// Batching. Up to `batch` windows run side by side as sequences of one runner: each stage call
// takes one token of every window still running (the decode tokens of a loop step mix depths,
// as in Continuous Depth Batching). A token's exit depends only on its own signals, so the
// windows do not change each other's depths; the numbers of a batched run equal a run with
// batch 1 up to the float rounding of a different matmul row count.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "exec/exit_spec.h"
#include "kv/kv_layout.h"
#include "model/model.h"

namespace fathom {

struct PerplexityOptions {
  int32_t loops = 0;     // loop steps of every sequence (KV depth); 0: the model's default
  ExitSpec exit;         // kNone: every token runs `loops` steps
  std::optional<double> budget;  // b in [0, 1]: scales a signal policy's threshold (exit_policy.h)
  bool lookahead = false;        // the lookahead gate (decisions take effect a step later)
  KvLayout layout = KvLayout::kLastExited;  // as EngineOptions' default
  int32_t shared_after = 1;
  DType kv_dtype = DType::kBF16;
  int64_t context = 0;   // window length in tokens; 0: DefaultContext(model)
  int32_t batch = 8;     // windows in flight
  bool keep_tokens = false;  // fill PerplexityResult::nll / depths
};

struct PerplexityResult {
  int32_t loops = 0;            // the loop count the sequences ran with (0: dense)
  int64_t context = 0;          // the window length used
  int64_t tokens = 0;           // ids given
  int64_t windows = 0;          // windows with at least one prediction
  int64_t predictions = 0;      // scored tokens: tokens - windows (minus a last 1-token window)
  double nll_sum = 0;           // sum of -log p(target), natural log
  double mean_nll = 0;          // nll_sum / predictions
  double perplexity = 0;        // exp(mean_nll)
  // Depth: loop steps behind each prediction (the prompt token of a window: `loops`).
  int64_t core_steps = 0;       // sum of depths
  double mean_depth = 0;        // core_steps / predictions (0 for a dense model)
  std::vector<int64_t> depth_histogram;  // [loops + 1]: predictions made at depth d
  double layers_per_token = 0;  // prelude + coda + mean_depth * core layers
  // L2A gate checkpoints (else 0), over every token run: the fraction of (token, layer)
  // pairs that ran the attention / the MLP, of query heads attended, and of the layers'
  // matmul flops run (StageRunner::GateCounts).
  double attention_fraction = 0, mlp_fraction = 0, heads_fraction = 0, matmul_fraction = 0;
  // KV bytes one token adds (KvManager::BytesPerToken) as a prompt and as a decode token.
  size_t kv_bytes_per_prompt_token = 0, kv_bytes_per_decode_token = 0;
  double seconds = 0, cpu_seconds = 0;  // wall and process CPU time of the evaluation
  double tokens_per_s = 0;              // predictions / seconds
  std::vector<float> nll;               // keep_tokens: per prediction, in text order
  std::vector<int32_t> depths;          // keep_tokens: per prediction
};

// min(the model's positions, 1024).
int64_t DefaultContext(const Model& model);

// Errors name the option: fewer than 2 ids, ids outside the vocabulary, a context below 2
// or beyond the model's positions, a batch below 1, loops out of range, an exit policy or
// budget for a dense model, a budget outside [0, 1].
Result<PerplexityResult> EvaluatePerplexity(const Model& model, const std::vector<int32_t>& ids,
                                            const PerplexityOptions& opt);

}  // namespace fathom
