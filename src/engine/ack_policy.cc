#include "engine/ack_policy.h"

namespace uroce::engine {

void AckPolicy::reconfigure(const AckPolicyConfig& config) {
  config_ = config;
  if (!config_.hold) due_ = Instant::never();
}

void AckPolicy::round_done(Instant now, std::size_t held, bool deferred) {
  if (held == 0) {
    due_ = Instant::never();
  } else if (due_.is_never() || deferred) {
    // A deferred ACK stays held across hops: each request that overtakes it starts its hold
    // over. Each hop of the peer's came within a hold (or the ACK would have left), and it
    // covers at most kMaxPsnsBehindADeferredAck PSNs, so it stays at most that many holds, the
    // last one with the lease if the application stops polling: about 4 ms, a quarter of the
    // shortest ACK timeout under which ACKs are held (Qp::kMinTimeoutToHoldAck).
    due_ = now + config_.hold_for;
  }
}

}  // namespace uroce::engine
