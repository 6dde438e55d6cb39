// Aimd's window (cc/aimd.h) through the transport: the requester keeps no more PSNs outstanding
// than the window, which opens as ACKs come (slow start), closes on a loss, and is paced once the
// rule has timed a round trip.
#include <gtest/gtest.h>

#include <algorithm>

#include "cc/aimd.h"
#include "harness.h"
#include "steps.h"
#include "wire/aeth.h"
#include "wire/opcode.h"
#include "wire/psn.h"

namespace uroce::test {
namespace {

// `n` 64 KiB SENDs from the Solo's buffer (64 packets each at MTU 1024), then one ACK or NAK.
void post_sends(Solo& s, int n) {
  for (int i = 0; i < n; ++i) {
    transport::SendRequest r;
    r.wr_id = static_cast<std::uint64_t>(i);
    r.opcode = WrOpcode::kSend;
    const Sge sge{s.va(0), 65536, s.e.key};
    r.sges = std::span<const Sge>(&sge, 1);
    ASSERT_EQ(s.e.qp->post_send(r), Errc::kOk);
  }
}

TEST(CcWindow, AimdsWindowCapsThePsnsOutstanding) {
  Solo s(QpType::kRc, 1024);
  s.set(/*timeout=*/14, /*retry_cnt=*/7, /*rnr_retry=*/7);
  cc::AimdParams p;
  p.initial_window_packets = 10;
  p.burst_packets = 1000;  // no pacing in the way of the count
  cc::Aimd aimd(p);
  s.e.cc.inner = &aimd;
  post_sends(s, 2);
  // The initial window.
  EXPECT_EQ(s.drain().size(), 10u);
  EXPECT_EQ(s.drain().size(), 0u);
  // All ten acknowledged a round trip later: slow start doubles the window.
  s.now = s.now + Duration::us(100);
  peer_response(s, 0x1000 + 9);
  EXPECT_EQ(aimd.window_packets(), 20u);
  EXPECT_EQ(aimd.srtt(), Duration::us(100));  // timed by the rule itself (or the transport)
  EXPECT_EQ(s.drain().size(), 20u);
  // A sequence NAK at the fifth of those: the window closes. The go-back-N sends the 16 PSNs
  // from the lost one on again, and nothing new.
  s.now = s.now + Duration::us(100);
  peer_response(s, 0x1000 + 14, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
  EXPECT_EQ(aimd.counters().loss_decreases, 1u);
  const std::uint32_t w = static_cast<std::uint32_t>(aimd.window());
  EXPECT_LT(w, 16u);
  const auto resent = s.drain();
  ASSERT_EQ(resent.size(), 16u);
  EXPECT_EQ(resent.front().h.bth.psn, 0x1000u + 14);
  EXPECT_EQ(resent.back().h.bth.psn, 0x1000u + 29);
  // Once they are acknowledged, the window is the cut one.
  s.now = s.now + Duration::us(100);
  peer_response(s, 0x1000 + 29);
  EXPECT_EQ(aimd.window_packets(), w);
  EXPECT_EQ(s.drain().size(), w);
}

TEST(CcWindow, AfterATimeoutTheAckOfWhatThePeerHadIsTaken) {
  // The peer had all ten; their ACK was lost. A timeout cuts the window to one, but the go-back-N
  // still sends the ten again, so the peer's ACK of the tenth (to the duplicates) is one of a
  // PSN sent: with a window of one the QP would drop it as one of a PSN never sent, time out
  // again and again, and fail with retry-exceeded.
  Solo s(QpType::kRc, 1024);
  s.set(/*timeout=*/14, /*retry_cnt=*/7, /*rnr_retry=*/7);
  cc::AimdParams p;
  p.initial_window_packets = 10;
  p.burst_packets = 1000;
  p.timeout_window_packets = 1;
  cc::Aimd aimd(p);
  s.e.cc.inner = &aimd;
  post_sends(s, 1);
  ASSERT_EQ(s.drain().size(), 10u);
  s.advance(s.e.qp->ack_timeout());
  EXPECT_EQ(aimd.counters().loss_decreases, 1u);
  EXPECT_DOUBLE_EQ(aimd.window(), 1.0);
  EXPECT_EQ(s.drain().size(), 10u);
  peer_response(s, 0x1000 + 9);
  EXPECT_EQ(s.e.cc.acked_packets, 10u);
  EXPECT_EQ(aimd.window_packets(), 1u);
  EXPECT_EQ(s.drain().size(), 1u);  // slow start again, from one
}

TEST(CcWindow, AimdPacesOnceItHasARoundTrip) {
  Solo s(QpType::kRc, 1024);
  cc::AimdParams p;
  p.initial_window_packets = 10;
  p.pacing_gain_percent = 125;
  p.burst_packets = 4;
  cc::Aimd aimd(p);
  s.e.cc.inner = &aimd;
  post_sends(s, 1);
  EXPECT_EQ(s.drain().size(), 10u);  // no round trip yet: the window alone
  s.now = s.now + Duration::us(100);
  peer_response(s, 0x1000 + 9);
  // 20 PSNs per 100 us at a gain of 1.25: the burst of four, then one every 4 us.
  EXPECT_EQ(s.drain().size(), 4u);
  const Instant next = s.e.qp->poll_timeout();
  ASSERT_FALSE(next.is_never());
  EXPECT_EQ(next - s.now, Duration::us(4));
  s.now = next;
  EXPECT_EQ(s.drain().size(), 1u);
}

// A rule that lets the first packet go, holds the rest until `hold_until`, and then may shut
// its window.
class HoldThenShut final : public cc::CongestionControl {
 public:
  Instant hold_until = Instant::never();
  std::uint32_t window = cc::kUnlimitedWindow;
  Instant next_send_time(Instant now, std::uint32_t) override {
    return sent_ == 0 ? now : std::max(now, hold_until);
  }
  void on_sent(Instant, std::uint32_t) override { ++sent_; }
  void on_ack(const cc::AckEvent&) override {}
  std::uint32_t window_packets() const override { return window; }
  void on_cnp(Instant) override {}
  void on_ecn_ce(Instant) override {}
  bool take_cnp(Instant) override { return false; }

 private:
  std::uint32_t sent_ = 0;
};

// A packet the rule held back, then not ready any more when the hold ends (the window shut
// meanwhile): the hold leaves poll_timeout() with it. It stayed there as a deadline in the past,
// so the device's round came due at the same instant for ever (the simulator's clock stood still
// with 64 senders into one).
TEST(CcWindow, AHoldWhosePacketIsNoLongerReadyLeavesNoDeadlineBehind) {
  Solo s(QpType::kRc, 1024);
  s.set(/*timeout=*/14, /*retry_cnt=*/7, /*rnr_retry=*/7);
  HoldThenShut cc;
  cc.hold_until = s.now + Duration::us(10);
  s.e.cc.inner = &cc;
  post_sends(s, 1);
  EXPECT_EQ(s.drain().size(), 1u);  // the first; the second is held
  EXPECT_EQ(s.e.qp->poll_timeout(), cc.hold_until);
  cc.window = 1;  // one PSN outstanding: no request is ready
  s.now = s.now + Duration::us(20);
  EXPECT_EQ(s.drain().size(), 0u);
  EXPECT_GT(s.e.qp->poll_timeout(), s.now);  // the ACK timer, not the hold that passed
}

}  // namespace
}  // namespace uroce::test
