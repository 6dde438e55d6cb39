// The progress model (engine::Scheduler) under the simulator's clock: who owns the socket,
// how held ACKs leave, what a polling, a blocking and an idle application cost the progress
// thread, and the hand-offs between them. Each case runs a list of seeds (link delay, wake-up
// latency and poll gaps are drawn from the seed); a failure names its seed, and
// ProgressSimOptions{.seed = N, ...} with the case's settings replays it. Time is an input
// here, so the bounds below are exact, not tolerances for a busy machine.
#include "sim/progress_sim.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace uroce::sim {
namespace {

constexpr std::uint64_t kSeeds = 12;

std::string describe(const ProgressSimOptions& o) {
  return "seed " + std::to_string(o.seed) + " (" + app_model_name(o.app[0]) + "/" +
         app_model_name(o.app[1]) + ", threads " + std::to_string(o.thread[0]) + "/" +
         std::to_string(o.thread[1]) + ")";
}

// Runs `o` and fails the test, naming the seed, when the run's own oracles do.
ProgressSimResult run_ok(const ProgressSimOptions& o) {
  const ProgressSimResult r = run_progress_sim(o);
  EXPECT_TRUE(r.ok) << describe(o) << ": " << r.failure;
  return r;
}

// The same options without deferred ACKs: the run the deferring tests compare with.
ProgressSimResult run_ok_without_deferring(const ProgressSimOptions& o) {
  ProgressSimOptions no_defer = o;
  no_defer.policy.acks.defer = false;
  return run_ok(no_defer);
}

// The longest an ACK may stay held when the host's owner is an application that polls, or
// the thread (which sleeps until the ACK is due): the hold, plus a poll gap or a wake-up.
std::int64_t hold_bound_ns(const ProgressSimOptions& o, const ProgressSimResult& r) {
  return o.policy.acks.hold_for.count_ns() + std::max(r.max_poll_gap_ns, r.max_wake_latency_ns) +
         2'000;
}

// Host 0 WRITEs to host 1, whose application behaves as `target`.
ProgressSimOptions writes_to(AppModel target, std::uint64_t seed) {
  ProgressSimOptions o;
  o.seed = seed;
  o.workload = Workload::kWrites;
  o.app[1] = target;
  return o;
}

// The longest an ACK may stay held when the application took the socket and then stopped
// polling: its lease (and slack) runs out, the thread takes over and holds the ACK, and wakes for
// it.
std::int64_t lease_hold_bound_ns(const ProgressSimOptions& o, const ProgressSimResult& r) {
  return (o.policy.app_lease + o.policy.lease_slack).count_ns() +
         o.policy.acks.hold_for.count_ns() + r.max_wake_latency_ns + 2'000;
}

TEST(ProgressSim, PollingPingPongKeepsTheSocketAndSendsEveryAckBehindTheNextRequest) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    ProgressSimOptions o;
    o.seed = seed;
    o.policy.acks.defer = false;  // the hold alone (deferring: below)
    const ProgressSimResult r = run_ok(o);
    for (int h = 0; h < 2; ++h) {
      SCOPED_TRACE(describe(o) + " host " + std::to_string(h));
      const HostReport& x = r.host[h];
      EXPECT_EQ(x.messages_received, o.messages);
      // The application took the socket once and kept it: its rounds renew the lease before it
      // ends, so the thread never took it back; it only looked at the lease now and then.
      EXPECT_EQ(x.sched.handoffs_to_app, 1u);
      EXPECT_EQ(x.sched.lease_expiries, 0u);
      EXPECT_LE(x.thread_wakeups, 2 + r.simulated_ns / o.policy.lease_slack.count_ns());
      EXPECT_EQ(x.thread_spin_ns, 0);
      // Every ACK but the very last rode behind the answer: no flush carried only an ACK.
      EXPECT_GT(x.engine.tx_acks_held, 0u);
      EXPECT_LE(x.lone_ack_flushes, 1u);
      EXPECT_LE(x.max_ack_held_ns, hold_bound_ns(o, r));
    }
  }
}

