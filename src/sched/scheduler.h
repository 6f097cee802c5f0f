// Scheduler: the four queues of Continuous Depth Batching (DESIGN.md §2) and the
// token-level continuous-batching baseline, over plain request state. It decides what
// runs and never touches tensors:
//
//   Schedule(&plan)        const: which stage runs next and on which work items, the KV
//                          growth it needs (counted with the KV manager's BlocksFor, so the
//                          engine's Grow never fails) and any preemptions;
//   (the engine executes the plan through the StageRunner)
//   Update(plan, outcome)  applies the plain result: sampled tokens, exit decisions.
//
// Queues (each a FIFO of request ids; a request has at most one decode token in flight):
//   waiting_  requests waiting for (more) prefill, in WaitOrder     (queue 1)
//   ready_    decode tokens waiting for the prelude                 (queue 2)
//   loop_     tokens waiting for their next loop step, any depth    (queue 3)
//   coda_     exited tokens waiting for the coda                    (queue 4)
// A token holds one of `width` state slots from its prelude to its coda.
//
// Modes:
//   cb            token-level continuous batching: prefill between token iterations, then
//                 the whole running batch runs prelude, every loop step (exit decisions
//                 are ignored: every token runs its request's loop count), coda.
//   cdb-norefill  fixed cohorts: prelude of up to W tokens, loop steps with exited tokens
//                 leaving the batch, one coda once the whole cohort has exited.
//   cdb-refill    the order is chosen every step: prelude whenever tokens wait and slots
//                 are free (i.e. right after the prefill or coda that produced them); else
//                 coda once K exited tokens wait (or flush: the loop queue is empty or the
//                 oldest exited token has waited flush_steps steps); else prefill; else
//                 one core step over every looping token; else the remaining coda.
//
// Exits: Update reads, per core item, whether the request's policy fired after that step.
// Without the lookahead gate (the default) the token exits at once, after step r; with it
// a decision read after step r takes effect at r+2: the token runs step r+1 regardless and
// then exits (minimum exit depth 2), which lets an asynchronous executor build the next
// batch while step r+1 runs.
//
// Memory: prefill admits a request only if its chunk fits in the free blocks beyond a
// reserve for the running requests' next `reserve_tokens` tokens; when a prelude cannot
// grow its sequence, the newest request holding KV is preempted by recompute (its KV is
// freed and it returns to the prefill queue in arrival order). On resume it re-prefills its
// prompt and replays its generated tokens with their recorded exit depths (no sampling),
// so its output is identical. A request that could never fit is rejected by AddRequest.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <limits>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "sched/plan.h"
#include "sched/request_table.h"

namespace fathom {

enum class SchedMode { kCb, kCdbNoRefill, kCdbRefill };

// The order of the waiting queue (prefill admission never overtakes within it):
//   kTierDeadline  by service tier (SchedRequest::rank: priority, default, flex), then
//                  earliest deadline, then arrival. With every request in one tier and no
//                  deadlines this is arrival order, so it is the default.
//   kFifo          by arrival only.
// A preempted request goes back to the place its key gives.
enum class WaitOrder { kTierDeadline, kFifo };
Result<SchedMode> ParseSchedMode(std::string_view name);  // "cb", "cdb-norefill", "cdb-refill"
std::string_view SchedModeName(SchedMode mode);

struct SchedConfig {
  SchedMode mode = SchedMode::kCdbRefill;
  int32_t width = 8;            // W: decode tokens in flight (state slots)
  int32_t min_coda = 1;         // K: minimum coda batch (refill)
  int32_t flush_steps = 4;      // refill: run the coda once its oldest token waited this long
  bool lookahead = false;       // exit decided after step r takes effect at r+2 (EngineOptions)
  int64_t prefill_budget = 256; // prompt tokens per prefill step
  // Chunk boundaries that do not depend on other requests: a prompt is cut at multiples of
  // prefill_budget from its start, and a chunk is never split to fit a step's remaining
  // budget (it waits for the next step). For models whose prompt processing depends on
  // where the prompt is cut (LCKV's iterated groups), so that batched equals solo and a
  // recompute after preemption cuts the prompt as the first prefill did.
  bool aligned_chunks = false;
  int64_t reserve_tokens = 16;  // admission headroom per running request
  WaitOrder order = WaitOrder::kTierDeadline;
  int64_t kv_blocks = 0;        // the KV pool
  // Blocks a sequence with this prompt length holds at length len (KvManager::BlocksFor).
  std::function<int64_t(int64_t prompt_len, int64_t len)> blocks_for;
};

struct SchedRequest {
  int64_t prompt_len = 0;
  int32_t max_tokens = 1;
  int32_t loops = 0;              // loop steps at full depth (0: dense)
  int32_t prompt_loops = 0;       // loop steps the prompt's tokens run (0: loops); the
                                  // depth recorded for the prefill's token
  std::vector<int32_t> stop_ids;  // generation stops after any of these
  int32_t rank = 1;               // service tier, lower first (budget/budget.h TierRank)
  double deadline = std::numeric_limits<double>::infinity();  // absolute, engine clock (s)
};

// A request as the scheduler sees it (read-only for callers and tests).
struct SchedRequestState {
  SchedRequest spec;
  enum class Queue : uint8_t { kNone, kWaiting, kReady, kLoop, kCoda } queue = Queue::kNone;
  bool done = false;
  FinishReason finish = FinishReason::kNone;
  int64_t arrival = 0;
  int64_t prefilled = 0;  // prompt positions prefilled since the last (re)admission
  int64_t kv_len = 0;     // positions the KV pool holds for it (0: none)
  std::vector<int32_t> tokens, depths;  // output so far; loop steps each ran
  int32_t fed = 0;        // output tokens whose KV is in place (fed back as inputs)
  // The token in flight (ready_ / loop_ / coda_).
  int32_t slot = -1, steps = 0, exit_at = 0;
  bool decided = false;
  int64_t coda_since = 0;  // step at which it entered coda_
  int64_t preemptions = 0;
};

class Scheduler {
 public:
  explicit Scheduler(SchedConfig cfg);

