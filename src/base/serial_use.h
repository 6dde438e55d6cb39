// SerialUse: the debug-build check of a sans-I/O object's threading contract. Such an object
// (the Engine, whose header says so) is not thread-safe: its caller serialises every call, and
// may hand it from one thread to another between calls (a device's progress thread and its
// application take turns under the device mutex). Each entry point opens a SerialUse::Scope,
// which asserts that no other thread is inside the object at the same time; one thread may nest.
//
// It synchronises nothing and changes no behaviour: checked where UROCE_ASSERT is (debug,
// sanitizer and simulation builds), nothing in release builds (NDEBUG). The thread identity and
// the atomic compare live in serial_use.cc, outside the sans-I/O core (scripts/check-core-purity).
#pragma once

#include <cstdint>

namespace uroce {

class SerialUse {
 public:
  class Scope {
   public:
#ifndef NDEBUG
    explicit Scope(SerialUse& u) : u_(u) { u_.enter(); }
    ~Scope() { u_.leave(); }
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
  void enter();
  void leave();
  std::uint64_t user_ = 0;  // a tag of the thread inside (serial_use.cc); 0: none
  int depth_ = 0;           // written only by the thread inside
};

}  // namespace uroce
