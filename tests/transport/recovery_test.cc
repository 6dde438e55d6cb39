// Loss recovery beyond IBTA's fixed ACK timeout (transport/recovery.cc): RTT samples under Karn's
// rule, an adaptive retransmission timeout within [kMinRto, ack_timeout()] that backs off and
// never spends retry_cnt sooner than the IBTA timer would, the tail-loss probe, and a window sized
// to the bandwidth-delay product.
#include <gtest/gtest.h>

#include <vector>

#include "harness.h"
#include "steps.h"
#include "wire/aeth.h"
#include "wire/opcode.h"
#include "wire/psn.h"

namespace uroce::test {
namespace {

using transport::kMaxUnackedPsns;
using transport::kMinRto;
using wire::Opcode;

constexpr std::uint32_t kPsn = 0x1000;  // Solo's first send PSN

// Records what the transport tells congestion control of each acknowledgement.
class RttRecorder final : public cc::CongestionControl {
 public:
  Instant next_send_time(Instant now, std::uint32_t) override { return now; }
  void on_sent(Instant, std::uint32_t) override {}
  void on_ack(const cc::AckEvent& ack) override { rtts.push_back(ack.rtt); }
  void on_cnp(Instant) override {}
  void on_ecn_ce(Instant) override {}
  bool take_cnp(Instant) override { return false; }
  std::vector<Duration> rtts;
};

Duration ibta(std::uint8_t timeout) { return Duration::ns(4096) * (std::int64_t{1} << timeout); }

// A WRITE of `len` bytes from the start of the buffer (len / 1024 packets at MTU 1024).
void post_write(Solo& s, std::uint64_t id, std::uint32_t len) {
  const Sge sg = sge(s.e, 0, len);
  transport::SendRequest r = request(id, WrOpcode::kRdmaWrite, std::span(&sg, 1));
  r.remote_addr = 0x10000;
  r.rkey = 0x99;
  ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
}

void ack(Solo& s, std::uint32_t psn) { peer_response(s, psn, wire::make_ack_syndrome()); }
void seq_nak(Solo& s, std::uint32_t psn) {
  peer_response(s, psn, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
}

// One single-packet WRITE answered after `rtt`: one RTT sample. Returns the next PSN.
std::uint32_t sample(Solo& s, std::uint64_t id, std::uint32_t psn, Duration rtt) {
  post_write(s, id, 512);
  EXPECT_EQ(s.drain().size(), 1u);
  s.now = s.now + rtt;
  ack(s, psn);
  return wire::psn_add(psn, 1);
}

TEST(Recovery, AnRttSampleTimesANewPacketAndIgnoresARetransmittedOne) {
  Solo s(QpType::kRc);
  RttRecorder rec;
  s.e.cc.inner = &rec;
  EXPECT_EQ(s.e.qp->srtt(), Duration::zero());
  std::uint32_t psn = sample(s, 1, kPsn, Duration::us(30));
  ASSERT_EQ(rec.rtts.size(), 1u);
  EXPECT_EQ(rec.rtts[0], Duration::us(30));  // handed to congestion control in AckEvent::rtt
  EXPECT_EQ(s.e.qp->srtt(), Duration::us(30));
  EXPECT_EQ(s.e.qp->min_rtt(), Duration::us(30));

  // The next packet is timed, NAKed, sent again, and acknowledged long after: the ACK may answer
  // either copy, so it gives no sample (Karn's rule).
  post_write(s, 2, 512);
  ASSERT_EQ(s.drain().size(), 1u);
  s.now = s.now + Duration::us(10);
  seq_nak(s, psn);
  const auto again = s.drain();
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].h.bth.psn, psn);
  s.now = s.now + Duration::us(900);
  ack(s, psn);
  EXPECT_EQ(s.e.scq.wcs.size(), 2u);
  EXPECT_EQ(rec.rtts.back(), Duration::zero());
  EXPECT_EQ(s.e.qp->srtt(), Duration::us(30));

