// Aimd (cc/aimd.h): the window's rules, each from a synthetic sequence of sends, ACKs and losses
// with their times; and DcqcnAimd (cc/dcqcn_aimd.h), the two limits side by side.
#include "cc/aimd.h"

#include <gtest/gtest.h>

#include <vector>

#include "cc/dcqcn_aimd.h"

namespace uroce::cc {
namespace {

constexpr Instant kT0 = Instant::from_ns(1'000'000'000);

// The rule's arithmetic is checked from TCP's initial window of 10 (the default is 32).
AimdParams iw10() {
  AimdParams p;
  p.initial_window_packets = 10;
  return p;
}

// A sender that keeps its window full: sends what the window allows, then ACKs them all one
// `rtt` later, a round trip at a time.
struct Flow {
  explicit Flow(const AimdParams& p = iw10()) : cc(p) {}
  Aimd cc;
  Instant now = kT0;
  std::uint32_t out = 0;  // PSNs outstanding

  void send_window() {
    while (out < cc.window_packets()) {
      cc.on_sent(now, 1024);
      ++out;
    }
  }
  // One round trip: the whole window is sent, then acknowledged `rtt` later in one ACK that
  // carries `rtt` as the transport's sample (zero: none).
  void round(Duration rtt, Duration sample) {
    send_window();
    now = now + rtt;
    AckEvent a{.now = now, .acked_packets = out, .rtt = sample, .in_flight = 0};
    out = 0;
    cc.on_ack(a);
  }
  void round(Duration rtt) { round(rtt, rtt); }
};

TEST(Aimd, SlowStartDoublesTheWindowEachRoundFromTheInitialOne) {
  Flow f;
  EXPECT_EQ(f.cc.window_packets(), 10u);
  EXPECT_TRUE(f.cc.in_slow_start());
  f.round(Duration::us(100));
  EXPECT_EQ(f.cc.window_packets(), 20u);
  f.round(Duration::us(100));
  EXPECT_EQ(f.cc.window_packets(), 40u);
  EXPECT_EQ(f.cc.counters().rtt_samples, 2u);
  EXPECT_EQ(f.cc.srtt(), Duration::us(100));
}

TEST(Aimd, ALossCutsTheFlightOncePerRoundTrip) {
  Flow f;
  for (int i = 0; i < 3; ++i) f.round(Duration::us(100));  // window 80
  ASSERT_EQ(f.cc.window_packets(), 80u);
  f.send_window();  // 80 out
  f.cc.on_loss(f.now, LossSignal::kNak);
  EXPECT_DOUBLE_EQ(f.cc.window(), 56.0);  // 80 * (1 - 0.3)
  EXPECT_FALSE(f.cc.in_slow_start());
  EXPECT_DOUBLE_EQ(f.cc.ssthresh(), 56.0);
  // The go-back-N sends the 80 outstanding again: the window lets them go.
  EXPECT_EQ(f.cc.window_packets(), 80u);
  // The go-back-N's own losses within the round trip: no second cut.
  f.cc.on_loss(f.now + Duration::us(50), LossSignal::kNak);
  f.cc.on_loss(f.now + Duration::us(99), LossSignal::kTimeout);
  EXPECT_DOUBLE_EQ(f.cc.window(), 56.0);
  EXPECT_EQ(f.cc.counters().loss_decreases, 1u);
  EXPECT_EQ(f.cc.counters().losses_ignored, 2u);
  // Once they are acknowledged the cut window holds, and nothing grew meanwhile.
  f.now = f.now + Duration::us(100);
  f.cc.on_ack({.now = f.now, .acked_packets = 80, .rtt = Duration::us(100), .in_flight = 0});
  f.out = 0;
  EXPECT_EQ(f.cc.window_packets(), 56u);
  // A round trip later it is a new loss: cut again, from what is out then (10 PSNs), not from
  // the window.
  for (int i = 0; i < 10; ++i) f.cc.on_sent(f.now + Duration::us(100), 1024);
  f.cc.on_loss(f.now + Duration::us(100), LossSignal::kNak);
  EXPECT_DOUBLE_EQ(f.cc.window(), 7.0);
  EXPECT_EQ(f.cc.window_packets(), 10u);  // those ten go again first
  EXPECT_EQ(f.cc.counters().loss_decreases, 2u);
}

// A flow in slow start at window 40, all 40 out, then an ACK timeout 10 ms later.
Flow timed_out(const AimdParams& p = iw10()) {
  Flow f(p);
  f.round(Duration::us(100));
  f.round(Duration::us(100));
  f.send_window();
  f.now = f.now + Duration::ms(10);
  f.cc.on_loss(f.now, LossSignal::kTimeout);
  return f;
}

TEST(Aimd, ATimeoutCutsAsALossDoes) {
  Flow f = timed_out();
  EXPECT_DOUBLE_EQ(f.cc.window(), 28.0);
  EXPECT_FALSE(f.cc.in_slow_start());
  // The ACK comes a round trip later: of the retransmissions, maybe; the cut stays.
  f.cc.on_ack({.now = f.now + Duration::us(100), .acked_packets = 40, .in_flight = 0});
  EXPECT_DOUBLE_EQ(f.cc.window(), 28.0);
  EXPECT_EQ(f.cc.counters().spurious_timeouts, 0u);
}

TEST(Aimd, ASpuriousTimeoutIsUndone) {
  // The ACK of what was outstanding arrives 5 us after the timeout, sooner than any
  // retransmission could be answered (min RTT 100 us): the timer fired on a late ACK.
  Flow f = timed_out();
  EXPECT_DOUBLE_EQ(f.cc.window(), 28.0);
  f.cc.on_ack({.now = f.now + Duration::us(5), .acked_packets = 40, .in_flight = 0});
  EXPECT_DOUBLE_EQ(f.cc.window(), 40.0);
  EXPECT_TRUE(f.cc.in_slow_start());
  EXPECT_EQ(f.cc.counters().spurious_timeouts, 1u);
  // A NAK is never spurious: the receiver saw the gap.
  f.out = 0;
  f.send_window();
  f.now = f.now + Duration::ms(1);
  f.cc.on_loss(f.now, LossSignal::kNak);
  f.cc.on_ack({.now = f.now + Duration::us(5), .acked_packets = 40, .in_flight = 0});
  EXPECT_DOUBLE_EQ(f.cc.window(), 28.0);
}

TEST(Aimd, ATimeoutCanRestartSlowStartFromOnePacket) {
  AimdParams p = iw10();
  p.timeout_window_packets = 1;
  Flow f = timed_out(p);
  EXPECT_DOUBLE_EQ(f.cc.window(), 1.0);
  EXPECT_DOUBLE_EQ(f.cc.ssthresh(), 28.0);
  EXPECT_TRUE(f.cc.in_slow_start());
  // The 40 outstanding go again (the peer may have them all, and acknowledge the last), then
  // the window is one.
  EXPECT_EQ(f.cc.window_packets(), 40u);
  f.cc.on_ack({.now = f.now + Duration::us(100), .acked_packets = 25, .in_flight = 15});
  EXPECT_EQ(f.cc.window_packets(), 15u);
  f.cc.on_ack({.now = f.now + Duration::us(100), .acked_packets = 15, .in_flight = 0});
  EXPECT_EQ(f.cc.window_packets(), 1u);
}

TEST(Aimd, NeverBelowTheFloor) {
  AimdParams p = iw10();
  p.initial_window_packets = 2;
  Flow f(p);
  for (int i = 0; i < 20; ++i) {
    f.cc.on_sent(f.now, 1024);
    f.cc.on_loss(f.now, LossSignal::kNak);
    f.now = f.now + Duration::ms(1);
    EXPECT_GE(f.cc.window_packets(), 1u);
  }
  EXPECT_EQ(f.cc.window_packets(), 1u);
  EXPECT_GE(f.cc.window(), 1.0);
  // A floor of 4 holds as well, through timeouts too.
  p.min_window_packets = 4;
  Flow g(p);
  EXPECT_EQ(g.cc.window_packets(), 4u);  // above the initial window
  g.cc.on_loss(g.now, LossSignal::kTimeout);
  EXPECT_EQ(g.cc.window_packets(), 4u);
}

// The delay rule on (off by default: aimd.h, "delay").
AimdParams with_delay_rule() {
  AimdParams p = iw10();
  p.delay_rule = true;
  return p;
}

// A flow brought out of slow start by one loss, at window 28, with an RTT of `base`.
Flow congestion_avoidance(Duration base, const AimdParams& p = iw10()) {
  Flow f(p);
  f.round(base);
  f.round(base);  // window 40
  f.send_window();
  f.cc.on_loss(f.now, LossSignal::kNak);  // 28
  f.now = f.now + base;
  f.cc.on_ack({.now = f.now, .acked_packets = f.out, .rtt = base, .in_flight = 0});
  f.out = 0;
  f.now = f.now + base;
  return f;
}

TEST(Aimd, BelowTheTargetTheWindowGrowsByAiPacketsPerRoundTrip) {
  Flow f = congestion_avoidance(Duration::us(100));
  ASSERT_EQ(f.cc.window_packets(), 28u);
  const double start = f.cc.window();
  for (int i = 0; i < 10; ++i) f.round(Duration::us(100));
  // About ai per round (the increase is ai / window per PSN, the window growing meanwhile).
  const double ai = AimdParams{}.ai_packets_per_rtt;
  EXPECT_NEAR(f.cc.window(), start + 10.0 * ai, 0.5 * ai);
  EXPECT_EQ(f.cc.counters().delay_decreases, 0u);
}

TEST(Aimd, AnUnusedWindowDoesNotGrow) {
  Flow f = congestion_avoidance(Duration::us(100));
  const double start = f.cc.window();
  for (int i = 0; i < 50; ++i) {
    f.cc.on_sent(f.now, 1024);  // one PSN out at a time, against a window of 28
    f.now = f.now + Duration::us(100);
    f.cc.on_ack({.now = f.now, .acked_packets = 1, .rtt = Duration::us(100), .in_flight = 0});
  }
  EXPECT_DOUBLE_EQ(f.cc.window(), start);
}

TEST(Aimd, AboveTheTargetTheWindowShrinksOncePerRound) {
  Flow f = congestion_avoidance(Duration::us(100),
                                with_delay_rule());  // min RTT 100 us: target 100 + 300 us
  ASSERT_EQ(f.cc.target(), Duration::us(400));
  const double start = f.cc.window();
  // A round trip of 600 us: 200 us above the target, a cut of 0.4 * 200 / 600 (delay_beta).
  f.round(Duration::us(600));
  EXPECT_EQ(f.cc.counters().delay_decreases, 1u);
  const double once = start * (1.0 - 0.4 * (200'000.0 / 600'000.0));
  EXPECT_DOUBLE_EQ(f.cc.window(), once);
  // Far above it, a cut of at most max_delay_decrease (a fifth).
  f.round(Duration::ms(4));
  EXPECT_EQ(f.cc.counters().delay_decreases, 2u);
  EXPECT_DOUBLE_EQ(f.cc.window(), once * 0.8);
  // While above the target, no growth; at most one cut per round (an SRTT long) however many
  // ACKs come.
  const std::uint64_t cuts = f.cc.counters().delay_decreases;
  const double after = f.cc.window();
  for (int i = 0; i < 5; ++i) {
    f.cc.on_sent(f.now, 1024);
    f.now = f.now + Duration::us(10);
    f.cc.on_ack({.now = f.now, .acked_packets = 1, .rtt = Duration::ms(4), .in_flight = 0});
  }
  EXPECT_DOUBLE_EQ(f.cc.window(), after);
  EXPECT_EQ(f.cc.counters().delay_decreases, cuts);
}

TEST(Aimd, ADelayAboveTheTargetEndsSlowStart) {
  Flow f(with_delay_rule());
  f.round(Duration::us(100));
  f.round(Duration::us(100));
  for (int i = 0; i < 4 && f.cc.in_slow_start(); ++i) f.round(Duration::us(1000));
  EXPECT_FALSE(f.cc.in_slow_start());
  EXPECT_GE(f.cc.counters().delay_decreases, 1u);
}

TEST(Aimd, AQueueThatNeverDrainsIsSharedNotYielded) {
  // Another flow (TCP) keeps the queue full: the RTT stays 1 ms above the 100 us seen at first,
  // whatever this flow does. After competing_after_rounds rounds the delay rule stands down and
  // the window grows again, as a loss-driven flow's does.
  Flow f = congestion_avoidance(Duration::us(100), with_delay_rule());
  for (int i = 0; i < 30; ++i) f.round(Duration::us(1100));
  EXPECT_TRUE(f.cc.competing());
  EXPECT_LE(f.cc.counters().delay_decreases, 5u);
  EXPECT_GT(f.cc.counters().competing_rounds, 20u);
  const double competing = f.cc.window();
  f.round(Duration::us(1100));
  f.round(Duration::us(1100));
  EXPECT_GT(f.cc.window(), competing);  // additive increase goes on
  // The queue drains (the other flow left): a round at or below the target ends it.
  for (int i = 0; i < 30 && f.cc.competing(); ++i) f.round(Duration::us(120));
  EXPECT_FALSE(f.cc.competing());
}

// By default the window follows loss alone and nothing is paced (aimd.h: on a host whose CPUs are
// shared by more busy processes than it has, the RTT measures the scheduler, not the queue).
TEST(Aimd, ByDefaultNeitherDelayNorPacingHoldsTheWindow) {
  Flow f = congestion_avoidance(Duration::us(100));
  const double start = f.cc.window();
  for (int i = 0; i < 10; ++i) f.round(Duration::ms(4));  // far above any target
  EXPECT_EQ(f.cc.counters().delay_decreases, 0u);
  EXPECT_GT(f.cc.window(), start);  // additive increase went on
  for (int i = 0; i < 64; ++i) {
    ASSERT_EQ(f.cc.next_send_time(f.now, 1024), f.now) << i;
    f.cc.on_sent(f.now, 1024);
  }
  EXPECT_EQ(f.cc.counters().paced_waits, 0u);
}

TEST(Aimd, PacesAtTheWindowOverTheRoundTripWithABurst) {
  AimdParams p = iw10();
  p.pacing_gain_percent = 125;
  p.burst_packets = 4;
  Flow f(p);
  // No RTT sample yet: nothing is paced.
  for (int i = 0; i < 10; ++i) {
    EXPECT_EQ(f.cc.next_send_time(f.now, 1024), f.now);
    f.cc.on_sent(f.now, 1024);
  }
  f.now = f.now + Duration::us(100);
  f.cc.on_ack({.now = f.now, .acked_packets = 10, .rtt = Duration::us(100), .in_flight = 0});
  ASSERT_EQ(f.cc.window_packets(), 20u);
  // 20 PSNs per 100 us, at a gain of 1.25: one every 4 us. Four leave at once, then one per 4 us.
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(f.cc.next_send_time(f.now, 1024), f.now) << i;
    f.cc.on_sent(f.now, 1024);
  }
  const Instant next = f.cc.next_send_time(f.now, 1024);
  EXPECT_EQ(next - f.now, Duration::us(4));
  EXPECT_EQ(f.cc.counters().paced_waits, 1u);
  f.cc.on_sent(next, 1024);
  EXPECT_EQ(f.cc.next_send_time(next, 1024) - next, Duration::us(4));
  // Idle for a while: the burst is available again.
  const Instant later = next + Duration::ms(1);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(f.cc.next_send_time(later, 1024), later);
    f.cc.on_sent(later, 1024);
  }
  EXPECT_GT(f.cc.next_send_time(later, 1024), later);
}

TEST(Aimd, TimesItsOwnRoundTripsWhenTheTransportDoesNot) {
  Flow f;
  // Ten sent 10 us apart, acknowledged four and six at a time: each ACK times its newest PSN.
  for (int i = 0; i < 10; ++i) f.cc.on_sent(f.now + Duration::us(10) * i, 1024);
  f.cc.on_ack({.now = kT0 + Duration::us(80), .acked_packets = 4, .in_flight = 6});
  EXPECT_EQ(f.cc.srtt(), Duration::us(50));  // PSN 3, sent at 30 us
  EXPECT_EQ(f.cc.min_rtt(), Duration::us(50));
  f.cc.on_ack({.now = kT0 + Duration::us(130), .acked_packets = 6, .in_flight = 0});
  EXPECT_EQ(f.cc.min_rtt(), Duration::us(40));  // PSN 9, sent at 90 us
  EXPECT_EQ(f.cc.counters().rtt_samples, 2u);
  // A loss: what was outstanding is sent again, and an ACK of those gives no sample (Karn).
  const Instant t = kT0 + Duration::ms(1);
  for (int i = 0; i < 5; ++i) f.cc.on_sent(t, 1024);
  f.cc.on_loss(t, LossSignal::kNak);
  for (int i = 0; i < 5; ++i) f.cc.on_sent(t + Duration::us(1), 1024);  // the go-back-N
  f.cc.on_ack({.now = t + Duration::us(2), .acked_packets = 5, .in_flight = 0});
  EXPECT_EQ(f.cc.counters().rtt_samples, 2u);
  // New PSNs after it are timed again.
  f.cc.on_sent(t + Duration::us(10), 1024);
  f.cc.on_ack({.now = t + Duration::us(70), .acked_packets = 1, .in_flight = 0});
  EXPECT_EQ(f.cc.counters().rtt_samples, 3u);
  // An ACK that does not add up (a READ: one request, many PSNs) gives none.
  f.cc.on_sent(t + Duration::us(100), 1024);
  f.cc.on_ack({.now = t + Duration::us(160), .acked_packets = 16, .in_flight = 0});
  EXPECT_EQ(f.cc.counters().rtt_samples, 3u);
  // The transport's samples, once it gives one, are the only ones.
  f.cc.on_sent(t + Duration::us(200), 1024);
  f.cc.on_ack({.now = t + Duration::us(300), .acked_packets = 1, .rtt = Duration::us(77)});
  f.cc.on_sent(t + Duration::us(300), 1024);
  f.cc.on_ack({.now = t + Duration::us(400), .acked_packets = 1});
  EXPECT_EQ(f.cc.counters().rtt_samples, 4u);
}

TEST(Aimd, TheSameEventsGiveTheSameWindows) {
  auto run = [] {
    Flow f = congestion_avoidance(Duration::us(100));
    for (int i = 0; i < 40; ++i) {
      f.round(Duration::us(100 + (i * 37) % 300));
      if (i % 7 == 3) f.cc.on_loss(f.now, LossSignal::kNak);
    }
    return f.cc.window();
  };
  EXPECT_EQ(run(), run());
}

TEST(DcqcnAimd, TheRateHearsEcnAndTheWindowHearsLoss) {
  DcqcnParams rate;
  rate.line_rate_mbps = 10'000;
  rate.burst_bytes = 1024;
  DcqcnAimd cc(rate, iw10());
  EXPECT_TRUE(cc.ecn_capable());
  EXPECT_EQ(cc.window_packets(), 10u);
  // A loss cuts the window, not the rate.
  for (int i = 0; i < 10; ++i) cc.on_sent(kT0, 1024);
  cc.on_loss(kT0, LossSignal::kNak);
  EXPECT_DOUBLE_EQ(cc.window().window(), 7.0);
  EXPECT_FALSE(cc.rate().reaction_point().limited());
  cc.on_ack({.now = kT0, .acked_packets = 10, .in_flight = 0});
  EXPECT_EQ(cc.window_packets(), 7u);
  // A CNP cuts the rate at once; the window hears it as an echo, and cuts at its round's end
  // (below); the receiver's side answers CE marks with CNPs.
  cc.on_cnp(kT0 + Duration::us(10));
  EXPECT_TRUE(cc.rate().reaction_point().limited());
  EXPECT_EQ(cc.window().counters().ecn_echoes, 1u);
  EXPECT_EQ(cc.window_packets(), 7u);
  cc.on_ecn_ce(kT0);
  EXPECT_TRUE(cc.take_cnp(kT0));
  // The send time is the later of the two: the rate paces here (the window has no RTT yet).
  const Instant t = kT0 + Duration::us(20);
  cc.on_sent(t, 1024);
  cc.on_sent(t, 1024);
  EXPECT_GT(cc.next_send_time(t, 1024), t);
  EXPECT_EQ(cc.next_send_time(t, 1024), cc.rate().reaction_point().next_send_time(t, 1024));
}

// A CNP cuts the limit that holds the flow back. The first of an episode cuts the rate (it was
// not limited); later ones cut it only while it holds a packet back (within a smoothed RTT); the
// window hears every one. Without this, the window's echo rule kept the port marking all along,
// every CNP reset DCQCN's increase timer and byte counter, and rates that held nothing back
// drifted down until they held some flows below their share (eight senders, Jain 0.933).
TEST(DcqcnAimd, ACnpCutsTheRateOnlyWhileTheRateHoldsTheFlowBack) {
  DcqcnParams rate;
  rate.line_rate_mbps = 10'000;
  rate.burst_bytes = 1024;
  DcqcnAimd cc(rate, iw10());
  // The window's RTT: 10 us.
  cc.on_sent(kT0, 1024);
  cc.on_ack({.now = kT0 + Duration::us(10), .acked_packets = 1, .rtt = Duration::us(10)});
  ASSERT_EQ(cc.window().srtt(), Duration::us(10));
  // The first CNP: the rate is cut, and the window hears it.
  Instant t = kT0 + Duration::us(20);
  cc.on_cnp(t);
  const DcqcnReactionPoint& rp = cc.rate().reaction_point();
  ASSERT_TRUE(rp.limited());
  const std::uint64_t cut = rp.current_mbps();
  EXPECT_LT(cut, 10'000u);
  EXPECT_EQ(cc.rate().counters().rp_rate_cuts, 1u);
  // Later, the rate has held nothing back (the window paced the flow): the window hears the CNP,
  // the rate does not.
  t = t + Duration::us(50);
  EXPECT_EQ(cc.next_send_time(t, 1024), t);
  cc.on_cnp(t + Duration::us(1));
  EXPECT_EQ(cc.rate().counters().rp_rate_cuts, 1u);
  EXPECT_EQ(cc.rate().counters().rp_cnp_handled, 1u);
  EXPECT_EQ(cc.cnps_to_window_only(), 1u);
  EXPECT_EQ(cc.window().counters().ecn_echoes, 2u);
  EXPECT_EQ(rp.current_mbps(), cut);
  // Now the rate holds a packet back: a CNP within the RTT cuts it again.
  t = t + Duration::us(10);
  for (int i = 0; i < 4; ++i) cc.on_sent(t, 1024);
  EXPECT_GT(cc.next_send_time(t, 1024), t);
  cc.on_cnp(t + Duration::us(5));
  EXPECT_EQ(cc.rate().counters().rp_rate_cuts, 2u);
  EXPECT_LT(rp.current_mbps(), cut);
  // One smoothed RTT after the hold, the rate is no longer taken for the limit.
  cc.on_cnp(t + Duration::us(30));
  EXPECT_EQ(cc.rate().counters().rp_rate_cuts, 2u);
  EXPECT_EQ(cc.cnps_to_window_only(), 2u);
  EXPECT_EQ(cc.window().counters().ecn_echoes, 4u);
}

// The ECN echo rule (DCTCP's): a round that heard echoes cuts the window by ecn_alpha / 2, where
// ecn_alpha (from 1) moves by ecn_gain towards the round's share of echoed PSNs.
TEST(Aimd, AnEchoedRoundCutsTheWindowByHalfDctcpsAlpha) {
  Flow f = congestion_avoidance(Duration::us(100));
  const double before = f.cc.window();
  // Rounds without echoes have lowered alpha from 1 by 15/16 each.
  const double a0 = f.cc.ecn_alpha();
  EXPECT_LT(a0, 1.0);
  // One echo in a round of `before` PSNs: alpha = a0 * 15/16 + (1/16) * (1 / before).
  f.send_window();
  f.cc.on_congestion_echo(f.now + Duration::us(50));
  f.round(Duration::us(100));
  const double share = 1.0 / before;
  const double alpha = a0 * 15.0 / 16.0 + share / 16.0;
  EXPECT_NEAR(f.cc.ecn_alpha(), alpha, 1e-9);
  // The round's end comes with the ACK after the echo: the cut, and no growth with it.
  EXPECT_NEAR(f.cc.window(), before * (1 - alpha / 2), 1e-9);
  EXPECT_EQ(f.cc.counters().ecn_decreases, 1u);
  EXPECT_FALSE(f.cc.in_slow_start());
  // A round without echoes lowers alpha and cuts nothing, and the window grows by DCTCP's one
  // PSN per round while the path marks (ecn_ai_packets_per_rtt), not ai_packets_per_rtt (4).
  const double w = f.cc.window();
  f.round(Duration::us(100));
  EXPECT_NEAR(f.cc.ecn_alpha(), alpha * 15.0 / 16.0, 1e-9);
  EXPECT_EQ(f.cc.counters().ecn_decreases, 1u);
  EXPECT_GT(f.cc.window(), w + 0.9);
  EXPECT_LT(f.cc.window(), w + 1.0);
}

// Every echoed round cuts: a flow whose every round is echoed ends at the floor, one PSN.
TEST(Aimd, EchoesEveryRoundTakeTheWindowToTheFloor) {
  Flow f = congestion_avoidance(Duration::us(100));
  for (int i = 0; i < 40; ++i) {
    f.send_window();
    f.cc.on_congestion_echo(f.now);
    f.round(Duration::us(100));
  }
  EXPECT_EQ(f.cc.window_packets(), 1u);
  EXPECT_DOUBLE_EQ(f.cc.window(), 1.0);
}

// A path that never marks (loopback, a network without ECN) never echoes: the window is the one
// the rule gives without the ECN echo rule, loss for loss and round for round.
TEST(Aimd, WithoutEchoesTheEcnRuleChangesNothing) {
  auto run = [](bool ecn) {
    AimdParams p = iw10();
    p.ecn_rule = ecn;
    Flow f(p);
    std::vector<double> windows;
    for (int i = 0; i < 60; ++i) {
      f.round(Duration::us(100 + (i * 37) % 300));
      if (i % 9 == 4) f.cc.on_loss(f.now, LossSignal::kNak);
      windows.push_back(f.cc.window());
    }
    return windows;
  };
  EXPECT_EQ(run(true), run(false));
}

// Congestion avoidance never grows faster than slow start: a window of one PSN, acknowledged, is
// two, not 1 + ai_packets_per_rtt (4).
TEST(Aimd, AdditiveIncreaseIsNeverFasterThanSlowStart) {
  AimdParams p = iw10();
  p.initial_window_packets = 2;
  Flow f(p);
  f.send_window();
  f.cc.on_loss(f.now, LossSignal::kNak);  // 2 * 0.7 = 1.4
  f.round(Duration::us(100));             // the recovery's round
  ASSERT_FALSE(f.cc.in_slow_start());
  ASSERT_DOUBLE_EQ(f.cc.window(), 1.4);
  ASSERT_EQ(f.cc.window_packets(), 1u);
  f.round(Duration::us(100));  // one PSN acknowledged: + min(4 / 1.4, 1)
  EXPECT_DOUBLE_EQ(f.cc.window(), 2.4);
}

}  // namespace
}  // namespace uroce::cc
