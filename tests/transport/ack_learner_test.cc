// transport/ack_learner.h: each learner's rule on its own, as the QP feeds it events. The QP's
// use of them (holds, deferrals, the counters) is tested in audit_test.cc, tests/device/
// ack_hold_test.cc and the simulator (tests/sim/progress_sim_test.cc).
#include "transport/ack_learner.h"

#include <gtest/gtest.h>

namespace uroce::transport {
namespace {

// A held ACK of `kind` that leaves alone, as Qp::poll_packet reports it.
bool leave_alone(AckLearner& l, AckFor kind) {
  const bool deferred = l.left_alone(kind);
  l.ack_sent(kind);
  l.left_alone_sent();
  return deferred;
}

// The peer's message of `kind` ACKed and that ACK sent at once.
void peer_message_acked(AckLearner& l, AckFor kind) {
  l.peer_spoke();
  l.ack_queued(kind);
  l.ack_sent(kind);
}

TEST(BackedOff, AFailureSwitchesItOffFor64EventsThen128AndASuccessResetsTheBackOff) {
  BackedOff b;
  EXPECT_TRUE(b.on);
  b.failed();
  EXPECT_FALSE(b.on);
  for (int i = 0; i < 63; ++i) b.count();
  EXPECT_FALSE(b.on);
  b.count();
  EXPECT_TRUE(b.on);  // after 64
  b.failed();
  for (int i = 0; i < 127; ++i) b.count();
  EXPECT_FALSE(b.on);
  b.count();
  EXPECT_TRUE(b.on);  // after 128
  b.succeeded();
  b.failed();
  EXPECT_EQ(b.retry_in, 64u);  // back to the start
}

TEST(BackedOff, TheBackOffStopsDoublingAtItsMaximum) {
  BackedOff b;
  for (int i = 0; i < 20; ++i) b.failed();
  EXPECT_EQ(b.backoff, BackedOff::kMax);
  EXPECT_EQ(b.retry_in, BackedOff::kMax);
  b.count();  // counting while on changes nothing
  BackedOff on;
  on.count();
  EXPECT_TRUE(on.on);
  EXPECT_EQ(on.retry_in, 0u);
}

TEST(AckLearner, AtFirstEveryKindMayBeHeldAndDeferred) {
  const AckLearner l;
  for (const AckFor k : {AckFor::kWrite, AckFor::kSend}) {
    EXPECT_TRUE(l.may_hold(k, 1));
    EXPECT_TRUE(l.may_hold(k, 5));
    EXPECT_TRUE(l.may_defer(k));
  }
  EXPECT_FALSE(l.deferring());
}

TEST(AckLearner, AHeldAckLeftAloneStopsHoldingItsKindUntilTheApplicationAnswersAnother) {
  AckLearner l;
  l.held(false);
  EXPECT_FALSE(leave_alone(l, AckFor::kWrite));
  EXPECT_FALSE(l.may_hold(AckFor::kWrite, 1));
  EXPECT_TRUE(l.may_hold(AckFor::kSend, 1));  // the other kind is untouched
  EXPECT_TRUE(l.may_defer(AckFor::kWrite));   // and so is deferring
  // A late answer to the ACK that left alone does not count.
  l.request_started();
  EXPECT_FALSE(l.may_hold(AckFor::kWrite, 1));
  // The next WRITE's ACK goes at once; the peer speaks again before the application answers.
  peer_message_acked(l, AckFor::kWrite);
  peer_message_acked(l, AckFor::kWrite);
  EXPECT_FALSE(l.may_hold(AckFor::kWrite, 1));
  // This time the application starts a request before the peer's next one: it answers.
  l.request_started();
  EXPECT_TRUE(l.may_hold(AckFor::kWrite, 1));
}

TEST(AckLearner, ADeferredAckLeftAloneStopsDeferringItsKindFor64HoldsThen128) {
  AckLearner l;
  l.held(false);
  l.deferred();
  EXPECT_TRUE(l.deferring());
  EXPECT_TRUE(leave_alone(l, AckFor::kSend));
  EXPECT_FALSE(l.deferring());
  EXPECT_FALSE(l.may_defer(AckFor::kSend));
  EXPECT_TRUE(l.may_defer(AckFor::kWrite));
  EXPECT_TRUE(l.may_hold(AckFor::kSend, 1));  // the peer waited: holding is not to blame
  // Retried after 64 held ACKs of the kind that requests overtook.
  for (int i = 0; i < 63; ++i) {
    l.held(false);
    l.hold_answered(AckFor::kSend);
  }
  EXPECT_FALSE(l.may_defer(AckFor::kSend));
  l.hold_answered(AckFor::kSend);
  EXPECT_TRUE(l.may_defer(AckFor::kSend));
  // Failing again: 128 this time.
  l.deferred();
  EXPECT_TRUE(leave_alone(l, AckFor::kSend));
  for (int i = 0; i < 127; ++i) l.hold_answered(AckFor::kSend);
  EXPECT_FALSE(l.may_defer(AckFor::kSend));
  l.hold_answered(AckFor::kSend);
  EXPECT_TRUE(l.may_defer(AckFor::kSend));
}

TEST(AckLearner, ADeferredAckThatThePeersNextRequestOvertakesResetsTheBackOff) {
  AckLearner l;
  l.deferred();
  leave_alone(l, AckFor::kWrite);  // back-off now 128
  EXPECT_EQ(l.defers_state(AckFor::kWrite).backoff, 128u);
  for (int i = 0; i < 64; ++i) l.hold_answered(AckFor::kWrite);
  ASSERT_TRUE(l.may_defer(AckFor::kWrite));
  l.deferred();
  l.ack_replaced(AckFor::kWrite);  // the peer did not wait
  EXPECT_FALSE(l.deferring());
  EXPECT_EQ(l.defers_state(AckFor::kWrite).backoff, 64u);
  // An ACK replaced when it was not deferred teaches nothing.
  leave_alone(l, AckFor::kWrite);
  l.ack_replaced(AckFor::kWrite);
  EXPECT_EQ(l.defers_state(AckFor::kWrite).backoff, 64u);
}

TEST(AckLearner, AWideHoldLeftAloneStopsWideHoldsForThePeers64MessagesThen128) {
  AckLearner l;
  l.held(true);
  leave_alone(l, AckFor::kWrite);
  EXPECT_FALSE(l.may_hold(AckFor::kSend, 2));
  EXPECT_TRUE(l.may_hold(AckFor::kSend, 1));  // a narrow hold is still allowed
  for (int i = 0; i < 63; ++i) peer_message_acked(l, AckFor::kSend);
  EXPECT_FALSE(l.may_hold(AckFor::kSend, 2));
  l.ack_queued(AckFor::kNone);  // an ACK of no message's end does not count
  EXPECT_FALSE(l.may_hold(AckFor::kSend, 2));
  l.ack_queued(AckFor::kSend);
  EXPECT_TRUE(l.may_hold(AckFor::kSend, 2));
  l.held(true);
  leave_alone(l, AckFor::kSend);
  for (int i = 0; i < 127; ++i) l.ack_queued(AckFor::kWrite);
  EXPECT_FALSE(l.wide_state().on);
  l.ack_queued(AckFor::kWrite);
  EXPECT_TRUE(l.wide_state().on);
}

TEST(AckLearner, AnAnsweredWideHoldResetsTheBackOffAndANarrowOneLeavesItAlone) {
  AckLearner l;
  l.held(true);
  leave_alone(l, AckFor::kWrite);
  for (int i = 0; i < 64; ++i) l.ack_queued(AckFor::kWrite);
  ASSERT_TRUE(l.wide_state().on);
  EXPECT_EQ(l.wide_state().backoff, 128u);
  l.held(false);
  l.hold_answered(AckFor::kWrite);
  EXPECT_EQ(l.wide_state().backoff, 128u);
  l.held(true);
  l.hold_answered(AckFor::kWrite);
  EXPECT_EQ(l.wide_state().backoff, 64u);
  // A deferral is no wide hold: its failure is the deferral's.
  l.held(true);
  l.deferred();
  leave_alone(l, AckFor::kWrite);
  EXPECT_TRUE(l.wide_state().on);
  EXPECT_FALSE(l.may_defer(AckFor::kWrite));
}

}  // namespace
}  // namespace uroce::transport
