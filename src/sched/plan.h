// Plan and Outcome: the plain data that passes between the scheduler (which decides), the
// engine (which executes through the StageRunner) and the scheduler's Update (which
// applies the result). No tensors, no pointers into the engine: a plan prints with
// ToString() and a fake runner can answer it in tests.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace fathom {

using RequestId = int32_t;

// Which queue of DESIGN.md §2 a plan serves: prefill (queue 1), prelude (2), one core
// step over items at their own depths (3), coda (4). kIdle: only preemptions, or nothing.
enum class Stage : uint8_t { kIdle, kPrefill, kPrelude, kCore, kCoda };
std::string_view StageName(Stage s);

// A chunk of a request's prompt: positions [pos0, pos0 + n). `last` ends the prompt; the
// engine samples the first output token from its logits only if `sample` (a request that
// resumes after preemption already has it).
struct PrefillWork {
  RequestId req = -1;
  int64_t pos0 = 0, n = 0;
  bool last = false, sample = false;
};

// One decode token of one request at one stage. Prelude: `token` enters at `pos`. Core:
// runs 0-based step `step`. Coda: `step` = loop steps run (its exit depth). `replay`: a
// token being recomputed after preemption (depth forced, coda output ignored, no sampling).
struct WorkItem {
  RequestId req = -1;
  int32_t slot = -1;
  int64_t pos = 0;
  int32_t token = 0;
  int32_t step = 0;
  bool replay = false;
};

// KV growth applied before the stage: request `req` holds positions [0, new_len).
struct KvGrowth {
  RequestId req = -1;
  int64_t new_len = 0;
};

struct Plan {
  Stage stage = Stage::kIdle;
  std::vector<RequestId> preempt;  // applied first: free the KV, requeue for recompute
  std::vector<KvGrowth> grow;      // then this growth (never fails: the scheduler counted it)
  std::vector<PrefillWork> chunks;  // kPrefill
  std::vector<WorkItem> items;      // kPrelude, kCore, kCoda

  void Clear();  // keeps capacity: no allocation in the steady state
  bool empty() const { return stage == Stage::kIdle && preempt.empty(); }
  std::string ToString() const;
};

// What executing a plan produced.
struct Outcome {
  // kPrefill: one per chunk (-1 unless the chunk has `sample`); kCoda: one per item.
  std::vector<int32_t> tokens;
  // kCore: one per item, 1 if the request's exit policy fired after this step.
  std::vector<uint8_t> exit;
  void Clear() { tokens.clear(), exit.clear(); }
};

enum class FinishReason : uint8_t { kNone, kLength, kStop, kCancelled };
std::string_view FinishReasonName(FinishReason r);  // "", "length", "stop", "cancelled"

// One output token (or, with token -1, a finish without a token: cancellation).
struct TokenEvent {
  RequestId req = -1;
  int32_t token = -1;
  int32_t depth = 0;  // loop steps run to produce it
  FinishReason finish = FinishReason::kNone;
  float budget = 1.f;  // the budget b it ran under (filled by the engine; 1 for the prefill's token)
};

}  // namespace fathom
