#include "sched/scheduler.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace fathom {
namespace {

void Erase(std::vector<RequestId>& v, RequestId id) {
  auto it = std::find(v.begin(), v.end(), id);
  if (it != v.end()) v.erase(it);
}
bool Contains(const std::vector<RequestId>& v, RequestId id) {
  return std::find(v.begin(), v.end(), id) != v.end();
}

}  // namespace

Result<SchedMode> ParseSchedMode(std::string_view name) {
  if (name == "cb") return SchedMode::kCb;
  if (name == "cdb-norefill") return SchedMode::kCdbNoRefill;
  if (name == "cdb-refill") return SchedMode::kCdbRefill;
  return Status::Error("scheduler: expected cb, cdb-norefill or cdb-refill, found '" +
                       std::string(name) + "'");
}

std::string_view SchedModeName(SchedMode mode) {
  switch (mode) {
    case SchedMode::kCb: return "cb";
    case SchedMode::kCdbNoRefill: return "cdb-norefill";
    case SchedMode::kCdbRefill: return "cdb-refill";
  }
  return "?";
}

Scheduler::Scheduler(SchedConfig cfg) : cfg_(std::move(cfg)) {
  FATHOM_CHECK_MSG(cfg_.width >= 1 && cfg_.min_coda >= 1 && cfg_.prefill_budget >= 1,
                   "width=" << cfg_.width << " K=" << cfg_.min_coda << " budget=" << cfg_.prefill_budget);
  FATHOM_CHECK(cfg_.blocks_for != nullptr);
  slot_owner_.assign(static_cast<size_t>(cfg_.width), -1);
  free_blocks_ = cfg_.kv_blocks;
}

int64_t Scheduler::Blocks(const Req& r, int64_t len) const {
  return len <= 0 ? 0 : cfg_.blocks_for(r.spec.prompt_len, len);
}
int64_t Scheduler::GrowCost(const Req& r, int64_t len) const {
  return len <= r.kv_len ? 0 : Blocks(r, len) - Blocks(r, r.kv_len);
}

int32_t Scheduler::free_slots() const {
  return static_cast<int32_t>(std::count(slot_owner_.begin(), slot_owner_.end(), -1));
}

Result<RequestId> Scheduler::AddRequest(SchedRequest r) {
  if (r.prompt_len < 1) return Status::Error("request: empty prompt");
  if (r.max_tokens < 1) return Status::Error("request: max_tokens must be at least 1");
  if (std::isnan(r.deadline)) return Status::Error("request: deadline is NaN");
  // The last output token is never fed back: the KV holds prompt + max_tokens - 1 positions.
  const int64_t need = cfg_.blocks_for(r.prompt_len, r.prompt_len + r.max_tokens - 1);
  if (need > cfg_.kv_blocks)
    return Status::Error("request rejected: its prompt (" + std::to_string(r.prompt_len) +
                         " tokens) plus max_tokens (" + std::to_string(r.max_tokens) + ") need " +
                         std::to_string(need) + " KV blocks, but the pool has only " +
                         std::to_string(cfg_.kv_blocks));
  const auto id = static_cast<RequestId>(num_requests());
  Req q;
  q.spec = std::move(r);
  // The output lists take every token the request can emit now, so that the steady decode
  // loop allocates nothing (tests/alloc); max_tokens is bounded by the KV pool above.
  q.tokens.reserve(static_cast<size_t>(q.spec.max_tokens));
  q.depths.reserve(static_cast<size_t>(q.spec.max_tokens));
  q.arrival = id;
  q.queue = Req::Queue::kWaiting;
  reqs_.Add(std::move(q));
  active_.push_back(id);
  Enqueue(id);
  return id;
}

bool Scheduler::WaitsBefore(RequestId a, RequestId b) const {
  const Req &x = request(a), &y = request(b);
  if (cfg_.order == WaitOrder::kTierDeadline) {
    if (x.spec.rank != y.spec.rank) return x.spec.rank < y.spec.rank;
    if (x.spec.deadline != y.spec.deadline) return x.spec.deadline < y.spec.deadline;
  }
  return x.arrival < y.arrival;
}

void Scheduler::Enqueue(RequestId id) {
  // waiting_ is kept sorted by WaitsBefore (a strict weak order), so the first request that
  // `id` waits before is found by binary search: a long queue costs log n per arrival.
  auto pos = std::upper_bound(waiting_.begin(), waiting_.end(), id,
                              [&](RequestId a, RequestId w) { return WaitsBefore(a, w); });
  waiting_.insert(pos, id);
}

