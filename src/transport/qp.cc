// QP construction, attributes, posting, error handling and the dispatch of inputs and outputs.
// The protocol roles live in requester.cc, completer.cc and responder.cc.
#include "transport/qp.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "cc/aimd.h"
#include "wire/aeth.h"
#include "wire/psn.h"

namespace uroce::transport {

// cc/aimd.h: the window a flow starts with lets a ping-pong's deferred ACKs wait for their
// 16 PSNs.
static_assert(cc::AimdParams{}.initial_window_packets >= 2 * kMaxPsnsBehindADeferredAck);

namespace {

std::uint32_t at_least_one(std::uint32_t v) { return v == 0 ? 1 : v; }

}  // namespace

Qp::Qp(std::uint32_t qpn, QpType type, const QpCap& cap, const QpEnv& env)
    : qpn_(qpn),
      type_(type),
      cap_(cap),
      env_(env),
      sq_capacity_(at_least_one(cap.max_send_wr)),
      sq_mask_(static_cast<std::uint32_t>(std::bit_ceil(std::uint64_t{sq_capacity_}) - 1)),
      sq_(std::size_t{sq_mask_} + 1),
      sq_sges_((std::size_t{sq_mask_} + 1) * cap.max_send_sge),
      sq_inline_((std::size_t{sq_mask_} + 1) * cap.max_inline_data),
      responses_(1) {
  UROCE_CHECK(env_.memory != nullptr && env_.send_cq != nullptr && env_.recv_cq != nullptr);
  UROCE_CHECK(env_.rq != nullptr && env_.cc != nullptr);
  // XRC is RC's protocol; the target's receive side is the XRC SRQs of its domain.
  UROCE_CHECK(env_.xrc == XrcRole::kNone || type_ == QpType::kRc);
  UROCE_CHECK(type_ == QpType::kRc || type_ == QpType::kUc || type_ == QpType::kUd);
  UROCE_CHECK(env_.xrc != XrcRole::kRecv || (env_.rq_is_srq && env_.xrc_srqs != nullptr));
  UROCE_CHECK(cap.max_send_sge <= kMaxSge && cap.max_inline_data <= kMaxInlineData);
  if (type_ == QpType::kUd) mtu_bytes_ = env_.port_mtu_bytes;
  xrc_.idle_rq = env_.rq;
  xrc_.idle_cq = env_.recv_cq;
}

std::span<Sge> Qp::sges_of(std::uint32_t index) {
  const std::size_t slot = index & sq_mask_;
  return std::span<Sge>(sq_sges_).subspan(slot * cap_.max_send_sge, cap_.max_send_sge);
}

std::span<const Sge> Qp::sges_of(std::uint32_t index) const {
  const std::size_t slot = index & sq_mask_;
  return std::span<const Sge>(sq_sges_).subspan(slot * cap_.max_send_sge, cap_.max_send_sge);
}

std::span<std::byte> Qp::inline_of(std::uint32_t index) {
  const std::size_t slot = index & sq_mask_;
  return std::span<std::byte>(sq_inline_)
      .subspan(slot * cap_.max_inline_data, cap_.max_inline_data);
}

Duration Qp::ack_timeout() const {
  // IBTA 9.7.6.1.3 / rxe: 4.096 us * 2^timeout; 0 means no timeout.
  if (attr_.timeout == 0) return Duration::infinite();
  return Duration::ns(4096) * (std::int64_t{1} << std::min<std::uint8_t>(attr_.timeout, 31));
}

// Long: one attribute per mask bit, applied in the verbs' order.
void Qp::modify(const QpAttr& a, std::uint32_t mask, const AddressVector& path) {
  if (mask & kQpAccessFlags) attr_.qp_access_flags = a.qp_access_flags;
  if (mask & kQpQkey) attr_.qkey = a.qkey;
  if (mask & kQpPkeyIndex) attr_.pkey_index = a.pkey_index;
  if (mask & kQpPort) attr_.port_num = a.port_num;
  if (mask & kQpAv) {
    attr_.ah_attr = a.ah_attr;
    path_ = path;
    // A new path may lead to another host, or to the same one from elsewhere: learn again.
    if (!sport_known_) sport_pinned_ = false;
  }
  if (mask & kQpPathMtu) {
    attr_.path_mtu = a.path_mtu;
    if (type_ != QpType::kUd) mtu_bytes_ = mtu_bytes(a.path_mtu);
    UROCE_ASSERT(mtu_bytes_ >= 256 && mtu_bytes_ <= 4096);  // verbs refuses any other MTU
  }
  if (mask & kQpTimeout) attr_.timeout = a.timeout;
  if (mask & kQpRetryCnt) {
    attr_.retry_cnt = a.retry_cnt;
    comp_.retry_cnt = a.retry_cnt;
  }
  if (mask & kQpRnrRetry) {
    attr_.rnr_retry = a.rnr_retry;
    comp_.rnr_retry = a.rnr_retry;
  }
  if (mask & kQpRqPsn) {
    attr_.rq_psn = a.rq_psn & wire::kPsnMask;
    resp_.psn = attr_.rq_psn;
    resp_.unacked_psn = attr_.rq_psn;
  }
  if (mask & kQpSqPsn) {
    attr_.sq_psn = a.sq_psn & wire::kPsnMask;
    req_.psn = attr_.sq_psn;
    req_.psn_end = attr_.sq_psn;
    comp_.psn = attr_.sq_psn;
    comp_.reported_psn = attr_.sq_psn;
  }
  if (mask & kQpMaxQpRdAtomic) attr_.max_rd_atomic = a.max_rd_atomic;
  if (mask & kQpMaxDestRdAtomic) {
    attr_.max_dest_rd_atomic = a.max_dest_rd_atomic;
    // Control path: the only place besides the constructor that allocates.
    resources_.assign(a.max_dest_rd_atomic, RdAtomicResource{});
    next_resource_ = 0;
    // Each READ/atomic response may be followed by one coalesced ACK or NAK. A requester within
    // max_dest_rd_atomic has at most that many READs/atomics waiting for their responses, and
    // as many again replayed after a retry while the originals still wait: with one ACK or NAK
    // behind each and one in front, 3 * max_dest_rd_atomic + 1 slots are never exceeded (a
    // requester beyond its limit finds no room and its READ is dropped, to be retried).
    responses_ = BoundedRing<Response>(3 * std::size_t{a.max_dest_rd_atomic} + 4);
  }
  if (mask & kQpMinRnrTimer) attr_.min_rnr_timer = a.min_rnr_timer;
  if (mask & kQpDestQpn) attr_.dest_qp_num = a.dest_qp_num & wire::kPsnMask;
  if (mask & kQpEnSqdAsyncNotify) attr_.en_sqd_async_notify = a.en_sqd_async_notify;
  if (responses_.capacity() < 4) responses_ = BoundedRing<Response>(4);

  if (mask & kQpState) {
    const QpState next = a.qp_state;
    switch (next) {
      case QpState::kReset:
        reset_state();
        break;
      case QpState::kErr:
        enter_error();
        break;
      case QpState::kSqd:
        state_ = QpState::kSqd;
        req_.draining_done_event = false;
        update_drain();
        break;
      default:
        state_ = next;
        break;
    }
  }
  attr_.qp_state = state_;
  attr_.cur_qp_state = state_;
}

void Qp::start_send_queue_at_for_testing(std::uint32_t index) {
  UROCE_CHECK(sq_count_ == 0 && req_.next_wqe == sq_tail_);
  sq_tail_ = index;
  req_.next_wqe = index;
}

void Qp::reset_state() {
  // Moving to RESET discards every queued WQE without a completion (IBTA 10.3.1.1).
  state_ = QpState::kReset;
  sq_tail_ = 0;
  sq_count_ = 0;
  cnp_owed_ = false;
  acks_ = AckState{};
  req_ = Requester{};
  comp_ = Completer{};
  rec_ = Recovery{};
  comp_.retry_cnt = attr_.retry_cnt;
  comp_.rnr_retry = attr_.rnr_retry;
  resp_ = Responder{};
  if (env_.xrc == XrcRole::kRecv) unbind_xrc_srq();
  set_peer_udp_port(std::nullopt);  // the next connection's (verbs sets it again at RTR)
  sr_ = SelectiveRepeat{.on = sr_.on};
  for (auto& s : sr_slots_) s.held = false;
  for (auto& r : resources_) r = RdAtomicResource{};
  responses_.clear();
  drain_responses_in_error_ = false;
  if (!env_.rq_is_srq) {
    while (!env_.rq->empty()) env_.rq->pop();
  }
}

// Long: a work request's checks against its opcode's row, then its WQE field by field.
Errc Qp::post_send(const SendRequest& wr) {
  if (state_ == QpState::kReset || state_ == QpState::kInit || state_ == QpState::kRtr) {
    return Errc::kInvalidArgument;
  }
  // Which QP types may post which operation, and what each carries: wr_opcodes.def.
  const WrOpcodeInfo* wr_op = wr_opcode_info(wr.opcode);
  if (wr_op == nullptr || !wr_op->allows(type_)) return Errc::kInvalidArgument;
  // XRC: a target has no send queue; IBTA 1.5's FLUSH and ATOMIC WRITE have no XRC opcodes
  // that uroce knows (table 38 lists RC's operations through SEND with Invalidate).
  if (env_.xrc == XrcRole::kRecv ||
      (env_.xrc == XrcRole::kSend && (wr_op->is(kWrFlush) || wr_op->is(kWrAtomicWrite)))) {
    return Errc::kInvalidArgument;
  }
  if (wr.sges.size() > cap_.max_send_sge) return Errc::kInvalidArgument;
  std::uint64_t length = 0;
  for (const Sge& s : wr.sges) length += s.length;
  // An atomic's operand: the local buffer holds it, the remote address is aligned to it.
  const std::uint32_t operand = wr_op->operand_bytes;
  if (operand != 0 && (length < operand || wr.remote_addr % operand != 0)) {
    return Errc::kInvalidArgument;
  }
  if (length > kMaxMessageBytes) return Errc::kInvalidArgument;
  // FLUSH: a placement type of the two IBTA 1.5 has, and a selectivity level (range or region).
  if (wr_op->is(kWrFlush) &&
      (wr.flush_placement == 0 ||
       (wr.flush_placement & ~(wire::kFlushGlobal | wire::kFlushPersistent)) != 0 ||
       wr.flush_selectivity > wire::kFlushMr)) {
    return Errc::kInvalidArgument;
  }
  if (type_ == QpType::kUd) {
    if (wr.ud_av == nullptr || length > env_.port_mtu_bytes) return Errc::kInvalidArgument;
  }
  const bool inline_data = (wr.send_flags & kSendInline) != 0 && wr_op->is(kWrInline);
  if (inline_data && length > cap_.max_inline_data) return Errc::kInvalidArgument;
  if (sq_count_ == sq_capacity_) return Errc::kNoMemory;

  const std::uint32_t index = sq_tail_ + sq_count_;
  SendWqe& w = sq_at(index);
  // Every field of the slot written (a slot holds what its last WQE left): without a
  // `w = SendWqe{}` first, which cleared the slot's 184 bytes through a copy of a cleared one
  // (issue 40: the post). A UD WQE's address vector only on UD, whose slots hold nothing else.
  // A field added to SendWqe must be written below too: its size is pinned here to say so.
  static_assert(sizeof(SendWqe) == 184, "SendWqe changed: write the new field in post_send");
  w.wr_id = wr.wr_id;
  w.wr_op = wr_op;
  w.send_flags = wr.send_flags;
  w.imm_data = wr.imm_data;
  w.remote_addr = wr.remote_addr;
  w.rkey = wr.rkey;
  w.compare_add = wr.compare_add;
  w.swap = wr.swap;
  w.flush_length = wr.flush_length;
  w.flush_placement = wr.flush_placement;
  w.flush_selectivity = wr.flush_selectivity;
  w.bind_mw_rkey = wr.bind.mw_rkey;
  w.bind_mr_lkey = wr.bind.mr_lkey;
  w.bind_length = wr.bind.length;
  w.bind_access = wr.bind.access;
  if (type_ == QpType::kUd) {
    w.ud_av = *wr.ud_av;
    w.remote_qpn = wr.remote_qpn & wire::kPsnMask;
    w.remote_qkey = wr.remote_qkey;
  } else {
    w.remote_qpn = 0;
    w.remote_qkey = 0;
  }
  w.xrc_srqn = env_.xrc == XrcRole::kSend ? wr.xrc_srqn & 0xffffffu : 0;
  // FLUSH and the local operations: no local data.
  w.length = operand != 0 ? operand : wr_op->is(kWrFlush) || wr_op->is_local() ? 0 : length;
  w.is_inline = inline_data;
  w.num_sge = 0;
  w.state = WqeState::kPosted;
  w.started = false;
  w.first_psn = 0;
  w.last_psn = 0;
  w.sent_bytes = 0;
  w.read_bytes = 0;
  w.read_req_psn = 0;
  w.error = WcStatus::kSuccess;
  if (inline_data) {
    // Inline data is copied at post time (IBV_SEND_INLINE): the buffer may be reused at once.
    std::span<std::byte> dst = inline_of(index);
    std::size_t off = 0;
    for (const Sge& s : wr.sges) {
      if (s.length == 0) continue;
      UROCE_ASSERT(off + s.length <= dst.size());  // length <= max_inline_data, checked above
      std::memcpy(dst.data() + off, reinterpret_cast<const void*>(s.addr), s.length);
      off += s.length;
    }
  } else {
    std::copy(wr.sges.begin(), wr.sges.end(), sges_of(index).begin());
    w.num_sge = static_cast<std::uint32_t>(wr.sges.size());
  }
  ++sq_count_;
  UROCE_ASSERT(sq_count_ <= sq_capacity_);
  if (state_ == QpState::kErr || state_ == QpState::kSqe) flush();
  return Errc::kOk;
}

Errc Qp::post_recv(std::uint64_t wr_id, std::span<const Sge> sges) {
  UROCE_CHECK(!env_.rq_is_srq);
  if (state_ == QpState::kReset) return Errc::kInvalidArgument;
  const Errc e = env_.rq->post(wr_id, sges);
  if (e != Errc::kOk) return e;
  if (state_ == QpState::kErr) flush();
  return Errc::kOk;
}

void Qp::enter_error() {
  if (state_ == QpState::kErr) return;
  state_ = QpState::kErr;
  attr_.qp_state = state_;
  // In the error state a QP sends nothing, except what a responder error owes (responder.cc).
  if (!drain_responses_in_error_) responses_.clear();
  flush();
  if (env_.rq_is_srq && env_.events != nullptr) {
    env_.events->qp_event(qpn_, AsyncEventType::kQpLastWqeReached);
  }
}

void Qp::flush() {
  // IBTA 10.3.1.2: in the error state every outstanding WR completes with a flush error, in
  // order, signaled or not.
  while (sq_count_ > 0) {
    const WcStatus error = sq_at(sq_tail_).error;
    complete_send(sq_tail_, error != WcStatus::kSuccess ? error : WcStatus::kWrFlushErr);
  }
  req_.next_wqe = sq_tail_;
  req_.rd_atomic_inflight = 0;
  comp_.deadline = Instant::never();
  rec_.rto_deadline = Instant::never();
  rec_.probe_deadline = Instant::never();
  rec_.probe_due = false;
  req_.rnr_resume = Instant::never();
  drop_stale_xrc_srq();  // a WQE of a destroyed XRC SRQ completes nowhere
  if (resp_.has_wqe) {
    complete_recv(WcStatus::kWrFlushErr, 0, 0, 0, WcOpcode::kRecv, false, 0);
  }
  if (!env_.rq_is_srq) {
    while (!env_.rq->empty()) {
      take_recv_wqe();
      complete_recv(WcStatus::kWrFlushErr, 0, 0, 0, WcOpcode::kRecv, false, 0);
    }
  }
  // Every WR of the QP's own has completed.
  UROCE_ASSERT(sq_count_ == 0 && !resp_.has_wqe && (env_.rq_is_srq || env_.rq->empty()));
}

void Qp::fail_wqe(std::uint32_t index, WcStatus status) {
  // The failed WQE completes with its own status; every other outstanding one with a flush
  // error, all in queue order (rxe: the QP enters the error state at once).
  sq_at(index).error = status;
  enter_error();
}

void Qp::update_drain() {
  // SQD (IBTA 10.3.1.7): draining while a started WQE is outstanding; once none is, the
  // SQ-drained event fires once if the QP asked for it (en_sqd_async_notify).
  if (state_ != QpState::kSqd) {
    attr_.sq_draining = false;
    return;
  }
  bool in_flight = false;
  for (std::uint32_t i = sq_tail_; i != sq_tail_ + sq_count_; ++i) {
    if (sq_at(i).started) {
      in_flight = true;
      break;
    }
  }
  attr_.sq_draining = in_flight;
  if (!in_flight && !req_.draining_done_event) {
    req_.draining_done_event = true;
    if (attr_.en_sqd_async_notify && env_.events != nullptr) {
      env_.events->qp_event(qpn_, AsyncEventType::kSqDrained);
    }
  }
}

void Qp::complete_send(std::uint32_t index, WcStatus status) {
  UROCE_CHECK(sq_count_ > 0 && index == sq_tail_);
  SendWqe& w = sq_at(index);
  if (w.wr_op->is_read_or_atomic() &&
      (w.state == WqeState::kSending || w.state == WqeState::kPending)) {
    UROCE_CHECK(req_.rd_atomic_inflight > 0);
    --req_.rd_atomic_inflight;
  }
  if (status != WcStatus::kSuccess || (w.send_flags & kSendSignaled) != 0) {
    Wc wc;
    wc.wr_id = w.wr_id;
    wc.status = status;
    wc.opcode = w.wr_op->completion;
    wc.byte_len = static_cast<std::uint32_t>(w.length);
    wc.qp_num = qpn_;
    env_.send_cq->push(wc, false);
  }
  if (status == WcStatus::kSuccess && w.wr_op->packet.has_value()) ++counters_.messages_completed;
  w.state = WqeState::kDone;
  ++sq_tail_;
  --sq_count_;
  if (req_.next_wqe == index) ++req_.next_wqe;  // completed before it was fully sent (errors)
  // The requester's next WQE is still one of the queue's (or the slot after it).
  UROCE_ASSERT(req_.next_wqe - sq_tail_ <= sq_count_);
  if (state_ == QpState::kSqd) update_drain();
}

const wire::OpcodeInfo& Qp::build_bth(TxPacket& out, wire::Opcode op, std::uint32_t dest_qpn,
                                      std::uint32_t psn, bool ack_req, bool solicited,
                                      std::uint32_t payload_bytes, std::uint32_t xrc_srqn) {
  UROCE_ASSERT(wire::opcode_info(op).transport != wire::Transport::kXrc);
  if (env_.xrc != XrcRole::kNone) op = wire::xrc_opcode(op);
  const wire::OpcodeInfo& info = wire::opcode_info(op);
  wire::Bth bth;
  bth.opcode = static_cast<std::uint8_t>(op);
  bth.solicited = solicited;
  bth.pkey = 0xffff;
  bth.dest_qpn = dest_qpn;
  bth.ack_req = ack_req;
  bth.psn = psn & wire::kPsnMask;
  // The extension headers zero but for the XRCETH (write_headers' bytes); the caller fills those
  // its opcode carries.
  out.header_bytes = static_cast<std::uint32_t>(
      wire::write_bth_headers(MutBytes(out.header), info, bth, xrc_srqn, payload_bytes));
  out.num_pieces = 0;
  out.payload_bytes = payload_bytes;
  return info;
}

wire::Transport Qp::request_transport() const {
  switch (env_.xrc) {
    case XrcRole::kSend:
      return wire::Transport::kCnp;  // an initiator takes no requests
    case XrcRole::kRecv:
      return wire::Transport::kXrc;
    case XrcRole::kNone:
      break;
  }
  return type_ == QpType::kRc   ? wire::Transport::kRc
         : type_ == QpType::kUc ? wire::Transport::kUc
                                : wire::Transport::kUd;
}

wire::Transport Qp::response_transport() const {
  return env_.xrc == XrcRole::kNone ? wire::Transport::kRc : wire::Transport::kXrc;
}

void Qp::handle_packet(Instant now, const wire::RocePacket& pkt, const PacketInfo& info) {
  UROCE_ASSERT(pkt.op != nullptr);  // a parsed packet
  if (type_ != QpType::kUd) {
    // A connected QP takes packets from its peer only (rxe_recv.c check_type_state() and
    // check_addr(), RC and UC; UD and QP1 take datagrams from anyone), before anything else:
    // QPNs and PSNs are easy to guess, and a third host must not write memory, complete or fail
    // WQEs, nor make the QP NAK, retry or slow down (CNPs and ECN marks included). Below RTR
    // there is no path to compare with (RESET keeps the old one): drop. The destination is the
    // datapath's to check: datapath/udp's socket is bound to the device's address, and the
    // receiver's ICRC covers the destination address it rebuilt from it.
    if (state_ == QpState::kReset || state_ == QpState::kInit) {
      ++counters_.dropped;
      return;
    }
    if (!wire::same_host(info.src, path_.dst)) {
      ++counters_.src_addr_mismatch;
      return;
    }
    // The address is not enough: any user of the peer's host can send from it (issue 44). The
    // port, as the address, before anything else: a packet dropped here moves no PSN, earns no
    // ACK or NAK, and gives congestion control nothing.
    if (!from_peer_port(pkt, info)) {
      ++counters_.src_port_mismatch;
      return;
    }
    if (!sport_pinned_ && info.may_teach_port && pins_port(pkt)) {
      sport_ = info.src_port;
      sport_pinned_ = true;
    }
  }
  const wire::BthView bth = pkt.bth();
  if (!wire::pkey_matches(bth.pkey(), 0xffff)) {
    ++counters_.dropped;
    return;
  }
  if (pkt.op->is(wire::kFlagCnp)) {
    ++counters_.rp_cnp_handled;
    env_.cc->on_cnp(now);
    return;
  }
  if (info.ecn == 3) {
    // The notification point (DCQCN): a CE mark asks the sender to slow down. Only on a QP
    // with a path to send the CNP on (RTR and later: checked above), and only where
    // congestion control wants one now (one per QP per np_min_time_between_cnps).
    ++counters_.np_ecn_marked_roce_packets;
    env_.cc->on_ecn_ce(now);
    if (env_.cc->take_cnp(now) && state_ != QpState::kErr) cnp_owed_ = true;
  }
  if (pkt.op->is(wire::kFlagResponse)) {
    handle_response(now, pkt, info.payload_placed);
    if (sr_.resend_active) sr_after_response(now);
  } else {
    handle_request(now, pkt, info);
  }
}

void Qp::set_peer_udp_port(std::optional<std::uint16_t> port) {
  sport_known_ = port.has_value();
  sport_pinned_ = port.has_value();
  sport_ = port.value_or(0);
}

bool Qp::from_peer_port(const wire::RocePacket& pkt, const PacketInfo& info) const {
  if (!sport_pinned_ || info.src_port == sport_) return true;
  // A CNP from a peer whose port was learned: hardware sends CNPs from another port (ConnectX:
  // 0) than its QP's packets. It can only slow the QP down.
  return !sport_known_ && pkt.op->is(wire::kFlagCnp);
}

bool Qp::pins_port(const wire::RocePacket& pkt) const {
  // Only what the peer alone is likely to know: an off-path sender must guess the PSN within a
  // window of one for a request, and within the outstanding PSNs for a response. Duplicates,
  // NAK-earning PSNs and CNPs teach nothing.
  const wire::OpcodeInfo& op = *pkt.op;
  if (op.is(wire::kFlagCnp)) return false;
  if (op.transport != (op.is(wire::kFlagResponse) ? response_transport() : request_transport())) {
    return false;
  }
  const std::uint32_t psn = pkt.bth().psn();
  if (op.is(wire::kFlagResponse)) {
    return sq_count_ > 0 && wire::psn_ge(psn, comp_.psn) && wire::psn_lt(psn, req_.psn);
  }
  return state_ != QpState::kErr && psn == resp_.psn;
}

void Qp::handle_timeout(Instant now) {
  // An RNR wait that is over: has_transmit_work() sees the requester's work again.
  if (!req_.rnr_resume.is_never() && req_.rnr_resume <= now) req_.rnr_resume = Instant::never();
  if (comp_.deadline <= now) {
    const std::uint64_t timeouts = counters_.timeouts;
    handle_retry_timeout(now);
    if (counters_.timeouts != timeouts) note_ibta_timeout(now);
  }
  // Loss recovery's own timers: the adaptive retransmission timeout, the tail-loss probe.
  if (earliest(rec_.rto_deadline, rec_.probe_deadline) <= now) handle_recovery_timeout(now);
  if (sr_.resend_deadline <= now) sr_resend_timeout(now);
}

bool Qp::poll_transmit(Instant now, TxPacket& out) {
  acks_.poll_started();
  // Congestion control's hold is what this poll finds: a packet it holds back sets it again
  // (poll_request, sr_poll_resend). Left from an earlier poll whose packet is gone since
  // (acknowledged, or no request ready any more), it stayed in poll_timeout() as a deadline in
  // the past, and the caller's round came due at the same instant for ever: the simulator's
  // clock stood still (64 senders into one with DCQCN and selective repeat).
  req_.pace_until = Instant::never();
  if (cnp_owed_) {
    cnp_owed_ = false;
    if (state_ != QpState::kErr) {
      build_cnp(out);
      ++counters_.np_cnp_sent;
      return true;
    }
  }
  const bool sent = poll_packet(now, out);
  // With congestion control that asks for it, every packet leaves ECN-capable (ECT(0)) unless
  // the traffic class says otherwise, so that a congested switch marks it instead of dropping
  // it (a ConnectX port with DCQCN on does the same).
  if (sent && env_.cc->ecn_capable() && (out.av.traffic_class & 3u) == 0) {
    out.av.traffic_class |= kEct0;
  }
  return sent;
}

void Qp::build_cnp(TxPacket& out) {
  out.av = path_;
  out.av.traffic_class = static_cast<std::uint8_t>((kCnpDscp << 2) | kEct0);
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kCnp);
  h.bth.pkey = 0xffff;
  h.bth.becn = true;
  h.bth.dest_qpn = attr_.dest_qp_num;
  h.bth.psn = 0;
  out.header_bytes = static_cast<std::uint32_t>(wire::write_headers(MutBytes(out.header), h, 0));
  out.num_pieces = 0;
  out.payload_bytes = 0;
  UROCE_ASSERT(out.header_bytes == wire::opcode_info(wire::Opcode::kCnp).header_bytes);
}

