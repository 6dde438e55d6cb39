// The device's ACK policy on its own (engine/ack_policy.h): the round level with time as an
// input (a round's mode, when held ACKs fall due, what a round's report changes), and the flush
// level on a real QP (which QP a flush sets aside, which ACK stays behind a request). The QP's
// own learners are tests/transport/ack_learner_test.cc's; the policy in the simulator is
// tests/sim/progress_sim_test.cc's and cluster_test.cc's.
#include "engine/ack_policy.h"

#include <gtest/gtest.h>

#include "transport/harness.h"
#include "transport/steps.h"

namespace uroce::engine {
namespace {

const Instant kT0 = Instant::from_ns(1'000'000);
const Duration kHold = AckPolicyConfig{}.hold_for;

TEST(AckPolicy, TheDefaultsAreADevicesHoldAndDeferFor100Us) {
  const AckPolicyConfig c;
  EXPECT_TRUE(c.hold);
  EXPECT_TRUE(c.defer);
  EXPECT_EQ(c.hold_for, Duration::us(100));
  const AckPolicy p;
  EXPECT_TRUE(p.due().is_never());
  EXPECT_EQ(p.mode(kT0), AckMode::kHoldAndDefer);
}

TEST(AckPolicy, TheSwitchesChooseTheMode) {
  AckPolicyConfig c;
  c.defer = false;
  EXPECT_EQ(AckPolicy(c).mode(kT0), AckMode::kHold);
  c.hold = false;
  EXPECT_EQ(AckPolicy(c).mode(kT0), AckMode::kSend);
  c.defer = true;  // deferring needs holding
  EXPECT_EQ(AckPolicy(c).mode(kT0), AckMode::kSend);
}

TEST(AckPolicy, AThreadRoundHoldsNothingForABlockedApplication) {
  const AckPolicy p;
  EXPECT_EQ(p.mode(kT0, /*app_blocked=*/true), AckMode::kSend);
  EXPECT_EQ(p.mode(kT0, /*app_blocked=*/false), AckMode::kHoldAndDefer);
}

TEST(AckPolicy, HeldAcksFallDueOneHoldAfterTheFirstWasHeld) {
  AckPolicy p;
  p.round_done(kT0, 1, false);
  EXPECT_EQ(p.due(), kT0 + kHold);
  // Later rounds that still hold do not push the deadline out.
  p.round_done(kT0 + Duration::us(40), 2, false);
  EXPECT_EQ(p.due(), kT0 + kHold);
  EXPECT_EQ(p.mode(kT0 + Duration::ns(kHold.count_ns() - 1)), AckMode::kHoldAndDefer);
  // Due: the next round sends them.
  EXPECT_EQ(p.mode(kT0 + kHold), AckMode::kSend);
  EXPECT_EQ(p.mode(kT0 + kHold + Duration::ms(1)), AckMode::kSend);
  // A round that left nothing held ends the hold; the next one starts a new one.
  p.round_done(kT0 + kHold, 0, false);
  EXPECT_TRUE(p.due().is_never());
  EXPECT_EQ(p.mode(kT0 + kHold), AckMode::kHoldAndDefer);
  p.round_done(kT0 + Duration::ms(1), 1, false);
  EXPECT_EQ(p.due(), kT0 + Duration::ms(1) + kHold);
}

TEST(AckPolicy, ADeferredAckStartsItsHoldOver) {
  AckPolicy p;
  p.round_done(kT0, 1, false);
  const Instant later = kT0 + Duration::us(70);
  p.round_done(later, 1, true);  // a request overtook the held ACK, which stayed behind it
  EXPECT_EQ(p.due(), later + kHold);
  EXPECT_EQ(p.mode(kT0 + kHold), AckMode::kHoldAndDefer);  // past the first deadline: still held
}

TEST(AckPolicy, TheHoldLastsWhatTheConfigurationSays) {
  AckPolicyConfig c;
  c.hold_for = Duration::ms(20);
  AckPolicy p(c);
  p.round_done(kT0, 1, false);
  EXPECT_EQ(p.due(), kT0 + Duration::ms(20));
}

TEST(AckPolicy, HeldAcksSentOutsideARoundAreNoLongerDue) {
  AckPolicy p;
  p.round_done(kT0, 3, false);
  ASSERT_FALSE(p.due().is_never());
  p.flushed();
  EXPECT_TRUE(p.due().is_never());
  EXPECT_EQ(p.mode(kT0 + Duration::s(1)), AckMode::kHoldAndDefer);
}

TEST(AckPolicy, SwitchingHoldingOffReleasesTheHeldAcksAndOnKeepsThem) {
  AckPolicy p;
  p.round_done(kT0, 1, false);
  AckPolicyConfig c;
  c.defer = false;
  p.reconfigure(c);  // still holding: the held ACKs stay due when they were
  EXPECT_EQ(p.due(), kT0 + kHold);
  EXPECT_EQ(p.mode(kT0), AckMode::kHold);
  c.hold = false;
  p.reconfigure(c);  // a closing device's drain
  EXPECT_TRUE(p.due().is_never());
  EXPECT_EQ(p.mode(kT0), AckMode::kSend);
}

// ---- the flush level, on a QP -----------------------------------------------------------------

using test::Solo;
using wire::Opcode;

constexpr std::uint32_t kEpsn = 0x5000;  // Solo's rq_psn
constexpr std::uint32_t kPsn = 0x1000;   // Solo's sq_psn

// One SEND of this side's, acknowledged: the QP has sent requests, so it looks like one side of
// a ping-pong.
void send_and_get_acked(Solo& s) {
  const Sge w = test::sge(s.e, 0, 8);
  ASSERT_EQ(s.e.qp->post_send(test::request(1, WrOpcode::kSend, std::span(&w, 1))), Errc::kOk);
  ASSERT_EQ(s.drain().size(), 1u);
  test::peer_response(s, kPsn);
}

TEST(AckPolicy, AFlushThatHoldsSetsAsideAQpWhoseOnlyPacketIsAnAck) {
  Solo s(QpType::kRc);
  send_and_get_acked(s);
  if (HasFatalFailure()) return;
  test::post_recv(s, 1, 4096, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn, test::pattern(8, 0));
  ASSERT_TRUE(s.e.qp->only_ack_to_send());
  EXPECT_FALSE(AckPolicy::sets_aside(AckMode::kSend, *s.e.qp));
  EXPECT_TRUE(AckPolicy::sets_aside(AckMode::kHold, *s.e.qp));
  EXPECT_TRUE(AckPolicy::sets_aside(AckMode::kHoldAndDefer, *s.e.qp));
}

// The peer's deferred ACKs leave this side's requests of a ping-pong unacknowledged: while
// deferring, a QP with a few requests outstanding is still one side of a ping-pong; while only
// holding, it is not.
TEST(AckPolicy, WhileDeferringAQpWithRequestsOutstandingStillHoldsItsAck) {
  Solo s(QpType::kRc);
  send_and_get_acked(s);
  if (HasFatalFailure()) return;
  const Sge w = test::sge(s.e, 0, 8);
  for (std::uint64_t id : {2, 3}) {
    ASSERT_EQ(s.e.qp->post_send(test::request(id, WrOpcode::kSend, std::span(&w, 1))), Errc::kOk);
  }
  ASSERT_EQ(s.drain().size(), 2u);  // two requests outstanding
  test::post_recv(s, 1, 4096, 64);
  s.feed(Opcode::kRcSendOnly, kEpsn, test::pattern(8, 0));
  EXPECT_FALSE(AckPolicy::sets_aside(AckMode::kHold, *s.e.qp));
  EXPECT_TRUE(AckPolicy::sets_aside(AckMode::kHoldAndDefer, *s.e.qp));
}

// A held ACK that an unsignaled request overtook may stay behind it, only while deferring.
TEST(AckPolicy, OnlyADeferringFlushKeepsTheAckBehindTheRequest) {
  for (const bool signaled : {false, true}) {
    SCOPED_TRACE(signaled ? "signaled" : "unsignaled");
    Solo s(QpType::kRc);
    send_and_get_acked(s);
    if (HasFatalFailure()) return;
    test::post_recv(s, 1, 4096, 64);
    s.feed(Opcode::kRcSendOnly, kEpsn, test::pattern(8, 0));
    ASSERT_TRUE(AckPolicy::sets_aside(AckMode::kHoldAndDefer, *s.e.qp));
    s.e.qp->note_ack_held();  // the engine held it
    const Sge w = test::sge(s.e, 0, 8);
    ASSERT_EQ(s.e.qp->post_send(test::request(2, WrOpcode::kSend, std::span(&w, 1),
                                              signaled ? kSendSignaled : 0u)),
              Errc::kOk);
    const auto sent = s.drain(1);  // the request goes before the held ACK
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].op->opcode(), Opcode::kRcSendOnly);
    EXPECT_FALSE(AckPolicy::defers_behind(AckMode::kSend, *s.e.qp));
    EXPECT_FALSE(AckPolicy::defers_behind(AckMode::kHold, *s.e.qp));
    // Behind a signaled request the ACK is never deferred (its peer likely waits for it).
    EXPECT_EQ(AckPolicy::defers_behind(AckMode::kHoldAndDefer, *s.e.qp), !signaled);
  }
}

}  // namespace
}  // namespace uroce::engine
