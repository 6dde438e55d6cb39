// The debug-build threading checks (base/owner.h, base/serial_use.h): OwnedMutex knows its holder,
// SerialUse catches two threads inside one object at once and lets one thread nest or threads take
// turns.
#include "base/owner.h"
#include "base/serial_use.h"

#include <gtest/gtest.h>

#include <future>
#include <mutex>
#include <thread>

namespace uroce {
namespace {

#ifndef NDEBUG

TEST(OwnedMutex, KnowsWhoHoldsIt) {
  OwnedMutex mu;
  {
    std::lock_guard lk(mu);
    mu.assert_held();  // passes
  }
  EXPECT_DEATH(mu.assert_held(), "holder_");
  // Held by another thread is not held by this one.
  std::promise<void> locked;
  std::promise<void> done;
  std::thread t([&] {
    std::lock_guard lk(mu);
    locked.set_value();
    done.get_future().wait();
  });
  locked.get_future().wait();
  EXPECT_DEATH(mu.assert_held(), "holder_");
  done.set_value();
  t.join();
  EXPECT_TRUE(mu.try_lock());
  mu.assert_held();
  mu.unlock();
}

TEST(SerialUse, OneThreadMayNestAndThreadsMayTakeTurns) {
  SerialUse use;
  {
    SerialUse::Scope outer(use);
    SerialUse::Scope inner(use);
  }
  std::thread t([&] { SerialUse::Scope s(use); });
  t.join();
  SerialUse::Scope again(use);
}

TEST(SerialUse, TwoThreadsInsideAtOnceAbort) {
  EXPECT_DEATH(
      {
        SerialUse use;
        std::promise<void> inside;
        std::promise<void> never;
        std::thread t([&] {
          SerialUse::Scope s(use);
          inside.set_value();
          never.get_future().wait();  // stays inside until the process ends
        });
        inside.get_future().wait();
        SerialUse::Scope s(use);  // a second thread enters: the check fires
        t.detach();
      },
      "none == me");
}

#else

TEST(OwnedMutex, ChecksOnlyInDebugBuilds) { GTEST_SKIP() << "NDEBUG: the checks compile away"; }

#endif

}  // namespace
}  // namespace uroce
