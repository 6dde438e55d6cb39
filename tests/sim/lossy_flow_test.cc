// One flow under random loss (sim/lossy_flow.h): with the loss recovery of transport/recovery.cc
// (adaptive RTO, tail-loss probe, BDP window), a 10 Gb/s flow with 20 us of propagation RTT keeps
// most of its loss-free goodput at 0.1% and 1% loss and several times IBTA's recovery (the full
// ACK timeout, a 128-PSN window) at 1% and 5%. Every WRITE completes once, in order, its data in
// place (the scenario's oracles). Figures: bench/lossy_flow.cc.
#include "sim/lossy_flow.h"

#include <gtest/gtest.h>

#include <cstdio>

namespace uroce::sim {
namespace {

using Cc = DeviceConfig::CongestionControl;

LossyFlowResult run(std::uint32_t per_100k, bool adaptive, Cc cc = Cc::kNone) {
  LossyFlowOptions o;
  o.loss = fault::Ratio{per_100k, 100'000};
  o.adaptive_recovery = adaptive;
  o.congestion_control = cc;
  o.duration_ns = 100'000'000;
  LossyFlowResult r = run_lossy_flow(o);
  std::printf(
      "loss %u/100000 %s, cc %s: goodput %.3f Gb/s, retransmitted %.3f, ACK timeouts %llu, "
      "adaptive %llu, probes %llu, window %u\n",
      per_100k, adaptive ? "adaptive" : "IBTA", congestion_control_name(cc), r.goodput_bps / 1e9,
      r.retransmitted_share, static_cast<unsigned long long>(r.timeouts),
      static_cast<unsigned long long>(r.adaptive_timeouts),
      static_cast<unsigned long long>(r.tail_probes), r.send_window);
  return r;
}

TEST(LossyFlow, WithoutLossTheFlowFillsTheLinkAndRetransmitsNothing) {
  const LossyFlowResult r = run(0, true);
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_GT(r.goodput_bps, 0.95e10);
  EXPECT_EQ(r.retransmitted_packets, 0u);
  EXPECT_EQ(r.timeouts + r.adaptive_timeouts + r.tail_probes, 0u);
  // Its BDP is below 128 PSNs, but nothing is lost: the window stays rxe's.
  EXPECT_EQ(r.send_window, 128u);
}

struct Case {
  std::uint32_t per_100k;
  double least_share;  // of the loss-free goodput, with the recovery
  double least_gain;   // over IBTA's recovery
};

TEST(LossyFlow, TheRecoveryKeepsGoodputUnderRandomLoss) {
  const LossyFlowResult clean = run(0, true);
  ASSERT_TRUE(clean.ok) << clean.failure;
  for (const Case c : {Case{100, 0.95, 1.03}, Case{1000, 0.7, 3}, Case{5000, 0.15, 10}}) {
    const LossyFlowResult ours = run(c.per_100k, true);
    const LossyFlowResult ibta = run(c.per_100k, false);
    ASSERT_TRUE(ours.ok) << ours.failure;
    ASSERT_TRUE(ibta.ok) << ibta.failure;
    EXPECT_GE(ours.goodput_bps, c.least_share * clean.goodput_bps) << c.per_100k;
    EXPECT_GE(ours.goodput_bps, c.least_gain * ibta.goodput_bps) << c.per_100k;
    EXPECT_LT(ours.retransmitted_share, ibta.retransmitted_share) << c.per_100k;
    // Nothing waits for the 67 ms IBTA timeout.
    EXPECT_EQ(ours.timeouts, 0u) << c.per_100k;
    EXPECT_EQ(ibta.adaptive_timeouts + ibta.tail_probes, 0u) << c.per_100k;
    if (c.per_100k >= 1000) {
      EXPECT_GT(ours.tail_probes, 0u) << c.per_100k;
    }
  }
}

// With the device's default congestion control (dcqcn-aimd), whose loss rule cuts the window at
// each loss as Reno does, random loss costs more than the recovery alone loses, and 1% still
// keeps at least 0.7 of the loss-free goodput (issue 39's floor), 0.1% at least 0.85.
TEST(LossyFlow, TheDefaultCongestionControlKeepsMostOfTheGoodputUnderRandomLoss) {
  const Cc cc = DeviceConfig{}.congestion_control;
  const LossyFlowResult clean = run(0, true, cc);
  ASSERT_TRUE(clean.ok) << clean.failure;
  EXPECT_GT(clean.goodput_bps, 0.95e10);
  EXPECT_EQ(clean.retransmitted_packets, 0u);
  for (const auto& [per_100k, least_share] : {std::pair{100u, 0.85}, std::pair{1000u, 0.7}}) {
    const LossyFlowResult r = run(per_100k, true, cc);
    ASSERT_TRUE(r.ok) << r.failure;
    EXPECT_GE(r.goodput_bps, least_share * clean.goodput_bps) << per_100k;
    EXPECT_EQ(r.timeouts, 0u) << per_100k;
  }
}

// `ib_write_bw -q 4` into a receiver on a loaded host (issue 39: with the recovery on, under
// ThreadSanitizer, it ended once in retry-exceeded): four QPs of 64 KiB WRITEs, 128 outstanding
// each (2048 PSNs, so the windows hold them: the device's congestion control's, under the BDP
// window's 1024), into a receiver whose process spends 20 us on each frame and is descheduled
// for 60 ms of every 70, behind a socket buffer of 8 MiB of frames that the four windows
// overfill. No loss in the network: the receiver's socket drops. This does NOT reproduce CI's
// retry-exceeded (it passes without the restart after a stall too): it holds the oracles and the
// retry budget under socket drops and IBTA timeouts, and is the bed for the reproduction.
LossyFlowResult into_descheduled_receiver() {
  LossyFlowOptions o;
  o.qps = 4;
  o.window = 128;
  o.adaptive_recovery = true;
  o.congestion_control = DeviceConfig{}.congestion_control;
  o.receiver_socket_bytes = 8u << 20;
  o.receiver_frame_cost_ns = 20'000;
  o.receiver_deschedule_period_ns = 70'000'000;
  o.receiver_deschedule_off_ns = 60'000'000;
  o.duration_ns = 1'000'000'000;
  o.warmup_ns = 100'000'000;
  LossyFlowResult r = run_lossy_flow(o);
  std::printf(
      "descheduled receiver: %s; goodput %.3f Gb/s, completed %llu, retransmitted %.3f, "
      "ACK timeouts %llu, adaptive %llu, probes %llu, socket drops %llu\n",
      r.ok ? "ok" : r.failure.c_str(), r.goodput_bps / 1e9,
      static_cast<unsigned long long>(r.completed), r.retransmitted_share,
      static_cast<unsigned long long>(r.timeouts),
      static_cast<unsigned long long>(r.adaptive_timeouts),
      static_cast<unsigned long long>(r.tail_probes),
      static_cast<unsigned long long>(r.socket_drops));
  return r;
}

TEST(LossyFlow, FourQpsIntoADescheduledReceiverKeepTheirRetries) {
  const LossyFlowResult r = into_descheduled_receiver();
  ASSERT_TRUE(r.ok) << r.failure;
  EXPECT_EQ(r.retry_exceeded, 0u);
  EXPECT_GT(r.socket_drops, 0u);  // the windows did overfill its socket
  EXPECT_GT(r.timeouts, 0u);      // and the IBTA timer fired while it was not running
}

}  // namespace
}  // namespace uroce::sim