bool Qp::poll_packet(Instant now, TxPacket& out) {
  // A bind or an invalidation at the head of the send queue sends nothing.
  if (local_op_at_head()) run_local_ops();
  if (acks_.take_held()) {  // one request packet at most goes first
    // The WQE poll_request sends from, if it does, read before it sends: a UC or UD WQE
    // completes as its last packet leaves, and its slot leaves the queue's window with it.
    const std::uint32_t index = req_.next_wqe;
    const bool unsignaled =
        index - sq_tail_ < sq_count_ && (sq_at(index).send_flags & kSendSignaled) == 0;
    if (state_ != QpState::kErr && responses_.size() == 1 && poll_request(now, out)) {
      acks_.overtaken(responses_.front().ack_for, unsignaled);
      return true;
    }
    if (state_ != QpState::kErr && responses_.size() == 1 &&
        responses_.front().kind == Response::Kind::kAck &&
        responses_.front().ack_for != AckFor::kNone) {
      // The held ACK leaves alone (its hold ran out, or the engine flushed it for another
      // reason: the application blocked, a QP changed). A deferred one: the peer waited for
      // it. Otherwise this side's application did not answer in time.
      if (acks_.left_alone(responses_.front().ack_for)) {
        ++counters_.acks_deferred_unanswered;
      } else {
        ++counters_.acks_held_unanswered;
      }
      const bool sent = poll_response(out);
      acks_.left_alone_sent();  // not one sent at once: an answer now is a late one
      return sent;
    }
  }
  if (state_ == QpState::kErr) {
    if (drain_responses_in_error_ && poll_response(out)) return true;
    drain_responses_in_error_ = false;
    return false;
  }
  if (poll_response(out)) return true;
  return poll_request(now, out);
}

