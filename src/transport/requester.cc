// The requester: turns send WQEs into request packets (IBTA 9.7.x; rxe_req.c).
//
// For each WQE in order: segment by path MTU (RC/UC), one packet for UD, READ and atomics;
// PSNs assigned in sequence; AckReq on the last packet of a message and at least every 64
// packets; at most 128 unacknowledged PSNs (a READ may start below 256) and max_rd_atomic
// outstanding READs/atomics; a fenced WQE waits for earlier READs/atomics. Go-back-N retry
// restarts from a PSN, skipping the packets of the first WQE that were already acknowledged.
#include <algorithm>

#include "base/assert.h"
#include "transport/qp.h"
#include "wire/psn.h"

namespace uroce::transport {

using wire::Opcode;

bool Qp::request_ready() const {
  if (state_ != QpState::kRts && state_ != QpState::kSqd) return false;
  if (req_.next_wqe == sq_tail_ + sq_count_) return false;
  const SendWqe& w = sq_at(req_.next_wqe);
  // A local operation (BIND_MW, LOCAL_INV) waits until every WQE before it has completed: a
  // window bound or invalidated behind requests still in flight could change what they reach
  // (rxe runs it as its requester passes it; uroce orders it as if fenced). SQD starts none.
  if (w.wr_op->is_local()) return req_.next_wqe == sq_tail_ && state_ == QpState::kRts;
  const bool rc = type_ == QpType::kRc;
  // The PSN window (rxe: RXE_MAX_UNACKED_PSNS), as an unsigned distance: a READ takes all
  // its response PSNs at once and may leave up to 2^23 of them outstanding. A READ may start
  // in a window twice as wide: its responses stream into this host's own socket, the peer's
  // responder bounds them by max_dest_rd_atomic (hardware keeps no PSN window for them), and
  // at 128 PSNs the requests reach the responder too late to keep its stream going (loopback,
  // 64 KiB READs at MTU 4096: 0.77x WRITE's bandwidth, 0.97-1.02x at 256; docs/PERFORMANCE.md).
  const std::uint32_t outstanding = (req_.psn - comp_.psn) & wire::kPsnMask;
  // Congestion control may narrow it (a window-based rule), never widen it.
  // Loss recovery sizes the window of the rest to the bandwidth-delay product (recovery.cc).
  const std::uint32_t cc_window = env_.cc->window_packets();
  const std::uint32_t window =
      std::min(w.wr_op->is(kWrRead) ? kMaxUnackedReadPsns : recovery_window(cc_window), cc_window);
  if (rc && outstanding >= std::max<std::uint32_t>(window, 1)) return false;
  // A READ of up to 2^31 bytes at MTU 256 spans up to 2^23 PSNs. Behind other outstanding
  // PSNs it would put the oldest more than 2^23 behind the next, where 24-bit comparisons turn
  // round (a response would look like one never sent): such a READ waits for an empty window.
  if (rc && w.wr_op->is(kWrRead) && outstanding != 0) {
    if (outstanding + packets_for(w.length - w.sent_bytes, mtu_bytes_) > kMaxPsnSpan) return false;
  }
  if (w.state == WqeState::kPosted) {
    // SQD: no new WQE starts; one started before (and reset by a go-back-N) goes on.
    if (state_ == QpState::kSqd && !w.started) return false;
    if (rc && w.wr_op->is_read_or_atomic()) {
      const std::uint32_t limit = std::max<std::uint32_t>(1, attr_.max_rd_atomic);
      if (req_.rd_atomic_inflight >= limit) return false;
    }
    // Fence: wait until every earlier READ and atomic has completed (IBTA 10.8.3.3).
    if (rc && (w.send_flags & kSendFence) != 0 && req_.rd_atomic_inflight > 0) return false;
  }
  return true;
}

bool Qp::poll_request(Instant now, TxPacket& out) {
  if (state_ != QpState::kRts && state_ != QpState::kSqd) return false;
  if (!req_.rnr_resume.is_never()) {
    if (now < req_.rnr_resume) return false;
    req_.rnr_resume = Instant::never();
  }
  // A selective repeat's resend of one packet first, then a tail-loss probe (recovery.cc).
  if (sr_.resend_pending && sr_poll_resend(now, out)) return true;
  if (rec_.probe_due) return poll_probe(now, out);
  if (!request_ready()) return false;
  if (sq_at(req_.next_wqe).wr_op->is_local() && (!run_local_ops() || !request_ready())) {
    return false;
  }
  const std::uint32_t index = req_.next_wqe;
  SendWqe& w = sq_at(index);
  const bool rc = type_ == QpType::kRc;
  // Congestion control may hold the packet back.
  const std::uint32_t bytes =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(w.length - w.sent_bytes, mtu_bytes_));
  const Instant allowed = env_.cc->next_send_time(now, bytes);
  if (allowed > now) {
    req_.pace_until = allowed;
    return false;
  }
  req_.pace_until = Instant::never();

