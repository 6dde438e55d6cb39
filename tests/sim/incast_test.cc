// Issue 39's incast in the simulator (sim/incast.h): N senders into one receiver through a switch
// port with ECN marking. With DCQCN the queue stays near the marking thresholds, nothing is
// dropped once the rates have converged, the port is kept busy and the flows share it fairly;
// without congestion control the same runs overflow the port's buffer.
#include "sim/incast.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

namespace uroce::sim {
namespace {

using Cc = DeviceConfig::CongestionControl;

IncastOptions into_one(std::uint32_t senders, std::uint64_t buffer_bytes, bool dcqcn) {
  IncastOptions o;
  o.senders = senders;
  o.port_buffer_bytes = buffer_bytes;
  o.cc = dcqcn ? Cc::kDcqcn : Cc::kNone;
  return o;
}

IncastOptions eight_into_one(bool dcqcn) { return into_one(8, 256 * 1024, dcqcn); }

TEST(Incast, WithoutCongestionControlTheReceiversPortOverflows) {
  const IncastResult r = run_incast(eight_into_one(false));
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_GT(r.drops, 0u);
  EXPECT_GT(r.drops_measured, 0u);  // not only while the flows start: all along
  EXPECT_EQ(r.ecn_marked, 0u);      // nothing is ECN-capable
  EXPECT_EQ(r.cnps_sent, 0u);
  std::uint64_t retransmitted = 0;
  for (const IncastFlow& f : r.flows) retransmitted += f.retransmitted_packets;
  EXPECT_GT(retransmitted, 0u);
}

// The loop closes: the port marks the senders' ECN-capable packets, the receiver answers with
// CNPs, and each reaches the sender it names, several senders among them. (How well DCQCN then
// shares the port is measured, not yet asserted: docs/REAL_NETWORK.md, "The simulator's incast".)
TEST(Incast, WithDcqcnMarksBecomeCnpsThatReachTheSenders) {
  const IncastResult r = run_incast(eight_into_one(true));
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_GT(r.ecn_marked, 0u);
  EXPECT_GT(r.cnps_sent, 0u);
  std::uint64_t heard = 0;
  for (const IncastFlow& f : r.flows) heard += f.cnps_received;
  EXPECT_EQ(heard, r.cnps_sent);  // no loss on the way back: each CNP reached its sender
  std::size_t senders_that_heard = 0;
  for (const IncastFlow& f : r.flows) senders_that_heard += f.cnps_received > 0 ? 1 : 0;
  EXPECT_GT(senders_that_heard, 1u);
}

// A buffer below the two senders' windows (128 PSNs of 4 KiB each).
IncastOptions two_into_one(bool dcqcn) { return into_one(2, 512 * 1024, dcqcn); }

// Without congestion control the two senders overflow the port. (Since the loss recovery's
// window follows the bandwidth-delay product, floored at kMinBdpWindow after a loss, its go-back-N
// settles them: seed 1 drops 133 frames before convergence and none after, at utilisation 1.0.)
TEST(Incast, TwoSendersWithoutCongestionControlDrop) {
  const IncastResult r = run_incast(two_into_one(false));
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_GT(r.drops, 0u);
}

// The same two senders with DCQCN, the port marking on dequeue: nothing is dropped, before or
// after convergence, the port is kept busy and the two share it. (Not yet issue 39's whole
// acceptance: the p99 queue is above Kmax, and seed 1's Jain is 0.945, seeds 2-5 0.96-0.99:
// docs/SIMULATION.md, "Incast"; the acceptance tests below run at path MTU 1024.)
TEST(Incast, TwoSendersWithDcqcnDropNothingAndShareEvenly) {
  const IncastResult r = run_incast(two_into_one(true));
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.drops, 0u);
  EXPECT_GT(r.cnps_sent, 0u);
  EXPECT_GE(r.jain, 0.9);
  EXPECT_GE(r.utilisation, 0.9);
  EXPECT_GE(r.goodput_share, 0.9 * r.goodput_ceiling);
}

// Marking on enqueue, the marks reach the senders a whole queue late: the two senders still
// drop nothing and share evenly, but their rates fall far below the port's and the queue stays
// near the buffer (docs/SIMULATION.md, "Incast").
TEST(Incast, TwoSendersWithDcqcnMarkingOnEnqueueLeaveThePortIdle) {
  IncastOptions o = two_into_one(true);
  o.ecn_mark_on_dequeue = false;
  const IncastResult r = run_incast(o);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.drops, 0u);
  EXPECT_GE(r.jain, 0.95);
  EXPECT_LT(r.utilisation, 0.9);
  EXPECT_GT(r.queue_p99_bytes, 2 * o.ecn_kmax_bytes);
}

