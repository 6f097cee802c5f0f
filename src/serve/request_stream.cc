#include "serve/request_stream.h"

namespace fathom::serve {

Status RequestStream::WaitAdmitted() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return admission_ != Admission::kPending; });
  if (admission_ == Admission::kRejected) return Status::Error(reject_message_);
  return Status::Ok();
}

bool RequestStream::Wait(std::vector<TokenEvent>* out, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait_for(lk, timeout, [&] { return !events_.empty() || over_; });
  if (events_.empty()) return false;
  out->insert(out->end(), events_.begin(), events_.end());
  events_.clear();
  return true;
}

std::string RequestStream::error() const {
  std::lock_guard<std::mutex> lk(mu_);
  return error_;
}

bool RequestStream::over() const {
  std::lock_guard<std::mutex> lk(mu_);
  return over_ && events_.empty();
}

FinishReason RequestStream::finish() const {
  std::lock_guard<std::mutex> lk(mu_);
  return finish_;
}

void RequestStream::Admit() {
  std::lock_guard<std::mutex> lk(mu_);
  admission_ = Admission::kAdmitted;
  cv_.notify_all();
}

void RequestStream::Reject(std::string message) {
  std::lock_guard<std::mutex> lk(mu_);
  admission_ = Admission::kRejected;
  reject_message_ = std::move(message);
  over_ = true;
  cv_.notify_all();
}

void RequestStream::Push(const TokenEvent& e) {
  std::lock_guard<std::mutex> lk(mu_);
  events_.push_back(e);
  if (e.finish != FinishReason::kNone) over_ = true, finish_ = e.finish;
  cv_.notify_all();
}

void RequestStream::Fail(std::string message) {
  std::lock_guard<std::mutex> lk(mu_);
  // A failure before admission (the loop stopped) reads as a rejection to WaitAdmitted.
  if (admission_ == Admission::kPending) {
    admission_ = Admission::kRejected;
    reject_message_ = message;
  }
  error_ = std::move(message);
  over_ = true;
  cv_.notify_all();
}

}  // namespace fathom::serve
