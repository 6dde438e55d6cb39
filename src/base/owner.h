// OwnedMutex: a std::mutex that knows which thread holds it, so that a function documented as
// "called with the device mutex held" (UdpDevice's *_locked) says so with assert_held(). Checked
// where UROCE_ASSERT is (debug, sanitizer and simulation builds); nothing in release builds
// (NDEBUG). Its sibling for sans-I/O objects, which may not use threads: base/serial_use.h.
#pragma once

#include <atomic>
#include <mutex>
#include <thread>

#include "base/assert.h"

namespace uroce {

class OwnedMutex {
 public:
  void lock() {
    mu_.lock();
#ifndef NDEBUG
    holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
#endif
  }
  bool try_lock() {
    if (!mu_.try_lock()) return false;
#ifndef NDEBUG
    holder_.store(std::this_thread::get_id(), std::memory_order_relaxed);
#endif
    return true;
  }
  void unlock() {
#ifndef NDEBUG
    UROCE_ASSERT(holder_.load(std::memory_order_relaxed) == std::this_thread::get_id());
    holder_.store(std::thread::id(), std::memory_order_relaxed);
#endif
    mu_.unlock();
  }
  // The calling thread holds the mutex (debug builds; nothing in release builds).
  void assert_held() const {
#ifndef NDEBUG
    UROCE_ASSERT(holder_.load(std::memory_order_relaxed) == std::this_thread::get_id());
#endif
  }

 private:
  std::mutex mu_;
#ifndef NDEBUG
  std::atomic<std::thread::id> holder_{};
#endif
};

}  // namespace uroce