// Issue 39's acceptance scenario (docs/SIMULATION.md, "Incast"): path MTU 1024 (RoCE's on a
// standard 1500-byte Ethernet), marking from Kmin 5 KB to Kmax 100 KB, every packet above Kmax
// (Pmax 100%), a 512 KiB buffer, the transport's adaptive loss recovery and selective repeat
// between the uroce peers (the start may drop: a loss then costs a round trip, not 16.8 ms).
// Each sender keeps eight 64 KiB WRITEs outstanding: its transport window (128 PSNs) would fill
// the buffer without congestion control (below). With congestion control on, every QP runs the
// default rule, dcqcn-aimd (DCQCN's rate beside Aimd's window, cc/dcqcn_aimd.h). Measured from 5
// to 10 ms here, to keep CI cheap under ASan; the figures in docs/SIMULATION.md are from 10 to
// 20 ms (`uroce sim incast`'s default), seeds 1-16.
IncastOptions acceptance(std::uint32_t senders, std::uint64_t seed, bool cc_on) {
  IncastOptions o = into_one(senders, 512 * 1024, false);
  o.cc = cc_on ? Cc::kDcqcnAimd : Cc::kNone;
  o.seed = seed;
  o.duration_ns = 10'000'000;
  o.converge_ns = 5'000'000;
  o.mtu = 1024;
  o.ecn_kmin_bytes = 5'000;
  o.ecn_kmax_bytes = 100'000;
  o.ecn_pmax_percent = 100;
  o.adaptive_recovery = true;
  o.selective_repeat = true;
  return o;
}

void expect_acceptance(const IncastOptions& o) {
  const std::uint64_t seed = o.seed;
  const IncastResult r = run_incast(o);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.drops_measured, 0u) << "seed " << seed;
  EXPECT_LE(r.queue_p99_bytes, o.ecn_kmax_bytes) << "seed " << seed;
  EXPECT_GE(r.utilisation, 0.9) << "seed " << seed;
  EXPECT_GE(r.goodput_share, 0.9 * r.goodput_ceiling) << "seed " << seed;
  EXPECT_GE(r.jain, 0.95) << "seed " << seed;
  EXPECT_GT(r.cnps_sent, 0u);
}

// Measured from 3 to 6 ms, which seeds 1-16 meet too (Jain 0.988-1.000), to halve the test's
// cost under ASan (about 5 s of CPU).
TEST(Incast, DefaultRuleMeetsTheAcceptanceForTwoSenders) {
  for (std::uint64_t seed : {1u, 2u}) {
    IncastOptions o = acceptance(2, seed, true);
    o.duration_ns = 6'000'000;
    o.converge_ns = 3'000'000;
    expect_acceptance(o);
  }
}

// Seeds 1 and 2. Before a CNP cut DCQCN's rate only while the rate held the flow back
// (cc/dcqcn_aimd.h, on_cnp), the rates drifted apart under the window's steady marking: from 5 to
// 10 ms seed 2 had Jain 0.899 (seeds 1-16: 0.881-0.976, nine below 0.95); seed 1 had 0.933 from
// 10 to 20 ms. Seeds 1-16 meet it now (docs/SIMULATION.md, "Incast").
TEST(Incast, DefaultRuleMeetsTheAcceptanceForEightSenders) {
  for (std::uint64_t seed : {1u, 2u}) expect_acceptance(acceptance(8, seed, true));
}

// The same eight senders without congestion control overflow the buffer and share the port
// unevenly, the queue above Kmax. (From 10 to 20 ms they drop after convergence too: 214 frames
// on seed 1; from 5 to 10 ms the recovery's window after a loss has settled them for a while.)
TEST(Incast, WithoutCongestionControlTheAcceptanceFailsForEightSenders) {
  const IncastOptions o = acceptance(8, 1, false);
  const IncastResult r = run_incast(o);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_GT(r.drops, 0u);
  EXPECT_GT(r.queue_p99_bytes, o.ecn_kmax_bytes);
  EXPECT_LT(r.jain, 0.95);
}

// Two senders without it drop nothing (their two windows of 128 PSNs, about 200 KB, fit in the
// buffer) but keep the queue above Kmax: the acceptance fails on the p99 queue.
TEST(Incast, WithoutCongestionControlTheAcceptanceFailsForTwoSenders) {
  const IncastOptions o = acceptance(2, 1, false);
  const IncastResult r = run_incast(o);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_GT(r.queue_p99_bytes, o.ecn_kmax_bytes);
}

