// The ACK-hold and deferral policy of one device (issue 40): every decision about holding a
// positive ACK for the request behind it, and about deferring it behind that request, is taken
// here or by the per-QP learner this policy asks. It reads no clock and keeps no QP: times are
// inputs, and the engine carries the decisions out.
//
// Holding. A ping-pong QP's positive ACK may wait, for config().hold_for, for the request the
// application is about to post on that QP, and then leave in the same batch right behind it:
// one system call per hop instead of two, and the peer, polling for its completion, finds the
// request first (Qp::note_ack_held). Deferring. With holding, a held ACK that this side's
// request overtook may stay behind that request, still held, instead of following it in the
// same batch (Qp::ack_deferrable): the peer of a ping-pong of unsignaled requests then gets one
// datagram per hop.
//
// Three levels, from the longest-lived to the shortest:
//   - per QP: transport::AckState (transport/ack_state.h), owned by each QP, with what it learns
//     in a transport::AckLearner (transport/ack_learner.h), which the QP feeds its events (an
//     ACK queued, replaced, sent, left alone; a request started; the peer's request executed).
//     It says whether the QP's ACK may wait (Qp::only_ack_to_send) and whether a held one may
//     stay behind the request that overtook it (Qp::ack_deferrable). The transport cannot
//     include this file (layering).
//   - per round, here: the mode of the round about to start (mode()), when the ACKs held so far
//     fall due (due()), and what the round's report changes (round_done(), flushed()). The
//     Scheduler owns one AckPolicy and asks it; its thread sleeps until due() at the latest.
//   - per flush, here: which active QP a flush sets aside with only an ACK to send
//     (sets_aside()), and whether the ACK a request just overtook stays behind it
//     (defers_behind()). Static and inline: Engine::flush_tx asks for every active QP.
//
// How long an ACK may stay held: a held ACK leaves in the owner's first round at or after
// due() (first held + hold_for); the progress thread sleeps until then at the latest, and an
// application that stopped polling loses the socket at its lease's end, so an ACK is held at
// most hold_for + app_lease + lease_slack (Scheduler). A deferred ACK starts its hold over at
// each request that overtakes it, at most kMaxPsnsBehindADeferredAck times. Both stay well
// under the shortest ACK timeout under which a QP offers ACKs for holding
// (Qp::kMinTimeoutToHoldAck).
//
// Not thread-safe: its owner's (UdpDevice: the scheduler mutex).
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/time.h"
#include "transport/qp.h"

namespace uroce::engine {

// Every switch of the policy, filled by whoever runs the engine: DeviceOptions (from
// UROCE_HOLD_ACKS and UROCE_DEFER_ACKS at the edge), the simulators' options, tests. The
// defaults are a device's.
struct AckPolicyConfig {
  bool hold = true;  // hold ACKs for the request behind them (UROCE_HOLD_ACKS=0: off)
  bool defer =
      true;  // with `hold`, defer one behind the request that overtook it (UROCE_DEFER_ACKS)
  Duration hold_for = Duration::us(100);  // how long held ACKs wait (from the first held)
};

// What one flush does with the ACKs the transport offers for holding (a round's plan).
enum class AckMode : std::uint8_t {
  kSend,          // every ACK leaves now
  kHold,          // held; a request that overtakes a held ACK takes it along
  kHoldAndDefer,  // held, and a held ACK may stay behind the request that overtook it
};

class AckPolicy {
 public:
  explicit AckPolicy(const AckPolicyConfig& config = {}) : config_(config) {}

  const AckPolicyConfig& config() const { return config_; }
  // A new configuration. The ACKs held now stay held until due(), unless holding is off.
  void reconfigure(const AckPolicyConfig& config);

  // ---- a round (the Scheduler's) ----

  // The mode of a round starting at `now`: hold while holding is on and the ACKs held so far
  // are not due. `app_blocked`: a progress thread's round while the application is blocked in
  // the library holds nothing: no request can come before that round wakes the application,
  // and the hold would only put the thread to sleep on a near timer for an ACK that leaves
  // alone anyway (about 13 us to arm under PVM).
  AckMode mode(Instant now, bool app_blocked = false) const {
    if (!config_.hold || app_blocked || now >= due_) return AckMode::kSend;
    return config_.defer ? AckMode::kHoldAndDefer : AckMode::kHold;
  }
  // When the ACKs held now must leave (never() while none are held).
  Instant due() const { return due_; }
  // A round at `now` ended with `held` ACKs held (RoundReport::held_acks), `deferred`: one of
  // its flushes deferred an ACK (RoundReport::acks_deferred), which starts the hold over.
  void round_done(Instant now, std::size_t held, bool deferred);
  // The held ACKs were sent outside a round (Engine::flush_held_acks: a QP about to change).
  void flushed() { due_ = Instant::never(); }

  // ---- a flush (the Engine's, per active QP) ----

  static bool holds(AckMode mode) { return mode != AckMode::kSend; }
  // A flush in `mode` sets `qp` aside, its only packet a positive ACK that may wait
  // (Qp::only_ack_to_send). While deferring, this side may have up to
  // kMaxPsnsBehindADeferredAck requests outstanding that its peer's deferred ACKs leave
  // unacknowledged and still be one side of a ping-pong.
  static bool sets_aside(AckMode mode, const transport::Qp& qp) {
    if (!holds(mode)) return false;
    const std::uint32_t outstanding =
        mode == AckMode::kHoldAndDefer ? 1 + transport::kMaxPsnsBehindADeferredAck : 1;
    return qp.only_ack_to_send(outstanding);
  }
  // A flush in `mode` keeps the held ACK that the request `qp` just sent overtook behind it
  // (Qp::ack_deferrable; then Qp::defer_ack).
  static bool defers_behind(AckMode mode, const transport::Qp& qp) {
    return mode == AckMode::kHoldAndDefer && qp.ack_deferrable();
  }

 private:
  AckPolicyConfig config_;
  Instant due_ = Instant::never();
};

}  // namespace uroce::engine
