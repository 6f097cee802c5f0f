// RequestTable<T>: per-request records by id, for the Scheduler and the Engine (one
// implementation of the bookkeeping both need). Ids are handed out in order from 0 and never
// reused. Forget(id) marks a record dropped; storage is reclaimed from the front in id
// order, up to the oldest record not yet forgotten, so a long-running server keeps the
// requests in flight (and finished ones not yet read), not every request it ever served.
#pragma once

#include <cstdint>
#include <deque>
#include <utility>

#include "core/check.h"
#include "sched/plan.h"  // RequestId

namespace fathom {

template <typename T>
class RequestTable {
 public:
  // Appends a record; returns its id (next_id() before the call).
  RequestId Add(T value) {
    items_.push_back({std::move(value), false});
    return next_id() - 1;
  }
  // A record that was added and whose storage is still held (forgotten records count until
  // reclaimed: reading them is allowed, their owner cleared what it wanted first).
  bool Holds(RequestId id) const { return id >= base_ && id < next_id(); }
  T& operator[](RequestId id) { return Entry(id).value; }
  const T& operator[](RequestId id) const { return items_[Index(id)].value; }
  // Marks id dropped and reclaims every dropped record at the front.
  void Forget(RequestId id) {
    Entry(id).forgotten = true;
    while (!items_.empty() && items_.front().forgotten) {
      items_.pop_front();
      ++base_;
    }
  }
  RequestId first_id() const { return base_; }  // the oldest record held
  RequestId next_id() const { return base_ + static_cast<RequestId>(items_.size()); }
  int64_t held() const { return static_cast<int64_t>(items_.size()); }

 private:
  struct Item {
    T value;
    bool forgotten;
  };
  size_t Index(RequestId id) const {
    FATHOM_CHECK_MSG(Holds(id), "request " << id << " is not held (ids " << base_ << ".." << next_id() << ")");
    return static_cast<size_t>(id - base_);
  }
  Item& Entry(RequestId id) { return items_[Index(id)]; }
  std::deque<Item> items_;  // ids base_, base_ + 1, ...
  RequestId base_ = 0;
};

}  // namespace fathom
