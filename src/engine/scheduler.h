// The progress policy of one device, sans-I/O: who owns the socket (runs receive rounds), when a
// positive ACK may wait for the request behind it, when the progress thread spins, sleeps and on
// what, and how much a round may send. It reads no clock and makes no system call: every input
// carries `now`, every output is an action for the caller to carry out. UdpDevice executes
// its actions over a real socket, eventfds and a timerfd; the simulator (sim/progress_sim.h)
// executes them over a manual clock, with modeled application threads, and checks them.
//
// Ownership. One owner of the socket at a time:
//
//           app_round_begin (the application polls: progress(), transmit())
//        +---------------------------------------------------------------+
//        |                                                               v
//   [ kThread ]                                                  [ kApplication ]
//        ^                                                               |
//        +---------------------------------------------------------------+
//           app_blocks (the application says it will block: hand-off at once)
//           or thread_next() at/after lease_end() (it stopped polling without saying so)
//
// While the application owns the socket the progress thread sleeps off the socket (its packets
// would wake the thread on the CPU the application polls from, for nothing) until the lease
// ends or something wakes it; it runs a round meanwhile only for a doorbell that asks for one
// (a post from a thread that does not transmit itself). Every application round renews the
// lease (to now + app_lease) in memory: the application's thread arms no timer. The thread
// sleeps until the lease's end as it was when it went to sleep, with `lease_slack` of slack
// (the kernel may end the sleep that much later, with a timer interrupt it takes anyway), and
// if the application renewed it meanwhile sleeps again until the new end: while the
// application polls, the thread wakes about once per app_lease + lease_slack. (Re-arming a
// near timer on every renewal, as this did before, cost the application's thread 22 us per
// timerfd_settime under a PVM hypervisor: a fifth of its time at one renewal per 100 us.) The
// lease is the only timer in the hand-off, and it is there only for an application that stops
// polling without a word (nothing tells a library that its caller went off to compute or to
// block in read() on another socket): the thread takes the socket back app_lease to app_lease
// + lease_slack after its last round. An application that blocks in the library
// (get_cq_event, req_notify_cq) hands over explicitly. Without a progress thread (polling
// mode) the application always owns the socket.
//
// Held ACKs. Whether a round holds the positive ACKs that may wait for the request behind them,
// and when held ones fall due, is the AckPolicy's (engine/ack_policy.h), which the Scheduler owns
// and asks: a round's plan carries its AckMode, its report what it held, and a held ACK leaves
// by acks().due() in a round of the owner. The thread sleeps until then at the latest; an
// owning application's next round sends it, and if that application has stopped polling, the
// lease's end wakes the thread, so an ACK is held at most acks.hold_for + app_lease +
// lease_slack. A thread's round holds nothing while the application is blocked in the library
// (app_blocks() since its last round; AckPolicy::mode): one a round held just before the
// application blocked still leaves by acks().due().
//
// Threads: not thread-safe; the caller serialises all calls (UdpDevice under its scheduler
// mutex). Times are the caller's monotonic clock.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/time.h"
#include "engine/ack_policy.h"

namespace uroce::engine {

struct SchedulerConfig {
  // A progress thread exists (thread mode); without one the application owns the socket.
  bool progress_thread = false;
  // Which ACKs wait for the request behind them, and how long (the AckPolicy's switches).
  AckPolicyConfig acks;
  // How long an application round keeps the socket the application's.
  Duration app_lease = Duration::us(200);
  // How much later than the lease's end the thread may wake to look at it (ThreadAction::
  // slack): a timer the kernel programs for the thread alone costs the application's CPU about
  // 50 us a wake-up under a PVM hypervisor; with 2 ms of slack half the wake-ups ride on the
  // scheduler tick (250 Hz) and the thread's looks cost the polling application about 1%.
  Duration lease_slack = Duration::ms(2);
  // The thread: after a round that did work, busy-poll this long before sleeping.
  Duration spin = Duration::zero();
  // The thread, with `spin` zero: after work, busy-poll this long while the application is
  // blocked in the library (it said so: app_blocks): the CPU is then nobody else's, and a
  // stream of packets costs no wake-up per batch. Zero: never.
  Duration blocked_app_spin = Duration::us(500);
  // The thread, with `spin` zero: a sleep on the socket that ended within this much means that
  // packets come faster than a wake-up is worth (a stream to a passive target): after the next
  // round that works, spin for blocked_app_spin as for a blocked application, until a sleep
  // lasts longer again.
  Duration stream_gap = Duration::us(50);
  // Packets a thread round sends before it lets go of the device.
  std::size_t tx_budget = 256;
};

// What a round did, as the engine tells it afterwards.
struct RoundReport {
  std::size_t received = 0;
  std::size_t sent = 0;
  std::size_t held_acks = 0;              // Engine::held_acks()
  bool acks_deferred = false;             // a flush deferred an ACK: the hold starts over
  bool tx_left = false;                   // Engine::has_unheld_tx_work()
  Instant next_timer = Instant::never();  // Engine::next_timeout()
};

// How to run the round about to start.
struct RoundPlan {
  std::size_t tx_budget = SIZE_MAX;
  AckMode acks = AckMode::kSend;  // Engine::flush_tx's: AckPolicy::mode
};

enum class Owner : std::uint8_t { kApplication, kThread };

// What the progress thread does next.
struct ThreadAction {
  enum class Kind : std::uint8_t {
    kRound,           // take the device lock and run a round with `plan`; then thread_round_end
    kSpin,            // busy-poll, without the lock, until `until`, a readable socket or
                      // doorbell_pending(); then thread_woke
    kSleep,           // block until `until` (never(): no deadline), a wake-up signal and, with
                      // watch_socket, a readable socket; then thread_woke
    kSleepOffSocket,  // block until `until` (the lease's end, with `slack`) or a wake-up
                      // signal; then thread_woke
    kWaitWritable,    // the socket is full: block until it is writable (or `until`); then
                      // thread_woke
  };
  Kind kind = Kind::kRound;
  Instant until = Instant::never();
  // A sleep may end up to this much after `until` (the kernel's timer slack: the executor's
  // timer then fires with one the CPU takes anyway); zero: as close to `until` as it can.
  Duration slack = Duration::zero();
  bool watch_socket = false;
  RoundPlan plan;
};

// What the application's executor does after its round.
struct AppAfter {
  bool wake_thread = false;  // signal the sleeping thread
};

struct SchedulerCounters {
  std::uint64_t app_rounds = 0;
  std::uint64_t thread_rounds = 0;
  std::uint64_t handoffs_to_app = 0;     // the application took the socket from the thread
  std::uint64_t handoffs_to_thread = 0;  // explicit: app_blocks
  std::uint64_t lease_expiries = 0;      // the thread took the socket when a lease ran out
  std::uint64_t lease_renewed = 0;       // the thread woke at a lease's end and found it renewed
  std::uint64_t thread_sleeps = 0;
  std::uint64_t thread_spins = 0;
  std::uint64_t wake_signals = 0;  // wake-ups asked of the executor
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config);