TEST(ProgressSim, PollingModeWithoutThreadsHoldsAcksTheSameWay) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    ProgressSimOptions o;
    o.seed = seed;
    o.policy.acks.defer = false;  // the hold alone (deferring: below)
    o.thread[0] = o.thread[1] = false;
    const ProgressSimResult r = run_ok(o);
    for (int h = 0; h < 2; ++h) {
      SCOPED_TRACE(describe(o) + " host " + std::to_string(h));
      EXPECT_EQ(r.host[h].sched.thread_rounds, 0u);
      EXPECT_LE(r.host[h].lone_ack_flushes, 1u);
      EXPECT_LE(r.host[h].max_ack_held_ns, hold_bound_ns(o, r));
    }
  }
}

// While the application polls, its rounds renew the lease in memory and the thread, off the
// socket, wakes only when the lease it slept on (plus lease_slack) ends, finds it renewed and
// sleeps again: about once per app_lease + lease_slack, never taking a round. Without the
// slack it looks once per lease: the slack is what spaces the looks (each costs the
// application's CPU a timer interrupt and a context switch).
TEST(ProgressSim, APollingApplicationsThreadLooksAtTheLeaseOncePerLeaseAndSlack) {
  for (std::uint64_t seed = 1; seed <= 2; ++seed) {
    ProgressSimOptions o;
    o.seed = seed;
    o.messages = 1000;
    const ProgressSimResult r = run_ok(o);
    SCOPED_TRACE(describe(o));
    ASSERT_GT(o.policy.lease_slack.count_ns(), 0);
    const std::int64_t period = (o.policy.app_lease + o.policy.lease_slack).count_ns();
    ASSERT_GT(r.simulated_ns, 4 * period);  // long enough to look several times
    for (int h = 0; h < 2; ++h) {
      const HostReport& x = r.host[h];
      EXPECT_EQ(x.sched.lease_expiries, 0u);
      EXPECT_LE(x.sched.thread_rounds, 1u);  // before the application's first round
      // Each look but the first (the application's first round) found the lease renewed.
      EXPECT_GE(x.sched.lease_renewed + 1, x.thread_wakeups);
      EXPECT_GE(x.thread_wakeups, static_cast<std::uint64_t>(r.simulated_ns / period) - 1);
      EXPECT_LE(x.thread_wakeups,
                static_cast<std::uint64_t>(r.simulated_ns / o.policy.lease_slack.count_ns()) + 2);
    }
    ProgressSimOptions tight = o;
    tight.policy.lease_slack = Duration::zero();
    const ProgressSimResult t = run_ok(tight);
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(t.host[h].sched.lease_expiries, 0u);
      EXPECT_GE(t.host[h].thread_wakeups,
                static_cast<std::uint64_t>(t.simulated_ns / o.policy.app_lease.count_ns()) / 2);
    }
  }
}

TEST(ProgressSim, WithoutAckHoldingEveryAckLeavesAlone) {
  ProgressSimOptions o;
  o.policy.acks.hold = false;
  const ProgressSimResult r = run_ok(o);
  for (int h = 0; h < 2; ++h) {
    EXPECT_EQ(r.host[h].engine.tx_acks_held, 0u);
    EXPECT_GT(r.host[h].lone_ack_flushes, o.messages / 2);
  }
}

