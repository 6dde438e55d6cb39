// The responder: executes incoming requests and produces ACKs, NAKs, READ responses and atomic
// ACKs (IBTA 9.7.4-9.7.5, 9.8 for UC, 9.8.4 for UD; rxe_resp.c).
//
// RC: an out-of-sequence PSN gets one NAK (PSN sequence error) per gap; a duplicate SEND or
// WRITE is re-ACKed, never re-executed; a duplicate READ is replayed from its saved resource,
// possibly from mid-message; a duplicate atomic returns its saved original value. A SEND (or
// WRITE with immediate) without a receive WQE gets an RNR NAK carrying min_rnr_timer. Invalid
// requests (class C), access violations (class A) and local failures send their NAK and move
// the QP to the error state.
// UC: no responses; after a gap, packets are dropped until the next First or Only.
// UD: no PSN checks; the Q_Key must match; the receive buffer starts with the 40-byte GRH area.
#include <algorithm>
#include <cstring>

#include "transport/qp.h"
#include "transport/sgl.h"
#include "wire/aeth.h"
#include "wire/psn.h"

namespace uroce::transport {

using wire::NakCode;
using wire::Opcode;

namespace {

// The MR and QP access flags a FLUSH's placement type needs (rxe check_rkey()).
std::uint32_t flush_access(std::uint8_t placement) {
  return ((placement & wire::kFlushGlobal) != 0 ? kAccessFlushGlobal : 0u) |
         ((placement & wire::kFlushPersistent) != 0 ? kAccessFlushPersistent : 0u);
}

#ifdef UROCE_CANARY_ATOMIC_WRITE
// The ATOMIC WRITE canary (defined only in tests/sim's uroce_sim_canary_atomic_write): a
// deliberate bug that the simulator must catch. A duplicate ATOMIC WRITE is placed a second
// time, at its saved resource's address, as a responder that redid it like a WRITE would: after
// a later one to the same address, it puts the older value back.
void canary_place_again(MemoryResolver& memory, std::uint32_t pd, std::uint32_t qpn,
                        std::uint32_t rkey, std::uint64_t va, ConstBytes payload) {
  if (payload.size() != 8) return;
  if (auto mem = memory.resolve(pd, qpn, rkey, true, va, 8, kAccessRemoteWrite); mem.ok()) {
    std::memcpy(mem.value().data(), payload.data(), 8);
  }
}
#endif

}  // namespace

bool Qp::take_recv_wqe() {
  UROCE_ASSERT(!resp_.has_wqe);  // a WQE taken while one is held would never complete
  if (env_.rq->empty()) return false;
  const RecvWqe f = env_.rq->front();
  UROCE_ASSERT(f.sges.size() <= resp_.wqe_sges.size());
  resp_.wqe_id = f.wr_id;
  resp_.wqe_num_sge = static_cast<std::uint32_t>(f.sges.size());
  std::copy(f.sges.begin(), f.sges.end(), resp_.wqe_sges.begin());
  resp_.has_wqe = true;
  resp_.recv_offset = 0;
  if (env_.rq->pop() && env_.events != nullptr) env_.events->srq_limit_reached(env_.rq);
  return true;
}

bool Qp::bind_xrc_srq(const wire::RocePacket& pkt) {
  UROCE_ASSERT(env_.xrc == XrcRole::kRecv && pkt.op->has(wire::ExtHeader::kXrcEth));
  const std::optional<XrcSrqTarget> t = env_.xrc_srqs->xrc_srq(env_.xrcd, pkt.xrceth().srqn());
  if (!t) return false;
  // A message's packets all name its SRQ: a WQE taken from one completes there, a WRITE's
  // keys are of one PD.
  if ((resp_.has_wqe || resp_.in_message != MsgKind::kNone) && t->serial != xrc_.serial) {
    return false;
  }
  UROCE_ASSERT(t->rq != nullptr && t->cq != nullptr);
  env_.rq = t->rq;
  env_.recv_cq = t->cq;
  env_.pd = t->pd;
  xrc_.srqn = pkt.xrceth().srqn();
  xrc_.serial = t->serial;
  return true;
}

// An XRC SRQ may be destroyed while a target QP uses it: the kernel counts no XRC_RECV QP on an
// XRC SRQ (ib_destroy_srq_user() refuses only while srq->usecnt, which only QPs created on the
// SRQ raise), so ibv_destroy_srq succeeds mid-message. The QP finds out here, before anything
// of the SRQ's is touched again: at every request and before a flush or an error completes the
// WQE it holds. A message in progress into the SRQ is dropped: its receive WQE went with the
// SRQ and completes nowhere (as every WQE still queued there), and the message's remaining
// packets are Invalid Requests (they name an SRQ that is gone, or, if its number is taken again,
// continue a message the QP no longer has: the opcode sequence check refuses them).
void Qp::drop_stale_xrc_srq() {
  if (env_.xrc != XrcRole::kRecv || env_.rq == xrc_.idle_rq) return;
  const std::optional<XrcSrqTarget> t = env_.xrc_srqs->xrc_srq(env_.xrcd, xrc_.srqn);
  if (t && t->serial == xrc_.serial) return;
  unbind_xrc_srq();
}

void Qp::unbind_xrc_srq() {
  UROCE_ASSERT(env_.xrc == XrcRole::kRecv);
  resp_.has_wqe = false;
  resp_.recv_offset = 0;
  resp_.in_message = MsgKind::kNone;
  env_.rq = xrc_.idle_rq;
  env_.recv_cq = xrc_.idle_cq;
  env_.pd = 0;
  xrc_.srqn = 0;
  xrc_.serial = 0;
}

Qp::RespStatus Qp::scatter_into_recv(std::uint64_t offset, ConstBytes data) {
  UROCE_ASSERT(resp_.has_wqe);
  const std::span<const Sge> sges = std::span(resp_.wqe_sges).first(resp_.wqe_num_sge);
  // While selective repeat keeps packets past the ePSN, this one (at the ePSN) leaves the bytes
  // they placed alone.
  switch (sr_.held > 0 ? sr_scatter(resp_.psn, sges, offset, data)
                       : scatter(*env_.memory, env_.pd, sges, offset, data)) {
    case ScatterResult::kOk:
      return RespStatus::kOk;
    case ScatterResult::kTooLong:
      return RespStatus::kLengthError;
    case ScatterResult::kAccessError:
      break;
  }
  return RespStatus::kOperationalError;
}

void Qp::complete_recv(WcStatus status, std::uint32_t byte_len, std::uint32_t wc_flags,
                       std::uint32_t imm, WcOpcode opcode, bool solicited, std::uint32_t src_qp,
                       NetworkHdr network_hdr) {
  UROCE_CHECK(resp_.has_wqe);
  Wc wc;
  wc.wr_id = resp_.wqe_id;
  wc.status = status;
  wc.opcode = opcode;
  wc.byte_len = byte_len;
  wc.imm_data = imm;
  wc.qp_num = qpn_;
  wc.src_qp = src_qp;
  wc.wc_flags = wc_flags;
  wc.network_hdr = network_hdr;
  resp_.has_wqe = false;
  resp_.recv_offset = 0;
  env_.recv_cq->push(wc, solicited);
}

void Qp::queue_ack(std::uint8_t syndrome, std::uint32_t psn, AckFor ack_for) {
  UROCE_ASSERT(type_ == QpType::kRc);  // UC and UD answer nothing
  acks_.ack_queued(ack_for);
  Response r;
  r.kind = Response::Kind::kAck;
  r.syndrome = syndrome;
  r.psn = psn;
  r.msn = resp_.msn;
  r.ack_for = ack_for;
  if (!responses_.empty() && responses_.back().kind == Response::Kind::kAck) {
    // Behind the last READ or atomic response, at most one ACK or NAK waits: the one that says
    // the most. Every ACK and NAK at PSN p acknowledges all requests before p, so a later one
    // at a higher PSN says all an earlier one did (a NAK at p whose gap was filled since, or an
    // RNR NAK at p whose retry was executed since, is obsolete); one at a lower PSN (a re-ACK of
    // a duplicate) says nothing new. At the same PSN the newcomer wins (an ACK: p was executed
    // since; a fatal NAK: the QP's last word), except a sequence NAK, which adds nothing to a
    // NAK there: replacing an RNR NAK would make the requester spend retry_cnt, not rnr_retry.
    Response& back = responses_.back();
    const std::int32_t d = wire::psn_diff(psn, back.psn);
    const bool back_is_nak = wire::aeth_type(back.syndrome) != wire::AethType::kAck;
    const bool new_is_seq_nak = syndrome == wire::make_nak_syndrome(NakCode::kPsnSequenceError);
    if (d > 0 || (d == 0 && !(back_is_nak && new_is_seq_nak))) {
      // The peer sent more without waiting for a deferred ACK: deferring pays.
      acks_.ack_replaced(back.ack_for);
      back = r;
    }
    return;
  }
  // Room is guaranteed: a READ or atomic response is queued only with a slot to spare behind
  // it (execute_request), and ACKs and NAKs coalesce into one behind each.
  responses_.push_back(r);
}

void Qp::accept_rd_atomic(const RdAtomicResource& saved) {
  // Resources are reused oldest first; the requester's max_rd_atomic keeps the ones it may
  // still ask to replay alive.
  UROCE_ASSERT(!resources_.empty() && saved.valid);  // execute_request checked max_dest_rd_atomic
  const std::uint32_t index = next_resource_;
  UROCE_ASSERT(index < resources_.size());
  resources_[index] = saved;
  resources_[index].pd = env_.pd;
  next_resource_ = (next_resource_ + 1) % static_cast<std::uint32_t>(resources_.size());
  queue_rd_atomic_response(index, saved.first_psn, saved.va, saved.length, saved.rkey);
}

void Qp::queue_rd_atomic_response(std::uint32_t resource, std::uint32_t psn, std::uint64_t va,
                                  std::uint64_t length, std::uint32_t rkey) {
  UROCE_ASSERT(resource < resources_.size() && resources_[resource].valid);
  const RdAtomicResource& r = resources_[resource];
  // A replay answers the saved request or a part of it (handle_duplicate's checks).
  UROCE_ASSERT(length <= r.length);
  Response job;
  job.kind = r.is_read ? Response::Kind::kRead : Response::Kind::kAtomic;
  job.psn = psn;
  job.msn = r.msn;
  job.va = va;
  job.length = length;
  job.rkey = rkey;
  // The atomic's original value goes with its response now: the resource may be reused by a
  // later READ or atomic before this response leaves (rxe also builds the atomic ACK from the
  // value computed when the atomic executes).
  job.orig = r.orig;
  job.pd = r.pd;
  UROCE_CHECK(responses_.size() + 1 < responses_.capacity());
  responses_.push_back(job);
}

void Qp::responder_error(std::uint8_t nak_syndrome, WcStatus status, std::uint32_t psn) {
  UROCE_CHECK(type_ == QpType::kRc);  // UC drops a bad message itself; UD has no NAKs
  ++counters_.other_naks_sent;
  drop_stale_xrc_srq();  // a READ response's error may come long after the SRQ went
  if (resp_.has_wqe) complete_recv(status, 0, 0, 0, WcOpcode::kRecv, false, attr_.dest_qp_num);
  // Responses go out in PSN order, the NAK after everything before it: READ responses and
  // atomic ACKs owed to requests accepted before this one still leave, from the error state
  // (poll_transmit), then the NAK, then nothing.
  queue_ack(nak_syndrome, psn);
  drain_responses_in_error_ = true;
  if (env_.events != nullptr) {
    const NakCode code = static_cast<NakCode>(wire::aeth_value(nak_syndrome));
    env_.events->qp_event(qpn_, code == NakCode::kRemoteAccessError ? AsyncEventType::kQpAccessErr
                                : code == NakCode::kInvalidRequest  ? AsyncEventType::kQpReqErr
                                                                    : AsyncEventType::kQpFatal);
  }
  enter_error();
}

void Qp::handle_request(Instant, const wire::RocePacket& pkt, const PacketInfo& info) {
  // handle_packet() took CNPs and responses already.
  UROCE_ASSERT(!pkt.op->is(wire::kFlagCnp) && !pkt.op->is(wire::kFlagResponse));
  if (state_ != QpState::kRtr && state_ != QpState::kRts && state_ != QpState::kSqd &&
      state_ != QpState::kSqe) {
    ++counters_.dropped;
    return;
  }
  if (pkt.op->transport != request_transport()) {
    ++counters_.dropped;
    return;
  }
  ++counters_.packets_received;
  counters_.bytes_received += pkt.payload.size();
  switch (type_) {
    case QpType::kRc:
      handle_rc_request(pkt, info.payload_placed);
      break;
    case QpType::kUc:
      handle_uc_request(pkt, info.payload_placed);
      break;
    case QpType::kUd:
      handle_ud_request(pkt, info);
      break;
    case QpType::kXrcSend:  // XRC runs as RC (QpEnv::xrc): the constructor refuses these
    case QpType::kXrcRecv:
      UROCE_CHECK(false);
  }
}

// A request at the expected PSN: its checks, a receive WQE for one that consumes one, then the
// step of its kind (SEND, WRITE, READ, atomic).
Qp::RespStatus Qp::execute_request(const wire::RocePacket& pkt, bool placed) {
  const wire::OpcodeInfo& op = *pkt.op;
  // XRC (IBTA 9.8.1.1): the XRCETH names the SRQ, which must be of the QP's XRC domain.
  if (env_.xrc == XrcRole::kRecv) {
    drop_stale_xrc_srq();
    if (!bind_xrc_srq(pkt)) {
      ++counters_.xrc_bad_srqn;
      return RespStatus::kInvalidRequest;
    }
  }
  if (const RespStatus s = check_request(pkt); s != RespStatus::kOk) return s;
  if (op.is(wire::kFlagRecvWqe) && !resp_.has_wqe && !take_recv_wqe()) return RespStatus::kRnr;
  // Only a continuation is ever placed before it gets here (one_pass_target), or a request that
  // selective repeat kept (sr_drain).
  UROCE_ASSERT(!placed || !op.is(wire::kFlagFirst) || sr_.draining);
  if (op.is(wire::kFlagSend)) return execute_send(pkt, placed);
  if (op.is(wire::kFlagWrite)) return execute_write(pkt, placed);
  if (resources_.empty()) return RespStatus::kInvalidRequest;  // max_dest_rd_atomic == 0
  if (responses_.size() + 2 > responses_.capacity()) return RespStatus::kBusy;
  if (op.is(wire::kFlagRead)) return execute_read(pkt);
  if (op.is(wire::kFlagAtomicWrite)) return execute_atomic_write(pkt);
  if (op.is(wire::kFlagFlush)) return execute_flush(pkt);
  return execute_atomic(pkt);
}

// The opcode sequence, the QP's remote access and the payload's length.
Qp::RespStatus Qp::check_request(const wire::RocePacket& pkt) const {
  const wire::OpcodeInfo& op = *pkt.op;
  const bool first = op.is(wire::kFlagFirst);
  const bool last = op.is(wire::kFlagLast);
  const bool send = op.is(wire::kFlagSend);
  const bool write = op.is(wire::kFlagWrite);
  // Opcode sequence (IBTA 9.7.4.1.3 / rxe check_op_seq).
  switch (resp_.in_message) {
    case MsgKind::kSend:
      if (!send || first) return RespStatus::kInvalidRequest;
      break;
    case MsgKind::kWrite:
      if (!write || first) return RespStatus::kInvalidRequest;
      break;
    case MsgKind::kNone:
      if (!first) return RespStatus::kInvalidRequest;
      break;
  }
  // The QP must allow the remote operation (rxe check_op_valid(), check_qp_attr_access()): an
  // ATOMIC WRITE remote write, a FLUSH each placement type it asks for.
  const std::uint32_t access = attr_.qp_access_flags;
  if (((write || op.is(wire::kFlagAtomicWrite)) && !(access & kAccessRemoteWrite)) ||
      (op.is(wire::kFlagRead) && !(access & kAccessRemoteRead)) ||
      (op.is(wire::kFlagAtomic) && !(access & kAccessRemoteAtomic)) ||
      (op.is(wire::kFlagFlush) && (flush_access(pkt.feth().placement()) & ~access) != 0)) {
    return RespStatus::kInvalidRequest;
  }
  // Payload lengths against the path MTU (rxe check_length).
  const std::size_t payload = pkt.payload.size();
  // First and Middle carry exactly the MTU, Last 1..MTU bytes, Only 0..MTU.
  if (op.is(wire::kFlagPayload)) {
    if (!last && payload != mtu_bytes_) return RespStatus::kInvalidRequest;
    if (last && !first && payload == 0) return RespStatus::kInvalidRequest;
    if (payload > mtu_bytes_) return RespStatus::kInvalidRequest;
  }
  return RespStatus::kOk;
}

// A SEND's packet into the receive WQE; its last completes the WQE (with its immediate, or the
// rkey it invalidates).
Qp::RespStatus Qp::execute_send(const wire::RocePacket& pkt, bool placed) {
  const wire::OpcodeInfo& op = *pkt.op;
  if (op.is(wire::kFlagFirst)) resp_.recv_offset = 0;
  if (!placed) {
    if (const RespStatus s = scatter_into_recv(resp_.recv_offset, pkt.payload);
        s != RespStatus::kOk) {
      return s;
    }
  }
  resp_.recv_offset += pkt.payload.size();
  resp_.psn = wire::psn_add(pkt.bth().psn(), 1);
  if (!op.is(wire::kFlagLast)) {
    resp_.in_message = MsgKind::kSend;
    return RespStatus::kOk;
  }
  std::uint32_t flags = 0;
  std::uint32_t imm = 0;
  if (op.has(wire::ExtHeader::kImmDt)) {
    flags |= kWcWithImm;
    imm = pkt.immdt().value();
  }
  if (op.has(wire::ExtHeader::kIeth)) {
    imm = pkt.ieth().value();
    if (!env_.memory->invalidate(env_.pd, qpn_, imm, true).ok()) return RespStatus::kInvalidRequest;
    flags |= kWcWithInv;
  }
  resp_.in_message = MsgKind::kNone;
  resp_.msn = wire::psn_add(resp_.msn, 1);
  ++counters_.messages_executed;
  complete_recv(WcStatus::kSuccess, static_cast<std::uint32_t>(resp_.recv_offset), flags, imm,
                WcOpcode::kRecv, pkt.bth().solicited(), attr_.dest_qp_num);
  return RespStatus::kOk;
}

// A WRITE's packet: the first checks the RETH's region, each is placed at write_va, and the
// packets must add up to the RETH's length; a last with immediate completes a receive WQE.
Qp::RespStatus Qp::execute_write(const wire::RocePacket& pkt, bool placed) {
  const wire::OpcodeInfo& op = *pkt.op;
  const bool last = op.is(wire::kFlagLast);
  const std::size_t payload = pkt.payload.size();
  MutBytes message;  // a First or Only packet's whole message, resolved once for both uses
  if (op.is(wire::kFlagFirst)) {
    const wire::RethView reth = pkt.reth();
    resp_.write_va = reth.va();
    resp_.write_rkey = reth.rkey();
    resp_.write_resid = reth.dma_length();
    resp_.write_length = reth.dma_length();
    if (resp_.write_length > kMaxMessageBytes) return RespStatus::kInvalidRequest;
    if (resp_.write_length > 0) {
      auto whole = env_.memory->resolve(env_.pd, qpn_, resp_.write_rkey, true, resp_.write_va,
                                        resp_.write_length, kAccessRemoteWrite);
      if (!whole.ok()) return RespStatus::kAccessError;
      message = whole.value();
    }
  }
  // The packets must add up to the RETH's DMA length exactly.
  if (last ? payload != resp_.write_resid : payload >= resp_.write_resid) {
    return RespStatus::kInvalidRequest;
  }
  if (payload > 0) {
    // Resolved per packet (a region deregistered mid-message is never written), but for the
    // message's first packet, whose bytes lead the message resolved just above.
    MutBytes dst = message.first(std::min(payload, message.size()));
    if (message.empty()) {
      auto mem = env_.memory->resolve(env_.pd, qpn_, resp_.write_rkey, true, resp_.write_va,
                                      payload, kAccessRemoteWrite);
      if (!mem.ok()) return RespStatus::kAccessError;
      dst = mem.value();
    }
    // sr_copy's first case in line (issue 40): no packet after this one is kept to overlap it.
    if (!placed && sr_.held == 0) {
      std::memcpy(dst.data(), pkt.payload.data(), dst.size());
    } else if (!placed) {
      sr_copy(pkt.bth().psn(), std::span(&dst, 1), pkt.payload.first(payload));
    }
  }
  resp_.write_va += payload;
  resp_.write_resid -= payload;
  resp_.psn = wire::psn_add(pkt.bth().psn(), 1);
  if (!last) {
    resp_.in_message = MsgKind::kWrite;
    return RespStatus::kOk;
  }
  resp_.in_message = MsgKind::kNone;
  resp_.msn = wire::psn_add(resp_.msn, 1);
  ++counters_.messages_executed;
  if (op.has(wire::ExtHeader::kImmDt)) {
    complete_recv(WcStatus::kSuccess, static_cast<std::uint32_t>(resp_.write_length), kWcWithImm,
                  pkt.immdt().value(), WcOpcode::kRecvRdmaWithImm, pkt.bth().solicited(),
                  attr_.dest_qp_num);
  }
  return RespStatus::kOk;
}

// A READ request: its region checked, a resource saved for replays, its responses queued.
Qp::RespStatus Qp::execute_read(const wire::RocePacket& pkt) {
  const std::uint32_t psn = pkt.bth().psn();
  const wire::RethView reth = pkt.reth();
  const std::uint64_t length = reth.dma_length();
  if (length > kMaxMessageBytes) return RespStatus::kInvalidRequest;
  if (length > 0 &&
      !env_.memory->resolve(env_.pd, qpn_, reth.rkey(), true, reth.va(), length, kAccessRemoteRead)
           .ok()) {
    return RespStatus::kAccessError;
  }
  const std::uint32_t npsn = packets_for(length, mtu_bytes_);
  resp_.msn = wire::psn_add(resp_.msn, 1);  // a READ counts when accepted
  ++counters_.messages_executed;
  accept_rd_atomic(RdAtomicResource{true, true, psn, wire::psn_add(psn, std::int64_t{npsn} - 1),
                                    reth.va(), reth.rkey(), length, 0, resp_.msn});
  resp_.psn = wire::psn_add(psn, npsn);
  return RespStatus::kOk;
}

// Atomics (IBTA 9.4.5): 8 bytes, naturally aligned, executed at once; the original value is
// saved for the response and its replays.
Qp::RespStatus Qp::execute_atomic(const wire::RocePacket& pkt) {
  UROCE_ASSERT(pkt.op->is(wire::kFlagAtomic));  // the opcode table's requests are 4 kinds
  const std::uint32_t psn = pkt.bth().psn();
  const wire::AtomicEthView a = pkt.atomic_eth();
  if ((a.va() & 7u) != 0) return RespStatus::kInvalidRequest;
  auto mem = env_.memory->resolve(env_.pd, qpn_, a.rkey(), true, a.va(), 8, kAccessRemoteAtomic);
  if (!mem.ok()) return RespStatus::kAccessError;
  UROCE_ASSERT(mem.value().size() >= 8);
  std::uint64_t orig = 0;
  std::memcpy(&orig, mem.value().data(), 8);
  // Atomic with respect to every other RDMA atomic of this device (IBV_ATOMIC_HCA): the engine
  // executes them one at a time.
  std::uint64_t result = orig;
  if (wire::rc_operation(pkt.op->opcode()) == Opcode::kRcCompareSwap) {
    if (orig == a.compare()) result = a.swap_add();
  } else {
    result = orig + a.swap_add();
  }
  std::memcpy(mem.value().data(), &result, 8);
  resp_.msn = wire::psn_add(resp_.msn, 1);
  ++counters_.messages_executed;
  accept_rd_atomic(RdAtomicResource{true, false, psn, psn, a.va(), a.rkey(), 8, orig, resp_.msn});
  resp_.psn = wire::psn_add(psn, 1);
  return RespStatus::kOk;
}

// ATOMIC WRITE (IBTA 1.5 annex A19; rxe atomic_write_reply()): its RETH's region checked as a
// WRITE's (remote write access), exactly 8 bytes to an 8-byte aligned address, placed at once.
// Answered, as rxe does, with a READ Response Only without data; its resource makes a duplicate
// get that answer again without a second write.
Qp::RespStatus Qp::execute_atomic_write(const wire::RocePacket& pkt) {
  const std::uint32_t psn = pkt.bth().psn();
  const wire::RethView reth = pkt.reth();
  const std::uint64_t length = reth.dma_length();
  if (length > kMaxMessageBytes) return RespStatus::kInvalidRequest;
  // rxe check_rkey(): the key and the range first, then the payload against the RETH's length.
  auto mem =
      env_.memory->resolve(env_.pd, qpn_, reth.rkey(), true, reth.va(), length, kAccessRemoteWrite);
  if (!mem.ok()) return RespStatus::kAccessError;
  if (length != 8 || pkt.payload.size() != 8) return RespStatus::kInvalidRequest;
  if ((reth.va() & 7u) != 0) return RespStatus::kInvalidRequest;  // misaligned (rxe's class C)
  UROCE_ASSERT(mem.value().size() == 8);
  // One 8-byte store after everything before it, as far as the engine's thread sees them.
  std::memcpy(mem.value().data(), pkt.payload.data(), 8);
  resp_.msn = wire::psn_add(resp_.msn, 1);
  ++counters_.messages_executed;
  accept_rd_atomic(RdAtomicResource{true, true, psn, psn, reth.va(), reth.rkey(), 0, 0, resp_.msn});
  resp_.psn = wire::psn_add(psn, 1);
  return RespStatus::kOk;
}

// FLUSH (IBTA 1.5 annex A19; rxe check_rkey() and process_flush()): the R_Key must grant each
// placement type asked for; a range flush checks its range, a region flush only the key. uroce
// places every byte in the host's memory as it executes each request, in order, so everything
// before the FLUSH is visible already (the application's threads see it as they see any of the
// engine's writes: through the completion path's synchronisation). There is no persistent
// memory to flush to. Answered with a READ Response Only without data.
Qp::RespStatus Qp::execute_flush(const wire::RocePacket& pkt) {
  const std::uint32_t psn = pkt.bth().psn();
  const wire::FethView feth = pkt.feth();
  const wire::RethView reth = pkt.reth();
  if (feth.selectivity() > wire::kFlushMr) return RespStatus::kInvalidRequest;  // reserved
  if (reth.dma_length() > kMaxMessageBytes) return RespStatus::kInvalidRequest;
  const std::uint32_t access = flush_access(feth.placement());
  const bool ok =
      feth.selectivity() == wire::kFlushMr
          ? env_.memory->resolve_region(env_.pd, qpn_, reth.rkey(), access).ok()
          : env_.memory
                ->resolve(env_.pd, qpn_, reth.rkey(), true, reth.va(), reth.dma_length(), access)
                .ok();
  if (!ok) return RespStatus::kAccessError;
  resp_.msn = wire::psn_add(resp_.msn, 1);
  ++counters_.messages_executed;
  accept_rd_atomic(RdAtomicResource{true, true, psn, psn, reth.va(), reth.rkey(), 0, 0, resp_.msn});
  resp_.psn = wire::psn_add(psn, 1);
  return RespStatus::kOk;
}

void Qp::handle_rc_request(const wire::RocePacket& pkt, bool placed) {
  const std::uint32_t psn = pkt.bth().psn();
  const std::int32_t d = wire::psn_diff(psn, resp_.psn);
  if (d > 0 && sr_.on) {
    sr_out_of_order(pkt);
    return;
  }
  if (d > 0) {
    // As rxe (check_psn, nak_sent): one NAK per out-of-sequence run, then silence until the
    // expected PSN arrives.
    ++counters_.out_of_sequence;
    if (!resp_.nak_sent) {
      resp_.nak_sent = true;
      ++counters_.seq_naks_sent;
      queue_ack(wire::make_nak_syndrome(NakCode::kPsnSequenceError), resp_.psn);
    }
    return;
  }
  if (d < 0) {
    ++counters_.duplicate_requests;
    handle_duplicate(pkt);
    // Selective repeat: a resend whose answer was lost learns of the next hole.
    if (sr_.on && sr_.held > 0) sr_queue_seq_nak(true);
    return;
  }
  const RespStatus s = execute_request(pkt, placed);
  // An executed request moves the expected PSN past itself (a READ past all its responses).
  UROCE_ASSERT(s != RespStatus::kOk || wire::psn_diff(resp_.psn, psn) > 0);
  answer_request(pkt, s);
  if (sr_.on) sr_after_in_order(psn, s);
}

void Qp::answer_request(const wire::RocePacket& pkt, RespStatus s) {
  const std::uint32_t psn = pkt.bth().psn();
  switch (s) {
    case RespStatus::kOk:
      resp_.nak_sent = false;
      acks_.peer_spoke();  // the peer spoke again before this side's application
      // A READ, an atomic, an ATOMIC WRITE or a FLUSH has its response queued already.
      if (pkt.bth().ack_req() && !pkt.op->is(wire::kFlagRead) && !pkt.op->is(wire::kFlagAtomic) &&
          !pkt.op->is(wire::kFlagAtomicWrite) && !pkt.op->is(wire::kFlagFlush)) {
        const AckFor ack_for = !pkt.op->is(wire::kFlagLast)      ? AckFor::kNone
                               : pkt.op->is(wire::kFlagComplete) ? AckFor::kSend
                                                                 : AckFor::kWrite;
        queue_ack(wire::make_ack_syndrome(), psn, ack_for);
      }
      return;
    case RespStatus::kRnr:
      // The RNR NAK is this run's NAK (IBTA 9.7.5.2.8, one NAK per run as for a sequence
      // error): the packets behind P are dropped in silence until the requester, after its RNR
      // timer, resends P.
      resp_.nak_sent = true;
      ++counters_.rnr_naks_sent;
      queue_ack(wire::make_rnr_nak_syndrome(attr_.min_rnr_timer), psn);
      return;
    case RespStatus::kBusy:
      ++counters_.dropped;
      return;
    case RespStatus::kInvalidRequest:
      responder_error(wire::make_nak_syndrome(NakCode::kInvalidRequest), WcStatus::kRemInvReqErr,
                      psn);
      return;
    case RespStatus::kLengthError:
      responder_error(wire::make_nak_syndrome(NakCode::kInvalidRequest), WcStatus::kLocLenErr, psn);
      return;
    case RespStatus::kAccessError:
      responder_error(wire::make_nak_syndrome(NakCode::kRemoteAccessError), WcStatus::kRemAccessErr,
                      psn);
      return;
    case RespStatus::kOperationalError:
      responder_error(wire::make_nak_syndrome(NakCode::kRemoteOperationalError),
                      WcStatus::kLocProtErr, psn);
      return;
  }
}

void Qp::drop_responses_from(std::uint32_t psn) {
  // A READ or atomic asked for again at PSN p: the requester went back to p (its completer has
  // every response before p; go-back-N resends each request after p too). Every response still
  // queued for p or later is obsolete, and a READ stream that reaches p would only send packets
  // beyond the requester's gap, each dropped there: the replay takes their place. rxe likewise
  // abandons the READ it was answering for the replayed one. The queue is in PSN order, so the
  // obsolete ones are its tail. A network's duplicate of an old request may drop responses that
  // are still needed; the requester's implied NAK or timeout asks for them again.
  while (!responses_.empty()) {
    const Response& r = responses_.back();
    UROCE_ASSERT(r.kind != Response::Kind::kRead || r.offset <= r.length);
    // The last PSN this entry would send (an ACK's is the PSN it acknowledges).
    const std::uint32_t last =
        r.kind == Response::Kind::kRead
            ? wire::psn_add(r.psn, std::int64_t{packets_for(r.length - r.offset, mtu_bytes_)} - 1)
            : r.psn;
    if (wire::psn_lt(last, psn)) return;
    responses_.pop_back();
  }
}

// Long: one case per kind of request asked again (SEND or WRITE, READ, ATOMIC WRITE or FLUSH,
// atomic), each matched against the saved resources in the one loop.
void Qp::handle_duplicate(const wire::RocePacket& pkt) {
  const std::uint32_t psn = pkt.bth().psn();
  UROCE_ASSERT(wire::psn_lt(psn, resp_.psn));
  const wire::OpcodeInfo& op = *pkt.op;
  if (op.is(wire::kFlagSend) || op.is(wire::kFlagWrite)) {
    // C9-105: acknowledge again, never execute again.
    queue_ack(wire::make_ack_syndrome(), wire::psn_add(resp_.psn, -1));
    return;
  }
  if (responses_.size() + 2 > responses_.capacity()) {
    ++counters_.dropped;
    return;
  }
  for (std::uint32_t i = 0; i < resources_.size(); ++i) {
    const RdAtomicResource& r = resources_[i];
    if (!r.valid) continue;
    if (op.is(wire::kFlagRead) && r.is_read && wire::psn_ge(psn, r.first_psn) &&
        wire::psn_le(psn, r.last_psn)) {
      // Replay from the requested PSN, with the (possibly shortened) range of the new request,
      // which must be the saved request or a part of it (rxe duplicate_request): the same rkey
      // and a range within the saved one, ending where it ends. Anything else is dropped in
      // silence (class D); it never reaches memory the original request was not checked for.
      const wire::RethView reth = pkt.reth();
      const std::uint64_t va = reth.va();
      const std::uint64_t length = reth.dma_length();
      if (reth.rkey() != r.rkey || length > kMaxMessageBytes || length > r.length || va < r.va ||
          va - r.va > r.length - length) {
        break;
      }
      const std::uint32_t npsn = packets_for(length, mtu_bytes_);
      if (wire::psn_add(psn, std::int64_t{npsn} - 1) != r.last_psn) break;
      drop_responses_from(psn);
      queue_rd_atomic_response(i, psn, va, length, reth.rkey());
      return;
    }
    if ((op.is(wire::kFlagAtomicWrite) || op.is(wire::kFlagFlush)) && r.is_read && r.length == 0 &&
        r.first_psn == psn) {
      // oA19-14, oA19-15: an ATOMIC WRITE or FLUSH asked again is not executed again (rxe
      // replays its resource): the zero-length READ Response Only again.
#ifdef UROCE_CANARY_ATOMIC_WRITE
      if (op.is(wire::kFlagAtomicWrite)) {
        canary_place_again(*env_.memory, r.pd, qpn_, r.rkey, r.va, pkt.payload);
      }
#endif
      drop_responses_from(psn);
      queue_rd_atomic_response(i, psn, r.va, 0, r.rkey);
      return;
    }
    if (op.is(wire::kFlagAtomic) && !r.is_read && r.first_psn == psn) {
#ifdef UROCE_CANARY
      // The canary (defined only in tests/sim's uroce_sim_canary): a deliberate bug that the
      // simulator must catch.
      // A duplicate atomic is executed a second time, as a responder without saved atomic
      // results would do.
      if (auto mem = env_.memory->resolve(r.pd, qpn_, r.rkey, true, r.va, 8, kAccessRemoteAtomic);
          mem.ok()) {
        std::uint64_t cur = 0;
        std::memcpy(&cur, mem.value().data(), 8);
        const wire::AtomicEthView a = pkt.atomic_eth();
        cur = wire::rc_operation(op.opcode()) == Opcode::kRcCompareSwap
                  ? (cur == a.compare() ? a.swap_add() : cur)
                  : cur + a.swap_add();
        std::memcpy(mem.value().data(), &cur, 8);
      }
#endif
      // Never executed twice: the saved original value is sent again.
      drop_responses_from(psn);
      queue_rd_atomic_response(i, psn, r.va, r.length, r.rkey);
      return;
    }
  }
  ++counters_.dropped;  // no saved resource: a class D error, the request is dropped
}

void Qp::handle_uc_request(const wire::RocePacket& pkt, bool placed) {
  const std::uint32_t psn = pkt.bth().psn();
  const bool first = pkt.op->is(wire::kFlagFirst);
  if (psn != resp_.psn) {
    // IBTA 9.8.3: a gap aborts the message in progress; resynchronize on this PSN.
    ++counters_.out_of_sequence;
    resp_.in_message = MsgKind::kNone;
    resp_.recv_offset = 0;
    resp_.uc_drop_until_first = !first;
    resp_.psn = psn;
  }
  if (resp_.uc_drop_until_first) {
    if (!first) {
      ++counters_.dropped;
      resp_.psn = wire::psn_add(psn, 1);
      return;
    }
    resp_.uc_drop_until_first = false;
  }
  if (execute_request(pkt, placed) != RespStatus::kOk) {
    // UC reports nothing to the sender: the whole message is dropped (the receive WQE, if one
    // was taken, is kept for the next message).
    ++counters_.dropped;
    resp_.in_message = MsgKind::kNone;
    resp_.recv_offset = 0;
    resp_.uc_drop_until_first = true;
    resp_.psn = wire::psn_add(psn, 1);
  }
}

void Qp::handle_ud_request(const wire::RocePacket& pkt, const PacketInfo& info) {
  const wire::DethView deth = pkt.deth();
  if (deth.qkey() != attr_.qkey) {
    ++counters_.qkey_violations;
    return;
  }
  if (!resp_.has_wqe && !take_recv_wqe()) {
    ++counters_.ud_no_wqe_drops;
    return;
  }
  // The GRH area (rxe): for IPv4, 20 zero bytes then the IPv4 header; for IPv6, its header.
  std::array<std::byte, kGrhBytes> grh{};
  NetworkHdr network_hdr = NetworkHdr::kNone;
  if (info.ip_header.size() == 20) {
    std::copy(info.ip_header.begin(), info.ip_header.end(), grh.begin() + 20);
    network_hdr = NetworkHdr::kIpv4;
  } else if (info.ip_header.size() == kGrhBytes) {
    std::copy(info.ip_header.begin(), info.ip_header.end(), grh.begin());
    network_hdr = NetworkHdr::kIpv6;
  }
  RespStatus s = scatter_into_recv(0, grh);
  if (s == RespStatus::kOk) s = scatter_into_recv(kGrhBytes, pkt.payload);
  if (s == RespStatus::kLengthError) {
    // rxe (IBTA class D/E): without an SRQ the datagram is dropped and the receive WQE waits
    // for the next one; with an SRQ the WQE completes with an error. The QP carries on: one
    // oversized datagram from any sender must not take a UD QP down.
    if (env_.rq_is_srq) {
      complete_recv(WcStatus::kRemInvReqErr, 0, 0, 0, WcOpcode::kRecv, false, deth.src_qpn());
    } else {
      ++counters_.dropped;
    }
    return;
  }
  if (s != RespStatus::kOk) {
    // A receive WQE whose lkey does not resolve (class A: the QP enters the error state).
    complete_recv(WcStatus::kLocQpOpErr, 0, 0, 0, WcOpcode::kRecv, false, deth.src_qpn());
    enter_error();
    return;
  }
  std::uint32_t flags = kWcGrh;
  std::uint32_t imm = 0;
  if (pkt.op->has(wire::ExtHeader::kImmDt)) {
    flags |= kWcWithImm;
    imm = pkt.immdt().value();
  }
  complete_recv(WcStatus::kSuccess, static_cast<std::uint32_t>(kGrhBytes + pkt.payload.size()),
                flags, imm, WcOpcode::kRecv, pkt.bth().solicited(), deth.src_qpn(), network_hdr);
}

// The next queued response's packet. Over 70 lines (issue 40 asks for a reason): one case per
// kind of response (ACK or NAK, atomic ACK, READ response), each a short sequence that reads
// best next to the others, plus the checks on the queue's invariants.
bool Qp::poll_response(TxPacket& out) {
  if (responses_.empty()) return false;
  UROCE_ASSERT(type_ == QpType::kRc);
  Response& r = responses_.front();
  out.av = path_;
  const std::uint32_t dest = attr_.dest_qp_num;
  switch (r.kind) {
    case Response::Kind::kAck:
      acks_.ack_sent(r.ack_for);
      if (wire::aeth_type(r.syndrome) == wire::AethType::kAck) {
        resp_.unacked_psn = wire::psn_add(r.psn, 1);
      }
      build_bth(out, Opcode::kRcAcknowledge, dest, r.psn, false, false, 0);
      wire::AethMut(MutBytes(out.header).subspan(wire::kBthBytes))
          .encode(wire::Aeth{r.syndrome, r.msn});
      if (r.sr_kept) out.header[8] |= kBthSrKeptBit;
      responses_.pop_front();
      break;
    case Response::Kind::kAtomic: {
      UROCE_ASSERT(r.length == 8);
      build_bth(out, Opcode::kRcAtomicAcknowledge, dest, r.psn, false, false, 0);
      const MutBytes hdr(out.header);
      wire::AethMut(hdr.subspan(wire::kBthBytes))
          .encode(wire::Aeth{wire::make_ack_syndrome(), r.msn});
      wire::AtomicAckEthMut(hdr.subspan(wire::kBthBytes + 4)).set_orig(r.orig);
      responses_.pop_front();
      break;
    }
    case Response::Kind::kRead: {
      // A READ whose last response left was popped: none is queued with nothing left to send.
      UROCE_ASSERT(r.offset < r.length || (r.offset == 0 && r.length == 0));
      const std::uint64_t rest = r.length - r.offset;
      const auto len = static_cast<std::uint32_t>(std::min<std::uint64_t>(rest, mtu_bytes_));
      const bool first = r.offset == 0;
      const bool last = r.offset + len == r.length;
      const Opcode op = first && last ? Opcode::kRcRdmaReadResponseOnly
                        : first       ? Opcode::kRcRdmaReadResponseFirst
                        : last        ? Opcode::kRcRdmaReadResponseLast
                                      : Opcode::kRcRdmaReadResponseMiddle;
      const std::uint32_t psn = r.psn;
      if (len > 0) {
        // Resolved per packet: a region deregistered mid-READ is never read from again.
        auto mem =
            env_.memory->resolve(r.pd, qpn_, r.rkey, true, r.va + r.offset, len, kAccessRemoteRead);
        if (!mem.ok()) {
          // The NAK replaces this READ's rest and whatever was queued behind it.
          responses_.clear();
          responder_error(wire::make_nak_syndrome(NakCode::kRemoteAccessError),
                          WcStatus::kRemAccessErr, psn);
          return poll_response(out);
        }
        out.pieces[0] = mem.value();
        out.num_pieces = 1;
      }
      build_bth(out, op, dest, psn, false, false, len);
      out.num_pieces = len > 0 ? 1 : 0;
      if (wire::opcode_info(op).has(wire::ExtHeader::kAeth)) {
        wire::AethMut(MutBytes(out.header).subspan(wire::kBthBytes))
            .encode(wire::Aeth{wire::make_ack_syndrome(), r.msn});
      }
      r.offset += len;
      r.psn = wire::psn_add(r.psn, 1);
      if (last) responses_.pop_front();
      break;
    }
  }
  ++counters_.packets_sent;
  counters_.bytes_sent += out.payload_bytes;
  return true;
}

}  // namespace uroce::transport
