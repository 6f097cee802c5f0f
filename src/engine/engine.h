// Engine: many requests through one model. It owns the KV manager, the Backend (the CPU
// StageRunner) and a Scheduler, and its step loop reads in one breath:
//
//   Step():  plan = scheduler.Schedule()      (plain data; nothing mutated)
//            outcome = Execute(plan)          (preempt / grow KV, one runner stage, sampling,
//                                              exit decisions by each request's policy)
//            scheduler.Update(plan, outcome)  (queues advance; tokens and finishes emitted)
//
// Per request it keeps what the scheduler must not touch: the prompt ids, a Sampler seeded
// by the request (so its tokens do not depend on batching), its exit policy object and its
// KV sequence. Buffers are members reused across steps, the decode stages' reserved at
// their largest; the runner's are sized once (exec/run_state.h). What a steady decode step
// still allocates (per-request token lists growing, oneDNN inside its calls) is measured by
// tests/alloc.
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "budget/budget.h"
#include "budget/latency_model.h"
#include "engine/thread_governor.h"
#include "core/dtype.h"
#include "core/status.h"
#include "exec/exit_spec.h"
#include "exec/backend.h"
#include "kernels/sampling.h"
#include "kv/kv_layout.h"
#include "kv/kv_manager.h"
#include "model/model.h"
#include "sched/request_table.h"
#include "sched/scheduler.h"

