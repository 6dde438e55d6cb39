// What an RC QP learns about holding and deferring its ACKs (issue 40): three learners that the
// QP feeds events and asks for a decision, kept out of the packet state machine so that each
// rule reads, and is tested (tests/transport/ack_learner_test.cc), on its own. Owned by the QP's
// AckState (transport/ack_state.h), the per-QP level of the device's ACK policy; the round and
// flush levels are engine/ack_policy.h's.
//
// - answers (per kind, AckFor::kWrite and kSend): whether this QP's application answers a message
//   of that kind with a request of its own soon enough for the message's ACK to wait for it, as
//   TCP's delayed ACK learns a ping-pong. A held ACK that leaves without a request behind it (the
//   engine's hold ran out, or it flushed the ACK for another reason: the application blocked, a
//   QP changed) clears its kind: a WRITE whose initiator waits for the completion before it says
//   so with a SEND (UCX's put rendezvous, MPI_Win_flush) cost that initiator the whole hold on
//   every message. The kind's ACKs then leave at once, and the kind is set again when this QP
//   starts a new request WQE after one of those ACKs left and before the peer's next request
//   executes (the application did answer). A late answer to the ACK that left alone does not
//   count.
// - defers (per kind): whether the peer sends its next message of that kind without waiting for
//   the ACK of the last one, so that the ACK may be deferred behind this side's request
//   (Qp::ack_deferrable). Fails when a deferred ACK leaves alone (the peer waited for it); counts
//   the ACKs that then follow their request; succeeds when a deferred ACK is overtaken by the
//   peer's next request.
// - wide: whether to hold an ACK while this QP has more than one request outstanding (which the
//   peer's deferred ACKs need: they leave this side's requests of a ping-pong unacknowledged). In
//   a stream both ways with a small window, each side's application may be waiting for a
//   completion that the other side's held ACK carries, and then both holds run out: one hold per
//   window. So a wide hold that leaves alone stops wide holds, and they are tried again after 64
//   of the peer's messages, then 128, ... (a wide hold that is answered succeeds): a stream pays
//   one hold at its messages 1, 65, 193, ..., a ping-pong none.
//
// Pure state: no clock, no allocation. Not thread-safe (its QP's).
#pragma once

#include <algorithm>
#include <cstdint>

namespace uroce::transport {

// What a positive ACK acknowledges, for holding it (Qp::only_ack_to_send): the end of an RDMA
// WRITE without immediate (the responder's application sees it only in its memory), the end of
// a message that completes a receive WQE (a SEND, a WRITE with immediate), or anything else.
enum class AckFor : std::uint8_t { kWrite, kSend, kNone };

// Learned behaviour that a failure switches off: tried again after `backoff` events, doubled at
// each failure (up to kMax), back to kStart at a success. A peer's wire-up or one slow turn does
// not end it for the connection's life, and one that always fails costs one failure per
// thousands of messages.
struct BackedOff {
  static constexpr std::uint32_t kStart = 64;
  static constexpr std::uint32_t kMax = 1u << 16;
  bool on = true;
  std::uint32_t backoff = kStart;
  std::uint32_t retry_in = 0;
  void failed() {
    on = false;
    retry_in = backoff;
    backoff = std::min(backoff * 2, kMax);
  }
  void succeeded() { backoff = kStart; }
  void count() {  // one event while off
    if (!on && --retry_in == 0) on = true;
  }
};

class AckLearner {
 public:
  // ---- decisions ----
  // A lone positive ACK of the end of a message of `kind` (not kNone) may be held, with
  // `outstanding` send WQEs of this QP not yet completed.
  bool may_hold(AckFor kind, std::uint32_t outstanding) const {
    return (outstanding <= 1 || wide_.on) && answers(kind);
  }
  // A held ACK of `kind` (not kNone) that a request overtook may stay behind it.
  bool may_defer(AckFor kind) const { return defer_[index(kind)].on; }
  // The ACK held now is a deferred one (deferred() since it was queued).
  bool deferring() const { return deferred_; }

  // ---- events ----
  // The responder queued the ACK of the end of a message of `kind` (one of the peer's messages).
  void ack_queued(AckFor kind) {
    if (kind != AckFor::kNone) wide_.count();
  }
  // A later ACK replaced the queued one, of `kind`, before it left: a deferred one was overtaken
  // by the peer's next request (deferring pays).
  void ack_replaced(AckFor kind) {
    if (deferred_ && kind != AckFor::kNone) defer_[index(kind)].succeeded();
    deferred_ = false;
  }
  // The engine held the ACK; `wide` when more than one request of this QP is outstanding.
  void held(bool wide) { wide_hold_ = wide; }
  // The engine kept the held ACK behind the request that overtook it (deferring learns on its
  // own: not a wide hold).
  void deferred() {
    deferred_ = true;
    wide_hold_ = false;
  }
  // A request went out before the held ACK of `kind`: the hold was answered.
  void hold_answered(AckFor kind) {
    if (wide_hold_) wide_.succeeded();
    if (kind != AckFor::kNone) defer_[index(kind)].count();
  }
  // The held ACK of `kind` (not kNone) leaves alone. A deferred one: the peer waited for it;
  // otherwise this side's application did not answer in time. Returns whether it was deferred.
  // The ACK then leaves (ack_sent), and left_alone_sent() follows.
  bool left_alone(AckFor kind) {
    if (deferred_) {
      defer_[index(kind)].failed();
      return true;
    }
    answers_[index(kind)] = false;
    if (wide_hold_) wide_.failed();
    return false;
  }
  // After a held ACK left alone: an answer now is a late one.
  void left_alone_sent() { unheld_ = AckFor::kNone; }
  // An ACK of `kind` leaves: one of a kind this QP's application has not been answering leaves
  // at once, and an answer before the peer speaks again sets the kind again.
  void ack_sent(AckFor kind) {
    if (kind != AckFor::kNone && !answers(kind)) unheld_ = kind;
    deferred_ = false;
  }
  // A request of the peer's executed: the window for an answer to an ACK sent at once closes.
  void peer_spoke() { unheld_ = AckFor::kNone; }
  // This QP's application started a new request WQE: it answered the ACK sent at once.
  void request_started() {
    if (unheld_ == AckFor::kNone) return;
    answers_[index(unheld_)] = true;
    unheld_ = AckFor::kNone;
  }

  // Testing hooks.
  const BackedOff& defers_state(AckFor kind) const { return defer_[index(kind)]; }
  const BackedOff& wide_state() const { return wide_; }
  bool answers(AckFor kind) const { return answers_[index(kind)]; }

 private:
  static int index(AckFor kind) { return static_cast<int>(kind); }  // not kNone
  BackedOff defer_[2];
  bool answers_[2] = {true, true};
  AckFor unheld_ = AckFor::kNone;  // the last ACK sent at once because of answers_
  bool deferred_ = false;          // deferred(): the queued ACK stayed behind a request
  bool wide_hold_ = false;         // held() with more than one request outstanding
  BackedOff wide_;
};

}  // namespace uroce::transport
