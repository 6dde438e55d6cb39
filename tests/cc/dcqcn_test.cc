// DCQCN's reaction and notification points (cc/dcqcn.h), fed events with explicit times. The
// figures below are worked by hand from the rules in dcqcn.h with a 10 Gb/s line: alpha starts at
// 1023/1024, g is 5/1024, a cut keeps max(1 - alpha/2, 50%) of the rate.
#include "cc/dcqcn.h"

#include <gtest/gtest.h>

#include <cmath>

namespace uroce::cc {
namespace {

const Instant kT0 = Instant::from_ns(1'000'000'000);

DcqcnParams ten_gig() {
  DcqcnParams p;
  p.line_rate_mbps = 10'000;
  p.rp_clamp_tgt_rate = true;
  p.rp_threshold = 5;
  p.np_min_time_between_cnps_us = 50;
  return p;
}

DcqcnParams connectx_ten_gig() {
  DcqcnParams p;
  p.line_rate_mbps = 10'000;
  p.rp_dce_tcp_rtt_us = 1'000'000'000;  // alpha frozen between CNPs
  return p;
}

TEST(DcqcnParams, TheDefaultsAreConnectXs) {
  const DcqcnParams p;
  EXPECT_FALSE(p.rp_clamp_tgt_rate);
  EXPECT_TRUE(p.rp_clamp_tgt_rate_ati);
  EXPECT_EQ(p.rp_threshold, 1u);
  EXPECT_EQ(p.rp_time_reset_us, 300);
  EXPECT_EQ(p.rp_byte_reset, 32767u);
  EXPECT_EQ(p.np_min_time_between_cnps_us, 4);
}

// Without clamping, the cuts of one congestion episode keep the target where the first put it,
// so fast recovery heads back to the rate before the episode.
TEST(DcqcnReactionPoint, UnclampedTheTargetStaysThroughCutsWithoutATimerIncrease) {
  DcqcnReactionPoint rp(connectx_ten_gig());
  ASSERT_TRUE(rp.on_cnp(kT0));
  EXPECT_EQ(rp.target_mbps(), 10'000u);
  ASSERT_TRUE(rp.on_cnp(kT0 + Duration::us(4)));
  EXPECT_EQ(rp.current_mbps(), 2504u);
  EXPECT_EQ(rp.target_mbps(), 10'000u);
  // A byte-counter increase does not clamp: the target stays.
  rp.on_sent(kT0 + Duration::us(10), 32767);
  EXPECT_EQ(rp.current_mbps(), (2504u + 10'000u + 1) / 2);
  ASSERT_TRUE(rp.on_cnp(kT0 + Duration::us(20)));
  EXPECT_EQ(rp.target_mbps(), 10'000u);
}

TEST(DcqcnReactionPoint, AfterATimerIncreaseTheNextCutClampsTheTarget) {
  DcqcnReactionPoint rp(connectx_ten_gig());
  ASSERT_TRUE(rp.on_cnp(kT0));          // 5004, target 10000
  rp.advance(kT0 + Duration::us(300));  // timer stage 1: halfway back, 7502
  ASSERT_EQ(rp.current_mbps(), 7502u);
  ASSERT_TRUE(rp.on_cnp(kT0 + Duration::us(301)));
  EXPECT_EQ(rp.target_mbps(), 7502u);
  EXPECT_LT(rp.current_mbps(), 7502u);
}

// A packet charged at a low rate goes as soon as a rate increase allows: the pacer asks again at
// the increase's time, and what it owes is owed at the new rate.
TEST(DcqcnReactionPoint, ARateIncreaseShortensThePacersWait) {
  DcqcnParams p = connectx_ten_gig();
  p.rp_min_dec_fac = 0;
  p.burst_bytes = 0;
  DcqcnReactionPoint rp(p);
  for (int i = 0; i < 40; ++i) rp.on_cnp(kT0 + Duration::us(4 * i));  // down to a few Mb/s
  const Instant t = kT0 + Duration::us(160);
  ASSERT_LT(rp.current_mbps(), 10u);
  rp.on_sent(t, 4096);  // the burst allowance: one packet
  rp.on_sent(t, 4096);  // milliseconds at this rate
  const Instant wait = rp.next_send_time(t, 4096);
  EXPECT_EQ(wait, kT0 + Duration::us(156 + 300));  // the timer's next event, not the debt's end
  rp.advance(wait);                                // fast recovery: halfway back to the line
  EXPECT_GT(rp.current_mbps(), 4'000u);
  EXPECT_LT(rp.next_send_time(wait, 4096), wait + Duration::us(20));
}

// The same with alpha frozen between CNPs (its decay has a test of its own), so that the cuts and
// stages below come out as worked by hand.
DcqcnParams ten_gig_steady_alpha() {
  DcqcnParams p = ten_gig();
  p.rp_dce_tcp_rtt_us = 1'000'000'000;
  return p;
}

TEST(DcqcnReactionPoint, WithoutACnpTheRateIsUnlimitedAndNothingIsPaced) {
  DcqcnReactionPoint rp(ten_gig());
  for (int i = 0; i < 1000; ++i) {
    const Instant t = kT0 + Duration::ns(i);
    EXPECT_EQ(rp.next_send_time(t, 4096), t);
    rp.on_sent(t, 4096);
  }
  EXPECT_FALSE(rp.limited());
  EXPECT_EQ(rp.counters().rp_rate_increases, 0u);
}

TEST(DcqcnReactionPoint, ACnpCutsByHalfAlphaAndRaisesAlpha) {
  DcqcnReactionPoint rp(ten_gig());
  ASSERT_TRUE(rp.on_cnp(kT0));
  // 10000 * (1 - 0.5 * 1023/1024) = 5004.88
  EXPECT_EQ(rp.current_mbps(), 5004u);
  EXPECT_EQ(rp.target_mbps(), 10'000u);
  // (1019/1024) * (1023/1024) + 5/1024
  EXPECT_NEAR(rp.alpha(), 0.9990282, 1e-6);
  EXPECT_EQ(rp.counters().rp_rate_cuts, 1u);
}

TEST(DcqcnReactionPoint, OneCutPerMonitorPeriod) {
  DcqcnReactionPoint rp(ten_gig_steady_alpha());
  ASSERT_TRUE(rp.on_cnp(kT0));
  EXPECT_FALSE(rp.on_cnp(kT0 + Duration::us(3)));
  EXPECT_EQ(rp.current_mbps(), 5004u);
  EXPECT_EQ(rp.counters().rp_cnp_ignored, 1u);
  ASSERT_TRUE(rp.on_cnp(kT0 + Duration::us(4)));
  // The target is the rate before the cut; 5004 * (1 - alpha/2) with alpha just below 1.
  EXPECT_EQ(rp.target_mbps(), 5004u);
  EXPECT_EQ(rp.current_mbps(), 2504u);
  EXPECT_EQ(rp.counters().rp_cnp_handled, 3u);
  EXPECT_EQ(rp.counters().rp_rate_cuts, 2u);
}

TEST(DcqcnReactionPoint, TheMinimumDecreaseFactorBoundsACut) {
  DcqcnParams p = ten_gig();
  p.rp_min_dec_fac = 80;  // a cut keeps at least 80%, however high alpha is
  DcqcnReactionPoint rp(p);
  ASSERT_TRUE(rp.on_cnp(kT0));
  EXPECT_EQ(rp.current_mbps(), 8000u);
}

TEST(DcqcnReactionPoint, NeverBelowTheMinimumRate) {
  DcqcnParams p = ten_gig();
  p.rp_min_rate_mbps = 3000;
  DcqcnReactionPoint rp(p);
  ASSERT_TRUE(rp.on_cnp(kT0));
  ASSERT_TRUE(rp.on_cnp(kT0 + Duration::us(10)));
  EXPECT_EQ(rp.current_mbps(), 3000u);
}

TEST(DcqcnReactionPoint, TimerStagesRecoverFastThenRaiseTheTargetAdditively) {
  DcqcnReactionPoint rp(ten_gig_steady_alpha());
  ASSERT_TRUE(rp.on_cnp(kT0));
  const Instant cut = kT0 + Duration::us(4);
  ASSERT_TRUE(rp.on_cnp(cut));  // 2504, target 5004: the target is below the line now
  // Fast recovery (stages 1-5): halfway to the target each time_reset (300 us).
  const std::uint64_t fast[] = {3754, 4379, 4692, 4848, 4926};
  for (int i = 0; i < 5; ++i) {
    rp.advance(cut + Duration::us(300 * (i + 1)));
    EXPECT_EQ(rp.current_mbps(), fast[i]) << "stage " << i + 1;
    EXPECT_EQ(rp.target_mbps(), 5004u);
  }
  // Stage 6, one counter past the threshold: the target rises by AI (5 Mb/s).
  rp.advance(cut + Duration::us(300 * 6));
  EXPECT_EQ(rp.target_mbps(), 5009u);
  EXPECT_EQ(rp.current_mbps(), 4968u);
  EXPECT_EQ(rp.stage(), 6u);
  // Nothing happens between timer events.
  rp.advance(cut + Duration::us(300 * 6 + 299));
  EXPECT_EQ(rp.current_mbps(), 4968u);
}

TEST(DcqcnReactionPoint, TheByteCounterIsAStageToo) {
  DcqcnReactionPoint rp(ten_gig());
  ASSERT_TRUE(rp.on_cnp(kT0));
  rp.on_sent(kT0 + Duration::us(1), 32766);
  EXPECT_EQ(rp.current_mbps(), 5004u);
  rp.on_sent(kT0 + Duration::us(2), 1);  // 32767 bytes: one stage
  EXPECT_EQ(rp.current_mbps(), (5004u + 10'000u + 1) / 2);
  EXPECT_EQ(rp.counters().rp_rate_increases, 1u);
}

TEST(DcqcnReactionPoint, BothCountersPastTheThresholdIsHyperIncrease) {
  DcqcnReactionPoint rp(ten_gig_steady_alpha());
  ASSERT_TRUE(rp.on_cnp(kT0));
  ASSERT_TRUE(rp.on_cnp(kT0 + Duration::us(4)));  // target 5004
  const Instant cut = kT0 + Duration::us(4);
  // Seven byte stages at once (no time passes): 5 fast, then 2 additive (byte counter only).
  rp.on_sent(cut, 7 * 32767);
  EXPECT_EQ(rp.target_mbps(), 5004u + 2 * 5);
  // Seven timer stages: from the 6th on both counters are past 5: hyper increase by
  // (min stage - 5) * HAI.
  const std::uint64_t before = rp.target_mbps();
  for (int i = 1; i <= 7; ++i) rp.advance(cut + Duration::us(300 * i));
  // Timer stages 1-5: the byte stages (7) make max > 5, so additive (+5 each); 6: hyper
  // (6 - 5) * 50; 7: hyper (7 - 5) * 50.
  EXPECT_EQ(rp.target_mbps(), before + 5 * 5 + 50 + 100);
}

TEST(DcqcnReactionPoint, AlphaDecaysOncePerPeriodWithoutACnp) {
  DcqcnReactionPoint rp(ten_gig());
  ASSERT_TRUE(rp.on_cnp(kT0));
  const double a = rp.alpha();
  // The period of the CNP counts as seen; 10 more periods without one.
  rp.advance(kT0 + Duration::us(11));
  EXPECT_NEAR(rp.alpha(), a * std::pow(1019.0 / 1024.0, 10), 1e-9);
}

// Why 64 senders into a 10 Gb/s port cannot converge with ConnectX's defaults (docs/SIMULATION.md,
// "Incast", 64 senders): the port sends 1.15 packets of 1 KiB per us, so even with every packet
// marked each of 64 flows hears a CNP about every 55 us. Alpha decays by 1019/1024 every
// dce_tcp_rtt (1 us), 24% between two CNPs, and a CNP adds 5/1024: alpha settles near
// g / (1 - (1 - g) 0.764) = 0.020 after each CNP, 0.016 when the next one cuts, which then takes
// 0.8% off. The same CNPs with the paper's 55 us alpha period keep alpha near 1.
TEST(DcqcnReactionPoint, WithACnpEvery55usConnectXsAlphaSettlesNearTwoPercent) {
  DcqcnParams p;
  p.line_rate_mbps = 10'000;
  p.rp_time_reset_us = 1'000'000;  // no timer increase in between: only the cuts
  DcqcnReactionPoint rp(p);
  Instant t = kT0;
  for (int i = 0; i < 100; ++i, t = t + Duration::us(55)) ASSERT_TRUE(rp.on_cnp(t));
  EXPECT_NEAR(rp.alpha(), 0.0204, 0.002);  // just after a CNP; 0.0156 when the next one cuts
  const std::uint64_t before = rp.current_mbps();
  ASSERT_TRUE(rp.on_cnp(t));
  EXPECT_GT(rp.current_mbps(), before * 99 / 100);  // a cut takes 0.8% off

  p.rp_dce_tcp_rtt_us = 55;
  DcqcnReactionPoint paper(p);
  t = kT0;
  for (int i = 0; i < 100; ++i, t = t + Duration::us(55)) ASSERT_TRUE(paper.on_cnp(t));
  EXPECT_GT(paper.alpha(), 0.9);
}

TEST(DcqcnReactionPoint, BackAtTheLineItIsUnlimitedAgain) {
  DcqcnReactionPoint rp(ten_gig());
  ASSERT_TRUE(rp.on_cnp(kT0));
  rp.advance(kT0 + Duration::ms(100));
  EXPECT_FALSE(rp.limited());
  EXPECT_EQ(rp.next_send_time(kT0 + Duration::ms(100), 4096), kT0 + Duration::ms(100));
}

TEST(DcqcnReactionPoint, PacingHoldsTheRateAfterTheBurst) {
  DcqcnParams p = ten_gig();
  p.rp_byte_reset = 1u << 30;  // no byte stages in this test
  p.rp_time_reset_us = 1'000'000;
  DcqcnReactionPoint rp(p);
  ASSERT_TRUE(rp.on_cnp(kT0));
  ASSERT_EQ(rp.current_mbps(), 5004u);
  // Send 1000-byte packets as soon as allowed: the first 16 KiB (the burst) at once, then one
  // per 1000 * 8 / 5004 us.
  Instant t = kT0;
  std::uint64_t sent = 0;
  while (sent < 1'000'000) {
    const Instant at = rp.next_send_time(t, 1000);
    ASSERT_GE(at, t);
    t = at;
    rp.on_sent(t, 1000);
    sent += 1000;
  }
  // The last packet leaves when the 999 before it, less the burst (16 KiB), have had their time
  // at 5004 Mb/s (each packet's time is whole nanoseconds: under 1 us lost in all).
  const double us = static_cast<double>((t - kT0).count_ns()) / 1000.0;
  EXPECT_NEAR(us, (999'000.0 - 16384.0) * 8 / 5004, 1.0);
}

TEST(Dcqcn, TheNotificationPointSendsOneCnpPerWindow) {
  Dcqcn cc(ten_gig());
  EXPECT_FALSE(cc.take_cnp(kT0));  // nothing marked
  cc.on_ecn_ce(kT0);
  EXPECT_TRUE(cc.take_cnp(kT0));
  cc.on_ecn_ce(kT0 + Duration::us(49));
  EXPECT_FALSE(cc.take_cnp(kT0 + Duration::us(49)));  // within 50 us of the last CNP
  EXPECT_FALSE(cc.take_cnp(kT0 + Duration::us(60)));  // and that mark owes none later
  cc.on_ecn_ce(kT0 + Duration::us(60));
  EXPECT_TRUE(cc.take_cnp(kT0 + Duration::us(60)));
  EXPECT_EQ(cc.counters().np_ecn_marked_roce_packets, 3u);
  EXPECT_EQ(cc.counters().np_cnp_sent, 2u);
}

TEST(Dcqcn, PacedWaitsAreCounted) {
  DcqcnParams p = ten_gig();
  p.burst_bytes = 0;
  Dcqcn cc(p);
  cc.on_cnp(kT0);
  EXPECT_EQ(cc.next_send_time(kT0, 4096), kT0);
  cc.on_sent(kT0, 4096);
  cc.on_sent(kT0, 4096);  // two packets' time charged, one packet's allowance
  EXPECT_GT(cc.next_send_time(kT0, 4096), kT0);
  EXPECT_EQ(cc.counters().paced_waits, 1u);
}

}  // namespace
}  // namespace uroce::cc