// A sleeping application (ibv_rc_pingpong -e): it blocks for completion events, the thread
// owns the socket meanwhile, and each post's transmit round and re-arm hand it back and forth
// explicitly: never by the lease. The thread holds no ACK while the application is blocked
// (nothing can come before the thread wakes it): every ACK leaves at once, alone, and the
// thread never sleeps on a hold's timer. The one exception: a completion that came between the
// event and the re-arm fires the re-arm at once (as ConnectX's arming does), and the application,
// awake for that event, is not blocked; the thread may hold an ACK for it then, never more than
// one per such event.
TEST(ProgressSim, BlockingApplicationsHandTheSocketOverExplicitly) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    ProgressSimOptions o;
    o.seed = seed;
    o.app[0] = o.app[1] = AppModel::kBlocking;
    const ProgressSimResult r = run_ok(o);
    for (int h = 0; h < 2; ++h) {
      SCOPED_TRACE(describe(o) + " host " + std::to_string(h));
      const HostReport& x = r.host[h];
      EXPECT_EQ(x.messages_received, o.messages);
      EXPECT_EQ(x.sched.lease_expiries, 0u);
      EXPECT_GE(x.sched.handoffs_to_thread, o.messages);
      EXPECT_GT(x.sched.thread_rounds, o.messages);  // the thread received every message
      EXPECT_LE(x.engine.tx_acks_held, x.cq_events_at_arm);
      EXPECT_EQ(x.lone_ack_flushes + x.engine.tx_acks_held, o.messages);
    }
  }
}

// The thread spins after work while the application is blocked in the library; with a polling
// application it never spins (it may be polling on the thread's CPU).
TEST(ProgressSim, TheThreadSpinsOnlyForABlockedApplication) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    ProgressSimOptions o;
    o.seed = seed;
    o.app[0] = AppModel::kBlocking;
    o.app[1] = AppModel::kPolling;
    const ProgressSimResult r = run_ok(o);
    SCOPED_TRACE(describe(o));
    EXPECT_GT(r.host[0].thread_spin_ns, 0);
    EXPECT_EQ(r.host[1].thread_spin_ns, 0);
    o.policy.blocked_app_spin = Duration::zero();
    EXPECT_EQ(run_ok(o).host[0].thread_spin_ns, 0);
    EXPECT_EQ(run_ok(o).host[1].thread_spin_ns, 0);
  }
}

// A passive target's thread spins between packets that come in a stream (its sleeps end
// within stream_gap), and never with stream_gap zero. (Without ACK holding, so that its
// sleeps end by the next WRITE, not by a held ACK falling due.)
TEST(ProgressSim, AnIdleTargetsThreadSpinsForAStream) {
  int streams = 0;  // seeds whose machine is fast enough for a stream
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    ProgressSimOptions o = writes_to(AppModel::kIdle, seed);
    o.policy.acks.hold = false;
    const ProgressSimResult r = run_ok(o);
    SCOPED_TRACE(describe(o));
    // The next WRITE comes a round trip, a poll gap and a wake-up after the ACK at most.
    const std::int64_t gap_ns = 2 * r.link_delay_ns + r.max_poll_gap_ns + r.max_wake_latency_ns;
    if (gap_ns + 2'000 < o.policy.stream_gap.count_ns()) {
      EXPECT_GT(r.host[1].thread_spin_ns, 0);
      ++streams;
    }
    o.policy.stream_gap = Duration::zero();
    EXPECT_EQ(run_ok(o).host[1].thread_spin_ns, 0);
  }
  EXPECT_GT(streams, 0);
}

// A passive target whose application does nothing after one WRITE of its own: its thread
// receives every WRITE and sends the ACKs it held once they are due (no request comes).
TEST(ProgressSim, IdleTargetsThreadSendsTheAcksItHolds) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const ProgressSimOptions o = writes_to(AppModel::kIdle, seed);
    const ProgressSimResult r = run_ok(o);
    SCOPED_TRACE(describe(o));
    const HostReport& t = r.host[1];
    EXPECT_GT(t.engine.tx_acks_held, 0u);
    EXPECT_GT(t.sched.thread_rounds, o.messages);
    // Its one WRITE's transmit round leased it the socket once; the lease ran out once.
    EXPECT_EQ(t.sched.lease_expiries, 1u);
    // The thread sleeps until the held ACK is due, and wakes for it.
    EXPECT_LE(t.max_ack_held_ns, lease_hold_bound_ns(o, r));
  }
}

