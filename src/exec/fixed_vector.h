// FixedVector: a buffer whose capacity is set once, at construction, and never changes.
// push_back, resize or First past the capacity is a FATHOM_CHECK failure, never a
// reallocation: the runner's buffers (run_state.h) are sized from the limits its callers
// promise, and a call beyond them is an error returned before any buffer is touched.
//
// The storage is default-initialised (make_unique_for_overwrite): floats and pointers are
// left uninitialised, so a buffer sized for the largest call costs pages only as far as
// calls actually reach.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "core/check.h"

namespace fathom {

template <typename T>
class FixedVector {
 public:
  FixedVector() = default;
  explicit FixedVector(int64_t capacity)
      : data_(std::make_unique_for_overwrite<T[]>(static_cast<size_t>(capacity))), capacity_(capacity) {
    FATHOM_CHECK_MSG(capacity >= 0, "capacity=" << capacity);
  }

  int64_t capacity() const { return capacity_; }
  int64_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T* data() { return data_.get(); }
  const T* data() const { return data_.get(); }

  // The first n elements as scratch (contents unspecified); size() becomes n.
  T* First(int64_t n) {
    resize(n);
    return data_.get();
  }
  void resize(int64_t n) {
    FATHOM_CHECK_MSG(n >= 0 && n <= capacity_, "FixedVector: " << n << " elements, capacity " << capacity_);
    size_ = n;
  }
  void clear() { size_ = 0; }
  void push_back(const T& v) {
    FATHOM_CHECK_MSG(size_ < capacity_, "FixedVector: push_back past capacity " << capacity_);
    data_[static_cast<size_t>(size_++)] = v;
  }

  T& operator[](int64_t i) { return data_[static_cast<size_t>(i)]; }
  const T& operator[](int64_t i) const { return data_[static_cast<size_t>(i)]; }
  T& back() { return data_[static_cast<size_t>(size_ - 1)]; }
  T* begin() { return data_.get(); }
  T* end() { return data_.get() + size_; }
  const T* begin() const { return data_.get(); }
  const T* end() const { return data_.get() + size_; }
  std::span<const T> span() const { return {data_.get(), static_cast<size_t>(size_)}; }

 private:
  std::unique_ptr<T[]> data_;
  int64_t capacity_ = 0, size_ = 0;
};

}  // namespace fathom