  const SchedulerConfig& config() const { return config_; }
  Owner owner() const { return owner_; }
  // The ACK policy its rounds follow: acks().due() is when held ACKs must leave (never() while
  // none are held). Mutable for Engine::flush_held_acks.
  const AckPolicy& acks() const { return acks_; }
  AckPolicy& acks() { return acks_; }
  // The application owns the socket until then (thread mode).
  Instant lease_end() const { return lease_end_; }
  // A doorbell asked the thread for a round it has not started yet.
  bool doorbell_pending() const { return doorbell_pending_; }
  // The thread is in (or about to enter) a kSleep, kSleepOffSocket or kWaitWritable.
  bool thread_asleep() const { return asleep_; }
  const SchedulerCounters& counters() const { return counters_; }

  // ---- the application's thread ----

  // The application runs a round (progress(), or transmit(): receive or not): it takes the
  // socket and renews its lease.
  RoundPlan app_round_begin(Instant now);
  AppAfter app_round_end(Instant now, const RoundReport& report);
  // The application is about to block in the library (a completion or async event): the
  // socket goes to the thread at once. Returns whether to wake the thread.
  bool app_blocks(Instant now);
  // Polling mode: how long wait() may block (until `max_until` at most) before the next round.
  Instant app_wait_until(Instant now, Instant max_until, const RoundReport& state) const;

  // ---- any thread ----

  // A post rang a doorbell. `quiet`: its poster transmits itself right after (transmit()), so
  // the thread need not. Returns whether to wake the thread.
  bool doorbell(bool quiet);
  // ---- the progress thread ----

  ThreadAction thread_next(Instant now);
  void thread_round_end(Instant now, const RoundReport& report);
  // Back from a kSpin, kSleep, kSleepOffSocket or kWaitWritable (however it ended).
  void thread_woke(Instant now);
  // The thread spins after its next round that works (SchedulerConfig::stream_gap).
  bool streaming() const { return streaming_; }
  // A new configuration (start_progress_thread, stop_progress_thread, close): the thread's
  // state starts over (the application owns the socket without a thread, the thread with
  // one); held ACKs stay held.
  void reconfigure(const SchedulerConfig& config);

 private:
  ThreadAction go_to_sleep(Instant now, ThreadAction::Kind kind, Instant until, bool watch_socket);

  enum class Plan : std::uint8_t { kRound, kSpin, kSleep, kWaitWritable };

  SchedulerConfig config_;
  Owner owner_;
  AckPolicy acks_;
  Instant lease_end_ = Instant::from_ns(0);
  Instant off_socket_until_ = Instant::never();  // the end of the thread's off-socket sleep
  bool app_blocked_ = false;                     // app_blocks() since its last round
  bool streaming_ = false;  // the thread's last sleep on the socket was short (stream_gap)
  Instant slept_at_ = Instant::from_ns(0);
  bool doorbell_pending_ = false;
  bool asleep_ = false;
  // The thread's plan after its last round or wake-up.
  Plan plan_ = Plan::kRound;
  Instant spin_until_ = Instant::from_ns(0);
  Instant sleep_until_ = Instant::never();
  // Asleep on the socket (not off it), and when the thread then looks by itself.
  bool watching_ = false;
  Instant watch_until_ = Instant::never();
  SchedulerCounters counters_;
};

}  // namespace uroce::engine