  // A new packet afterwards is timed again; RFC 6298: SRTT = 7/8 SRTT + 1/8 R.
  psn = wire::psn_add(psn, 1);
  sample(s, 3, psn, Duration::us(70));
  EXPECT_EQ(rec.rtts.back(), Duration::us(70));
  EXPECT_EQ(s.e.qp->srtt(), Duration::us(35));
  EXPECT_EQ(s.e.qp->min_rtt(), Duration::us(30));
}

// Under heavy loss a go-back-N may never reach a new packet. After a sequence NAK at p the
// responder has discarded every packet past p it received, so the ACK of a retransmission past p
// can answer only that copy: it is timed.
TEST(Recovery, ARetransmissionPastTheGapASequenceNakReportedIsTimed) {
  Solo s(QpType::kRc);
  post_write(s, 1, 4096);  // PSNs p .. p+3, AckReq on the last
  ASSERT_EQ(s.drain().size(), 4u);
  s.now = s.now + Duration::us(20);
  seq_nak(s, kPsn);  // p was lost
  ASSERT_EQ(s.drain().size(), 4u);
  s.now = s.now + Duration::us(50);
  ack(s, kPsn + 3);
  EXPECT_EQ(s.e.qp->srtt(), Duration::us(50));
  EXPECT_EQ(s.e.scq.wcs.size(), 1u);
}

// Before the first RTT sample only the IBTA timer runs, so a first window whose AckReq packets
// were dropped (incast: the buffer's tail) would wait it out: until a sample, every packet asks
// for an ACK (RecoveryParams::ack_req_until_sampled, which a device with the adaptive recovery
// turns on). After it, AckReq is back to every half window and each message's last packet;
// without it, nothing changes.
TEST(Recovery, EveryPacketAsksForAnAckUntilTheFirstRttSample) {
  Solo s(QpType::kRc);
  transport::RecoveryParams p;
  p.ack_req_until_sampled = true;
  s.e.qp->set_recovery(p);
  post_write(s, 1, 4096);  // PSNs p .. p+3
  const auto first = s.drain();
  ASSERT_EQ(first.size(), 4u);
  for (const auto& pkt : first) EXPECT_TRUE(pkt.h.bth.ack_req) << pkt.h.bth.psn;
  s.now = s.now + Duration::us(20);
  ack(s, kPsn + 3);
  ASSERT_EQ(s.e.qp->srtt(), Duration::us(20));
  post_write(s, 2, 4096);
  const auto second = s.drain();
  ASSERT_EQ(second.size(), 4u);
  EXPECT_FALSE(second[0].h.bth.ack_req);
  EXPECT_FALSE(second[1].h.bth.ack_req);
  EXPECT_FALSE(second[2].h.bth.ack_req);
  EXPECT_TRUE(second[3].h.bth.ack_req);

  Solo off(QpType::kRc);  // the default: off
  post_write(off, 1, 4096);
  const auto plain = off.drain();
  ASSERT_EQ(plain.size(), 4u);
  EXPECT_FALSE(plain[0].h.bth.ack_req);
  EXPECT_TRUE(plain[3].h.bth.ack_req);
}

TEST(Recovery, TheRtoIsTheIbtaTimeoutUntilAnRttIsMeasuredThenClampedBetweenFloorAndIbta) {
  Solo s(QpType::kRc);
  s.set(/*timeout=*/14, 7, 7);
  EXPECT_EQ(s.e.qp->rto(), ibta(14));
  std::uint32_t psn = sample(s, 1, kPsn, Duration::us(30));
  // SRTT + 4 RTTVAR = 30 + 60 us: below the floor.
  EXPECT_EQ(s.e.qp->rto(), kMinRto);
  // A slow path: SRTT + 4 RTTVAR above the floor.
  for (int i = 0; i < 20; ++i) psn = sample(s, 2 + i, psn, Duration::ms(8));
  EXPECT_GT(s.e.qp->rto(), Duration::ms(8));
  EXPECT_LT(s.e.qp->rto(), ibta(14));
  // Never beyond the IBTA timeout: exponent 10 is 4.2 ms, below the floor itself.
  s.set(/*timeout=*/10, 7, 7);
  EXPECT_EQ(s.e.qp->rto(), ibta(10));
  // Timeout 0 is infinite and stays so.
  s.set(/*timeout=*/0, 7, 7);
  EXPECT_TRUE(s.e.qp->rto().is_infinite());
  post_write(s, 100, 512);
  ASSERT_EQ(s.drain().size(), 1u);
  s.advance(Duration::s(5));
  EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, 0u);
  EXPECT_EQ(s.e.qp->counters().timeouts, 0u);
}

