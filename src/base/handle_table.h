// A table of owned objects named by handles (slot index + generation), so that a handle to a
// destroyed object is detected instead of reaching freed memory or, worse, the object that
// reused its slot.
//
// - insert() takes ownership and returns a handle; get() returns nullptr for a handle whose
//   object is gone (the slot's generation moved on) or that was never issued; remove() hands
//   the object back and retires the handle.
// - Objects live behind std::unique_ptr: their addresses never change while they are in the
//   table (other layers may keep pointers to them, e.g. a QP's completion queue).
// - Generation 0 is never issued, so a value-initialized handle {0, 0} is the null handle.
// - The table holds at most `max_size` objects; insert() into a full table returns the null
//   handle (the caller turns that into its own "too many" error).
// - Freed slots are reused oldest-first (FIFO), which spreads reuse and delays ABA further.
//
// Single-threaded, like everything in the core.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "base/assert.h"

namespace uroce {

struct RawHandle {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;  // 0: null handle
  bool operator==(const RawHandle&) const = default;
};

template <class T>
class HandleTable {
 public:
  explicit HandleTable(std::uint32_t max_size) : max_size_(max_size) {}
  HandleTable(const HandleTable&) = delete;
  HandleTable& operator=(const HandleTable&) = delete;

  std::uint32_t size() const { return live_; }
  std::uint32_t max_size() const { return max_size_; }
  bool full() const { return live_ >= max_size_; }

  // Takes ownership of `object` (non-null). Returns the null handle when the table is full.
  RawHandle insert(std::unique_ptr<T> object) {
    UROCE_ASSERT(object != nullptr);
    if (full()) return RawHandle{};
    std::uint32_t index;
    if (!free_.empty()) {
      index = free_.front();
      free_.pop_front();
    } else {
      index = static_cast<std::uint32_t>(slots_.size());
      slots_.push_back(Slot{});
    }
    Slot& s = slots_[index];
    UROCE_ASSERT(s.object == nullptr);
    s.object = std::move(object);
    ++live_;
    return RawHandle{index, s.generation};
  }

  T* get(RawHandle h) const {
    if (h.generation == 0 || h.index >= slots_.size()) return nullptr;
    const Slot& s = slots_[h.index];
    if (s.generation != h.generation) return nullptr;
    return s.object.get();
  }

  // Removes the object of a live handle and returns it (nullptr for a stale or null handle).
  std::unique_ptr<T> remove(RawHandle h) {
    if (get(h) == nullptr) return nullptr;
    Slot& s = slots_[h.index];
    std::unique_ptr<T> out = std::move(s.object);
    // Skip 0 on wrap-around: it marks the null handle.
    s.generation = s.generation == UINT32_MAX ? 1 : s.generation + 1;
    free_.push_back(h.index);
    --live_;
    return out;
  }

  // Calls f(RawHandle, T&) for every live object, in slot order. f must not insert or remove.
  template <class F>
  void for_each(F&& f) const {
    for (std::uint32_t i = 0; i < slots_.size(); ++i) {
      if (slots_[i].object) f(RawHandle{i, slots_[i].generation}, *slots_[i].object);
    }
  }

 private:
  struct Slot {
    std::unique_ptr<T> object;
    std::uint32_t generation = 1;
  };
  std::uint32_t max_size_;
  std::uint32_t live_ = 0;
  std::vector<Slot> slots_;
  std::deque<std::uint32_t> free_;
};

}  // namespace uroce
