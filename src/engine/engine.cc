#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
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

}  // namespace

Result<std::unique_ptr<Engine>> Engine::Create(const Model& model, const EngineOptions& opt) {
  const ModelSpec& spec = model.spec();
  if (opt.width < 1) return Status::Error("width: must be at least 1");
  if (opt.min_coda < 1) return Status::Error("k: the minimum coda batch must be at least 1");
  if (opt.prefill_budget < 1) return Status::Error("prefill budget: must be at least 1");
  FATHOM_ASSIGN_OR_RETURN(int32_t depth, ResolveLoops(spec, opt.max_depth));
  const int64_t blocks = opt.kv_bytes > 0
                             ? BlockPool::BlocksForBudget(opt.kv_bytes, opt.block_size, spec.kv_dim())
                             : 4096;
  if (blocks < 1) return Status::Error("kv memory: " + std::to_string(opt.kv_bytes) + " bytes hold no block");
  FATHOM_ASSIGN_OR_RETURN(auto kv, MakeKvManager(spec, std::max(depth, 1), opt.layout, opt.shared_after,
                                                 blocks, opt.block_size));
  return std::unique_ptr<Engine>(new Engine(model, opt, depth, std::move(kv)));
}

Engine::Engine(const Model& model, const EngineOptions& opt, int32_t max_depth,
               std::unique_ptr<KvManager> kv)
    : model_(model),
      opt_(opt),
      max_depth_(max_depth),
      kv_(std::move(kv)),
      runner_(std::make_unique<StageRunner>(model, *kv_, opt.width)),
      sched_([&] {
        SchedConfig c;
        c.mode = opt.mode;
        c.width = opt.width;
        c.min_coda = opt.min_coda;
        c.flush_steps = opt.flush_steps;
        c.lookahead = opt.lookahead;
        c.prefill_budget = opt.prefill_budget;
        c.aligned_chunks = model.spec().prompt_iteration.active();
        c.kv_blocks = kv_->pool().num_blocks();
        const KvManager* k = kv_.get();
        c.blocks_for = [k](int64_t prompt_len, int64_t len) { return k->BlocksFor(prompt_len, len); };
        return c;
      }()) {}

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
  SchedRequest s;
  s.prompt_len = n_prompt;
  s.max_tokens = r.max_tokens;
  s.loops = loops;
  s.stop_ids = r.stop_ids;
  if (r.stop_at_eos && spec.eos_id >= 0) s.stop_ids.push_back(spec.eos_id);
  FATHOM_ASSIGN_OR_RETURN(RequestId id, sched_.AddRequest(std::move(s)));
  FATHOM_CHECK(id == reqs_.next_id());
  Req q;
  q.loops = loops;
  q.sampler = std::make_unique<Sampler>(r.seed);
  q.policy = std::move(policy);
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
  return d;
}

Status Engine::Execute(const Plan& plan, Outcome* out) {
  out->Clear();
  for (RequestId v : plan.preempt) ReleaseKv(v);
  for (const PrefillWork& c : plan.chunks) {
    Req& r = At(c.req);
    if (r.seq >= 0) continue;
    r.seq = kv_->AddSequence(static_cast<int64_t>(r.spec.prompt.size()));
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
        const Req& r = At(w.req);
        PrefillChunk c;
        c.seq = r.seq;
        c.ids = r.spec.prompt.data() + w.pos0;
        c.pos0 = w.pos0;
        c.n = w.n;
        c.loops = r.loops;
        c.logits = w.sample ? PrefillChunk::Logits::kLast : PrefillChunk::Logits::kNone;
        c.random_init = r.spec.init_seed;
        chunks_.push_back(c);
      }
      FATHOM_RETURN_IF_ERROR(runner_->Prefill(chunks_, false, &prefill_));
      int64_t k = 0;
      for (const PrefillWork& w : plan.chunks) {
        int32_t t = -1;
        if (w.sample) {
          Req& r = At(w.req);
          t = r.sampler->Sample(prefill_.logits.data() + k++ * V, V, r.spec.sampling);
        }
        out->tokens.push_back(t);
      }
      return Status::Ok();
    }
    case Stage::kPrelude:
      items_.clear();
      for (const WorkItem& w : plan.items) {
        Req& r = At(w.req);
        if (!w.replay && r.policy) r.policy->Reset();
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
      return Status::Ok();
  }
  return Status::Error("internal: unknown stage");
}

Status Engine::Step() {
  events_.clear();
  const double t0 = Now();
  sched_.Schedule(&plan_);
  const double t1 = Now();
  if (plan_.empty())
    return Status::Error(sched_.HasWork() ? "internal: the scheduler made no progress with work pending"
                                          : "no work");
  FATHOM_RETURN_IF_ERROR(Execute(plan_, &outcome_));
  const double t2 = Now();
  sched_.Update(plan_, outcome_, &events_);
  const double t3 = Now();
  for (const TokenEvent& e : events_) {
    if (e.token >= 0) ++stats_.output_tokens;
    if (plan_.stage == Stage::kCoda && e.token >= 0) ++stats_.decode_tokens, stats_.depth_sum += e.depth;
    if (e.finish != FinishReason::kNone) ReleaseKv(e.req);
  }
  StageStats& st = stats_.stage[static_cast<int>(plan_.stage)];
  ++st.runs;
  if (plan_.stage == Stage::kPrefill)
    for (const PrefillWork& c : plan_.chunks) st.rows += c.n;
  else
    st.rows += static_cast<int64_t>(plan_.items.size());
  st.seconds += t2 - t1;
  ++stats_.steps;
  stats_.preemptions = sched_.preemptions();
  stats_.schedule_seconds += (t1 - t0) + (t3 - t2);
  stats_.seconds += t3 - t0;
  return Status::Ok();
}

Status Engine::RunToCompletion() {
  while (HasWork()) FATHOM_RETURN_IF_ERROR(Step());
  return Status::Ok();
}

}  // namespace fathom