TEST(Recovery, AnAdaptiveTimeoutGoesBackNAndBacksOffUpToTheIbtaTimeout) {
  Solo s(QpType::kRc);
  s.set(/*timeout=*/14, 7, 7);
  s.e.qp->set_recovery(transport::RecoveryParams{true, /*tail_probe=*/false, true, kMinRto});
  std::uint32_t psn = sample(s, 1, kPsn, Duration::us(30));
  post_write(s, 2, 2048);  // two packets
  ASSERT_EQ(s.drain().size(), 2u);
  const Instant sent = s.now;
  // After 5 ms, 10 ms more, 20 ms more: each time both packets again, with no retry spent.
  Duration expected = kMinRto;
  Instant at = sent;
  for (std::uint64_t n = 1; n <= 3; ++n) {
    at = at + expected;
    EXPECT_EQ(s.e.qp->poll_timeout(), at) << n;
    s.now = at;
    s.e.qp->handle_timeout(s.now);
    EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, n);
    const auto out = s.drain();
    ASSERT_EQ(out.size(), 2u) << n;
    EXPECT_EQ(out[0].h.bth.psn, psn);
    expected = expected * 2;
  }
  EXPECT_EQ(s.e.qp->counters().retransmitted_packets, 6u);
  // The next doubling (40 ms more, at 75 ms) would pass the IBTA timer, which fires 67 ms after
  // the first transmission, and spends a retry.
  EXPECT_EQ(s.e.qp->poll_timeout(), sent + ibta(14));
  s.now = sent + ibta(14);
  s.e.qp->handle_timeout(s.now);
  EXPECT_EQ(s.e.qp->counters().timeouts, 1u);
  EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, 3u);
  EXPECT_EQ(s.drain().size(), 2u);
  // From then on only the IBTA timer runs, until progress.
  EXPECT_EQ(s.e.qp->poll_timeout(), s.now + ibta(14));
  ack(s, wire::psn_add(psn, 1));
  EXPECT_EQ(s.e.qp->rto(), kMinRto);
  EXPECT_EQ(s.e.scq.wcs.size(), 2u);
}

// A peer that never answers: the QP fails with retry-exceeded exactly when the IBTA rule fails
// it (retry_cnt + 1 expiries of the full ACK timeout), however many adaptive timeouts came first.
Instant time_of_retry_exceeded(bool adaptive) {
  Solo s(QpType::kRc);
  s.set(/*timeout=*/14, /*retry_cnt=*/2, 7);
  if (!adaptive) s.e.qp->set_recovery(transport::RecoveryParams::off());
  sample(s, 1, kPsn, Duration::us(30));
  post_write(s, 2, 4096);
  EXPECT_EQ(s.drain().size(), 4u);
  const Instant sent = s.now;
  for (int i = 0; i < 100 && s.e.qp->state() != QpState::kErr; ++i) {
    s.now = s.e.qp->poll_timeout();
    s.e.qp->handle_timeout(s.now);
    s.drain();
  }
  EXPECT_EQ(s.e.qp->state(), QpState::kErr);
  EXPECT_EQ(s.e.qp->counters().retry_exceeded, 1u);
  EXPECT_EQ(s.e.qp->counters().timeouts, 3u);
  if (adaptive) {
    EXPECT_GT(s.e.qp->counters().adaptive_timeouts, 0u);
    EXPECT_GT(s.e.qp->counters().tail_probes, 0u);
  }
  return Instant::from_ns((s.now - sent).count_ns());
}

TEST(Recovery, RetryExceededComesNoSoonerThanIbtasRuleWouldBringIt) {
  const Instant adaptive = time_of_retry_exceeded(true);
  const Instant fixed = time_of_retry_exceeded(false);
  EXPECT_EQ(fixed, Instant::from_ns((ibta(14) * 3).count_ns()));
  EXPECT_EQ(adaptive, fixed);
}

TEST(Recovery, ATailLossProbeResendsTheNewestPacketOnceAndRecoversALostTail) {
  Solo s(QpType::kRc);
  std::uint32_t psn = sample(s, 1, kPsn, Duration::us(40));
  post_write(s, 2, 4096);  // PSNs psn .. psn+3, AckReq on the last
  ASSERT_EQ(s.drain().size(), 4u);
  // The last packet is lost: the responder, without AckReq, says nothing. After 2 SRTT and the
  // allowance for a held ACK, the newest packet goes again, with AckReq.
  const Instant probe_at = s.now + Duration::us(80) + transport::kProbeAckAllowance;
  EXPECT_EQ(s.e.qp->poll_timeout(), probe_at);
  s.now = probe_at;
  s.e.qp->handle_timeout(s.now);
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaWriteLast);
  EXPECT_EQ(out[0].h.bth.psn, wire::psn_add(psn, 3));
  EXPECT_TRUE(out[0].h.bth.ack_req);
  EXPECT_EQ(s.e.qp->counters().tail_probes, 1u);
  EXPECT_EQ(s.e.qp->counters().retransmitted_packets, 1u);
  // The responder takes it in order and acknowledges all: done in about an RTT, not a timeout.
  s.now = s.now + Duration::us(40);
  ack(s, wire::psn_add(psn, 3));
  ASSERT_EQ(s.e.scq.wcs.size(), 2u);
  EXPECT_EQ(s.e.scq.wcs[1].status, WcStatus::kSuccess);
  EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, 0u);
  EXPECT_TRUE(s.e.qp->poll_timeout().is_never());
  // The requester went on as before: the next WRITE takes the next PSNs.
  psn = wire::psn_add(psn, 4);
  post_write(s, 3, 1024);
  out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, psn);
}