// A WRITE target whose application polls but never answers (it did one WRITE of its own, so
// its QP looks like a ping-pong side): the first WRITE's ACK is held until its hold runs out;
// from then on the QP knows nobody answers WRITEs and sends their ACKs at once. Before, every
// WRITE's ACK waited out the hold, and the initiator, which posts each WRITE after the last
// completed, paid it on every message: the run took at least messages x ack_hold (10 ms for
// 100 WRITEs; 0.8-6.2 ms now). Now it takes at most one hold (and a lease) more than the same
// run without holding.
TEST(ProgressSim, AWriteTargetThatNeverAnswersHoldsOneAck) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    for (const AppModel target : {AppModel::kPolling, AppModel::kIdle}) {
      ProgressSimOptions o = writes_to(target, seed);
      SCOPED_TRACE(describe(o));
      const ProgressSimResult r = run_ok(o);
      EXPECT_EQ(r.host[1].acks_held_unanswered, 1u);
      ProgressSimOptions no_hold = o;
      no_hold.policy.acks.hold = false;
      const ProgressSimResult base = run_ok(no_hold);
      EXPECT_EQ(base.host[1].acks_held_unanswered, 0u);
      EXPECT_LE(r.simulated_ns, base.simulated_ns + o.policy.acks.hold_for.count_ns() +
                                    (o.policy.app_lease + o.policy.lease_slack).count_ns() +
                                    r.max_wake_latency_ns + r.max_poll_gap_ns + 10'000);
      EXPECT_LT(r.simulated_ns, std::int64_t{o.messages} * o.policy.acks.hold_for.count_ns());
    }
  }
}

// Hand-off: an application that polls and then blocks hands the socket to the thread at once;
// one that polls and then goes away without a word keeps it until its lease ends, once. The
// blocking side's ACKs ride with its requests while it polls and leave alone once it blocks
// (the one at the switch too); the polling side's all ride.
TEST(ProgressSim, AnApplicationThatBlocksHandsOverAtOnce) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    ProgressSimOptions o;
    o.seed = seed;
    o.policy.acks.defer = false;  // the hold alone (deferring: below)
    o.app[1] = AppModel::kPollThenBlock;
    const ProgressSimResult r = run_ok(o);
    SCOPED_TRACE(describe(o));
    EXPECT_EQ(r.host[1].sched.lease_expiries, 0u);
    EXPECT_GE(r.host[1].sched.handoffs_to_thread, o.messages - o.switch_after);
    EXPECT_GE(r.host[1].lone_ack_flushes, o.messages - o.switch_after);
    EXPECT_LE(r.host[1].lone_ack_flushes, o.messages - o.switch_after + 1);
    EXPECT_GT(r.host[1].engine.tx_acks_held, 0u);
    EXPECT_LE(r.host[0].lone_ack_flushes, 1u);
  }
}

TEST(ProgressSim, AnApplicationThatStopsSilentlyLosesTheSocketWhenItsLeaseEnds) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    const ProgressSimOptions o = writes_to(AppModel::kPollThenStop, seed);
    const ProgressSimResult r = run_ok(o);
    SCOPED_TRACE(describe(o));
    const HostReport& t = r.host[1];
    EXPECT_EQ(t.sched.lease_expiries, 1u);
    EXPECT_EQ(t.sched.handoffs_to_thread, 0u);
    EXPECT_LE(t.max_ack_held_ns, lease_hold_bound_ns(o, r));
  }
}