  if (w.state == WqeState::kPosted) {
    // This side answered the message whose ACK went at once, if one did: hold that kind's ACKs
    // again.
    acks_.request_started();
    w.state = WqeState::kSending;
    w.started = true;
    w.first_psn = req_.psn;
    w.last_psn = wire::psn_add(w.first_psn, std::int64_t{w.wr_op->psns(w.length, mtu_bytes_)} - 1);
    w.sent_bytes = 0;
    w.read_bytes = 0;
    if (rc && w.wr_op->is_read_or_atomic()) ++req_.rd_atomic_inflight;
  }
  const std::uint32_t psn = req_.psn;
  const bool fresh = !req_.sent_any || wire::psn_gt(psn, req_.max_sent_psn);
  build_request_packet(w, index, out);
  if (state_ == QpState::kErr) return false;  // a local protection error failed the WQE

  env_.cc->on_sent(now, out.payload_bytes);
  ++counters_.packets_sent;
  counters_.bytes_sent += out.payload_bytes;
  if (rc && !comp_.deadline.is_never()) {
    // armed already
  } else if (rc) {
    comp_.deadline = now + ack_timeout();
  }
  if (rc) note_request_sent(now, psn, fresh, wire::BthView(out.header_span()).ack_req());
  if (!rc) complete_unreliable_sends();
  return true;
}

bool Qp::run_local_ops() {
  while (state_ == QpState::kRts && local_op_at_head()) {
    if (!run_local_op()) return false;
  }
  return state_ != QpState::kErr;
}

bool Qp::run_local_op() {
  // rxe_do_local_ops(): a bind that fails completes with IBV_WC_MW_BIND_ERR, an invalidation
  // with IBV_WC_LOC_QP_OP_ERR, and the QP enters the error state.
  const std::uint32_t index = req_.next_wqe;
  const SendWqe& w = sq_at(index);
  if (w.wr_op->opcode == WrOpcode::kBindMw) {
    const MwBindRequest bind{env_.pd,        qpn_,          w.bind_mw_rkey, w.rkey,
                             w.bind_mr_lkey, w.remote_addr, w.bind_length,  w.bind_access};
    if (!env_.memory->bind_mw(bind).ok()) {
      fail_wqe(index, WcStatus::kMwBindErr);
      return false;
    }
  } else if (!env_.memory->invalidate(env_.pd, qpn_, w.imm_data, false).ok()) {
    fail_wqe(index, WcStatus::kLocQpOpErr);
    return false;
  }
  complete_send(index, WcStatus::kSuccess);
  return true;
}