namespace fathom {

struct EngineOptions {
  SchedMode mode = SchedMode::kCdbRefill;
  int32_t width = 8;             // W: decode tokens in flight (runner state slots)
  int32_t min_coda = 1;          // K (cdb-refill)
  int32_t flush_steps = 4;       // cdb-refill coda flush age, in steps
  // The lookahead gate (DESIGN.md §1): an exit decided after step r takes effect at r+2,
  // so the minimum exit depth is 2 (MinExitDepth). Off by default: Step() executes each
  // plan synchronously, so the gate would cost every signal exit one more core step and
  // hide nothing. It is for an asynchronous backend that builds plan N+1 while plan N runs.
  bool lookahead = false;
  int64_t prefill_budget = 256;  // prompt tokens per prefill step
  int32_t max_depth = 0;         // KV depth r_max; 0: the model's default loop count
  KvLayout layout = KvLayout::kLastExited;
  int32_t shared_after = 1;
  size_t kv_bytes = 0;           // KV pool; 0: 4096 blocks
  int32_t block_size = 16;
  // K/V storage: bf16 halves the bytes per token (twice the sequences per byte of
  // kv_bytes, half the attention reads) at bf16 rounding of K and V; kF32 is exact.
  DType kv_dtype = DType::kBF16;
  // The budget controller (src/budget/budget.h, issue 14). Off: a token's budget is its
  // request's fixed budget or budget trace, else its tier's clamp of b = 1 (today's
  // outputs). On: b is recomputed before every step from the engine's own pressure
  // (deadlines, queue, KV headroom, a reclaim notice) and step-latency fit.
  bool budget_control = false;
  // Prompts follow the budget too (looped models, requests whose exits follow b): a
  // request's prompt runs PromptDepthAt(b, loops, min depth) loop steps (exec/exit_policy.h),
  // b being the budget its first decode token would get when its first prompt chunk is
  // prefilled (budget_trace[0], `budget`, or the controller's b in its tier), fixed from
  // then on (a recompute after preemption runs the same depth); later tokens read the
  // prompt's missing deeper steps by the KV layout's rule, as they read an early exit's.
  // L2A gate checkpoints: the prompt's routers read that b. Off: prompts at full depth
  // (b = 1 for the routers unless the request fixes `budget`), so that a prompt's K/V does
  // not depend on the load at the time it was read.
  bool budget_prompts = false;
  BudgetConfig budget;
  WaitOrder wait_order = WaitOrder::kTierDeadline;
  // OpenMP threads per step (engine/thread_governor.h): with adaptive_threads each step
  // runs on the candidate of N, N/2, ..., 1 that its shape measured fastest, N being the
  // creating thread's omp_get_max_threads(). The count never changes a result: logits are
  // the same bits on 1, 2 and 3 threads (tests/model/thread_invariance_test.cc), except
  // where matmuls run on oneDNN's own OpenMP team (f32 weights; 16-bit weights on CPUs with
  // AVX-512 but not AVX512-BF16), whose split oneDNN chooses. Off by default: on the 2-core
  // host of 2026-12-07 it ran at 0.89-1.24 of 1 thread under one busy process (fixed
  // threads 0.86-1.08), but idle still at 0.95-1.02 of fixed threads in the medians of
  // four runs (docs/BENCHMARKS.md, "The governor skips its probes on an idle host").
  bool adaptive_threads = false;
};

struct RequestSpec {
  std::string name;             // a label for printing (e.g. the JSON "id")
  std::vector<int32_t> prompt;
  int32_t max_tokens = 16;
  SamplingParams sampling;
  uint64_t seed = 0;
  std::vector<int32_t> stop_ids;
  bool stop_at_eos = true;
  int32_t loops = 0;            // 0: the engine's max_depth
  ExitSpec exit;
  std::optional<uint64_t> init_seed;  // Huginn's random initial state
  // Budget (issue 14). Decode token i runs under budget_trace[i] if given (the last entry
  // repeats; scripted runs and tests), else under `budget` if set, else under the
  // controller's b clamped to the tier's range. The first token (from the prompt's
  // prefill, at full depth) counts as b = 1. L2A gate checkpoints: the prompt's tokens run
  // their routers at `budget` if set, else at b = 1. With EngineOptions::budget_prompts
  // the prompt (and the first token) runs under the b described there instead.
  std::optional<double> budget;
  std::vector<float> budget_trace;
  ServiceTier tier = ServiceTier::kDefault;
  double deadline_s = 0;  // seconds after AddRequest to finish by; 0: none
  // Reasoning stop (issue 14): once `thinking_budget` tokens followed the start-of-thinking
  // token think_start_id (in the prompt or generated) with no end-of-thinking token
  // think_end_id since, that token is forced as the next one and generation goes on. With
  // `thinking_scales` the allowance is floor(thinking_budget x the budget b the token runs
  // under) (a server default that shrinks with b). -1: no stop.
  int32_t thinking_budget = -1;
  bool thinking_scales = false;
  int32_t think_start_id = -1, think_end_id = -1;
};

struct StageStats {
  int64_t runs = 0, rows = 0;  // stage executions and rows (tokens) in them
  double seconds = 0;
};

struct TierStats {
  int64_t requests = 0, tokens = 0;          // added; output tokens
  int64_t decode_tokens = 0, depth_sum = 0;  // tokens from the coda and their loop steps
  int64_t deadline_misses = 0;               // finished after their deadline
  double budget_sum = 0;                     // over decode tokens
};

struct EngineStats {
  StageStats stage[5];         // indexed by Stage
  int64_t steps = 0, output_tokens = 0, decode_tokens = 0, depth_sum = 0, preemptions = 0;
  double seconds = 0, schedule_seconds = 0;  // total Step() time; Schedule + Update time
  TierStats tier[kNumServiceTiers];          // indexed by TierRank
  int64_t deadline_misses = 0;   // requests that finished after their deadline (all tiers)
  int64_t deadline_hopeless = 0; // of those with a deadline: found unmeetable even at b = 0
  int64_t forced_think_ends = 0; // end-of-thinking tokens forced by a thinking budget
  int64_t fewer_thread_steps = 0; // steps the ThreadGovernor ran on fewer than N threads
  int64_t contended_thread_steps = 0;  // of the governor's steps on > 1 thread: those whose
                                       // threads waited for cores over 5% of their time
};

class Engine {
 public:
  static Result<std::unique_ptr<Engine>> Create(const Model& model, const EngineOptions& opt);

  // Validates the request (errors name the field) and queues it. A request that could
  // never fit in the KV pool is rejected here.
  Result<RequestId> AddRequest(RequestSpec r);
  bool Cancel(RequestId id);
  // One scheduling step. Appends this step's token events to events() (cleared first).
  Status Step();
  Status RunToCompletion();
  bool HasWork() const { return sched_.HasWork(); }