// Deferred ACKs (the default): in a ping-pong whose applications post their next message
// without waiting for the last one's completion, the ACK a host owes stays behind its answer
// when that answer is one packet (AckPolicyConfig::defer), so most turns carry no ACK at all.
// It leaves with a later answer once it covers kMaxPsnsBehindADeferredAck PSNs, and the run's
// oracle sees no retransmission: no ACK came later than the peer's ACK timeout. Without
// deferring every message's ACK is sent (the tests above). Messages of 1-3 packets: the ACK
// follows a multi-packet answer as before, so fewer are deferred.
// Hosts that ask for the completion of every 64th SEND only (UCX's rc_verbs) and do not wait.
TEST(ProgressSim, APingPongThatDoesNotWaitForCompletionsDefersItsAcks) {
  for (const std::uint32_t max_message : {1000u, 3000u}) {
    for (const bool threads : {true, false}) {
      for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
        ProgressSimOptions o;
        o.seed = seed;
        o.max_message = max_message;
        o.signal_every[0] = o.signal_every[1] = 64;
        o.thread[0] = o.thread[1] = threads;
        const ProgressSimResult r = run_ok(o);
        for (int h = 0; h < 2; ++h) {
          SCOPED_TRACE(describe(o) + " host " + std::to_string(h) + ", messages up to " +
                       std::to_string(max_message) + " bytes");
          const HostReport& x = r.host[h];
          EXPECT_EQ(x.messages_received, o.messages);
          EXPECT_EQ(x.sched.lease_expiries, 0u);
          if (max_message <= 1000) {
            EXPECT_GE(x.engine.tx_acks_deferred, o.messages / 2);
            EXPECT_LE(x.acks_sent, o.messages / 4);
          } else {
            EXPECT_GT(x.engine.tx_acks_deferred, 0u);
            EXPECT_LT(x.acks_sent, o.messages);
          }
          // At most the last ACK, which the peer waits for at the end of the run.
          EXPECT_LE(x.acks_deferred_unanswered, 1u);
        }
      }
    }
  }
}

// Hosts that ask for the completion of every SEND are taken to wait for completions, and so
// their peers: no ACK is deferred behind a signaled request, whether the hosts then wait for the
// completion (a send queue of one, perftest's latency tests) or not. A run that defers nothing
// is the run without deferring, turn for turn.
TEST(ProgressSim, AHostThatSignalsEverySendDefersNoAck) {
  for (const Workload w : {Workload::kPingPong, Workload::kPingPongAfterCompletion}) {
    for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
      ProgressSimOptions o;
      o.seed = seed;
      o.workload = w;
      SCOPED_TRACE(describe(o) + (w == Workload::kPingPong ? " ping-pong" : " after completion"));
      const ProgressSimResult r = run_ok(o);
      const ProgressSimResult base = run_ok_without_deferring(o);
      for (int h = 0; h < 2; ++h) {
        EXPECT_EQ(r.host[h].messages_received, o.messages);
        EXPECT_EQ(r.host[h].engine.tx_acks_deferred, 0u) << "host " << h;
        EXPECT_EQ(r.host[h].acks_deferred_unanswered, 0u) << "host " << h;
        EXPECT_EQ(r.host[h].acks_sent, base.host[h].acks_sent) << "host " << h;
      }
      EXPECT_EQ(r.simulated_ns, base.simulated_ns);
    }
  }
}

// A host that does not wait (every 64th SEND signaled) and a peer that waits for every
// completion (a send queue of one): the first ACK the first host defers leaves alone when its
// hold runs out, and that host stops deferring that kind of ACK; it tries again after 64 ACKs
// (then 128, ...), so 100 messages cost at most two holds over the same run without deferring.
// The waiting peer signals every SEND, so it defers nothing itself.
TEST(ProgressSim, APeerThatWaitsForEveryCompletionStopsTheDeferring) {
  for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
    ProgressSimOptions o;
    o.seed = seed;
    o.workload = Workload::kPingPongAfterCompletion;
    o.signal_every[0] = 64;
    SCOPED_TRACE(describe(o));
    const ProgressSimResult r = run_ok(o);
    const ProgressSimResult base = run_ok_without_deferring(o);
    for (int h = 0; h < 2; ++h) {
      EXPECT_EQ(r.host[h].messages_received, o.messages);
      EXPECT_EQ(base.host[h].acks_deferred_unanswered, 0u);
    }
    const std::uint64_t stalls = r.host[0].acks_deferred_unanswered;
    EXPECT_GE(stalls, 1u);
    EXPECT_LE(stalls, 2u);
    EXPECT_EQ(r.host[1].engine.tx_acks_deferred, 0u);
    EXPECT_LE(r.simulated_ns, base.simulated_ns +
                                  static_cast<std::int64_t>(stalls) * hold_bound_ns(o, r) +
                                  r.max_poll_gap_ns + r.max_wake_latency_ns + 10'000);
  }
}