Instant Qp::poll_timeout() const {
  Instant t = earliest(comp_.deadline, earliest(rec_.rto_deadline, rec_.probe_deadline));
  if (!req_.rnr_resume.is_never()) t = earliest(t, req_.rnr_resume);
  t = earliest(t, sr_.resend_deadline);
  return earliest(t, req_.pace_until);
}

bool Qp::has_transmit_work() const {
  if (state_ == QpState::kErr) return drain_responses_in_error_ && !responses_.empty();
  if (cnp_owed_ || !responses_.empty()) return true;
  return req_.rnr_resume.is_never() && (rec_.probe_due || sr_.resend_pending || request_ready());
}

AckFacts Qp::ack_facts() const {
  AckFacts f;
  f.in_error = state_ == QpState::kErr;
  f.cnp_owed = cnp_owed_;
  f.sent_any = req_.sent_any;
  f.outstanding = sq_count_;
  f.ack_timeout = attr_.timeout;
  if (responses_.size() != 1) return f;
  const Response& r = responses_.front();
  if (r.kind != Response::Kind::kAck || wire::aeth_type(r.syndrome) != wire::AethType::kAck ||
      r.ack_for == AckFor::kNone) {
    return f;
  }
  f.lone_ack = r.ack_for;
  f.lone_ack_psns = wire::psn_diff(r.psn, resp_.unacked_psn) + 1;
  f.request_ready = req_.rnr_resume.is_never() && request_ready();
  return f;
}

}  // namespace uroce::transport