  const std::vector<TokenEvent>& events() const { return events_; }
  const SchedRequestState& request(RequestId id) const { return sched_.request(id); }
  const std::string& name(RequestId id) const { return reqs_[id].spec.name; }
  // Drops a finished (or cancelled) request's state once its result was read; request(id)
  // and name(id) are invalid afterwards. Long-running servers call it so that memory is
  // bounded by the requests in flight (see Scheduler::Forget).
  void Forget(RequestId id);
  const EngineStats& stats() const { return stats_; }
  const Scheduler& scheduler() const { return sched_; }
  const Plan& last_plan() const { return plan_; }
  // L2A gate checkpoints: what the gates ran so far, prompts included (zero otherwise).
  const GateCounts& gate_counts() const { return runner_->gate_counts(); }
  const KvManager& kv() const { return *kv_; }
  int32_t max_depth() const { return max_depth_; }
  // The budget: the controller's last decision (b = 1 when budget_control is off), and per
  // request the budget each output token ran under (one entry per token, like depths).
  const BudgetDecision& budget() const { return decision_; }
  const std::vector<float>& token_budgets(RequestId id) const { return reqs_[id].budgets; }
  // A reclaim notice: the machine goes away in `seconds`. From the next step b falls so that
  // the requests in flight finish in time (BudgetConfig::reclaim_safety of it).
  void NoticeReclaim(double seconds);
  bool reclaim_noticed() const { return reclaim_at_ < kNever; }

 private:
  static constexpr double kNever = std::numeric_limits<double>::infinity();
  struct Req {
    RequestSpec spec;
    int32_t loops = 0;
    std::unique_ptr<Sampler> sampler;
    std::unique_ptr<ExitPolicy> policy;
    KvManager::SeqId seq = -1;
    double deadline = kNever;    // absolute, on the engine's clock
    bool hopeless = false;       // found unmeetable even at b = 0 (counted once)
    double token_b = 1;          // the budget of the decode token in flight
    double prompt_b = 1;         // the budget the prompt ran under (budget_prompts)
    int32_t prompt_loops = 0;    // loop steps of the prompt (0: dense)
    bool prompt_decided = false;  // prompt_b and prompt_loops are set (first prefill chunk)
    std::vector<float> budgets;  // per output token
    bool thinking = false;       // after think_start_id, before think_end_id
    int64_t thought = 0;         // tokens since think_start_id
  };
  Engine(const Model& model, const EngineOptions& opt, int32_t max_depth, std::unique_ptr<KvManager> kv);
  Status Execute(const Plan& plan, Outcome* out);
  void ReleaseKv(RequestId id);
  DecodeItem Item(const WorkItem& w);
  double TokenBudget(const Req& r, int64_t pos);  // the b of the decode token fed at pos
  void DecidePrompt(RequestId id);                // prompt_b and prompt_loops, once
  int32_t Think(Req& r, int32_t token, double b);
  void UpdateBudget(double now);
  struct Iteration {
    double edge = 0, core = 0, rounds = 1, batch = 1;  // seconds; iterations per token; rows
  };
  Iteration IterationOf(double rows, double ctx_per_row) const;
  struct PromptSteps {
    double full = 1, min = 1;  // loop steps of a prompt at full depth and at b = 0
  };
  int32_t MinDepthOf(const Req& r) const;
  PromptSteps PromptStepsOf(const Req& r) const;
  TimeNeed Need(RequestId id, double now, const Iteration& running, const Iteration& all,
                bool waiting, double ahead_tokens, const PromptSteps& ahead_prompt) const;
  void Observe(const Plan& plan, double seconds);
  void Account(double now);

  Req& At(RequestId id) { return reqs_[id]; }

  const Model& model_;
  EngineOptions opt_;
  int32_t max_depth_;
  std::unique_ptr<KvManager> kv_;
  std::unique_ptr<Backend> runner_;  // executes the plans' stages (CPU: StageRunner)
  Scheduler sched_;
  RequestTable<Req> reqs_;  // the same ids as the scheduler's
  EngineStats stats_;
  // The budget controller and what it predicts with: a step-latency fit for core steps
  // and one for prelude / coda steps; decayed drain rates (prompt tokens and finished
  // requests per second of engine time).
  BudgetController controller_;
  BudgetDecision decision_;
  Pressure pressure_;
  StepLatencyModel core_latency_, edge_latency_;
  double drain_s_ = 0, drain_prompt_ = 0, drain_finished_ = 0;
  // Prompt tokens prefilled times the loop steps each ran (with the prefill stage's seconds:
  // the cost of one token's loop step; prompts that follow the budget run fewer steps).
  double prefill_row_steps_ = 0;
  double reclaim_at_ = kNever;
  ThreadGovernor governor_;
  // Reused every step.
  Plan plan_;
  Outcome outcome_;
  std::vector<TokenEvent> events_;
  std::vector<PrefillChunk> chunks_;
  std::vector<DecodeItem> items_;
  PrefillResult prefill_;
  CoreStepResult core_;
  CodaResult coda_;
};

}  // namespace fathom
