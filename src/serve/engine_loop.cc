#include "serve/engine_loop.h"

#include <omp.h>

#include <algorithm>

namespace fathom::serve {
namespace {

double Now() {
  using clock = std::chrono::steady_clock;
  return std::chrono::duration<double>(clock::now().time_since_epoch()).count();
}

double MeanRows(const StageStats& s) {
  return s.runs ? static_cast<double>(s.rows) / static_cast<double>(s.runs) : 0.0;
}

}  // namespace

EngineLoop::EngineLoop(std::unique_ptr<Engine> engine, EngineLoopOptions opt)
    : engine_(std::move(engine)), opt_(opt) {
  start_time_ = Now();
  rate_samples_.emplace_back(start_time_, 0);
  UpdateMetrics();
  // OpenMP's thread count is per thread: a new std::thread starts from the global default
  // (every core), not from its creator's omp_set_num_threads (`--threads`). Carry it over.
  const int omp_threads = omp_get_max_threads();
  thread_ = std::thread([this, omp_threads] {
    omp_set_num_threads(omp_threads);
    Run();
  });
}

EngineLoop::~EngineLoop() { Stop(); }

Submission EngineLoop::Submit(RequestSpec spec) {
  Submission s;
  std::lock_guard<std::mutex> lk(mu_);
  if (draining_ || stop_) {
    ++rejected_draining_;
    s.code = SubmitCode::kDraining;
    s.message = "the server is shutting down";
    return s;
  }
  if (reclaimed_) {
    ++rejected_draining_;
    s.code = SubmitCode::kReclaimed;
    s.message = "the server is being reclaimed: it takes no new requests";
    return s;
  }
  if (pending_ >= opt_.max_pending) {
    ++rejected_overloaded_;
    s.code = SubmitCode::kOverloaded;
    s.message = "the server is overloaded: " + std::to_string(pending_) + " requests are pending (--max-pending " +
                std::to_string(opt_.max_pending) + "); retry later";
    return s;
  }
  ++pending_;
  s.stream = std::make_shared<RequestStream>(static_cast<int64_t>(spec.prompt.size()));
  inbox_.push_back({std::move(spec), s.stream});
  cv_.notify_all();
  return s;
}

void EngineLoop::Cancel(const std::shared_ptr<RequestStream>& stream, bool stop_string) {
  if (!stream) return;
  std::lock_guard<std::mutex> lk(mu_);
  cancels_.emplace_back(stream, stop_string);
  cv_.notify_all();
}

void EngineLoop::NoticeReclaim(double seconds) {
  std::lock_guard<std::mutex> lk(mu_);
  reclaimed_ = true;
  reclaim_notice_ = seconds;
  cv_.notify_all();
}

void EngineLoop::BeginDrain() {
  std::lock_guard<std::mutex> lk(mu_);
  draining_ = true;
}

bool EngineLoop::draining() const {
  std::lock_guard<std::mutex> lk(mu_);
  return draining_;
}

void EngineLoop::WaitIdle() {
  std::unique_lock<std::mutex> lk(mu_);
  idle_cv_.wait(lk, [&] { return pending_ == 0 || stop_; });
}

void EngineLoop::Stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
    cv_.notify_all();
    idle_cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

void EngineLoop::Pause() {
  std::lock_guard<std::mutex> lk(mu_);
  paused_ = true;
}

void EngineLoop::Resume() {
  std::lock_guard<std::mutex> lk(mu_);
  paused_ = false;
  cv_.notify_all();
}

int64_t EngineLoop::pending() const {
  std::lock_guard<std::mutex> lk(mu_);
  return pending_;
}

void EngineLoop::Run() {
  std::vector<Inbound> inbox;
  std::vector<std::pair<std::shared_ptr<RequestStream>, bool>> cancels;
  for (;;) {
    bool step = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      const bool work = engine_->HasWork();
      cv_.wait(lk, [&] {
        return stop_ || !inbox_.empty() || !cancels_.empty() || reclaim_notice_ || (work && !paused_);
      });
      if (stop_) break;
      if (reclaim_notice_) engine_->NoticeReclaim(*reclaim_notice_), reclaim_notice_.reset();
      inbox.swap(inbox_);
      cancels.swap(cancels_);
      step = !paused_;
    }
    for (Inbound& in : inbox) {
      const auto n_prompt = static_cast<int64_t>(in.spec.prompt.size());
      auto id = engine_->AddRequest(std::move(in.spec));
      if (!id.ok()) {
        ++rejected_invalid_;
        in.stream->Reject(id.status().message());
        FinishOne(FinishReason::kNone);
        continue;
      }
      prompt_tokens_ += n_prompt;
      active_[*id] = in.stream;
      ids_[in.stream.get()] = *id;
      in.stream->Admit();
    }
    inbox.clear();
    for (const auto& [s, stop_string] : cancels) {
      auto it = ids_.find(s.get());
      if (it == ids_.end()) {
        // Finished (or rejected) already, its last event pushed in the iteration that
        // finished it. If the engine ran on to max_tokens past a stop string the handler
        // has since found, the client gets "stop": count it so, not as a length.
        if (stop_string && s->finish() == FinishReason::kLength) --finished_length_, ++finished_stop_;
        continue;
      }
      if (!engine_->Cancel(it->second)) continue;
      Deliver(engine_->events());
      if (stop_string) --cancelled_, ++finished_stop_;
    }
    cancels.clear();
    if (step && engine_->HasWork()) {
      Status st = engine_->Step();
      if (st.ok()) {
        Deliver(engine_->events());
      } else {
        FailAll("the engine failed: " + st.message());
      }
      if (opt_.pause_at_output_tokens > 0 && !paused_by_option_ &&
          engine_->stats().output_tokens >= opt_.pause_at_output_tokens) {
        paused_by_option_ = true;
        Pause();
      }
    }
    UpdateMetricsAndFlush();
  }
  // Stopped: nothing will run the remaining requests.
  {
    std::lock_guard<std::mutex> lk(mu_);
    inbox.swap(inbox_);
  }
  for (Inbound& in : inbox) {
    in.stream->Fail("the server is shutting down");
    FinishOne(FinishReason::kNone);
  }
  FailAll("the server is shutting down");
  UpdateMetricsAndFlush();
}

