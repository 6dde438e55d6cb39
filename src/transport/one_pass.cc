// One pass over the payload on receive (issue 14): where a packet whose ICRC is not checked yet
// may be placed while its ICRC is computed.
//
// The rule: RDMA leaves target memory undefined until the operation completes, so a packet
// placed and then found corrupted can be dropped as before: its range is rewritten by the
// retransmission. But a corrupted header must never choose where bytes go. So a packet is placed
// before its check only at the next expected PSN of a message whose target a verified packet
// established, exactly where its intact self would go: each function here repeats, without
// changing anything, the checks that handle_packet() makes on the way to that placement, and
// answers 0 wherever it would take another way (a NAK, a drop, a duplicate, a new message).
// What the unverified packet contributes is its opcode class (a continuation), its PSN (which
// must equal the one the state expects) and its payload length (which must be the one the state
// allows there); none of them can move the destination.
#include "transport/qp.h"
#include "transport/sgl.h"
#include "wire/aeth.h"
#include "wire/psn.h"

namespace uroce::transport {

std::size_t Qp::one_pass_target(const wire::RocePacket& pkt, const PacketInfo& info,
                                std::span<MutBytes> out) const {
  UROCE_CHECK(out.size() >= kMaxSge);
  const wire::OpcodeInfo& op = *pkt.op;
  if (!wire::icrc_deferrable(op) || pkt.payload.empty()) return 0;
  // handle_packet(): a connected QP from RTR on, its peer only (address and port), the default
  // P_Key.
  if (type_ == QpType::kUd || state_ == QpState::kReset || state_ == QpState::kInit) return 0;
  if (!wire::same_host(info.src, path_.dst) || !from_peer_port(pkt, info)) return 0;
  if (!wire::pkey_matches(pkt.bth().pkey(), 0xffff)) return 0;
  return op.is(wire::kFlagResponse) ? read_response_target(pkt, out) : request_target(pkt, out);
}

std::size_t Qp::request_target(const wire::RocePacket& pkt, std::span<MutBytes> out) const {
  const wire::OpcodeInfo& op = *pkt.op;
  // handle_request().
  if (state_ != QpState::kRtr && state_ != QpState::kRts && state_ != QpState::kSqd &&
      state_ != QpState::kSqe) {
    return 0;
  }
  // icrc_deferrable() let RC packets through only: an RC QP's.
  if (type_ != QpType::kRc || op.transport != wire::Transport::kRc) return 0;
  // handle_rc_request(): the expected PSN (not a duplicate, not a gap).
  if (pkt.bth().psn() != resp_.psn) return 0;
  // While selective repeat keeps packets past the ePSN, a packet at the ePSN is placed around
  // the bytes they placed (sr_copy), after its check.
  if (sr_.held > 0) return 0;
  // execute_request(): a continuation of the message in progress, of the length the path MTU
  // gives it (Middle exactly the MTU, Last 1..MTU; empty ones were refused above).
  const std::size_t payload = pkt.payload.size();
  const bool last = op.is(wire::kFlagLast);
  if (payload > mtu_bytes_ || (!last && payload != mtu_bytes_)) return 0;
  // A continuation that takes a receive WQE (WRITE Last with immediate) is placed in one pass
  // only when the WQE is already held: taking one is a change of state for the verified path.
  if (op.is(wire::kFlagRecvWqe) && !resp_.has_wqe) return 0;
  // icrc_deferrable() lets no SEND through (its length is unknown before its Last).
  if (!op.is(wire::kFlagWrite)) return 0;
  if (resp_.in_message != MsgKind::kWrite) return 0;
  if ((attr_.qp_access_flags & kAccessRemoteWrite) == 0) return 0;
  // The packets add up to the RETH's DMA length exactly.
  if (last ? payload != resp_.write_resid : payload >= resp_.write_resid) return 0;
  auto mem = env_.memory->resolve(env_.pd, qpn_, resp_.write_rkey, true, resp_.write_va, payload,
                                  kAccessRemoteWrite);
  if (!mem.ok()) return 0;
  out[0] = mem.value();
  return 1;
}

std::size_t Qp::read_response_target(const wire::RocePacket& pkt, std::span<MutBytes> out) const {
  // handle_response().
  if (type_ != QpType::kRc || (state_ != QpState::kRts && state_ != QpState::kSqd)) return 0;
  const std::uint32_t psn = pkt.bth().psn();
  if (sq_count_ == 0 || psn != comp_.psn || wire::psn_ge(psn, req_.psn)) return 0;
  // Inside a response stream already open (a First, or the start of the response to a
  // re-request, was verified and placed).
  if (!comp_.read_stream_open) return 0;
  // The Last's AETH must be an ACK (a NAK rides on an Acknowledge only: such a packet is
  // dropped).
  if (pkt.op->has(wire::ExtHeader::kAeth) &&
      wire::aeth_type(pkt.aeth().syndrome()) != wire::AethType::kAck) {
    return 0;
  }
  // The WQE that complete_acked_through(psn) leaves at the tail.
  std::uint32_t skip = 0;
  while (skip < sq_count_) {
    const SendWqe& w = sq_at(sq_tail_ + skip);
    if (w.state != WqeState::kPending || !wire::psn_lt(w.last_psn, psn) ||
        w.wr_op->is_read_or_atomic()) {
      break;
    }
    ++skip;
  }
  if (skip == sq_count_) return 0;
  const std::uint32_t index = sq_tail_ + skip;
  const SendWqe& w = sq_at(index);
  if (wire::psn_lt(w.last_psn, psn)) return 0;
  if (!w.wr_op->is(kWrRead) || w.state != WqeState::kPending) return 0;
  // The offset and the length check of handle_response().
  const std::uint64_t offset =
      std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, w.first_psn))} * mtu_bytes_;
  const std::size_t len = pkt.payload.size();
  const bool last = pkt.op->is(wire::kFlagLast);
  const bool length_ok =
      len <= mtu_bytes_ &&
      (last ? offset + len == w.length : (len == mtu_bytes_ && offset + len < w.length));
  if (!length_ok) return 0;
  std::size_t pieces = 0;
  const ScatterResult r = scatter_targets(*env_.memory, env_.pd, sges_of(index).first(w.num_sge),
                                          offset, len, out, pieces);
  return r == ScatterResult::kOk ? pieces : 0;
}

}  // namespace uroce::transport
