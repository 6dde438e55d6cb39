// transport/ack_state.h: the per-QP hold and deferral rules on the facts a QP gives them. The QP's
// use (the facts it reads, the order of its packets) is tested in audit_test.cc and
// tests/device/ack_hold_test.cc; what the learner learns, in ack_learner_test.cc.
#include "transport/ack_state.h"

#include <gtest/gtest.h>

namespace uroce::transport {
namespace {

// A ping-pong side whose one response is the positive ACK of a SEND covering one PSN, with one
// request of its own outstanding and nothing ready: an ACK that may be held.
AckFacts holdable() {
  AckFacts f;
  f.sent_any = true;
  f.outstanding = 1;
  f.ack_timeout = 14;  // perftest's
  f.lone_ack = AckFor::kSend;
  f.lone_ack_psns = 1;
  return f;
}

TEST(AckState, ALoneEndOfMessageAckOfAPingPongSideMayBeHeld) {
  const AckState a;
  EXPECT_TRUE(a.may_hold(holdable(), 1));
  AckFacts write = holdable();
  write.lone_ack = AckFor::kWrite;
  EXPECT_TRUE(a.may_hold(write, 1));
  AckFacts infinite = holdable();
  infinite.ack_timeout = 0;  // no ACK timeout: nothing to outlast
  EXPECT_TRUE(a.may_hold(infinite, 1));
}

TEST(AckState, EachFactThatRulesAHoldOutRulesItOut) {
  const AckState a;
  const auto without = [&](auto change) {
    AckFacts f = holdable();
    change(f);
    return a.may_hold(f, 1);
  };
  EXPECT_FALSE(without([](AckFacts& f) { f.in_error = true; }));
  EXPECT_FALSE(without([](AckFacts& f) { f.cnp_owed = true; }));
  EXPECT_FALSE(without([](AckFacts& f) { f.sent_any = false; }));  // a QP that only responds
  EXPECT_FALSE(without([](AckFacts& f) { f.outstanding = 2; }));   // streams requests
  EXPECT_FALSE(without([](AckFacts& f) { f.request_ready = true; }));
  EXPECT_FALSE(without([](AckFacts& f) { f.lone_ack = AckFor::kNone; }));
  EXPECT_FALSE(without([](AckFacts& f) { f.ack_timeout = AckState::kMinTimeoutToHoldAck - 1; }));
  EXPECT_TRUE(without([](AckFacts& f) { f.ack_timeout = AckState::kMinTimeoutToHoldAck; }));
}

TEST(AckState, AnAckCoveringKMaxPsnsBehindAHeldAckIsNotHeld) {
  const AckState a;
  AckFacts f = holdable();
  f.lone_ack_psns = kMaxPsnsBehindAHeldAck - 1;
  EXPECT_TRUE(a.may_hold(f, 1));
  f.lone_ack_psns = kMaxPsnsBehindAHeldAck;
  EXPECT_FALSE(a.may_hold(f, 1));
}

TEST(AckState, MoreOutstandingRequestsAreAllowedWhenTheCallerSaysSo) {
  const AckState a;
  AckFacts f = holdable();
  f.outstanding = 1 + kMaxPsnsBehindADeferredAck;
  EXPECT_FALSE(a.may_hold(f, 1));
  EXPECT_TRUE(a.may_hold(f, 1 + kMaxPsnsBehindADeferredAck));
  f.outstanding = 2 + kMaxPsnsBehindADeferredAck;
  EXPECT_FALSE(a.may_hold(f, 1 + kMaxPsnsBehindADeferredAck));
}

TEST(AckState, AKindWhoseHeldAckLeftAloneIsNotHeldAgainUntilTheApplicationAnswers) {
  AckState a;
  a.held(1);
  ASSERT_TRUE(a.take_held());
  EXPECT_FALSE(a.take_held());                 // one request packet at most goes first
  EXPECT_FALSE(a.left_alone(AckFor::kWrite));  // not a deferred one
  a.ack_sent(AckFor::kWrite);
  a.left_alone_sent();
  AckFacts write = holdable();
  write.lone_ack = AckFor::kWrite;
  EXPECT_FALSE(a.may_hold(write, 1));
  EXPECT_TRUE(a.may_hold(holdable(), 1));  // SENDs still are
  // The next WRITE's ACK leaves at once; the application answers it before the peer speaks.
  a.peer_spoke();
  a.ack_queued(AckFor::kWrite);
  a.ack_sent(AckFor::kWrite);
  a.request_started();
  EXPECT_TRUE(a.may_hold(write, 1));
}

TEST(AckState, OnlyTheAckAnUnsignaledRequestJustOvertookMayBeDeferred) {
  AckState a;
  const AckFacts f = holdable();
  EXPECT_FALSE(a.may_defer(f));  // no request overtook it
  a.held(1);
  ASSERT_TRUE(a.take_held());
  a.overtaken(AckFor::kSend, /*unsignaled=*/false);
  EXPECT_FALSE(a.may_defer(f));
  a.held(1);
  ASSERT_TRUE(a.take_held());
  a.overtaken(AckFor::kSend, /*unsignaled=*/true);
  EXPECT_TRUE(a.may_defer(f));
  AckFacts ready = f;
  ready.request_ready = true;
  EXPECT_FALSE(a.may_defer(ready));
  AckFacts error = f;
  error.in_error = true;
  EXPECT_FALSE(a.may_defer(error));
  AckFacts wide = f;
  wide.lone_ack_psns = kMaxPsnsBehindADeferredAck;
  EXPECT_FALSE(a.may_defer(wide));
  a.poll_started();  // the next poll: the request is no longer the one just sent
  EXPECT_FALSE(a.may_defer(f));
}

TEST(AckState, ADeferredAckStaysHeldAndOneLeftAloneStopsDeferringItsKind) {
  AckState a;
  const AckFacts f = holdable();
  a.held(1);
  ASSERT_TRUE(a.take_held());
  a.overtaken(AckFor::kSend, true);
  ASSERT_TRUE(a.may_defer(f));
  a.defer();
  EXPECT_FALSE(a.may_defer(f));              // deferred once per request
  EXPECT_TRUE(a.take_held());                // still held
  EXPECT_TRUE(a.left_alone(AckFor::kSend));  // the peer waited for it
  a.ack_sent(AckFor::kSend);
  a.left_alone_sent();
  a.held(1);
  ASSERT_TRUE(a.take_held());
  a.overtaken(AckFor::kSend, true);
  EXPECT_FALSE(a.may_defer(f));  // SENDs' ACKs are not deferred now
  AckFacts write = f;
  write.lone_ack = AckFor::kWrite;
  EXPECT_TRUE(a.may_defer(write));  // WRITEs' still are
}

}  // namespace
}  // namespace uroce::transport