void EngineLoop::Deliver(const std::vector<TokenEvent>& events) {
  for (const TokenEvent& e : events) {
    auto it = active_.find(e.req);
    if (it == active_.end()) continue;
    outbox_.emplace_back(it->second, e);
    if (e.finish == FinishReason::kNone) continue;
    ids_.erase(it->second.get());
    active_.erase(it);
    engine_->Forget(e.req);  // its result is in the stream: memory stays bounded
    FinishOne(e.finish);
  }
}

void EngineLoop::UpdateMetricsAndFlush() {
  // The snapshot first: a client that reads /metrics right after its response must see
  // its request counted as finished.
  UpdateMetrics();
  for (auto& [stream, e] : outbox_) stream->Push(e);
  outbox_.clear();
}

void EngineLoop::FinishOne(FinishReason why) {
  switch (why) {
    case FinishReason::kLength: ++finished_length_; break;
    case FinishReason::kStop: ++finished_stop_; break;
    case FinishReason::kCancelled: ++cancelled_; break;
    case FinishReason::kNone: break;  // rejected or failed: counted by the caller
  }
  std::lock_guard<std::mutex> lk(mu_);
  --pending_;
  if (pending_ == 0) idle_cv_.notify_all();
}

void EngineLoop::FailAll(const std::string& message) {
  // The failed step's requests cannot be told apart from the others: fail every running
  // request (each cancelled in the engine so that its KV is freed) rather than crash.
  for (auto& [id, stream] : active_) {
    engine_->Cancel(id);
    if (engine_->request(id).done) engine_->Forget(id);
    stream->Fail(message);
    ++failed_;
    FinishOne(FinishReason::kNone);
  }
  active_.clear();
  ids_.clear();
}

