// Debug-build checks of the threading contracts that headers state in words.
//
//   OwnedMutex   a std::mutex that knows which thread holds it: a function documented as "called
//                with the device mutex held" (UdpDevice's *_locked) says so with assert_held().
//   SerialUse    for an object that is not thread-safe and whose caller serialises every call
//                (Engine, Scheduler, a Qp): each entry point opens a SerialUse::Scope, which
//                asserts that no other thread is inside the object at the same time.
//
// Both are checked where UROCE_ASSERT is (debug, sanitizer and simulation builds) and cost
// nothing in release builds (NDEBUG): the members are empty there.
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

class SerialUse {
 public:
  class Scope {
   public:
#ifndef NDEBUG
    explicit Scope(SerialUse& u) : u_(u) {
      const std::thread::id me = std::this_thread::get_id();
      std::thread::id none{};
      // Entered by this thread already (a nested call) or by none; never by another at once.
      if (!u_.user_.compare_exchange_strong(none, me, std::memory_order_acquire)) {
        UROCE_CHECK(none == me);
      }
      ++u_.depth_;
    }
    ~Scope() {
      if (--u_.depth_ == 0) u_.user_.store(std::thread::id(), std::memory_order_release);
    }
#else
    explicit Scope(SerialUse&) {}
#endif
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

#ifndef NDEBUG
   private:
    SerialUse& u_;
#endif
  };

 private:
#ifndef NDEBUG
  std::atomic<std::thread::id> user_{};
  int depth_ = 0;  // written only by the thread in user_
#endif
};

}  // namespace uroce