TEST(Recovery, WithoutAnAnswerTheProbeAsksForTheOldestPacketOnceMoreThenWaitsForTheTimeout) {
  Solo s(QpType::kRc);
  const std::uint32_t psn = sample(s, 1, kPsn, Duration::us(40));
  post_write(s, 2, 4096);
  ASSERT_EQ(s.drain().size(), 4u);
  const Instant sent = s.now;
  std::vector<std::uint32_t> probed;
  while (s.e.qp->poll_timeout() < sent + kMinRto) {
    s.now = s.e.qp->poll_timeout();
    s.e.qp->handle_timeout(s.now);
    for (const auto& p : s.drain()) {
      EXPECT_TRUE(p.h.bth.ack_req);
      probed.push_back(p.h.bth.psn);
    }
  }
  // The newest (its duplicate would be re-ACKed, its loss repaired), then the oldest (the one a
  // lost NAK or a lost retransmission leaves the responder waiting for): no more.
  EXPECT_EQ(probed, (std::vector<std::uint32_t>{wire::psn_add(psn, 3), psn}));
  EXPECT_EQ(s.e.qp->counters().tail_probes, 2u);
  EXPECT_EQ(s.e.qp->poll_timeout(), sent + kMinRto);
  s.now = sent + kMinRto;
  s.e.qp->handle_timeout(s.now);
  EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, 1u);
  EXPECT_EQ(s.drain().size(), 4u);
}

TEST(Recovery, WithRecoveryOffNothingButTheIbtaTimerRuns) {
  Solo s(QpType::kRc);
  s.e.qp->set_recovery(transport::RecoveryParams::off());
  sample(s, 1, kPsn, Duration::us(40));
  post_write(s, 2, 4096);
  ASSERT_EQ(s.drain().size(), 4u);
  EXPECT_EQ(s.e.qp->poll_timeout(), s.now + ibta(14));
  EXPECT_EQ(s.e.qp->rto(), ibta(14));
  EXPECT_EQ(s.e.qp->send_window(), kMaxUnackedPsns);
}

// Two QPs streaming WRITEs over a path of 2 x 20 us with no rate limit: each round trip delivers
// the whole window, so the window doubles from 128 to the ceiling, and the stream moves more.
std::uint64_t stream(bool adaptive, std::uint32_t* window) {
  Pair p(QpType::kRc);
  p.one_way = Duration::us(20);
  p.connect();
  if (!adaptive) p.a.qp->set_recovery(transport::RecoveryParams::off());
  std::uint64_t posted = 0;
  for (int round = 0; round < 20; ++round) {
    while (p.a.qp->outstanding_send_wqes() < 64) {
      const Sge sg = sge(p.a, 0, 16384);  // 16 packets
      transport::SendRequest r = request(posted++, WrOpcode::kRdmaWrite, std::span(&sg, 1), 0);
      r.remote_addr = p.b.addr();
      r.rkey = p.b.key;
      EXPECT_EQ(p.a.qp->post_send(r), Errc::kOk);
    }
    p.run(Duration::us(100));
  }
  *window = p.a.qp->send_window();
  return posted - p.a.qp->outstanding_send_wqes();  // WRITEs completed
}

TEST(Recovery, TheWindowGrowsWithTheBandwidthDelayProduct) {
  std::uint32_t window = 0;
  const std::uint64_t adaptive = stream(true, &window);
  EXPECT_EQ(window, transport::kMaxBdpWindow);
  const std::uint64_t fixed = stream(false, &window);
  EXPECT_EQ(window, kMaxUnackedPsns);
  EXPECT_GT(adaptive, 3 * fixed);
}