bool Qp::gather(const SendWqe& w, std::uint32_t index, std::uint64_t offset, std::uint32_t len,
                TxPacket& out) {
  if (len == 0) return true;
  if (w.is_inline) {
    out.pieces[0] = ConstBytes(inline_of(index)).subspan(offset, len);
    out.num_pieces = 1;
    return true;
  }
  std::span<Sge> sges = sges_of(index).first(w.num_sge);
  std::uint64_t skip = offset;
  std::uint32_t left = len;
  for (const Sge& s : sges) {
    if (left == 0) break;
    if (skip >= s.length) {
      skip -= s.length;
      continue;
    }
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(s.length - skip, left));
    auto mem = env_.memory->resolve(env_.pd, qpn_, s.lkey, false, s.addr + skip, n, 0);
    if (!mem.ok()) return false;
    UROCE_CHECK(out.num_pieces < TxPacket::kMaxPieces);
    out.pieces[out.num_pieces++] = mem.value();
    left -= n;
    skip = 0;
  }
  return left == 0;
}

void Qp::build_request_packet(SendWqe& w, std::uint32_t index, TxPacket& out) {
  const std::uint32_t psn = req_.psn;
  out.av = type_ == QpType::kUd ? w.ud_av : path_;
  const std::uint32_t dest_qpn = type_ == QpType::kUd ? w.remote_qpn : attr_.dest_qp_num;
  const bool retransmit = req_.sent_any && wire::psn_le(psn, req_.max_sent_psn);

  if (w.wr_op->is(kWrRead)) {
    // One request for the rest of the READ; the responder answers with one PSN per packet.
    const std::uint64_t done = w.sent_bytes;
    const std::uint64_t rest = w.length - done;
    const wire::OpcodeInfo& info =
        build_bth(out, w.wr_op->request_opcode(type_, PacketPosition::kOnly), dest_qpn, psn, true,
                  false, 0, w.xrc_srqn);
    w.read_req_psn = psn;  // the response at this PSN opens the stream (completer.cc)
    wire::RethMut(MutBytes(out.header).subspan(info.offset_of(wire::ExtHeader::kReth)))
        .encode(wire::Reth{w.remote_addr + done, w.rkey, static_cast<std::uint32_t>(rest)});
    req_.psn = wire::psn_add(psn, packets_for(rest, mtu_bytes_));
    w.sent_bytes = w.length;
    w.state = WqeState::kPending;
    ++req_.next_wqe;
  } else if (w.wr_op->is(kWrAtomic)) {
    // The AtomicETH: Compare & Swap carries both operands, Fetch & Add its addend.
    const bool cas = w.wr_op->opcode == WrOpcode::kAtomicCmpAndSwp;
    const wire::OpcodeInfo& info =
        build_bth(out, w.wr_op->request_opcode(type_, PacketPosition::kOnly), dest_qpn, psn, true,
                  false, 0, w.xrc_srqn);
    wire::AtomicEthMut(MutBytes(out.header).subspan(info.offset_of(wire::ExtHeader::kAtomicEth)))
        .encode(wire::AtomicEth{w.remote_addr, w.rkey, cas ? w.swap : w.compare_add,
                                cas ? w.compare_add : 0});
    req_.psn = wire::psn_add(psn, 1);
    w.sent_bytes = w.length;
    w.state = WqeState::kPending;
    ++req_.next_wqe;
  } else if (w.wr_op->is(kWrFlush)) {
    // The FETH (placement type, selectivity level), then the RETH: the range, or for a whole
    // region only its R_Key that counts (rxe's responder skips the range check then).
    const wire::OpcodeInfo& info =
        build_bth(out, w.wr_op->request_opcode(type_, PacketPosition::kOnly), dest_qpn, psn, true,
                  false, 0, w.xrc_srqn);
    const MutBytes hdr(out.header);
    wire::FethMut(hdr.subspan(info.offset_of(wire::ExtHeader::kFeth)))
        .encode(wire::Feth{w.flush_placement, w.flush_selectivity});
    wire::RethMut(hdr.subspan(info.offset_of(wire::ExtHeader::kReth)))
        .encode(wire::Reth{w.remote_addr, w.rkey, w.flush_length});
    req_.psn = wire::psn_add(psn, 1);
    w.state = WqeState::kPending;
    ++req_.next_wqe;
  } else if (!build_message_packet(w, index, psn, dest_qpn, out)) {
    // SEND, RDMA WRITE and ATOMIC WRITE (one packet: RETH and its 8 bytes).
    return;  // a local protection error failed the WQE
  }
  if (retransmit) ++counters_.retransmitted_packets;
  if (!req_.sent_any || wire::psn_gt(psn, req_.max_sent_psn)) req_.max_sent_psn = psn;
  if (!wire::psn_lt(psn, req_.psn_end)) req_.psn_end = req_.psn;  // new PSNs (2^23 for a READ)
  req_.sent_any = true;
}

