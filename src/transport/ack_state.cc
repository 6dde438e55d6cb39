// The decisions of transport/ack_state.h.
#include "transport/ack_state.h"

namespace uroce::transport {

namespace {

// The QP's one response is a positive ACK of the end of a message that covers fewer than
// `max_psns` PSNs.
bool lone_ack_under(const AckFacts& f, std::uint32_t max_psns) {
  return f.lone_ack != AckFor::kNone && f.lone_ack_psns < static_cast<std::int32_t>(max_psns);
}

}  // namespace

bool AckState::may_hold(const AckFacts& f, std::uint32_t max_outstanding) const {
  if (f.in_error || f.cnp_owed) return false;
  if (!f.sent_any || f.outstanding > max_outstanding) return false;
  // A held ACK must not outlast the peer's ACK timeout, or the peer retransmits. The peer's
  // timeout is not visible here; the QP's own stands in for it (the two sides of a connection
  // are set up alike: ibv_rc_pingpong, perftest, rdma_cm). Short ones never hold.
  if (f.ack_timeout != 0 && f.ack_timeout < kMinTimeoutToHoldAck) return false;
  // An ACK that covers many PSNs may be what the peer's window waits for (several messages in
  // one turn): it leaves at once.
  return lone_ack_under(f, kMaxPsnsBehindAHeldAck) && learn_.may_hold(f.lone_ack, f.outstanding) &&
         !f.request_ready;
}

bool AckState::may_defer(const AckFacts& f) const {
  if (!after_unsignaled_ || f.in_error) return false;
  return lone_ack_under(f, kMaxPsnsBehindADeferredAck) && learn_.may_defer(f.lone_ack) &&
         !f.request_ready;
}

}  // namespace uroce::transport