TEST(Recovery, BelowRxesWindowOnlyAfterALossAndCongestionControlsWindowWins) {
  Solo s(QpType::kRc);
  std::uint32_t psn = kPsn;
  // An application-limited QP measures a low rate: its BDP is a few packets, but on a path that
  // loses nothing the window stays 128.
  for (int i = 0; i < 8; ++i) psn = sample(s, 1 + i, psn, Duration::us(40));
  EXPECT_EQ(s.e.qp->send_window(), kMaxUnackedPsns);
  // A loss (a sequence NAK's go-back-N): the window follows the BDP down to its floor...
  post_write(s, 10, 2048);
  ASSERT_EQ(s.drain().size(), 2u);
  s.now = s.now + Duration::us(40);
  seq_nak(s, psn);
  ASSERT_EQ(s.drain().size(), 2u);
  EXPECT_EQ(s.e.qp->send_window(), transport::kMinBdpWindow);
  s.now = s.now + Duration::us(40);
  ack(s, psn + 1);
  psn = wire::psn_add(psn, 2);
  EXPECT_EQ(s.e.qp->send_window(), transport::kMinBdpWindow);
  // ... for kLossyRtts SRTTs, then back to 128.
  s.now = s.now + s.e.qp->srtt() * transport::kLossyRtts;
  psn = sample(s, 11, psn, Duration::us(40));
  EXPECT_EQ(s.e.qp->send_window(), kMaxUnackedPsns);
  // Congestion control's window, when smaller, wins; a window below 2 x 64 asks for an ACK every
  // half window: 5 packets here.
  s.e.cc.window = 10;
  EXPECT_EQ(s.e.qp->send_window(), 10u);
  post_write(s, 100, 10240);
  const auto out = s.drain();
  ASSERT_EQ(out.size(), 10u);
  for (std::size_t i = 0; i < out.size(); ++i) EXPECT_EQ(out[i].h.bth.ack_req, i % 5 == 4) << i;
}

TEST(Recovery, ALargerCongestionControlWindowIsNotCappedByTheBandwidthDelayEstimate) {
  Solo s(QpType::kRc);
  std::uint32_t psn = kPsn;
  for (int i = 0; i < 8; ++i) psn = sample(s, 1 + i, psn, Duration::us(40));
  // After a loss the BDP estimate alone would hold the window at its floor...
  post_write(s, 10, 2048);
  ASSERT_EQ(s.drain().size(), 2u);
  s.now = s.now + Duration::us(40);
  seq_nak(s, psn);
  ASSERT_EQ(s.drain().size(), 2u);
  EXPECT_EQ(s.e.qp->send_window(), transport::kMinBdpWindow);
  // ... but a window-based rule's window of 300 is the window (up to the ceiling).
  s.e.cc.window = 300;
  EXPECT_EQ(s.e.qp->send_window(), 300u);
  s.e.cc.window = 5000;
  EXPECT_EQ(s.e.qp->send_window(), transport::kMaxBdpWindow);
}