bool Qp::build_message_packet(SendWqe& w, std::uint32_t index, std::uint32_t psn,
                              std::uint32_t dest_qpn, TxPacket& out) {
  UROCE_ASSERT(w.sent_bytes < w.length || (w.sent_bytes == 0 && w.length == 0));  // not all sent
  const std::uint64_t offset = w.sent_bytes;
  const auto len =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(w.length - offset, mtu_bytes_));
  const bool last = offset + len == w.length;
  bool ack_req = false;
  if (type_ == QpType::kRc) {
    ++req_.noack_packets;
    // AckReq at least every half window (recovery.cc), on a tail-loss probe's packet, and on
    // every packet until the first RTT sample when asked to
    // (RecoveryParams::ack_req_until_sampled).
    if (last || req_.noack_packets >= ack_req_interval() || rec_.force_ack_req ||
        awaiting_first_rtt_sample()) {
      ack_req = true;
      req_.noack_packets = 0;
    }
  }
  if (!fill_message_packet(w, index, psn, offset, ack_req, dest_qpn, out)) {
    // IBTA 10.7.3.1: a bad local key fails the WQE with a local protection error.
    fail_wqe(index, WcStatus::kLocProtErr);
    return false;
  }
  req_.psn = wire::psn_add(psn, 1);
  w.sent_bytes = offset + len;
  UROCE_ASSERT(w.sent_bytes <= w.length && last == (w.sent_bytes == w.length));
  if (last) {
    w.state = WqeState::kPending;
    ++req_.next_wqe;
  }
  return true;
}

bool Qp::fill_message_packet(const SendWqe& w, std::uint32_t index, std::uint32_t psn,
                             std::uint64_t offset, bool ack_req, std::uint32_t dest_qpn,
                             TxPacket& out) {
  UROCE_ASSERT(offset <= w.length);  // a packet of the message, not past its end
  const auto len =
      static_cast<std::uint32_t>(std::min<std::uint64_t>(w.length - offset, mtu_bytes_));
  const bool first = offset == 0;
  const bool last = offset + len == w.length;
  // SEND or RDMA WRITE, First/Middle/Last or Only, with ImmDt or IETH in the last packet:
  // wr_opcodes.def derives the opcode for this QP type.
  const Opcode op = w.wr_op->request_opcode(type_, packet_position(first, last));
  const bool solicited = last && (w.send_flags & kSendSolicited) != 0;
  const wire::OpcodeInfo& info =
      build_bth(out, op, dest_qpn, psn, ack_req, solicited, len, w.xrc_srqn);
  const MutBytes hdr(out.header);
  if (info.has(wire::ExtHeader::kReth)) {
    wire::RethMut(hdr.subspan(info.offset_of(wire::ExtHeader::kReth)))
        .encode(wire::Reth{w.remote_addr, w.rkey, static_cast<std::uint32_t>(w.length)});
  }
  if (info.has(wire::ExtHeader::kDeth)) {
    const std::uint32_t qkey = (w.remote_qkey & 0x80000000u) ? attr_.qkey : w.remote_qkey;
    wire::DethMut(hdr.subspan(info.offset_of(wire::ExtHeader::kDeth)))
        .encode(wire::Deth{qkey, qpn_});
  }
  if (info.has(wire::ExtHeader::kImmDt)) {
    wire::ImmDtMut(hdr.subspan(info.offset_of(wire::ExtHeader::kImmDt))).set_value(w.imm_data);
  }
  if (info.has(wire::ExtHeader::kIeth)) {
    wire::IethMut(hdr.subspan(info.offset_of(wire::ExtHeader::kIeth))).set_value(w.imm_data);
  }
  return gather(w, index, offset, len, out);
}

