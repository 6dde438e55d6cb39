// A bounded FIFO with its capacity fixed at construction: the only allocation is the
// constructor's. Pushing onto a full ring is a bug (the owner sizes it from its protocol bound).
#pragma once

#include <cstddef>
#include <vector>

#include "base/assert.h"

namespace uroce {

template <class T>
class BoundedRing {
 public:
  explicit BoundedRing(std::size_t capacity) : slots_(capacity) {}

  std::size_t size() const { return count_; }
  std::size_t capacity() const { return slots_.size(); }
  bool empty() const { return count_ == 0; }
  bool full() const { return count_ == slots_.size(); }

  T& front() {
    UROCE_CHECK(count_ > 0);
    return slots_[head_];
  }
  const T& front() const {
    UROCE_CHECK(count_ > 0);
    return slots_[head_];
  }
  T& back() {
    UROCE_CHECK(count_ > 0);
    return slots_[(head_ + count_ - 1) % slots_.size()];
  }
  T& operator[](std::size_t i) {
    UROCE_CHECK(i < count_);
    return slots_[(head_ + i) % slots_.size()];
  }
  void push_back(const T& v) {
    UROCE_CHECK(count_ < slots_.size());
    slots_[(head_ + count_) % slots_.size()] = v;
    ++count_;
  }
  void pop_front() {
    UROCE_CHECK(count_ > 0);
    head_ = (head_ + 1) % slots_.size();
    --count_;
  }
  void pop_back() {
    UROCE_CHECK(count_ > 0);
    --count_;
  }
  void clear() {
    head_ = 0;
    count_ = 0;
  }

 private:
  std::vector<T> slots_;
  std::size_t head_ = 0;
  std::size_t count_ = 0;
};

}  // namespace uroce