WorkItem Scheduler::NextInput(RequestId id) const {
  const Req& r = request(id);
  WorkItem it;
  it.req = id;
  it.pos = r.spec.prompt_len + r.fed;
  it.token = r.tokens[static_cast<size_t>(r.fed)];
  it.replay = r.fed + 1 < static_cast<int32_t>(r.tokens.size());
  it.slot = r.slot;
  it.step = r.steps;
  return it;
}

RequestId Scheduler::NewestHolder(const Plan& plan, RequestId exclude) const {
  RequestId best = -1;
  for (RequestId id : active_) {
    const Req& r = request(id);
    if (id == exclude || Contains(plan.preempt, id)) continue;
    const bool holds = r.kv_len > 0 ||
                       std::any_of(plan.grow.begin(), plan.grow.end(),
                                   [&](const KvGrowth& g) { return g.req == id; });
    if (holds && (best < 0 || r.arrival > request(best).arrival)) best = id;
  }
  return best;
}

bool Scheduler::PlanPrefill(Plan* plan) const {
  int64_t budget = cfg_.prefill_budget, free = free_blocks_, reserve = 0;
  // The requests past prefill that hold KV: every unfinished request is in exactly one queue
  // (CheckInvariants), so these are the ready, looping and coda ones, not the whole active
  // list (which a long waiting queue makes long).
  for (const std::vector<RequestId>* q : {&ready_, &loop_, &coda_})
    for (RequestId id : *q) {
      const Req& r = request(id);
      if (r.kv_len > 0) reserve += GrowCost(r, r.kv_len + cfg_.reserve_tokens);
    }
  for (RequestId id : waiting_) {
    if (budget == 0) break;
    const Req& r = request(id);
    int64_t n = std::min(r.spec.prompt_len - r.prefilled, budget);
    if (cfg_.aligned_chunks) {
      const int64_t piece = std::min(r.spec.prompt_len - r.prefilled,
                                     cfg_.prefill_budget - r.prefilled % cfg_.prefill_budget);
      if (piece > budget) break;  // whole pieces only; FIFO: no overtaking
      n = piece;
    }
    const int64_t cost = GrowCost(r, r.prefilled + n);
    if (cost + (r.kv_len > 0 ? 0 : reserve) > free) break;  // FIFO: no overtaking
    free -= cost;
    budget -= n;
    PrefillWork c;
    c.req = id;
    c.pos0 = r.prefilled;
    c.n = n;
    c.last = r.prefilled + n == r.spec.prompt_len;
    c.sample = c.last && r.tokens.empty();
    plan->chunks.push_back(c);
    plan->grow.push_back({id, r.prefilled + n});
  }
  if (plan->chunks.empty()) return false;
  plan->stage = Stage::kPrefill;
  return true;
}