// A stall (issue 39: four QPs' whole windows resent at every timeout into a descheduled receiver's
// full socket): a timeout that finds no progress since the last one restarts the go-back-N from
// kMinBdpWindow PSNs, not the whole window, and the window grows back by each PSN acknowledged.
// `adaptive`: the second adaptive timeout in a row is the stall; else the IBTA timer's first.
void expect_restart_after_a_stall(bool adaptive) {
  Solo s(QpType::kRc);
  s.e.qp->set_recovery(transport::RecoveryParams{adaptive, /*tail_probe=*/false, true, kMinRto});
  const std::uint32_t psn = sample(s, 1, kPsn, Duration::us(30));
  s.e.cc.window = 5000;  // a window-based rule that holds nothing back: the ceiling is the window
  ASSERT_EQ(s.e.qp->send_window(), transport::kMaxBdpWindow);
  post_write(s, 2, 512 * 1024);  // 512 packets
  ASSERT_EQ(s.drain().size(), 512u);
  if (adaptive) {
    // The first adaptive timeout may have fired on late ACKs: the whole window again.
    s.now = s.e.qp->poll_timeout();
    s.e.qp->handle_timeout(s.now);
    EXPECT_EQ(s.drain().size(), 512u);
    EXPECT_EQ(s.e.qp->send_window(), transport::kMaxBdpWindow);
  }
  s.now = s.e.qp->poll_timeout();
  s.e.qp->handle_timeout(s.now);
  EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, adaptive ? 2u : 0u);
  EXPECT_EQ(s.e.qp->counters().timeouts, adaptive ? 0u : 1u);
  EXPECT_EQ(s.e.qp->send_window(), transport::kMinBdpWindow);
  auto out = s.drain();
  ASSERT_EQ(out.size(), transport::kMinBdpWindow);
  EXPECT_EQ(out[0].h.bth.psn, psn);
  // An ACK of the first 16: the window grows by 16, so 32 more leave (16 in place of those).
  s.advance(Duration::us(30));
  ack(s, wire::psn_add(psn, 15));
  EXPECT_EQ(s.e.qp->send_window(), transport::kMinBdpWindow + 16);
  out = s.drain();
  ASSERT_EQ(out.size(), 32u);
  EXPECT_EQ(out[0].h.bth.psn, wire::psn_add(psn, 32));
  // The ACK of everything sent before the timeout (the receiver had it): +496.
  s.advance(Duration::us(30));
  ack(s, wire::psn_add(psn, 511));
  EXPECT_EQ(s.e.scq.wcs.size(), 2u);
  EXPECT_EQ(s.e.qp->send_window(), transport::kMinBdpWindow + 512);
  // Once it reaches the steady window the restart is over.
  post_write(s, 3, 512 * 1024);
  ASSERT_EQ(s.drain().size(), 512u);
  s.advance(Duration::us(30));
  ack(s, wire::psn_add(psn, 1023));
  EXPECT_EQ(s.e.scq.wcs.size(), 3u);
  EXPECT_EQ(s.e.qp->send_window(), transport::kMaxBdpWindow);
}

TEST(Recovery, AnIbtaTimeoutRestartsTheGoBackNFromASmallWindow) {
  expect_restart_after_a_stall(false);
}

TEST(Recovery, ASecondAdaptiveTimeoutWithoutProgressRestartsFromASmallWindow) {
  expect_restart_after_a_stall(true);
}

// ---- ACKs of packets sent before a go-back-N (issue 39) -----------------------------------------
// A timer that fires while the packets and their ACKs are on the way rewinds the requester below
// PSNs the responder has. Their ACKs answer requests that were sent: they complete the WQEs, and
// the requester does not send again what they acknowledge.

// What the requester sends now: their PSNs must be `psns`.
std::vector<Solo::Sent> expect_sent(Solo& s, const std::vector<std::uint32_t>& psns) {
  std::vector<Solo::Sent> out = s.drain();
  std::vector<std::uint32_t> sent;
  for (const Solo::Sent& p : out) sent.push_back(p.h.bth.psn);
  EXPECT_EQ(sent, psns);
  return out;
}

TEST(Recovery, AnAckArrivingAfterATimeoutsGoBackNCompletesTheWqesAndRestoresTheRetries) {
  Solo s(QpType::kRc);
  s.set(/*timeout=*/14, /*retry_cnt=*/1, 7);
  s.e.qp->set_recovery(transport::RecoveryParams::off());
  post_write(s, 1, 4096);  // PSNs p .. p+3
  ASSERT_EQ(s.drain().size(), 4u);
  s.advance(ibta(14));  // the IBTA timer: one retry spent, the requester back at p
  EXPECT_EQ(s.e.qp->counters().timeouts, 1u);
  // The ACK of the first transmission comes before the requester sent anything again.
  const std::uint64_t dropped = s.e.qp->counters().dropped;
  ack(s, wire::psn_add(kPsn, 3));
  EXPECT_EQ(s.e.qp->counters().dropped, dropped);
  ASSERT_EQ(s.e.scq.wcs.size(), 1u);
  EXPECT_EQ(s.e.scq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_TRUE(s.drain().empty());  // nothing acknowledged is sent again
  EXPECT_TRUE(s.e.qp->poll_timeout().is_never());
  // Progress restored retry_cnt (1): the next WRITE survives one timeout, and takes the next PSNs.
  post_write(s, 2, 1024);
  auto out = s.drain();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].h.bth.psn, wire::psn_add(kPsn, 4));
  s.advance(ibta(14));
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
  EXPECT_EQ(s.drain().size(), 1u);
  ack(s, wire::psn_add(kPsn, 4));
  EXPECT_EQ(s.e.scq.wcs.size(), 2u);
  EXPECT_EQ(s.e.qp->counters().retry_exceeded, 0u);
}