// A stream both ways, each host keeping up to `window` WRITEs outstanding in its send queue of
// 16: with deferring on, a host may hold an ACK while it has several requests outstanding (the
// peer's deferred ACKs need that), but here each host's application may be waiting for a
// completion that the other's held ACK carries. The first such hold that runs out stops those
// holds, and they are tried again after 64 of the peer's messages, then 128: in 300 messages at
// most four holds per host run out beyond the run without deferring (those three, and one at
// the end, when a host that has sent all it had still holds the peer's last ACK), and the run is
// longer by at most those holds. Without the learning, 9-23 holds per host ran out.
TEST(ProgressSim, AStreamBothWaysWithASmallWindowStopsHoldingAcksBehindIt) {
  for (const std::uint32_t window : {2u, 8u, 16u}) {
    for (const std::uint32_t every : {1u, 4u}) {
      for (const bool threads : {true, false}) {
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {
          ProgressSimOptions o;
          o.seed = seed;
          o.workload = Workload::kStreams;
          o.messages = 300;
          o.window = window;
          o.signal_every[0] = o.signal_every[1] = every;
          o.thread[0] = o.thread[1] = threads;
          SCOPED_TRACE(describe(o) + " window " + std::to_string(window) + ", every " +
                       std::to_string(every) + " signaled");
          const ProgressSimResult r = run_ok(o);
          const ProgressSimResult base = run_ok_without_deferring(o);
          std::uint64_t extra = 0;
          for (int h = 0; h < 2; ++h) {
            const HostReport& x = r.host[h];
            const std::uint64_t stalls = x.acks_held_unanswered + x.acks_deferred_unanswered;
            const std::uint64_t base_stalls =
                base.host[h].acks_held_unanswered + base.host[h].acks_deferred_unanswered;
            EXPECT_LE(stalls, base_stalls + 4) << "host " << h;
            extra += stalls > base_stalls ? stalls - base_stalls : 0;
          }
          EXPECT_LE(r.simulated_ns, base.simulated_ns +
                                        static_cast<std::int64_t>(extra) * hold_bound_ns(o, r) +
                                        r.max_poll_gap_ns + r.max_wake_latency_ns + 10'000);
        }
      }
    }
  }
}

// Issue 43: UCX stops polling an interface that has nothing to do (its adaptive progress): it
// polls the interface's CQ empty, then more of the device's CQs (the drop-in runs a progress round
// for each empty poll, and a round may complete work into the first CQ), then arms the first CQ
// without polling it again and sleeps until the completion event. A completion that came in
// between must wake it, as on ConnectX, whose arming carries the consumer index: an arming that
// finds one queued fires at once. With IBTA's "next completion" alone, the first reply that lands
// in that window stops a ping-pong for good (Open MPI's alltoall over ud_verbs hung so), with
// nothing outstanding and nothing lost.
TEST(ProgressSim, AnApplicationThatArmsAfterAnEmptyPollIsWokenByWhatCameBetween) {
  for (const Workload w : {Workload::kPingPong, Workload::kStreams}) {
    for (std::uint64_t seed = 1; seed <= kSeeds; ++seed) {
      ProgressSimOptions o;
      o.seed = seed;
      o.workload = w;
      o.app[0] = o.app[1] = AppModel::kPollThenArm;
      const ProgressSimResult r = run_ok(o);
      if (w == Workload::kPingPong) {
        EXPECT_EQ(r.host[0].messages_received, o.messages) << describe(o);
        EXPECT_EQ(r.host[1].messages_received, o.messages) << describe(o);
      }
    }
  }
}

// The canary: a policy that holds ACKs past the peer's ACK timeout (16.8 ms here) must be
// caught by the run's oracle (the requester retransmits).
TEST(ProgressSim, CanaryAHoldLongerThanTheAckTimeoutIsCaught) {
  ProgressSimOptions o;
  o.workload = Workload::kWrites;
  o.app[1] = AppModel::kIdle;
  o.policy.acks.hold_for = Duration::ms(20);
  const ProgressSimResult r = run_progress_sim(o);
  EXPECT_FALSE(r.ok);
  EXPECT_NE(r.failure.find("retransmitted"), std::string::npos) << r.failure;
  EXPECT_NE(r.failure.find("seed 1 "), std::string::npos) << r.failure;
}

// Under 1% loss each way, every workload and application model still finishes with every byte
// and every completion: whatever the hold, the deferral and the scheduler do with an ACK, a lost
// packet is resent by a timer that the owner of the socket runs.
TEST(ProgressSim, UnderLossEveryWorkloadAndApplicationModelFinishes) {
  for (const Workload w : {Workload::kPingPong, Workload::kWrites,
                           Workload::kPingPongAfterCompletion, Workload::kStreams}) {
    for (const AppModel m : {AppModel::kPolling, AppModel::kBlocking, AppModel::kPollThenBlock,
                             AppModel::kBlockedWaiterOtherPoster, AppModel::kPollThenArm}) {
      for (const std::uint32_t signal : {1u, 64u}) {
        ProgressSimOptions o;
        o.seed = 1;
        o.workload = w;
        o.app[0] = o.app[1] = m;
        o.signal_every[0] = o.signal_every[1] = signal;
        o.messages = 120;
        o.loss = fault::Ratio{1, 100};
        SCOPED_TRACE("workload " + std::to_string(static_cast<int>(w)) + ", signal every " +
                     std::to_string(signal));
        // run_ok's oracles: every message and WRITE landed intact, every WR completed, within
        // the limit. A ping-pong's hosts also count what they received.
        const ProgressSimResult r = run_ok(o);
        if (w == Workload::kPingPong || w == Workload::kPingPongAfterCompletion) {
          EXPECT_EQ(r.host[0].messages_received, o.messages) << describe(o);
          EXPECT_EQ(r.host[1].messages_received, o.messages) << describe(o);
        }
      }
    }
  }
}

// The stall that rping met under loss (the soak's, and CI's rping_selective_repeat_nosr): its CQ
// thread blocks in get_cq_event, which hands the socket to the progress thread; the progress
// thread, with nothing outstanding, sleeps on the socket with no timeout; then rping's main
// thread posts, and that round takes the socket back. Were the request or its ACK lost, no
// packet would come to wake the progress thread, nobody would run the ACK timer, and the
// request would stay outstanding for ever, with no retransmission and no retry-exceeded. The
// round that takes the socket must wake a thread asleep on it past the lease.
TEST(ProgressSim, ARequestPostedWhileTheWaiterIsBlockedIsResentWhenLost) {
  for (const Workload w : {Workload::kPingPong, Workload::kWrites}) {
    for (std::uint64_t seed = 1; seed <= 6; ++seed) {
      ProgressSimOptions o;
      o.seed = seed;
      o.workload = w;
      o.app[0] = o.app[1] = AppModel::kBlockedWaiterOtherPoster;
      o.messages = 120;
      o.loss = fault::Ratio{1, 100};
      const ProgressSimResult r = run_ok(o);
      if (w == Workload::kPingPong) {
        EXPECT_EQ(r.host[0].messages_received, o.messages) << describe(o);
        EXPECT_EQ(r.host[1].messages_received, o.messages) << describe(o);
      }
    }
  }
}

}  // namespace
}  // namespace uroce::sim
