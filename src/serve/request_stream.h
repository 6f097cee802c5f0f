// RequestStream: how one request's results travel from the engine loop's thread to the HTTP
// handler thread serving it. The loop admits or rejects the request, then pushes its token
// events (the last one carries the finish reason) or fails it; the handler waits on a
// condition variable, never by polling the engine.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "sched/plan.h"

namespace fathom::serve {

class RequestStream {
 public:
  explicit RequestStream(int64_t prompt_tokens) : prompt_tokens_(prompt_tokens) {}

  // --- handler side
  // Blocks until the engine accepted the request (Ok) or refused it (its message).
  Status WaitAdmitted();
  // Moves the events queued so far into *out (appended). If none are queued and the
  // stream is not over, waits up to `timeout` for some. Returns true if it appended any.
  bool Wait(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout);
  // The engine failed while running it (HTTP 500); empty otherwise.
  std::string error() const;
  // A finish (or a failure) was pushed and every event before it was taken by Wait: the
  // handler has seen everything. (While events are still queued it is false, even after
  // the finish was pushed: an SSE writer that took a batch of tokens, then saw the engine
  // finish, once ended the stream without the last tokens and with finish_reason "stop".)
  bool over() const;
  // The finish reason of the last event pushed (kNone before the finish or after a failure).
  FinishReason finish() const;
  int64_t prompt_tokens() const { return prompt_tokens_; }

  // --- engine loop side
  void Admit();
  void Reject(std::string message);
  void Push(const TokenEvent& e);
  void Fail(std::string message);

 private:
  enum class Admission { kPending, kAdmitted, kRejected };
  const int64_t prompt_tokens_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  Admission admission_ = Admission::kPending;
  std::string reject_message_, error_;
  std::deque<TokenEvent> events_;
  bool over_ = false;
  FinishReason finish_ = FinishReason::kNone;
};

}  // namespace fathom::serve