TEST(Recovery, AnAckPartWayThroughTheRewoundPacketsLeavesOnlyTheRestToSend) {
  Solo s(QpType::kRc);
  s.e.qp->set_recovery(transport::RecoveryParams::off());
  post_write(s, 1, 2048);  // p, p+1
  post_write(s, 2, 4096);  // p+2 .. p+5
  ASSERT_EQ(s.drain().size(), 6u);
  s.advance(ibta(14));
  // The responder had p .. p+3: the first WRITE completes, the second resumes at p+4.
  ack(s, wire::psn_add(kPsn, 3));
  ASSERT_EQ(s.e.scq.wcs.size(), 1u);
  EXPECT_EQ(s.e.scq.wcs[0].wr_id, 1u);
  const auto out = expect_sent(s, {wire::psn_add(kPsn, 4), wire::psn_add(kPsn, 5)});
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaWriteMiddle);
  EXPECT_EQ(out[0].payload, slice(s.e, 2048, 1024));  // the WRITE's third KiB
  ack(s, wire::psn_add(kPsn, 5));
  EXPECT_EQ(s.e.scq.wcs.size(), 2u);
}

TEST(Recovery, AResponseToAPsnNeverSentIsStillDropped) {
  Solo s(QpType::kRc);
  s.e.qp->set_recovery(transport::RecoveryParams::off());
  post_write(s, 1, 2048);  // p, p+1
  ASSERT_EQ(s.drain().size(), 2u);
  s.advance(ibta(14));
  const std::uint64_t dropped = s.e.qp->counters().dropped;
  ack(s, wire::psn_add(kPsn, 2));  // beyond everything ever sent
  seq_nak(s, wire::psn_add(kPsn, 2));
  EXPECT_EQ(s.e.qp->counters().dropped, dropped + 2);
  EXPECT_TRUE(s.e.scq.wcs.empty());
  EXPECT_EQ(s.e.qp->counters().seq_naks_received, 0u);
  EXPECT_EQ(s.drain().size(), 2u);  // the go-back-N goes on
}

// A READ's response stream to the first request is the READ's data, whichever request the
// requester has (re)sent since: taken, it completes the READ, which is not requested again.
void read_stream(Solo& s, const std::vector<std::byte>& remote, std::uint32_t first,
                 std::uint32_t from) {
  const auto packets = static_cast<std::uint32_t>(remote.size() / 1024);
  for (std::uint32_t i = from; i < packets; ++i) {
    wire::TransportHeaders h;
    const Opcode op = packets == 1       ? Opcode::kRcRdmaReadResponseOnly
                      : i == 0           ? Opcode::kRcRdmaReadResponseFirst
                      : i == packets - 1 ? Opcode::kRcRdmaReadResponseLast
                                         : Opcode::kRcRdmaReadResponseMiddle;
    h.bth.opcode = static_cast<std::uint8_t>(op);
    h.bth.psn = wire::psn_add(first, i);
    if (i == 0 || i == packets - 1) h.aeth.syndrome = wire::make_ack_syndrome();
    s.feed(h, ConstBytes(remote).subspan(std::size_t{i} * 1024, 1024));
  }
}

void post_read(Solo& s, std::uint64_t id, std::size_t off, std::uint32_t len) {
  const Sge sg = sge(s.e, off, len);
  transport::SendRequest r = request(id, WrOpcode::kRdmaRead, std::span(&sg, 1));
  r.remote_addr = 0x20000;
  r.rkey = 0x99;
  ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
}

TEST(Recovery, AReadsResponsesAfterATimeoutsGoBackNCompleteIt) {
  Solo s(QpType::kRc);
  s.e.qp->set_recovery(transport::RecoveryParams::off());
  const auto remote = pattern(4096, 7);
  post_read(s, 1, 8192, 4096);  // one request, responses at p .. p+3
  post_write(s, 2, 1024);       // p+4
  ASSERT_EQ(s.drain().size(), 2u);
  s.advance(ibta(14));
  read_stream(s, remote, kPsn, 0);
  ASSERT_EQ(s.e.scq.wcs.size(), 1u);
  EXPECT_EQ(s.e.scq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(slice(s.e, 8192, 4096), remote);
  // The READ is not requested again; the WRITE behind it, not acknowledged, goes again.
  const auto out = expect_sent(s, {wire::psn_add(kPsn, 4)});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].op->opcode(), Opcode::kRcRdmaWriteOnly);
  ack(s, wire::psn_add(kPsn, 4));
  EXPECT_EQ(s.e.scq.wcs.size(), 2u);
}