  // Errors: a request whose prompt plus max_tokens can never fit in the KV pool.
  Result<RequestId> AddRequest(SchedRequest r);
  // Drops a request that has not finished (its KV and slot are freed; the caller releases
  // its KV sequence). Appends a kCancelled event. False if unknown or finished.
  bool Cancel(RequestId id, std::vector<TokenEvent>* events);
  // The loop steps request `id`'s prompt runs (the engine decides them at its first prefill
  // chunk when prompts follow the budget); recorded as the depth of the prefill's token.
  void SetPromptLoops(RequestId id, int32_t loops) { At(id).spec.prompt_loops = loops; }

  // Fills `plan` (cleared first). Mutates nothing.
  void Schedule(Plan* plan) const;
  // Applies an executed plan and its outcome; appends output tokens and finishes.
  void Update(const Plan& plan, const Outcome& out, std::vector<TokenEvent>* events);

  bool HasWork() const { return !active_.empty(); }
  // A request added and not yet forgotten.
  const SchedRequestState& request(RequestId id) const { return reqs_[id]; }
  // Ids issued so far (ids are never reused).
  int64_t num_requests() const { return reqs_.next_id(); }
  // Drops a finished request's state (a long-running server calls this once it has read
  // the result). Storage is reclaimed in id order: up to the oldest request not forgotten,
  // so memory stays bounded by the requests in flight, not by the requests ever served.
  void Forget(RequestId id);
  // Requests whose state is still stored (in flight, or finished and not yet reclaimed).
  int64_t retained() const { return reqs_.held(); }
  const std::vector<RequestId>& waiting() const { return waiting_; }
  const std::vector<RequestId>& ready() const { return ready_; }
  const std::vector<RequestId>& looping() const { return loop_; }
  const std::vector<RequestId>& exited() const { return coda_; }
  int64_t free_blocks() const { return free_blocks_; }
  int32_t free_slots() const;
  int64_t preemptions() const { return preemptions_; }
  int64_t steps() const { return step_; }
  const SchedConfig& config() const { return cfg_; }
  // FATHOM_CHECKs the queue and ledger invariants (each active request in exactly one
  // queue, slots owned consistently, blocks accounted). For tests.
  void CheckInvariants() const;

 private:
  using Req = SchedRequestState;
  int64_t Blocks(const Req& r, int64_t len) const;
  int64_t GrowCost(const Req& r, int64_t len) const;
  WorkItem NextInput(RequestId id) const;
  RequestId NewestHolder(const Plan& plan, RequestId exclude) const;
  bool PlanPrefill(Plan* plan) const;
  bool PlanPrelude(Plan* plan, int32_t max_items) const;
  void PlanLoop(Plan* plan, Stage stage, const std::vector<RequestId>& queue) const;
  void PlanUnblock(Plan* plan) const;
  void ScheduleRefill(Plan* plan) const;
  void ScheduleCohort(Plan* plan) const;

  bool WaitsBefore(RequestId a, RequestId b) const;  // WaitOrder
  void Enqueue(RequestId id);                        // into waiting_ at its place
  void Preempt(RequestId id);
  void Detach(RequestId id);  // out of its queue and slot
  void Emit(RequestId id, int32_t token, int32_t depth, std::vector<TokenEvent>* events);
  void Finish(RequestId id, FinishReason why);

  Req& At(RequestId id) { return reqs_[id]; }

  SchedConfig cfg_;
  RequestTable<Req> reqs_;
  std::vector<RequestId> active_;  // not finished
  std::vector<RequestId> waiting_, ready_, loop_, coda_;
  std::vector<RequestId> slot_owner_;  // [width], -1 free
  int64_t free_blocks_ = 0;
  int64_t step_ = 0, preemptions_ = 0;
  Stage last_stage_ = Stage::kIdle;
};

}  // namespace fathom
