// The progress model under a manual clock: two hosts, each the real verbs device, engine and
// engine::Scheduler (the same policy UdpDevice executes over real sockets), over the simulated
// network, with the two threads a process has modeled around them: an application thread that
// polls, blocks on completion events or does nothing, and (optionally) the progress thread.
// The harness carries out the Scheduler's actions as UdpDevice does (rounds, spins, sleeps on
// or off the socket until the lease ends, wake-up signals), with seeded wake-up latencies, poll
// gaps and link delays, and checks after every event:
// - one owner: the thread runs no round while the application owns the socket unless a
//   doorbell asked for one;
// - every message arrives, byte for byte, and every WR completes successfully;
// - without loss (ProgressSimOptions::loss): no request is retransmitted but as a tail-loss probe:
// every ACK, held or not, reached its
//   requester before the ACK timeout, IBTA's or the adaptive one (the network loses nothing);
// - liveness: the workload finishes within the run's limit (a thread asleep that nothing
//   wakes, or a held ACK nobody sends, ends it there).
// A failure names the seed; the result also reports what the policy did (hand-offs, lease
// expiries, rounds, sleeps, spins, held ACKs and how long the longest was held, flushes that
// carried only an ACK) for tests to assert on: time is an input here, so those are exact.
#pragma once

#include <cstdint>
#include <string>

#include "base/time.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "fault/fault.h"
#include "transport/qp.h"

namespace uroce::sim {

// What a simulated application thread does.
enum class AppModel : std::uint8_t {
  kPolling,        // polls in a loop: a progress() round every poll gap
  kBlocking,       // arms its CQ, blocks for a completion event (application_waits), wakes
  kIdle,           // opened the device and never calls it again (a passive target)
  kPollThenStop,   // polls until `switch_after` messages, then goes away without a word
  kPollThenBlock,  // polls until `switch_after` messages, then blocks for events
  // Two threads, as rping has them: one arms the CQ and blocks for events (application_waits)
  // and hands each completion to the other, which posts the answer while the first is already
  // blocked again. The post, a round of the application's, takes the socket back from the
  // progress thread, and nothing of the application's gives it back.
  kBlockedWaiterOtherPoster,
  // UCX's interface that goes idle (ucp_worker_iface_check_events_do, issue 43): it polls its
  // CQ, and a poll gap after a poll that found it empty, polls another CQ of the device (the
  // drop-in runs a progress round for an empty poll, which may complete work into this CQ), then
  // arms this CQ without polling it again and sleeps until the completion event.
  kPollThenArm,
};
const char* app_model_name(AppModel m);

enum class Workload : std::uint8_t {
  // Host 0 and 1 take turns: a SEND, the peer's receive completes, it SENDs back (what
  // ibv_rc_pingpong does); `messages` each way.
  kPingPong,
  // Host 0 WRITEs `messages` times to host 1, one at a time, each after the last completed;
  // host 1 did one WRITE of its own first (so it holds ACKs like a ping-pong side would).
  kWrites,
  // As kPingPong, but each host that signals every SEND (signal_every 1) posts its next one
  // only once its last one completed (a send queue of one, as perftest's latency tests): its
  // peer's ACK is on the path of every turn. A host that signals fewer cannot wait so.
  kPingPongAfterCompletion,
  // Both hosts WRITE `messages` times to each other at once, each keeping up to `window` WRITEs
  // outstanding (a bidirectional stream with a small send queue): a host's ACKs then wait for
  // requests that its full window keeps it from posting.
  kStreams,
};

struct ProgressSimOptions {
  std::uint64_t seed = 1;
  Workload workload = Workload::kPingPong;
  AppModel app[2] = {AppModel::kPolling, AppModel::kPolling};
  bool thread[2] = {true, true};  // each host's progress thread
  std::uint32_t messages = 100;
  std::uint32_t max_message = 3000;  // bytes: up to 3 packets at path MTU 1024 (at most 3000)
  std::uint32_t switch_after = 30;   // kPollThenStop / kPollThenBlock
  // Ping-pongs and kStreams: each host asks for the completion of every this-many-th message and
  // of its last (UCX's rc_verbs: every 64th); 1: every one. kWrites signals every WRITE.
  std::uint32_t signal_every[2] = {1, 1};
  std::uint32_t window = 8;  // kStreams: WRITEs outstanding per host, 1..16 (the send queue)
  // The policy (its progress_thread is ignored: `thread` sets it per side).
  engine::SchedulerConfig policy;
  // ACK timeout code of every QP: 4.096 us * 2^code; by default the shortest with which a QP
  // offers its ACKs for holding (12: 16.8 ms).
  std::uint8_t ack_timeout = transport::Qp::kMinTimeoutToHoldAck;
  Duration limit = Duration::s(10);  // simulated time
  // Random loss on the link (each frame, each way; seeded). With loss, retransmissions are the
  // recovery's business and no longer a failure: the oracles left are the data, the completions
  // and liveness (every message arrives within `limit`; a lost packet that nothing resends, or
  // a timer that nothing runs, ends the run there).
  fault::Ratio loss;
};

struct HostReport {
  engine::SchedulerCounters sched;
  engine::EngineCounters engine;
  std::uint64_t flushes = 0;           // flushes that sent something
  std::uint64_t lone_ack_flushes = 0;  // ... only ACKs
  std::int64_t max_ack_held_ns = 0;    // the longest time ACKs stayed held
  std::uint64_t thread_wakeups = 0;    // sleeps that ended
  std::int64_t thread_spin_ns = 0;     // time the thread busy-polled
  std::uint64_t messages_received = 0;
  std::uint64_t acks_held_unanswered = 0;      // the QP's: held ACKs that left alone
  std::uint64_t acks_deferred_unanswered = 0;  // the QP's: deferred ACKs that left alone
  std::uint64_t acks_sent = 0;                 // ACK packets sent
  // Armings that found a completion queued and fired at once (verbs: as ConnectX arms).
  std::uint64_t cq_events_at_arm = 0;
};

struct ProgressSimResult {
  bool ok = true;
  std::string failure;  // "seed N at t=...: what"
  HostReport host[2];
  std::int64_t simulated_ns = 0;
  // The bounds the run drew from its seed.
  std::int64_t max_wake_latency_ns = 0;
  std::int64_t max_poll_gap_ns = 0;
  std::int64_t link_delay_ns = 0;
};

ProgressSimResult run_progress_sim(const ProgressSimOptions& options);

}  // namespace uroce::sim