TEST(Recovery, AReadRewoundMidStreamTakesTheRestOfTheFirstStream) {
  Solo s(QpType::kRc);
  s.e.qp->set_recovery(transport::RecoveryParams::off());
  const auto remote = pattern(4096, 9);
  post_read(s, 1, 8192, 4096);
  ASSERT_EQ(s.drain().size(), 1u);
  // Two responses arrive, then the stream stalls past the timeout (a slow responder).
  s.feed(Opcode::kRcRdmaReadResponseFirst, kPsn, ConstBytes(remote).first(1024));
  s.feed(Opcode::kRcRdmaReadResponseMiddle, wire::psn_add(kPsn, 1),
         ConstBytes(remote).subspan(1024, 1024));
  s.advance(ibta(14));  // back to p+2, mid-READ
  read_stream(s, remote, kPsn, 2);
  ASSERT_EQ(s.e.scq.wcs.size(), 1u);
  EXPECT_EQ(s.e.scq.wcs[0].status, WcStatus::kSuccess);
  EXPECT_EQ(slice(s.e, 8192, 4096), remote);
  EXPECT_TRUE(s.drain().empty());
}

// An adaptive timeout whose first progress comes sooner than the minimum RTT after it answered
// packets sent before it: spurious. Counted, and the RTO backs off for the QP; no retry is spent.
TEST(Recovery, ASpuriousAdaptiveTimeoutIsCountedAndRaisesTheRto) {
  Solo s(QpType::kRc);
  s.set(/*timeout=*/14, /*retry_cnt=*/0, 7);  // any retry spent would fail the QP
  s.e.qp->set_recovery(transport::RecoveryParams{true, /*tail_probe=*/false, true, kMinRto});
  std::uint32_t psn = sample(s, 1, kPsn, Duration::us(30));
  ASSERT_EQ(s.e.qp->rto(), kMinRto);
  post_write(s, 2, 4096);  // psn .. psn+3
  ASSERT_EQ(s.drain().size(), 4u);
  s.advance(kMinRto);
  EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, 1u);
  ASSERT_EQ(s.drain().size(), 4u);  // sent again
  // 10 us later (the minimum RTT is 30 us) an ACK arrives: it answers the first transmission.
  s.advance(Duration::us(10));
  ack(s, wire::psn_add(psn, 3));
  EXPECT_EQ(s.e.qp->counters().spurious_timeouts, 1u);
  EXPECT_EQ(s.e.qp->rto(), kMinRto * 2);
  EXPECT_EQ(s.e.scq.wcs.size(), 2u);
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
  psn = wire::psn_add(psn, 4);
  // A timeout that was not spurious (its ACK a full RTT after it) leaves the floor alone.
  post_write(s, 3, 1024);
  ASSERT_EQ(s.drain().size(), 1u);
  s.advance(kMinRto * 2);
  EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, 2u);
  ASSERT_EQ(s.drain().size(), 1u);
  s.advance(Duration::us(40));
  ack(s, psn);
  EXPECT_EQ(s.e.qp->counters().spurious_timeouts, 1u);
  EXPECT_EQ(s.e.qp->rto(), kMinRto * 2);
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
}

TEST(Recovery, AdaptiveTimeoutsSpendNoRetryCount) {
  Solo s(QpType::kRc);
  s.set(/*timeout=*/14, /*retry_cnt=*/0, 7);
  s.e.qp->set_recovery(transport::RecoveryParams{true, /*tail_probe=*/false, true, kMinRto});
  const std::uint32_t psn = sample(s, 1, kPsn, Duration::us(30));
  post_write(s, 2, 1024);
  ASSERT_EQ(s.drain().size(), 1u);
  // 5, 10, 20 ms: three adaptive timeouts, all before the IBTA timer's 67 ms.
  for (int i = 0; i < 3; ++i) {
    s.now = s.e.qp->poll_timeout();
    s.e.qp->handle_timeout(s.now);
    EXPECT_EQ(s.drain().size(), 1u);
  }
  EXPECT_EQ(s.e.qp->counters().adaptive_timeouts, 3u);
  EXPECT_EQ(s.e.qp->counters().timeouts, 0u);
  EXPECT_EQ(s.e.qp->state(), QpState::kRts);
  s.advance(Duration::us(30));
  ack(s, psn);
  EXPECT_EQ(s.e.scq.wcs.size(), 2u);
  EXPECT_EQ(s.e.scq.wcs[1].status, WcStatus::kSuccess);
}

}  // namespace
}  // namespace uroce::test
