// What a model's KV footprint buys under a fixed KV memory budget (issue 13, the LCKV
// paper's Table 1 and Figure 4 analog): how many sequences of prompt + output tokens fit,
// the decode throughput at each batch up to that, and the cost of prefilling a prompt.
//
// Sequences fit at their full length (prompt + output) in blocks of the engine's KV pool,
// so the count is what the engine admits without preempting anyone. Decode is timed as
// the engine's decode step of a non-looped model (prelude over every layer, then the LM
// head) over `batch` sequences at context prompt + output / 2, their mean over the
// generation; the cache holds zeros instead of a prefilled context, which does not change
// the cost (no kernel branches on values). Prefill is timed on one real prompt.
#pragma once

#include <cstdint>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "model/model.h"

namespace fathom::bench {

struct KvCapacityOptions {
  size_t kv_bytes = size_t{4} << 30;   // the KV memory budget
  int64_t prompt = 512, output = 1024; // tokens per sequence
  std::vector<int32_t> batches;        // decode batches to time; the maximum is added
  int reps = 3;                        // decode steps timed per batch (median)
  int64_t prefill_tokens = 0;          // 0: no prefill timing; else one prompt this long
  int64_t prefill_chunk = 256;         // its chunks (the engine's default budget)
  int32_t block_size = 16;
  DType kv_dtype = DType::kBF16;       // K/V storage, as EngineOptions::kv_dtype
};

// Times are wall seconds and, beside them, the process's CPU seconds: with one thread the
// CPU time is the work itself, which other processes' time slices on a shared host do not
// lengthen (shared caches and memory bandwidth still can).
struct DecodePoint {
  int32_t batch = 0;
  double step_s = 0;     // median decode step over the batch (wall)
  double step_cpu_s = 0; // median decode step (process CPU time)
  double tok_s = 0;      // batch / step_s
  double tok_cpu_s = 0;  // batch / step_cpu_s
  double kv_gib = 0;     // KV these sequences hold at full length
};

struct KvCapacityResult {
  int32_t layers = 0, kv_layers = 0;  // all layers; layers that own KV (producing)
  int64_t bytes_per_token = 0;        // kv_layers * 2 * kv_dim * sizeof(float)
  int64_t blocks = 0;                 // the budget in pool blocks
  int64_t blocks_per_sequence = 0;    // at prompt + output tokens
  int32_t max_batch = 0;              // blocks / blocks_per_sequence
  std::vector<DecodePoint> decode;    // ascending batch, the maximum last
  double prefill_s = 0;               // one prompt of prefill_tokens (0 if not timed)
  double prefill_cpu_s = 0;           // the same in process CPU time
};

Result<KvCapacityResult> MeasureKvCapacity(const Model& model, const KvCapacityOptions& opt);

}  // namespace fathom::bench
