#include "engine/scheduler.h"

#include <algorithm>

#include "base/assert.h"

namespace uroce::engine {

namespace {

// How long the thread waits for a full socket to drain before it looks again anyway.
constexpr Duration kWritableWait = Duration::ms(1);

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config)
    : config_(config),
      owner_(config.progress_thread ? Owner::kThread : Owner::kApplication),
      acks_(config.acks) {
  UROCE_CHECK(config.tx_budget > 0);
}

void Scheduler::reconfigure(const SchedulerConfig& config) {
  UROCE_CHECK(config.tx_budget > 0);
  config_ = config;
  owner_ = config.progress_thread ? Owner::kThread : Owner::kApplication;
  lease_end_ = Instant::from_ns(0);
  off_socket_until_ = Instant::never();
  app_blocked_ = false;
  streaming_ = false;
  doorbell_pending_ = false;
  asleep_ = false;
  plan_ = Plan::kRound;
  spin_until_ = Instant::from_ns(0);
  sleep_until_ = Instant::never();
  watching_ = false;
  watch_until_ = Instant::never();
  acks_.reconfigure(config_.acks);
}

// ---- the application's thread ----

RoundPlan Scheduler::app_round_begin(Instant now) {
  ++counters_.app_rounds;
  app_blocked_ = false;
  if (config_.progress_thread) {
    if (owner_ == Owner::kThread) {
      owner_ = Owner::kApplication;
      ++counters_.handoffs_to_app;
    }
    // Renewed here, not after the round, so that the thread cannot take the socket back in
    // the middle of it. A store: the thread looks at it when its sleep ends.
    lease_end_ = now + config_.app_lease;
  }
  return RoundPlan{SIZE_MAX, acks_.mode(now)};
}

AppAfter Scheduler::app_round_end(Instant now, const RoundReport& report) {
  acks_.round_done(now, report.held_acks, report.acks_deferred);
  AppAfter a;
  if (!config_.progress_thread) return a;
  // Work this round could not finish (a full socket, doorbells rung quietly) is the thread's,
  // even while the application owns the socket. So are held ACKs due before a thread that
  // sleeps on the socket would look by itself. (A thread off the socket leaves them to the
  // owner's rounds, and takes over when the lease ends.)
  if (report.tx_left) doorbell_pending_ = true;
  // A thread asleep on the socket past the end of the lease this round began: the round may
  // have armed a timer (it sent a request), which only the owner of the socket runs, and the
  // application may not poll again. rping does exactly that: its CQ thread blocked in
  // get_cq_event (the socket went to the thread) before its main thread posted (the socket came
  // back). Should the request or its ACK be lost, no packet would wake the thread, and the
  // request would stay outstanding for ever, never resent. Woken, it looks again when the lease
  // ends (an off-socket sleep) and takes the socket back if the application has let it go.
  const bool sleeps_past_lease = watching_ && watch_until_ > lease_end_ + config_.lease_slack;
  if (asleep_ &&
      (report.tx_left || sleeps_past_lease || (watching_ && acks_.due() < watch_until_))) {
    asleep_ = false;
    ++counters_.wake_signals;
    a.wake_thread = true;
  }
  return a;
}

bool Scheduler::app_blocks(Instant now) {
  if (!config_.progress_thread) return false;
  app_blocked_ = true;
  if (owner_ != Owner::kApplication) return false;  // the thread has it already
  owner_ = Owner::kThread;
  lease_end_ = now;
  ++counters_.handoffs_to_thread;
  if (!asleep_) return false;
  asleep_ = false;
  ++counters_.wake_signals;
  return true;
}

Instant Scheduler::app_wait_until(Instant now, Instant max_until, const RoundReport& state) const {
  if (state.tx_left) return now;
  return std::min({max_until, state.next_timer, acks_.due()});
}

// ---- any thread ----

bool Scheduler::doorbell(bool quiet) {
  if (quiet || !config_.progress_thread) return false;
  doorbell_pending_ = true;
  if (!asleep_) return false;  // running or spinning: it sees doorbell_pending()
  asleep_ = false;
  ++counters_.wake_signals;
  return true;
}

// ---- the progress thread ----

ThreadAction Scheduler::go_to_sleep(Instant now, ThreadAction::Kind kind, Instant until,
                                    bool watch_socket) {
  asleep_ = true;
  slept_at_ = now;
  watching_ = watch_socket;
  watch_until_ = until;
  ++counters_.thread_sleeps;
  ThreadAction a;
  a.kind = kind;
  a.until = until;
  a.watch_socket = watch_socket;
  return a;
}

ThreadAction Scheduler::thread_next(Instant now) {
  UROCE_CHECK(config_.progress_thread);
  UROCE_ASSERT(!asleep_);  // a sleep or spin ends with thread_woke() before the next question
  // An off-socket sleep that ran to its end (not one a signal ended).
  const bool lease_looked = now >= off_socket_until_;
  off_socket_until_ = Instant::never();
  if (owner_ == Owner::kApplication) {
    if (now >= lease_end_) {
      // The application stopped polling without a word: the socket is the thread's again.
      owner_ = Owner::kThread;
      ++counters_.lease_expiries;
      plan_ = Plan::kRound;
    } else if (!doorbell_pending_) {
      // Stay off the application's socket until its lease ends (again, when it was renewed
      // while the thread slept).
      if (lease_looked) ++counters_.lease_renewed;
      ThreadAction a = go_to_sleep(now, ThreadAction::Kind::kSleepOffSocket, lease_end_, false);
      a.slack = config_.lease_slack;
      off_socket_until_ = lease_end_;
      return a;
    }
  }
  if (doorbell_pending_) plan_ = Plan::kRound;
  switch (plan_) {
    case Plan::kRound: {
      doorbell_pending_ = false;  // the round sees every doorbell rung so far
      ++counters_.thread_rounds;
      ThreadAction a;
      a.kind = ThreadAction::Kind::kRound;
      // No ACK is held for an application blocked in the library (AckPolicy::mode).
      a.plan = RoundPlan{config_.tx_budget, acks_.mode(now, app_blocked_)};
      return a;
    }
    case Plan::kSpin: {
      ++counters_.thread_spins;
      ThreadAction a;
      a.kind = ThreadAction::Kind::kSpin;
      a.until = std::min(spin_until_, sleep_until_);
      return a;
    }
    case Plan::kSleep:
      return go_to_sleep(now, ThreadAction::Kind::kSleep, sleep_until_, true);
    case Plan::kWaitWritable:
      return go_to_sleep(now, ThreadAction::Kind::kWaitWritable, sleep_until_, true);
  }
  UROCE_CHECK(false);
  return {};
}

void Scheduler::thread_round_end(Instant now, const RoundReport& report) {
  UROCE_ASSERT(!asleep_);  // a round is the thread's work, awake
  acks_.round_done(now, report.held_acks, report.acks_deferred);
  const bool worked = report.received > 0 || report.sent > 0;
  const bool idle = !worked && !report.tx_left;
  const bool held = !acks_.due().is_never();
  if (worked) {
    Duration spin = config_.spin;
    if (spin == Duration::zero() && (app_blocked_ || streaming_)) spin = config_.blocked_app_spin;
    spin_until_ = now + spin;
  }
  if ((idle && now >= spin_until_) || (held && !report.tx_left)) {
    // Nothing to do, or only held ACKs: step aside (sleep) so that the application, which may
    // be about to answer, sends them behind its request; they are due by acks_.due().
    plan_ = Plan::kSleep;
    sleep_until_ = std::min(report.next_timer, acks_.due());
  } else if (idle) {
    plan_ = Plan::kSpin;
    sleep_until_ = report.next_timer;
  } else if (report.tx_left && report.sent == 0) {
    plan_ = Plan::kWaitWritable;
    sleep_until_ = now + kWritableWait;
  } else {
    plan_ = Plan::kRound;  // it did work: there may be more
  }
}

void Scheduler::thread_woke(Instant now) {
  // Only sleeps on the socket tell how fast packets come; a spin or an off-socket sleep
  // leaves the guess as it was.
  if (watching_) streaming_ = now - slept_at_ < config_.stream_gap;
  asleep_ = false;
  watching_ = false;
  plan_ = Plan::kRound;
}

}  // namespace uroce::engine
