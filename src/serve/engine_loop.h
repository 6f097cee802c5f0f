// EngineLoop: the one thread that owns the Engine. The Engine is single-threaded, so HTTP
// handler threads never touch it: they Submit requests into an inbox and read results from
// their RequestStream; the loop thread moves the inbox into the engine, applies
// cancellations, steps while there is work (otherwise it sleeps on a condition variable),
// delivers every token event to its stream and refreshes a metrics snapshot.
//
// Admission control: more than `max_pending` requests submitted and not finished -> the
// request is refused as overloaded (HTTP 429); after BeginDrain() -> refused as draining
// (503) while the requests already in flight run to their end.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/engine.h"
#include "serve/metrics.h"
#include "serve/request_stream.h"

namespace fathom::serve {

struct EngineLoopOptions {
  int64_t max_pending = 256;
  double rate_window_seconds = 10;  // the tokens/s metric's window
  // Tests: the loop pauses itself (as Pause()) once this many output tokens were generated
  // in total; 0: never. Lets a test act while a request is certainly in flight.
  int64_t pause_at_output_tokens = 0;
};

// kReclaimed: a reclaim notice arrived (HTTP 503 with Retry-After).
enum class SubmitCode { kOk, kOverloaded, kDraining, kReclaimed };

struct Submission {
  SubmitCode code = SubmitCode::kOk;
  std::shared_ptr<RequestStream> stream;  // kOk only
  std::string message;                    // otherwise
};

class EngineLoop {
 public:
  // Starts the thread. The engine (and the model it refers to) must outlive the loop.
  EngineLoop(std::unique_ptr<Engine> engine, EngineLoopOptions opt);
  ~EngineLoop();  // Stop()
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  // Any thread. The engine validates the request on the loop thread: wait for the verdict
  // with stream->WaitAdmitted() (its message names the field).
  Submission Submit(RequestSpec spec);
  // Any thread: the client went away (or, with `stop_string`, the text reached a stop
  // string: counted as finished by "stop"). The request is dropped and its KV freed; its
  // stream ends with a kCancelled event. No-op once finished.
  void Cancel(const std::shared_ptr<RequestStream>& stream, bool stop_string = false);

  // New submissions are refused (kDraining); running ones continue.
  void BeginDrain();
  bool draining() const;
  // Any thread: the machine is reclaimed in `seconds`. New submissions are refused
  // (kReclaimed); the engine gets the notice on its next step (Engine::NoticeReclaim), so
  // b falls for the requests in flight to finish in time.
  void NoticeReclaim(double seconds);
  // Blocks until no request is pending (submitted and not finished).
  void WaitIdle();
  // Stops the thread; requests still running are cancelled and their streams failed.
  void Stop();

  // Tests: stop stepping (submissions, admissions and cancellations still happen).
  void Pause();
  void Resume();

  int64_t pending() const;
  MetricsSnapshot Metrics() const;

 private:
  struct Inbound {
    RequestSpec spec;
    std::shared_ptr<RequestStream> stream;
  };
  void Run();
  // Bookkeeping of the events now; the streams get them in UpdateMetricsAndFlush.
  void Deliver(const std::vector<TokenEvent>& events);
  void UpdateMetricsAndFlush();
  void FinishOne(FinishReason why);
  void FailAll(const std::string& message);
  void UpdateMetrics();

  std::unique_ptr<Engine> engine_;
  const EngineLoopOptions opt_;

  // Shared with the handler threads, under mu_.
  mutable std::mutex mu_;
  std::condition_variable cv_;       // wakes the loop
  std::condition_variable idle_cv_;  // pending_ reached 0
  std::vector<Inbound> inbox_;
  std::vector<std::pair<std::shared_ptr<RequestStream>, bool>> cancels_;
  int64_t pending_ = 0;
  bool draining_ = false, paused_ = false, stop_ = false;
  bool reclaimed_ = false;
  std::optional<double> reclaim_notice_;  // for the loop thread to pass on
  int64_t rejected_overloaded_ = 0, rejected_draining_ = 0;

  // Loop thread only.
  std::unordered_map<RequestId, std::shared_ptr<RequestStream>> active_;
  std::unordered_map<const RequestStream*, RequestId> ids_;
  bool paused_by_option_ = false;
  std::vector<std::pair<std::shared_ptr<RequestStream>, TokenEvent>> outbox_;

  // The metrics snapshot, under metrics_mu_ (written by the loop thread).
  mutable std::mutex metrics_mu_;
  MetricsSnapshot metrics_;
  std::deque<std::pair<double, int64_t>> rate_samples_;  // (time, output tokens so far)
  double start_time_ = 0;
  int64_t finished_length_ = 0, finished_stop_ = 0, cancelled_ = 0, failed_ = 0, rejected_invalid_ = 0;
  int64_t prompt_tokens_ = 0;

  std::thread thread_;
};

}  // namespace fathom::serve