void EngineLoop::UpdateMetrics() {
  const Engine& e = *engine_;
  const Scheduler& s = e.scheduler();
  const EngineStats& st = e.stats();
  const double now = Now();
  std::lock_guard<std::mutex> lk(metrics_mu_);
  MetricsSnapshot& m = metrics_;
  m.queue_waiting = static_cast<int64_t>(s.waiting().size());
  m.queue_ready = static_cast<int64_t>(s.ready().size());
  m.queue_loop = static_cast<int64_t>(s.looping().size());
  m.queue_coda = static_cast<int64_t>(s.exited().size());
  // Waiting: not holding a state slot yet (the prefill queue, preempted ones included).
  m.running = static_cast<int64_t>(active_.size()) - m.queue_waiting;
  m.waiting = m.queue_waiting;
  m.finished_length = finished_length_;
  m.finished_stop = finished_stop_;
  m.cancelled = cancelled_;
  m.failed = failed_;
  m.rejected_invalid = rejected_invalid_;
  m.batch_prefill = MeanRows(st.stage[static_cast<int>(Stage::kPrefill)]);
  m.batch_prelude = MeanRows(st.stage[static_cast<int>(Stage::kPrelude)]);
  m.batch_core = MeanRows(st.stage[static_cast<int>(Stage::kCore)]);
  m.batch_coda = MeanRows(st.stage[static_cast<int>(Stage::kCoda)]);
  const Plan& p = e.last_plan();
  m.last_stage = std::string(StageName(p.stage));
  m.last_rows = 0;
  if (p.stage == Stage::kPrefill)
    for (const PrefillWork& c : p.chunks) m.last_rows += c.n;
  else
    m.last_rows = static_cast<int64_t>(p.items.size());
  m.steps = st.steps;
  m.preemptions = st.preemptions;
  m.fewer_thread_steps = st.fewer_thread_steps;
  m.contended_thread_steps = st.contended_thread_steps;
  m.mean_exit_depth =
      st.decode_tokens ? static_cast<double>(st.depth_sum) / static_cast<double>(st.decode_tokens) : 0.0;
  m.kv_blocks_free = e.kv().pool().num_free();
  m.kv_blocks_used = e.kv().pool().num_used();
  m.kv_block_bytes = static_cast<int64_t>(e.kv().pool().bytes_per_block());
  m.kv_bytes_per_token = static_cast<int64_t>(e.kv().BytesPerToken(TokenPhase::kDecode));
  m.prompt_tokens = prompt_tokens_;
  m.output_tokens = st.output_tokens;
  m.window_seconds = opt_.rate_window_seconds;
  m.budget = e.budget().b;
  m.reclaim_noticed = e.reclaim_noticed();
  m.deadline_misses = st.deadline_misses;
  m.deadline_hopeless = st.deadline_hopeless;
  m.forced_think_ends = st.forced_think_ends;
  for (int t = 0; t < kNumServiceTiers; ++t) {
    const TierStats& ts = st.tier[t];
    const auto n = static_cast<double>(ts.decode_tokens);
    m.tier_requests[t] = ts.requests;
    m.tier_tokens[t] = ts.tokens;
    m.tier_deadline_misses[t] = ts.deadline_misses;
    m.tier_mean_exit_depth[t] = n > 0 ? static_cast<double>(ts.depth_sum) / n : 0.0;
    m.tier_mean_budget[t] = n > 0 ? ts.budget_sum / n : 0.0;
  }
  // One rate sample per 100 ms keeps the window's deque small at any step rate.
  if (now - rate_samples_.back().first >= 0.1) rate_samples_.emplace_back(now, st.output_tokens);
  else rate_samples_.back().second = st.output_tokens;
  while (rate_samples_.size() > 2 && rate_samples_[1].first <= now - opt_.rate_window_seconds)
    rate_samples_.pop_front();
}

MetricsSnapshot EngineLoop::Metrics() const {
  MetricsSnapshot m;
  double rate = 0;
  {
    std::lock_guard<std::mutex> lk(metrics_mu_);
    m = metrics_;
    // Tokens since the newest sample at or before the window's start (or since start).
    const double now = Now();
    const double from = now - opt_.rate_window_seconds;
    auto base = rate_samples_.front();
    for (const auto& smp : rate_samples_)
      if (smp.first <= from) base = smp;
    const double span = std::max(now - std::max(base.first, from), 1e-3);
    rate = static_cast<double>(m.output_tokens - base.second) / span;
  }
  m.output_tokens_per_second = rate;
  std::lock_guard<std::mutex> lk(mu_);
  m.waiting += static_cast<int64_t>(inbox_.size());
  m.rejected_overloaded = rejected_overloaded_;
  m.rejected_draining = rejected_draining_;
  return m;
}

}  // namespace fathom::serve
