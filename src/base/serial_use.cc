#include "base/serial_use.h"

#include <atomic>

#include "base/assert.h"

namespace uroce {
namespace {

// A nonzero tag per thread: the address of a thread-local object.
std::uint64_t this_thread_tag() {
  static thread_local char tag;
  return reinterpret_cast<std::uintptr_t>(&tag);
}

}  // namespace

void SerialUse::enter() {
  const std::uint64_t me = this_thread_tag();
  std::uint64_t none = 0;
  // Entered by this thread already (a nested call) or by none; never by another at once.
  if (!std::atomic_ref(user_).compare_exchange_strong(none, me, std::memory_order_acquire)) {
    UROCE_CHECK(none == me);
  }
  ++depth_;
}

void SerialUse::leave() {
  UROCE_ASSERT(depth_ > 0);
  if (--depth_ == 0) std::atomic_ref(user_).store(0, std::memory_order_release);
}

}  // namespace uroce
