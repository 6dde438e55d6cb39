// engine::Scheduler on its own, time as an input: who owns the socket and when the progress
// thread must look again. The policy's behaviour over whole runs is tests/sim/progress_sim_test.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

namespace uroce::engine {
namespace {

// The thread's first action: a round, whose report puts it to sleep on the socket.
ThreadAction sleep_after_round(Scheduler& s, Instant now, Instant next_timer) {
  EXPECT_EQ(s.thread_next(now).kind, ThreadAction::Kind::kRound);
  RoundReport idle;
  idle.next_timer = next_timer;
  s.thread_round_end(now, idle);
  return s.thread_next(now);
}

SchedulerConfig with_thread() {
  SchedulerConfig c;
  c.progress_thread = true;
  return c;
}

// rping under loss: its CQ thread blocked in get_cq_event (the socket went to the progress
// thread, which found nothing outstanding and slept on the socket without a deadline), then its
// main thread posted a request, whose round took the socket back. No packet may come (the
// request or its ACK lost), so the thread must be woken to look again when the lease ends.
TEST(Scheduler, AThreadAsleepOnTheSocketPastTheLeaseIsWokenWhenTheApplicationTakesIt) {
  Scheduler s(with_thread());
  const Instant t0 = Instant::from_ns(1'000'000'000);
  EXPECT_FALSE(s.app_blocks(t0));  // the thread had the socket already
  const ThreadAction a = sleep_after_round(s, t0, Instant::never());
  ASSERT_EQ(a.kind, ThreadAction::Kind::kSleep);
  EXPECT_TRUE(a.watch_socket);
  EXPECT_TRUE(a.until.is_never());

  const Instant t1 = t0 + Duration::us(700);
  s.app_round_begin(t1);
  EXPECT_EQ(s.owner(), Owner::kApplication);
  RoundReport sent;
  sent.sent = 1;
  EXPECT_TRUE(s.app_round_end(t1, sent).wake_thread);
  EXPECT_FALSE(s.thread_asleep());

  // Woken, it stays off the application's socket until the lease ends, then takes it back.
  s.thread_woke(t1);
  const ThreadAction off = s.thread_next(t1);
  EXPECT_EQ(off.kind, ThreadAction::Kind::kSleepOffSocket);
  EXPECT_EQ(off.until, t1 + SchedulerConfig{}.app_lease);
  s.thread_woke(off.until);
  EXPECT_EQ(s.thread_next(off.until).kind, ThreadAction::Kind::kRound);
  EXPECT_EQ(s.owner(), Owner::kThread);
}

// A thread whose sleep on the socket ends by itself within the lease and its slack needs no
// signal: it looks at the lease when its timer fires.
TEST(Scheduler, AThreadAsleepOnANearTimerIsLeftAsleep) {
  Scheduler s(with_thread());
  const Instant t0 = Instant::from_ns(1'000'000'000);
  const ThreadAction a = sleep_after_round(s, t0, t0 + Duration::us(300));
  ASSERT_EQ(a.kind, ThreadAction::Kind::kSleep);
  const Instant t1 = t0 + Duration::us(100);
  s.app_round_begin(t1);
  EXPECT_FALSE(s.app_round_end(t1, RoundReport{}).wake_thread);
  EXPECT_TRUE(s.thread_asleep());
}

}  // namespace
}  // namespace uroce::engine
