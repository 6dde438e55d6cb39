// One RC QP's part in the device's ACK-hold and deferral policy (issue 40): whether the ACK it
// owes may wait for the request behind it, whether a held one may stay behind the request that
// overtook it, and the state those decisions read. The QP owns one AckState, feeds it events
// and answers its questions with the facts it reads (AckFacts); the engine's AckPolicy
// (engine/ack_policy.h) asks through the QP's four calls (Qp::only_ack_to_send, note_ack_held,
// ack_deferrable, defer_ack). What it learns from the peer and the application is AckLearner's
// (transport/ack_learner.h).
//
// Holding. A positive ACK may wait when all the QP would send now is that one ACK (no NAK, no
// READ or atomic response, no request ready), it acknowledges the end of a message, and the QP
// looks like one side of a ping-pong: it has sent requests itself and has at most one
// outstanding, so its application is likely to post the next one soon. Such an ACK may wait a
// little to leave together with that request (engine/ack_policy.h). A QP that only responds (a
// bandwidth test's target) or streams requests, an ACK in the middle of a message and one that
// covers kMaxPsnsBehindAHeldAck PSNs or more get out at once: the peer's window may be waiting
// for them. So does a duplicate's re-ACK, and the ACK of a kind of message this QP's
// application has not been answering (AckLearner). Never with an ACK timeout below
// kMinTimeoutToHoldAck. When the engine held the ACK (held()) and a request is ready with it,
// the request's first packet goes out before the ACK: the peer, polling for the completion that
// ACK brings, receives the request first and executes it in the same polling loop (a
// ping-pong of RDMA WRITEs whose target spins on memory needs no wake-up that way).
//
// Deferring. Right after the request that overtook a held ACK left, that ACK may stay behind it
// instead of following it in the same batch: when the request's WQE asks for no completion,
// and the ACK is a positive ACK of the end of a message of a kind whose ACKs the peer has not
// waited for (AckLearner), covering fewer than kMaxPsnsBehindADeferredAck PSNs, with no other
// request ready. The peer of a ping-pong whose application posts its next request without
// waiting for the completion (UCX's unsignaled sends) then gets one datagram per hop instead
// of two; the ACK leaves with a later request (every kMaxPsnsBehindADeferredAck PSNs), or
// alone when the hold runs out. An application that asks for the completion of its own request
// is taken to wait for completions, and the two sides of a connection mostly run the same
// program (perftest, ibv_rc_pingpong, MPI ranks), so its peer likely waits too: behind a
// signaled request the ACK is never deferred, and such a peer never stalls on it. A peer that
// waited all the same is learned from that (QpCounters::acks_deferred_unanswered): that kind's
// ACKs then follow the request as before. IBTA lets a responder coalesce ACKs; the requester's
// ACK timeout bounds the hold as for any held ACK (kMinTimeoutToHoldAck).
//
// Pure state: no clock, no allocation. Not thread-safe (its QP's).
#pragma once

#include <cstdint>

#include "transport/ack_learner.h"

namespace uroce::transport {

// A positive ACK that covers this many PSNs or more is never held for a request: the peer may
// have sent them in one turn and wait for it to open its window (kMaxUnackedPsns).
inline constexpr std::uint32_t kMaxPsnsBehindAHeldAck = 64;
// A held ACK that this side's own request overtook may stay behind it while it covers fewer
// PSNs than this: every this-many requests of a ping-pong, one ACK rides along.
inline constexpr std::uint32_t kMaxPsnsBehindADeferredAck = 16;

// What the ACK rules read of their QP at a decision (Qp::ack_facts).
struct AckFacts {
  bool in_error = false;          // the QP is in ERR
  bool cnp_owed = false;          // a CNP leaves before anything else
  bool sent_any = false;          // the QP has sent requests of its own
  std::uint32_t outstanding = 0;  // send WQEs not yet completed
  std::uint8_t ack_timeout = 0;   // the QP's ACK timeout exponent (QpAttr::timeout)
  // The one response queued, when it is a positive ACK of the end of a SEND or WRITE: its kind
  // (kNone otherwise) and the PSNs it covers since the last positive ACK the QP sent.
  AckFor lone_ack = AckFor::kNone;
  std::int32_t lone_ack_psns = 0;
  // A request could leave now (no RNR wait). Read only with a lone ACK (false otherwise).
  bool request_ready = false;
};

class AckState {
 public:
  // 4.096 us * 2^12 = 16.8 ms: over seven times the longest an engine holds an ACK
  // (UdpDevice: 100 us, 2.3 ms when the application stops polling: the hold, the lease and its
  // timer slack), and four times the longest a deferred one stays (AckPolicy::round_done: a
  // hold per request that overtakes it, each of which adds a PSN to it, so at most
  // kMaxPsnsBehindADeferredAck holds, and the last one's 2.3 ms: about 4 ms); IBTA lets a timer
  // fire no earlier than its nominal value. perftest and ibv_rc_pingpong set 14.
  static constexpr std::uint8_t kMinTimeoutToHoldAck = 12;

  // ---- decisions ----
  // All the QP would send now is one positive ACK that may wait (holding, above).
  // max_outstanding: the most send WQEs the QP may have outstanding and still count as one side
  // of a ping-pong; more than 1 where the peer defers its ACKs (defer()), which leaves up to
  // kMaxPsnsBehindADeferredAck of this side's requests unacknowledged in a ping-pong.
  bool may_hold(const AckFacts& f, std::uint32_t max_outstanding) const;
  // The held ACK that the request just sent overtook may stay behind it (deferring, above).
  bool may_defer(const AckFacts& f) const;

  // ---- the engine's calls ----
  // The engine held the ACK, with `outstanding` send WQEs of the QP not yet completed.
  void held(std::uint32_t outstanding) {
    held_ = true;
    learn_.held(outstanding > 1);
  }
  // The engine keeps the ACK back behind the request (after may_defer): it stays held.
  void defer() {
    after_unsignaled_ = false;
    held_ = true;
    learn_.deferred();
  }

  // ---- the QP's poll (Qp::poll_packet) ----
  // A poll starts: the request of the last one is no longer the one just sent.
  void poll_started() { after_unsignaled_ = false; }
  // Whether the engine held the ACK; a held ACK lets one request packet at most go first.
  bool take_held() {
    const bool held = held_;
    held_ = false;
    return held;
  }
  // A request went out before the held ACK of `kind`; `unsignaled`: its WQE asks for no
  // completion.
  void overtaken(AckFor kind, bool unsignaled) {
    after_unsignaled_ = unsignaled;
    learn_.hold_answered(kind);
  }
  // The held ACK of `kind` (not kNone) leaves alone: AckLearner::left_alone (true when it was a
  // deferred one). left_alone_sent() follows once it went.
  bool left_alone(AckFor kind) { return learn_.left_alone(kind); }
  void left_alone_sent() { learn_.left_alone_sent(); }

  // ---- the QP's other events (AckLearner's) ----
  void ack_queued(AckFor kind) { learn_.ack_queued(kind); }
  void ack_replaced(AckFor kind) { learn_.ack_replaced(kind); }
  void ack_sent(AckFor kind) { learn_.ack_sent(kind); }
  void peer_spoke() { learn_.peer_spoke(); }
  void request_started() { learn_.request_started(); }

 private:
  bool held_ = false;  // held(): a ready request goes before the ACK
  // The last poll gave a request that overtook the held ACK, from a WQE that asks for no
  // completion (may_defer).
  bool after_unsignaled_ = false;
  // Whether to hold and defer ACKs, learned from the peer's and the application's behaviour.
  AckLearner learn_;
};

}  // namespace uroce::transport