void Qp::complete_unreliable_sends() {
  // UC and UD: a WQE is complete once its last packet is handed to the network.
  while (sq_count_ > 0 && sq_at(sq_tail_).state == WqeState::kPending) {
    complete_send(sq_tail_, WcStatus::kSuccess);
  }
}

void Qp::skip_acknowledged(std::uint32_t through) {
  // A response beyond the requester's next PSN answers a request sent before a go-back-N went
  // back past it (an ACK timer that fired while the packets and their ACKs were on the way): the
  // responder has them. Sending them again would only earn duplicate ACKs, so the requester
  // takes them as sent again, WQE by WQE, each with the PSNs it had (a go-back-N gives the same
  // WQEs the same PSNs). A READ or an atomic is one request: passed whole, its outstanding count
  // restored, its response stream the one the first request started (a READ resumed mid-message
  // takes the stream's continuation at the resume PSN as its start, as from a re-request rxe
  // answers). Never past req_.psn_end: beyond it nothing was sent.
  while (wire::psn_le(req_.psn, through) && wire::psn_lt(req_.psn, req_.psn_end) &&
         req_.next_wqe != sq_tail_ + sq_count_) {
    SendWqe& w = sq_at(req_.next_wqe);
    const bool rd_atomic = w.wr_op->is_read_or_atomic();
    if (w.state == WqeState::kPosted) {
      if (!w.started || w.first_psn != req_.psn) return;  // not sent before (cannot happen)
      w.state = WqeState::kSending;
      w.sent_bytes = 0;
      w.read_bytes = 0;
      if (rd_atomic) ++req_.rd_atomic_inflight;  // retry_from counted a resumed one already
    } else if (w.state != WqeState::kSending) {
      return;
    }
    if (rd_atomic) {
      if (w.wr_op->is(kWrRead)) w.read_req_psn = req_.psn;
      req_.psn = wire::psn_add(w.last_psn, 1);
    } else {
      req_.psn = wire::psn_add(wire::psn_le(w.last_psn, through) ? w.last_psn : through, 1);
    }
    w.sent_bytes = std::min<std::uint64_t>(
        std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(req_.psn, w.first_psn))} *
            mtu_bytes_,
        w.length);
    if (rd_atomic || wire::psn_gt(req_.psn, w.last_psn)) {
      w.sent_bytes = w.length;
      w.state = WqeState::kPending;
      ++req_.next_wqe;
    }
  }
}

void Qp::retry_from(std::uint32_t psn) {
  // Go-back-N (IBTA 9.7.6.1.5, rxe req_retry): resend from `psn`. The first WQE resumes at the
  // packet holding `psn`; later ones start over with the same PSNs as before.
  if (sr_.on) sr_going_back(psn);
  req_.psn = psn;
  req_.noack_packets = 0;
  comp_.read_stream_open = false;
  req_.rd_atomic_inflight = 0;
  req_.next_wqe = sq_tail_;
  for (std::uint32_t i = sq_tail_; i != sq_tail_ + sq_count_; ++i) {
    SendWqe& w = sq_at(i);
    if (w.state == WqeState::kPosted) break;
    if (i == sq_tail_ && wire::psn_gt(psn, w.first_psn) && wire::psn_le(psn, w.last_psn)) {
      const std::uint64_t done =
          std::uint64_t{static_cast<std::uint32_t>(wire::psn_diff(psn, w.first_psn))} * mtu_bytes_;
      w.sent_bytes = std::min(done, w.length);
      w.state = WqeState::kSending;
      if (w.wr_op->is_read_or_atomic()) ++req_.rd_atomic_inflight;
      continue;
    }
    w.state = WqeState::kPosted;
    w.sent_bytes = 0;
  }
}

}  // namespace uroce::transport
