// A lock for critical sections of a few dozen instructions (the progress scheduler's state).
// Uncontended, lock() is one atomic exchange and unlock() one store; a std::mutex pair costs
// several times that in glibc, on every progress round. A waiter spins on a plain load (the
// cache line stays shared until the holder lets go) and yields now and then, so that a holder
// preempted on the waiter's CPU gets to run. Not for sections that block or make system calls.
#pragma once

#include <atomic>
#include <thread>

namespace uroce {

class SpinLock {
 public:
  SpinLock() = default;
  SpinLock(const SpinLock&) = delete;
  SpinLock& operator=(const SpinLock&) = delete;

  // The uncontended exchange inline; the wait out of line, so that the fast path inlines into
  // every caller (the progress round takes this lock twice: issue 40's instruction counts).
  void lock() noexcept {
    if (!locked_.exchange(true, std::memory_order_acquire)) return;
    lock_contended();
  }
  bool try_lock() noexcept {
    return !locked_.load(std::memory_order_relaxed) &&
           !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() noexcept { locked_.store(false, std::memory_order_release); }

 private:
  [[gnu::noinline]] void lock_contended() noexcept {
    do {
      for (unsigned spins = 1; locked_.load(std::memory_order_relaxed); ++spins) {
        if (spins % 64 == 0) {
          std::this_thread::yield();
        } else {
          relax();
        }
      }
    } while (locked_.exchange(true, std::memory_order_acquire));
  }
  static void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }
  std::atomic<bool> locked_{false};
};

}  // namespace uroce