// 64 senders. DCQCN alone cannot hold the queue here with ConnectX's defaults: each of 64 flows
// hears a CNP only every 55 us, alpha settles near 0.02 and a cut takes under 1% off (cc test
// DcqcnReactionPoint.WithACnpEvery55usConnectXsAlphaSettlesNearTwoPercent), so the transport's
// windows, not the rates, pace the senders, and 64 windows of 128 PSNs are 16 times the buffer
// (docs/SIMULATION.md, "Incast", 64 senders). The default rule's window hears the marks (cc/aimd.h:
// DCTCP's cut by the share of echoed PSNs, once per round, with its one-PSN additive increase while
// the path marks) and holds the 64 windows near one PSN each, about 70 KB in flight. The WRITEs
// are 8 KiB: goodput counts whole WRITEs completed, and a flow's share (156 Mb/s) completes a
// 64 KiB WRITE only every 3.4 ms, too coarse to measure fairness over milliseconds. Measured from
// 4 to 7 ms to keep CI cheap; docs/SIMULATION.md has 10 to 20 ms.
IncastOptions sixty_four(bool cc_on) {
  IncastOptions o = acceptance(64, 1, cc_on);
  o.message_bytes = 8192;
  o.duration_ns = 7'000'000;
  o.converge_ns = 4'000'000;
  return o;
}

TEST(Incast, DefaultRuleMeetsTheAcceptanceForSixtyFourSenders) {
  expect_acceptance(sixty_four(true));
}

// The same 64 senders without congestion control overflow the buffer all along and share the
// port unevenly.
TEST(Incast, WithoutCongestionControlTheAcceptanceFailsForSixtyFourSenders) {
  const IncastOptions o = sixty_four(false);
  const IncastResult r = run_incast(o);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_GT(r.drops_measured, 0u);
  EXPECT_GT(r.queue_p99_bytes, o.ecn_kmax_bytes);
  EXPECT_LT(r.jain, 0.95);
}

// Aimd (cc/aimd.h) on a port that drops instead of marking: 1 Gb/s, a 256 KiB tail-drop buffer,
// no ECN. The WRITEs are one packet each: the requester asks for an ACK only on a message's last
// packet (and every 64), so a window narrower than a WRITE's packets (Aimd starts at 10; a 64 KiB
// WRITE is 16 at MTU 4096) waits for an ACK the responder never sends, until the ACK timeout.
IncastOptions aimd_into_tail_drop(std::uint32_t senders) {
  IncastOptions o = into_one(senders, 256 * 1024, false);
  o.cc = Cc::kAimd;
  o.link_bps = 1'000'000'000;
  o.ecn_kmin_bytes = 0;
  o.ecn_kmax_bytes = 0;
  o.message_bytes = 4096;
  o.window = 32;
  return o;
}

// Aimd follows loss alone by default (aimd.h, "Defaults"): it fills the buffer until it drops, as
// TCP does, so the port drops now and then all along. What must hold: the senders share the port
// evenly, keep it busy, and every loss is recovered without an ACK timeout.
void expect_aimd_shares(std::uint32_t senders) {
  const IncastResult r = run_incast(aimd_into_tail_drop(senders));
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.ecn_marked, 0u);
  EXPECT_EQ(r.cnps_sent, 0u);
  EXPECT_GT(r.drops, 0u);  // a loss-driven rule finds the buffer's end
  for (const IncastFlow& f : r.flows) EXPECT_EQ(f.timeouts, 0u);
  EXPECT_GE(r.jain, 0.95);
  EXPECT_GE(r.utilisation, 0.9);
}

TEST(Incast, AimdSharesATailDropPortWithoutEcnBetweenTwoSenders) { expect_aimd_shares(2); }

// Not met (docs/SIMULATION.md, "Incast"): of eight senders one keeps the port and seven lose a
// tail to a full buffer and wait out the 16.8 ms ACK timeout (13 timeouts, Jain 0.125, in a
// 20 ms run), without the adaptive recovery's timeout and tail probe.
TEST(Incast, DISABLED_AimdSharesATailDropPortWithoutEcnAmongEightSenders) { expect_aimd_shares(8); }

TEST(Incast, ASeedGivesTheSameRunEveryTime) {
  const IncastResult a = run_incast(eight_into_one(true));
  const IncastResult b = run_incast(eight_into_one(true));
  ASSERT_TRUE(a.ok && b.ok) << a.failure << b.failure;
  EXPECT_EQ(a.drops, b.drops);
  EXPECT_EQ(a.ecn_marked, b.ecn_marked);
  EXPECT_EQ(a.cnps_sent, b.cnps_sent);
  ASSERT_EQ(a.flows.size(), b.flows.size());
  for (std::size_t i = 0; i < a.flows.size(); ++i) {
    EXPECT_EQ(a.flows[i].goodput_bytes, b.flows[i].goodput_bytes) << i;
  }
}

TEST(Incast, JainsIndex) {
  EXPECT_DOUBLE_EQ(jain_index({1, 1, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(jain_index({1, 0, 0, 0}), 0.25);
  EXPECT_DOUBLE_EQ(jain_index({}), 0.0);
  EXPECT_NEAR(jain_index({3, 1}), 16.0 / 20.0, 1e-12);
}

}  // namespace
}  // namespace uroce::sim