bool Scheduler::PlanPrelude(Plan* plan, int32_t max_items) const {
  int64_t free = free_blocks_;
  for (RequestId id : ready_) {
    if (static_cast<int32_t>(plan->items.size()) >= max_items) break;
    if (Contains(plan->preempt, id)) continue;
    const WorkItem it = NextInput(id);
    const int64_t cost = GrowCost(request(id), it.pos + 1);
    bool self_preempted = false;
    while (cost > free) {
      // Memory pressure: preempt the newest request holding KV. If that is this request
      // itself, it waits instead (older requests go first; the oldest always can).
      const RequestId v = NewestHolder(*plan, -1);
      FATHOM_CHECK_MSG(v >= 0, "no KV holder to preempt, free=" << free << " cost=" << cost);
      if (v == id) {
        self_preempted = true;
        break;
      }
      plan->preempt.push_back(v);
      free += Blocks(request(v), request(v).kv_len);
      for (size_t i = 0; i < plan->grow.size(); ++i)
        if (plan->grow[i].req == v) {
          free += GrowCost(request(v), plan->grow[i].new_len);
          plan->grow.erase(plan->grow.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
      for (size_t i = 0; i < plan->items.size(); ++i)
        if (plan->items[i].req == v) {
          plan->items.erase(plan->items.begin() + static_cast<std::ptrdiff_t>(i));
          break;
        }
    }
    if (self_preempted) continue;
    free -= cost;
    plan->items.push_back(it);
    plan->grow.push_back({id, it.pos + 1});
  }
  size_t s = 0;  // slots: the lowest free ones
  for (WorkItem& it : plan->items) {
    while (slot_owner_[s] != -1) ++s;
    it.slot = static_cast<int32_t>(s++);
  }
  if (!plan->items.empty()) plan->stage = Stage::kPrelude;
  return !plan->empty();
}

void Scheduler::PlanLoop(Plan* plan, Stage stage, const std::vector<RequestId>& queue) const {
  plan->stage = stage;
  for (RequestId id : queue) plan->items.push_back(NextInput(id));
}

void Scheduler::PlanUnblock(Plan* plan) const {
  // Nothing can run: prefill waits for blocks that partially prefilled requests hold.
  if (waiting_.empty()) return;
  const RequestId v = NewestHolder(*plan, waiting_.front());
  if (v >= 0) plan->preempt.push_back(v);
}

void Scheduler::ScheduleRefill(Plan* plan) const {
  const int32_t slots = free_slots();
  if (!ready_.empty() && slots > 0 && PlanPrelude(plan, slots)) return;
  plan->Clear();
  const bool flush = !coda_.empty() &&
                     (loop_.empty() || step_ - request(coda_.front()).coda_since >= cfg_.flush_steps);
  if (!coda_.empty() && (static_cast<int32_t>(coda_.size()) >= cfg_.min_coda || flush))
    return PlanLoop(plan, Stage::kCoda, coda_);
  if (PlanPrefill(plan)) return;
  plan->Clear();
  if (!loop_.empty()) return PlanLoop(plan, Stage::kCore, loop_);
  if (!coda_.empty()) return PlanLoop(plan, Stage::kCoda, coda_);
  PlanUnblock(plan);
}

void Scheduler::ScheduleCohort(Plan* plan) const {
  if (!loop_.empty()) return PlanLoop(plan, Stage::kCore, loop_);
  if (!coda_.empty()) return PlanLoop(plan, Stage::kCoda, coda_);
  // Between cohorts (token boundaries): alternate prefill and a new cohort.
  if (last_stage_ != Stage::kPrefill && PlanPrefill(plan)) return;
  plan->Clear();
  if (!ready_.empty() && PlanPrelude(plan, cfg_.width)) return;
  plan->Clear();
  if (PlanPrefill(plan)) return;
  plan->Clear();
  PlanUnblock(plan);
}

void Scheduler::Schedule(Plan* plan) const {
  plan->Clear();
  if (cfg_.mode == SchedMode::kCdbRefill)
    ScheduleRefill(plan);
  else
    ScheduleCohort(plan);
}

void Scheduler::Detach(RequestId id) {
  Req& r = At(id);
  switch (r.queue) {
    case Req::Queue::kWaiting: Erase(waiting_, id); break;
    case Req::Queue::kReady: Erase(ready_, id); break;
    case Req::Queue::kLoop: Erase(loop_, id); break;
    case Req::Queue::kCoda: Erase(coda_, id); break;
    case Req::Queue::kNone: break;
  }
  r.queue = Req::Queue::kNone;
  if (r.slot >= 0) slot_owner_[static_cast<size_t>(r.slot)] = -1;
  r.slot = -1;
  r.steps = 0;
}

void Scheduler::Preempt(RequestId id) {
  Detach(id);
  Req& r = At(id);
  free_blocks_ += Blocks(r, r.kv_len);
  r.kv_len = 0;
  r.prefilled = 0;
  r.fed = 0;
  ++r.preemptions;
  ++preemptions_;
  r.queue = Req::Queue::kWaiting;
  Enqueue(id);
}

void Scheduler::Finish(RequestId id, FinishReason why) {
  Detach(id);
  Req& r = At(id);
  free_blocks_ += Blocks(r, r.kv_len);
  r.kv_len = 0;
  r.done = true;
  r.finish = why;
  Erase(active_, id);
}

void Scheduler::Emit(RequestId id, int32_t token, int32_t depth, std::vector<TokenEvent>* events) {
  Req& r = At(id);
  r.tokens.push_back(token);
  r.depths.push_back(depth);
  FinishReason why = FinishReason::kNone;
  if (std::find(r.spec.stop_ids.begin(), r.spec.stop_ids.end(), token) != r.spec.stop_ids.end())
    why = FinishReason::kStop;
  else if (static_cast<int32_t>(r.tokens.size()) >= r.spec.max_tokens)
    why = FinishReason::kLength;
  events->push_back({id, token, depth, why});
  if (why != FinishReason::kNone) Finish(id, why);
}

bool Scheduler::Cancel(RequestId id, std::vector<TokenEvent>* events) {
  if (!reqs_.Holds(id) || request(id).done) return false;
  Finish(id, FinishReason::kCancelled);
  events->push_back({id, -1, 0, FinishReason::kCancelled});
  return true;
}

void Scheduler::Update(const Plan& plan, const Outcome& out, std::vector<TokenEvent>* events) {
  for (RequestId v : plan.preempt) Preempt(v);
  for (const KvGrowth& g : plan.grow) {
    Req& r = At(g.req);
    free_blocks_ -= GrowCost(r, g.new_len);
    r.kv_len = std::max(r.kv_len, g.new_len);
    FATHOM_CHECK_MSG(free_blocks_ >= 0, "KV ledger overdrawn: " << free_blocks_);
  }
  switch (plan.stage) {
    case Stage::kIdle: break;
    case Stage::kPrefill:
      for (size_t i = 0; i < plan.chunks.size(); ++i) {
        const PrefillWork& c = plan.chunks[i];
        Req& r = At(c.req);
        r.prefilled = c.pos0 + c.n;
        if (!c.last) continue;
        Erase(waiting_, c.req);
        r.queue = Req::Queue::kReady;
        ready_.push_back(c.req);
        const int32_t depth = r.spec.prompt_loops > 0 ? r.spec.prompt_loops : r.spec.loops;
        if (c.sample) Emit(c.req, out.tokens[i], depth, events);
      }
      break;
    case Stage::kPrelude:
      for (const WorkItem& it : plan.items) {
        Req& r = At(it.req);
        Erase(ready_, it.req);
        r.slot = it.slot;
        slot_owner_[static_cast<size_t>(it.slot)] = it.req;
        r.steps = 0;
        r.decided = it.replay || cfg_.mode == SchedMode::kCb;
        r.exit_at = it.replay ? r.depths[static_cast<size_t>(r.fed + 1)] : r.spec.loops;
        r.queue = r.exit_at == 0 ? Req::Queue::kCoda : Req::Queue::kLoop;
        if (r.exit_at == 0) {
          r.coda_since = step_;
          coda_.push_back(it.req);
        } else {
          loop_.push_back(it.req);
        }
      }
      break;
    case Stage::kCore:
      for (size_t i = 0; i < plan.items.size(); ++i) {
        const WorkItem& it = plan.items[i];
        Req& r = At(it.req);
        r.steps = it.step + 1;
        if (!r.decided && out.exit[i]) {
          r.decided = true;
          r.exit_at = std::min(r.spec.loops, r.steps + (cfg_.lookahead ? 1 : 0));
        }
        if (r.steps >= r.exit_at) {
          Erase(loop_, it.req);
          r.queue = Req::Queue::kCoda;
          r.coda_since = step_;
          coda_.push_back(it.req);
        }
      }
      break;
    case Stage::kCoda:
      for (size_t i = 0; i < plan.items.size(); ++i) {
        const WorkItem& it = plan.items[i];
        Req& r = At(it.req);
        const int32_t depth = r.steps;
        Detach(it.req);
        ++r.fed;
        r.queue = Req::Queue::kReady;
        ready_.push_back(it.req);
        if (!it.replay) Emit(it.req, out.tokens[i], depth, events);
      }
      break;
  }
  if (plan.stage != Stage::kIdle) last_stage_ = plan.stage;
  ++step_;
}

void Scheduler::Forget(RequestId id) {
  FATHOM_CHECK_MSG(reqs_.Holds(id) && request(id).done, "Forget(" << id << "): not a finished request");
  Req& r = At(id);
  r.tokens = {};
  r.depths = {};
  r.spec.stop_ids = {};
  reqs_.Forget(id);
}

void Scheduler::CheckInvariants() const {
  int64_t held = 0;
  for (RequestId id = reqs_.first_id(); id < num_requests(); ++id) {
    const Req& r = request(id);
    held += Blocks(r, r.kv_len);
    const int in = int(Contains(waiting_, id)) + int(Contains(ready_, id)) + int(Contains(loop_, id)) +
                   int(Contains(coda_, id));
    FATHOM_CHECK_MSG(in == (r.done ? 0 : 1), "request " << id << " is in " << in << " queues");
    FATHOM_CHECK_MSG(r.done != Contains(active_, id), "request " << id << " active list");
    const bool in_flight = r.queue == Req::Queue::kLoop || r.queue == Req::Queue::kCoda;
    FATHOM_CHECK_MSG(in_flight == (r.slot >= 0), "request " << id << " slot " << r.slot);
    if (r.slot >= 0)
      FATHOM_CHECK_MSG(slot_owner_[static_cast<size_t>(r.slot)] == id, "slot " << r.slot << " owner");
    if (r.done) FATHOM_CHECK_MSG(r.kv_len == 0, "finished request " << id << " holds KV");
    if (r.queue == Req::Queue::kLoop) FATHOM_CHECK(r.steps < r.exit_at);
  }
  FATHOM_CHECK_MSG(held + free_blocks_ == cfg_.kv_blocks,
                   "blocks: held " << held << " + free " << free_blocks_ << " != " << cfg_.kv_blocks);
  FATHOM_CHECK(static_cast<int32_t>(loop_.size() + coda_.size()) + free_slots() == cfg_.width);
}

}  // namespace fathom
