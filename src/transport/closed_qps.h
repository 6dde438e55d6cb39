// What an RC QP leaves behind when it is destroyed: enough to acknowledge its peer's
// retransmissions of requests it had already executed.
//
// The last ACK of a connection can be lost like any other packet. A peer whose ACK was lost
// retransmits after its ACK timeout; if the application destroyed the QP in between (a
// ping-pong's last iteration: ibv_rc_pingpong's server finishes when its own last SEND is
// acknowledged, and exits while the client may still wait for the ACK of its last SEND), hardware
// and rxe drop the retransmission and the peer's WQE fails with RETRY_EXC_ERR although the
// message was delivered. A closed QP here acknowledges such a duplicate again (C9-105, as the live
// QP would have), for as long as the peer may retry, as TCP's TIME_WAIT answers a lost last ACK.
// Only duplicates of SENDs and WRITEs are answered (an ACK says nothing the responder did not
// do); a new request, a duplicate READ (the memory may be gone) or atomic, and anything from
// another host are not.
//
// Sans-I/O: time is an input. The engine keeps one table for the QPs of its context; the device's
// coordinator keeps another for QPs whose block it has taken back (a context that closed).
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>

#include "base/time.h"
#include "transport/qp.h"
#include "wire/packet.h"

namespace uroce::transport {

struct ClosedQp {
  std::uint32_t qpn = 0;         // the destroyed QP
  std::uint32_t remote_qpn = 0;  // its peer
  AddressVector path;            // where its responses went
  std::uint32_t epsn = 0;        // the responder's next expected PSN
  std::uint32_t msn = 0;         // and its MSN
  Instant until;                 // answered until then
};

class ClosedQps {
 public:
  // The oldest entry goes when a new one would exceed this.
  static constexpr std::size_t kMaxEntries = 4096;

  void add(const ClosedQp& q);
  // `pkt` (ICRC verified) arrived for a QP that no longer exists. When it is a duplicate of a
  // SEND or WRITE its closed QP had executed, from that QP's peer, `out` gets the ACK (PSN
  // ePSN - 1, the QP's MSN) and the answer is true.
  bool answer(Instant now, const wire::RocePacket& pkt, const wire::IpAddress& src, TxPacket& out);
  // Forgets the entries expired at `now`.
  void expire(Instant now);
  // Entries still answered at `now` (expired ones are forgotten).
  std::size_t live(Instant now);
  // When the last entry expires (never() when there is none). It stays in the past until
  // expire() or live() is called with a later time.
  Instant last_until() const;

 private:
  std::unordered_map<std::uint32_t, ClosedQp> entries_;  // by QPN
  std::deque<std::uint32_t> order_;  // QPNs in the order added (some since expired)
};

// A QP's closed state if it is worth keeping: an RC QP that could still receive (RTR, RTS, SQD,
// SQE; not RESET, INIT or ERR, where it answers nothing either). It is kept for the peer's retry
// budget taken as this QP's own ACK timeout times (retry_cnt + 1) (both sides are usually set
// alike: ibv_rc_pingpong, perftest and rdma_cm's defaults), at least kMinClosedLife and at most
// kMaxClosedLife (also for an ACK timeout of 0, which never expires).
std::optional<ClosedQp> closed_state(const Qp& qp, Instant now);
inline constexpr Duration kMinClosedLife = Duration::s(1);
inline constexpr Duration kMaxClosedLife = Duration::s(16);

}  // namespace uroce::transport
