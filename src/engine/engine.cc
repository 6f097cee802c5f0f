#include "engine/engine.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>

#include "core/check.h"
#include "core/parallel.h"
#include "core/thread_cpu_time.h"
#include "exec/generate.h"
#include "exec/kv_setup.h"
#include "exec/stage_runner.h"
#include "kv/block_pool.h"

namespace fathom {
namespace {

double Now() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

int64_t PrefillTokens(const Plan& plan) {
  int64_t n = 0;
  for (const PrefillWork& c : plan.chunks) n += c.n;
  return n;
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& opt) {
  const ModelSpec& spec = model.spec();
  if (opt.width < 1) return Status::Error("width: must be at least 1");
  if (opt.min_coda < 1) return Status::Error("k: the minimum coda batch must be at least 1");
  if (opt.prefill_budget < 1) return Status::Error("prefill budget: must be at least 1");
  FATHOM_RETURN_IF_ERROR(opt.budget.Validate());
  FATHOM_ASSIGN_OR_RETURN(int32_t depth, ResolveLoops(spec, opt.max_depth));
  const int64_t blocks =
      opt.kv_bytes > 0 ? BlockPool::BlocksForBudget(opt.kv_bytes, opt.block_size, spec.kv_dim(),
                                                    opt.kv_dtype, spec.n_kv_heads)
                       : 4096;
  if (blocks < 1) return Status::Error("kv memory: " + std::to_string(opt.kv_bytes) + " bytes hold no block");
  FATHOM_ASSIGN_OR_RETURN(auto kv, MakeKvManager(spec, std::max(depth, 1), opt.layout, opt.shared_after,
                                                 blocks, opt.block_size, opt.kv_dtype));
  return std::unique_ptr<Engine>(new Engine(model, opt, depth, std::move(kv)));
}

Engine::Engine(const Model& model, const EngineOptions& opt, int32_t max_depth,
               std::unique_ptr<KvManager> kv)
    : model_(model),
      opt_(opt),
      max_depth_(max_depth),
      kv_(std::move(kv)),
      runner_(std::make_unique<StageRunner>(model, *kv_, opt.width, [&] {
        RunLimits l;  // a stage runs at most width decode items or prefill_budget prompt tokens
        l.max_rows = std::max<int64_t>(opt.width, opt.prefill_budget);
        l.max_context = model.rope().max_positions();  // AddRequest keeps prompt + output within
        return l;
      }())),
      sched_([&] {
        SchedConfig c;
        c.mode = opt.mode;
        c.width = opt.width;
        c.min_coda = opt.min_coda;
        c.flush_steps = opt.flush_steps;
        c.lookahead = opt.lookahead;
        c.prefill_budget = opt.prefill_budget;
        c.order = opt.wait_order;
        c.aligned_chunks = model.spec().prompt_iteration.active();
        c.kv_blocks = kv_->pool().num_blocks();
        const KvManager* k = kv_.get();
        c.blocks_for = [k](int64_t prompt_len, int64_t len) { return k->BlocksFor(prompt_len, len); };
        return c;
      }()),
      controller_(opt.budget),
      governor_([] {
        ThreadGovernorConfig g;
        g.max_threads = omp_get_max_threads();  // N: the creating thread's (--threads)
        return g;
      }()) {
  // The decode stages' inputs and results at their largest, so steps do not grow them.
  items_.reserve(static_cast<size_t>(opt.width));
  core_.signals.reserve(static_cast<size_t>(opt.width));
  coda_.tokens.reserve(static_cast<size_t>(opt.width));
  coda_.logits.reserve(static_cast<size_t>(opt.width * model.spec().vocab));
}

Result<RequestId> Engine::AddRequest(RequestSpec r) {
  const ModelSpec& spec = model_.spec();
  if (r.prompt.empty()) return Status::Error("prompt_ids: no token ids");
  if (r.max_tokens < 1) return Status::Error("max_tokens: must be at least 1");
  for (size_t i = 0; i < r.prompt.size(); ++i)
    if (r.prompt[i] < 0 || r.prompt[i] >= spec.vocab)
      return Status::Error("prompt_ids: token " + std::to_string(i) + " has id " + std::to_string(r.prompt[i]) +
                           ", outside the vocabulary [0, " + std::to_string(spec.vocab) + ")");
  const auto n_prompt = static_cast<int64_t>(r.prompt.size());
  if (n_prompt + r.max_tokens > model_.rope().max_positions())
    return Status::Error("prompt (" + std::to_string(n_prompt) + " tokens) plus max_tokens (" +
                         std::to_string(r.max_tokens) + ") exceeds the model's " +
                         std::to_string(model_.rope().max_positions()) + " positions");
  int32_t loops = 0;
  if (spec.loop.looped) {
    loops = r.loops > 0 ? r.loops : max_depth_;
    if (loops > max_depth_)
      return Status::Error("loops: " + std::to_string(loops) + " exceeds the engine's KV depth " +
                           std::to_string(max_depth_));
  } else if (r.loops > 0) {
    return Status::Error("loops: model_type '" + spec.model_type + "' is not a looped model");
  }
  FATHOM_ASSIGN_OR_RETURN(auto policy, MakeExitPolicy(spec, r.exit, loops, opt_.lookahead));
  if (r.budget && !(*r.budget >= 0 && *r.budget <= 1))
    return Status::Error("budget: " + std::to_string(*r.budget) + " outside [0, 1]");
  for (size_t i = 0; i < r.budget_trace.size(); ++i)
    if (!(r.budget_trace[i] >= 0 && r.budget_trace[i] <= 1))
      return Status::Error("budget_trace[" + std::to_string(i) + "]: " + std::to_string(r.budget_trace[i]) +
                           " outside [0, 1]");
  if (r.thinking_budget >= 0 && (r.think_start_id < 0 || r.think_start_id >= spec.vocab ||
                                 r.think_end_id < 0 || r.think_end_id >= spec.vocab))
    return Status::Error("thinking_token_budget: the start- and end-of-thinking token ids must be in the vocabulary");
  if (!(r.deadline_s >= 0 && r.deadline_s < kNever))
    return Status::Error("deadline: " + std::to_string(r.deadline_s) + " s is not a finite time >= 0");
  const double deadline = r.deadline_s > 0 ? Now() + r.deadline_s : kNever;
  SchedRequest s;
  s.prompt_len = n_prompt;
  s.max_tokens = r.max_tokens;
  s.loops = loops;
  s.stop_ids = r.stop_ids;
  s.rank = TierRank(r.tier);
  s.deadline = deadline;
  if (r.stop_at_eos && spec.eos_id >= 0) s.stop_ids.push_back(spec.eos_id);
  FATHOM_ASSIGN_OR_RETURN(RequestId id, sched_.AddRequest(std::move(s)));
  FATHOM_CHECK(id == reqs_.next_id());
  Req q;
  q.loops = loops;
  q.sampler = std::make_unique<Sampler>(r.seed);
  q.policy = std::move(policy);
  q.deadline = deadline;
  if (r.thinking_budget >= 0)  // thinking from the prompt: after its last start, no end since
    for (size_t i = r.prompt.size(); i-- > 0;) {
      if (r.prompt[i] == r.think_end_id) break;
      if (r.prompt[i] == r.think_start_id) {
        q.thinking = true, q.thought = static_cast<int64_t>(r.prompt.size() - 1 - i);
        break;
      }
    }
  q.budgets.reserve(static_cast<size_t>(r.max_tokens));  // one per output token
  ++stats_.tier[TierRank(r.tier)].requests;
  q.spec = std::move(r);
  reqs_.Add(std::move(q));
  return id;
}

void Engine::ReleaseKv(RequestId id) {
  Req& r = At(id);
  if (r.seq < 0) return;
  kv_->Release(r.seq);
  runner_->ReleaseSequence(r.seq);
  r.seq = -1;
}

bool Engine::Cancel(RequestId id) {
  events_.clear();
  if (!sched_.Cancel(id, &events_)) return false;
  ReleaseKv(id);
  return true;
}

void Engine::Forget(RequestId id) {
  sched_.Forget(id);  // checks that it is a finished request
  Req& r = At(id);
  FATHOM_CHECK(r.seq < 0);
  r.spec = RequestSpec();
  r.sampler.reset();
  r.policy.reset();
  reqs_.Forget(id);
}

DecodeItem Engine::Item(const WorkItem& w) {
  Req& r = At(w.req);
  DecodeItem d;
  d.slot = w.slot;
  d.seq = r.seq;
  d.pos = w.pos;
  d.token = w.token;
  d.step = w.step;
  d.random_init = r.spec.init_seed;
  d.sampler = w.replay ? nullptr : r.sampler.get();
  d.sampling = r.spec.sampling;
  d.budget = static_cast<float>(r.token_b);
  if (w.replay) {  // recomputed after preemption: at the b it first ran under, which L2A gates'
                   // K/V depend on (output token pos - prompt + 1 came out of it)
    const auto k = static_cast<size_t>(w.pos - static_cast<int64_t>(r.spec.prompt.size()) + 1);
    if (k < r.budgets.size()) d.budget = r.budgets[k];
  }
  return d;
}

double Engine::TokenBudget(const Req& r, int64_t pos) {
  const std::vector<float>& trace = r.spec.budget_trace;
  // Decode token i is the one fed at prompt + i: a count of tokens started would run ahead
  // when a preemption between a token's prelude and its coda makes it start again.
  const int64_t i = pos - static_cast<int64_t>(r.spec.prompt.size());
  if (!trace.empty()) return trace[static_cast<size_t>(std::min<int64_t>(i, static_cast<int64_t>(trace.size()) - 1))];
  return controller_.ForRequest(decision_.b, r.spec.tier, r.spec.budget);
}

// The budget and loop steps of request `id`'s prompt, decided at its first prefill chunk
// and kept (EngineOptions::budget_prompts). Without budget_prompts: full depth, and b = the
// request's fixed budget or 1 (what L2A routers read).
void Engine::DecidePrompt(RequestId id) {
  Req& r = At(id);
  if (r.prompt_decided) return;
  r.prompt_decided = true;
  r.prompt_loops = r.loops;
  r.prompt_b = r.spec.budget.value_or(1.0);
  if (!opt_.budget_prompts) return;
  const bool gated = model_.spec().l2a.enabled;
  const bool follows = r.policy && r.policy->follows_budget();
  if (!gated && !follows) return;  // b moves nothing of this request's decode either
  r.prompt_b = TokenBudget(r, static_cast<int64_t>(r.spec.prompt.size()));
  if (follows) {
    r.prompt_loops = PromptDepthAt(r.prompt_b, r.loops, MinDepthOf(r));
    sched_.SetPromptLoops(id, r.prompt_loops);
  }
}

// The reasoning stop: the token a request emits next, given the one sampled (`token`)
// under budget b; keeps the request's thinking state.
int32_t Engine::Think(Req& r, int32_t token, double b) {
  const RequestSpec& s = r.spec;
  if (s.thinking_budget < 0) return token;
  if (!r.thinking) {
    if (token == s.think_start_id) r.thinking = true, r.thought = 0;
    return token;
  }
  const double allowance = s.thinking_scales ? std::floor(s.thinking_budget * b) : s.thinking_budget;
  if (token != s.think_end_id && static_cast<double>(r.thought) >= allowance)
    token = s.think_end_id, ++stats_.forced_think_ends;
  if (token == s.think_end_id) r.thinking = false;
  else ++r.thought;
  return token;
}

Status Engine::Execute(const Plan& plan, Outcome* out) {
  out->Clear();
  for (RequestId v : plan.preempt) ReleaseKv(v);
  for (const PrefillWork& c : plan.chunks) {
    Req& r = At(c.req);
    if (r.seq >= 0) continue;
    const auto prompt_len = static_cast<int64_t>(r.spec.prompt.size());
    r.seq = kv_->AddSequence(prompt_len, prompt_len + r.spec.max_tokens);
    runner_->AddSequence(r.seq, r.loops);
  }
  for (const KvGrowth& g : plan.grow)
    FATHOM_CHECK_MSG(kv_->Grow(At(g.req).seq, g.new_len),
                     "planned KV growth failed: request " << g.req << " to " << g.new_len);
  const int64_t V = model_.spec().vocab;
  switch (plan.stage) {
    case Stage::kIdle: return Status::Ok();
    case Stage::kPrefill: {
      chunks_.clear();
      for (const PrefillWork& w : plan.chunks) {
        DecidePrompt(w.req);
        const Req& r = At(w.req);
        PrefillChunk c;
        c.seq = r.seq;
        c.ids = r.spec.prompt.data() + w.pos0;
        c.pos0 = w.pos0;
        c.n = w.n;
        c.loops = r.prompt_loops;
        c.logits = w.sample ? PrefillChunk::Logits::kLast : PrefillChunk::Logits::kNone;
        c.random_init = r.spec.init_seed;
        c.budget = static_cast<float>(r.prompt_b);  // L2A gates: the prompt's b
        chunks_.push_back(c);
      }
      FATHOM_RETURN_IF_ERROR(runner_->Prefill(chunks_, false, &prefill_));
      int64_t k = 0;
      for (const PrefillWork& w : plan.chunks) {
        int32_t t = -1;
        if (w.sample) {
          Req& r = At(w.req);
          t = Think(r, r.sampler->Sample(prefill_.logits.data() + k++ * V, V, r.spec.sampling),
                    r.prompt_b);
        }
        out->tokens.push_back(t);
      }
      return Status::Ok();
    }
    case Stage::kPrelude:
      items_.clear();
      for (const WorkItem& w : plan.items) {
        Req& r = At(w.req);
        if (!w.replay) {
          r.token_b = TokenBudget(r, w.pos);  // fixed for the token's whole loop
          if (r.policy) r.policy->Reset(), r.policy->SetBudget(r.token_b);
        }
        items_.push_back(Item(w));
      }
      return runner_->Prelude(items_);
    case Stage::kCore: {
      items_.clear();
      for (const WorkItem& w : plan.items) {
        const Req& r = At(w.req);
        items_.push_back(Item(w));
        items_.back().kl = !w.replay && r.policy && r.policy->needs_kl();  // its own row only
      }
      FATHOM_RETURN_IF_ERROR(runner_->CoreStep(items_, &core_));
      for (size_t i = 0; i < plan.items.size(); ++i) {
        const WorkItem& w = plan.items[i];
        Req& r = At(w.req);
        const bool exit = !w.replay && r.policy && r.policy->ShouldExit(w.step + 1, core_.signals[i]);
        out->exit.push_back(exit ? 1 : 0);
      }
      return Status::Ok();
    }
    case Stage::kCoda:
      items_.clear();
      for (const WorkItem& w : plan.items) items_.push_back(Item(w));
      FATHOM_RETURN_IF_ERROR(runner_->Coda(items_, &coda_));
      out->tokens.assign(coda_.tokens.begin(), coda_.tokens.end());
      for (size_t i = 0; i < plan.items.size(); ++i) {
        Req& r = At(plan.items[i].req);
        if (!plan.items[i].replay) out->tokens[i] = Think(r, out->tokens[i], r.token_b);
      }
      return Status::Ok();
  }
  return Status::Error("internal: unknown stage");
}

Status Engine::Step() {
  events_.clear();
  const double t0 = Now();
  if (opt_.budget_control) UpdateBudget(t0);
  sched_.Schedule(&plan_);
  if (plan_.empty())
    return Status::Error(sched_.HasWork() ? "internal: the scheduler made no progress with work pending"
                                          : "no work");
  const int64_t rows = plan_.stage == Stage::kPrefill ? PrefillTokens(plan_) : static_cast<int64_t>(plan_.items.size());
  const int bucket = ThreadGovernor::Bucket(plan_.stage, rows);
  // The step's team size, and the calling thread's left as it was (an engine created on
  // this thread later must see its N, not this step's choice).
  const int threads = opt_.adaptive_threads ? governor_.Choose(bucket) : 0, caller = omp_get_max_threads();
  if (threads > 0 && threads != caller) omp_set_num_threads(threads);
  // The governor also gets the thread-seconds the step's threads waited for a core: this
  // thread's wall minus CPU time (the caller of a parallel loop spins or yields, never
  // sleeps) and the pool workers' run delay.
  const double cpu1 = threads > 1 ? ThreadCpuSeconds() : 0;
  const double delay1 = threads > 1 ? ParallelWorkersRunDelaySeconds(threads - 1) : 0;
  const double t1 = Now();
  const Status executed = Execute(plan_, &outcome_);
  const double t2 = Now();
  const double cpu2 = threads > 1 ? ThreadCpuSeconds() : 0;
  const double delay2 = threads > 1 ? ParallelWorkersRunDelaySeconds(threads - 1) : 0;
  if (threads > 0 && threads != caller) omp_set_num_threads(caller);
  FATHOM_RETURN_IF_ERROR(executed);
  if (threads > 0) {
    const int64_t contended = governor_.stats().contended_steps;
    const double caller_waited =
        cpu1 >= 0 && cpu2 >= 0 ? std::max(0.0, (t2 - t1) - (cpu2 - cpu1)) : 0.0;
    // Not measured on one thread (no pool workers, and nothing to compare against).
    const double waited = threads > 1 ? caller_waited + std::max(0.0, delay2 - delay1) : -1.0;
    governor_.Record(bucket, threads, t2 - t1, waited);
    stats_.contended_thread_steps += governor_.stats().contended_steps - contended;
  }
  if (threads > 0 && threads < governor_.candidates().back()) ++stats_.fewer_thread_steps;
  sched_.Update(plan_, outcome_, &events_);
  const double t3 = Now();
  Account(t3);
  for (const TokenEvent& e : events_) {
    if (e.token >= 0) ++stats_.output_tokens;
    if (plan_.stage == Stage::kCoda && e.token >= 0) ++stats_.decode_tokens, stats_.depth_sum += e.depth;
    if (e.finish != FinishReason::kNone) ReleaseKv(e.req);
  }
  Observe(plan_, t2 - t1);
  StageStats& st = stats_.stage[static_cast<int>(plan_.stage)];
  ++st.runs;
  st.rows += rows;
  st.seconds += t2 - t1;
  ++stats_.steps;
  stats_.preemptions = sched_.preemptions();
  stats_.schedule_seconds += (t1 - t0) + (t3 - t2);
  stats_.seconds += t3 - t0;
  // Drain rates over engine time, decayed with a 10 s time constant.
  const double keep = std::exp(-(t3 - t0) / 10.0);
  drain_s_ = drain_s_ * keep + (t3 - t0);
  drain_prompt_ *= keep;
  drain_finished_ *= keep;
  if (plan_.stage == Stage::kPrefill)
    for (const PrefillWork& c : plan_.chunks) {
      drain_prompt_ += static_cast<double>(c.n);
      prefill_row_steps_ += static_cast<double>(c.n) * std::max(At(c.req).prompt_loops, 1);
    }
  for (const TokenEvent& e : events_) drain_finished_ += e.finish != FinishReason::kNone ? 1 : 0;
  return Status::Ok();
}

// Per-token budgets, per-tier counts and deadline misses for this step's events.
void Engine::Account(double now) {
  for (TokenEvent& e : events_) {
    Req& r = At(e.req);
    TierStats& t = stats_.tier[TierRank(r.spec.tier)];
    if (e.token >= 0) {
      const bool decode = plan_.stage == Stage::kCoda;
      // The prefill's token: b = 1 unless prompts follow the budget (EngineOptions).
      e.budget = static_cast<float>(decode ? r.token_b : opt_.budget_prompts ? r.prompt_b : 1.0);
      r.budgets.push_back(e.budget);
      ++t.tokens;
      if (decode) ++t.decode_tokens, t.depth_sum += e.depth, t.budget_sum += r.token_b;
    }
    if (e.finish != FinishReason::kNone && e.finish != FinishReason::kCancelled && now > r.deadline)
      ++t.deadline_misses, ++stats_.deadline_misses;
  }
}

// Feeds the step-latency fits: rows and the context tokens they attend to.
void Engine::Observe(const Plan& plan, double seconds) {
  if (plan.stage != Stage::kCore && plan.stage != Stage::kPrelude && plan.stage != Stage::kCoda) return;
  double ctx = 0;
  for (const WorkItem& w : plan.items) ctx += static_cast<double>(w.pos + 1);
  const auto rows = static_cast<double>(plan.items.size());
  (plan.stage == Stage::kCore ? core_latency_ : edge_latency_).Add(rows, ctx, seconds);
}

// One token iteration (prelude + coda steps, and one core step) of `rows` decoding rows
// attending to `ctx_per_row` tokens each, from the step-latency fits; rounds of `width`
// when more requests run than there are slots.
Engine::Iteration Engine::IterationOf(double rows, double ctx_per_row) const {
  Iteration it;
  rows = std::max(rows, 1.0);
  it.rounds = std::ceil(rows / opt_.width);
  it.batch = std::min(rows, static_cast<double>(opt_.width));
  it.edge = 2 * edge_latency_.Predict(it.batch, it.batch * ctx_per_row);
  it.core = core_latency_.Predict(it.batch, it.batch * ctx_per_row);
  return it;
}

// The fewest loop steps a token of the request may run: its own min_depth, or the lookahead's.
int32_t Engine::MinDepthOf(const Req& r) const {
  return std::max(r.spec.exit.min_depth, MinExitDepth(opt_.lookahead));
}

// Loop steps the rest of a request's prompt runs, at full depth and at b = 0: its decided
// depth once its first chunk ran; before that, with prompts following the budget
// (EngineOptions::budget_prompts and an exit policy that follows b), from all of its loops
// down to PromptDepthAt(0) (its minimum exit depth); otherwise all of its loops. 1 for a
// dense model.
Engine::PromptSteps Engine::PromptStepsOf(const Req& r) const {
  const double all = std::max(r.loops, 1);
  if (r.prompt_decided)
    return {std::max<double>(r.prompt_loops, 1), std::max<double>(r.prompt_loops, 1)};
  if (!opt_.budget_prompts || !r.policy || !r.policy->follows_budget()) return {all, all};
  return {all, static_cast<double>(PromptDepthAt(0.0, std::max(r.loops, 1), MinDepthOf(r)))};
}

// Time request `id` needs to finish from now, at full depth and at minimum depth. A running
// request: the rest of its prompt at the measured prefill cost per token and loop step
// (times the steps PromptStepsOf gives), then its remaining tokens at one iteration of the
// running batch (`running`) each. A waiting request also waits for the work ahead of it:
// `ahead_tokens` output tokens (every running request's and the waiting ones' before it, its
// own included) at `all.batch` tokens per iteration of the batch everything in flight would
// fill (`all`), after the prompts ahead (`ahead_prompt`: the waiting ones' before it and its
// own, in prompt tokens times their loop steps at full and at minimum depth); it needs the
// larger of the two.
TimeNeed Engine::Need(RequestId id, double now, const Iteration& running, const Iteration& all,
                      bool waiting, double ahead_tokens, const PromptSteps& ahead_prompt) const {
  const SchedRequestState& s = sched_.request(id);
  const Req& r = reqs_[id];
  const double per_step =
      prefill_row_steps_ > 0
          ? stats_.stage[static_cast<int>(Stage::kPrefill)].seconds / prefill_row_steps_
          : 0;
  const auto prompt_left = static_cast<double>(s.spec.prompt_len - s.prefilled);
  const PromptSteps steps = PromptStepsOf(r);
  const auto left_tokens = static_cast<double>(s.spec.max_tokens - static_cast<int32_t>(s.tokens.size()));
  const int32_t min_depth = MinDepthOf(r);
  const double full_d = std::max(r.loops, 1), min_d = std::min(full_d, static_cast<double>(min_depth));
  const Iteration& own = waiting ? all : running;
  // d: the decode tokens' loop steps; prompt_steps: the prompt's; ahead: the prompts' ahead.
  const auto time = [&](double d, double prompt_steps, double ahead) {
    const double alone = prompt_left * prompt_steps * per_step +
                         left_tokens * own.rounds * (own.edge + own.core * d);
    if (!waiting) return alone;
    return std::max(alone, ahead * per_step + ahead_tokens / all.batch * (all.edge + all.core * d));
  };
  TimeNeed t;
  t.left_s = r.deadline - now;
  t.full_s = time(full_d, steps.full, ahead_prompt.full);
  t.min_s = time(min_d, steps.min, ahead_prompt.min);
  return t;
}

void Engine::NoticeReclaim(double seconds) { reclaim_at_ = std::min(reclaim_at_, Now() + std::max(seconds, 0.0)); }

// Fills the Pressure from the scheduler's queues and the fits, and asks the controller.
void Engine::UpdateBudget(double now) {
  Pressure& p = pressure_;
  p.deadlines.clear();
  // Queued work: requests waiting for prefill, and admitted ones beyond the decode slots
  // (they wait in the ready queue for one: with KV to spare, a burst queues there).
  const auto running = static_cast<int64_t>(sched_.ready().size() + sched_.looping().size() + sched_.exited().size());
  p.waiting_requests = static_cast<int64_t>(sched_.waiting().size()) + std::max<int64_t>(0, running - opt_.width);
  p.waiting_prompt_tokens = 0;
  for (RequestId id : sched_.waiting())
    p.waiting_prompt_tokens += sched_.request(id).spec.prompt_len - sched_.request(id).prefilled;
  p.prompt_tokens_per_s = drain_s_ > 0 ? drain_prompt_ / drain_s_ : 0;
  p.requests_per_s = drain_s_ > 0 ? drain_finished_ / drain_s_ : 0;
  p.free_blocks = sched_.free_blocks();
  p.needed_blocks = 0;
  TimeNeed all{reclaim_at_ - now, 0, 0};
  double rows = 0, ctx = 0, ahead_tokens = 0;
  for (const auto* q : {&sched_.ready(), &sched_.looping(), &sched_.exited()})
    for (RequestId o : *q) {
      const SchedRequestState& s = sched_.request(o);
      rows += 1, ctx += static_cast<double>(s.kv_len);
      ahead_tokens += static_cast<double>(s.spec.max_tokens - static_cast<int32_t>(s.tokens.size()));
    }
  const double ctx_per_row = rows > 0 ? ctx / rows : 0;
  const auto in_flight = rows + static_cast<double>(sched_.waiting().size());
  const Iteration in_slots = IterationOf(rows, ctx_per_row), full = IterationOf(in_flight, ctx_per_row);
  const auto& blocks_for = sched_.config().blocks_for;
  PromptSteps ahead_prompt{0, 0};  // prompt tokens x loop steps, at full and at minimum depth
  for (const auto* q : {&sched_.ready(), &sched_.looping(), &sched_.exited(), &sched_.waiting()})
    for (RequestId id : *q) {
      const SchedRequestState& s = sched_.request(id);
      const int64_t final_len = s.spec.prompt_len + s.spec.max_tokens - 1;
      p.needed_blocks += blocks_for(s.spec.prompt_len, final_len) -
                         (s.kv_len > 0 ? blocks_for(s.spec.prompt_len, s.kv_len) : 0);
      const bool waiting = q == &sched_.waiting();
      if (waiting) {
        ahead_tokens += static_cast<double>(s.spec.max_tokens - static_cast<int32_t>(s.tokens.size()));
        const auto left = static_cast<double>(s.spec.prompt_len - s.prefilled);
        const PromptSteps steps = PromptStepsOf(reqs_[id]);
        ahead_prompt.full += left * steps.full;
        ahead_prompt.min += left * steps.min;
      }
      const TimeNeed t = Need(id, now, in_slots, full, waiting, ahead_tokens, ahead_prompt);
      all.full_s = std::max(all.full_s, t.full_s);
      all.min_s = std::max(all.min_s, t.min_s);
      Req& r = At(id);
      if (r.deadline == kNever) continue;
      p.deadlines.push_back(t);
      if (t.left_s < t.min_s && !r.hopeless) r.hopeless = true, ++stats_.deadline_hopeless;
    }
  if (reclaim_at_ < kNever) p.reclaim = all;
  else p.reclaim.reset();
  decision_ = controller_.Decide(p);
}

Status Engine::RunToCompletion() {
  while (HasWork()) FATHOM_RETURN_IF_ERROR(Step());
  return Status::Ok();
}

}  // namespace fathom
