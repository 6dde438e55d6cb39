// Queue pairs: creation against the device's limits, modify_qp() checked as the kernel and rxe
// check it, and the translation of verbs work requests into transport requests.
#include <algorithm>
#include <bit>

#include "verbs/address.h"
#include "verbs/device_state.h"
#include "verbs/qp_state_table.h"

namespace uroce {

using verbs::detail::from_raw;
using verbs::detail::to_raw;
namespace vd = verbs::detail;

std::optional<std::uint32_t> vd::DeviceState::allocate_qpn() {
  if (config.random_bytes) {
    // At most kMaxQp of about 2 * kMaxQp numbers are in use, so a draw is free at least half of
    // the time: 64 misses in a row (2^-64) fall back to the next free number in turn.
    const std::uint32_t span = qpn_alloc.max() - qpn_alloc.min() + 1;
    for (int tries = 0; tries < 64; ++tries) {
      const std::uint32_t qpn = qpn_alloc.min() + random_key_bits() % span;
      if (qpn_alloc.take(qpn)) return qpn;
    }
  }
  return qpn_alloc.allocate();
}

namespace {

constexpr std::uint32_t kPsnMask = 0xffffff;
constexpr std::uint32_t kQpnMask = 0xffffff;

// rxe_queue_init(): a ring of 2^k slots with one kept free, so 2^k - 1 >= n usable entries;
// capped at the device limit (rxe would report more than max_qp_wr for n = max_qp_wr).
std::uint32_t queue_entries(std::uint32_t n, std::uint32_t max) {
  return std::min(static_cast<std::uint32_t>(std::bit_ceil(std::uint64_t{n} + 1) - 1), max);
}

// rxe_qp_chk_cap().
bool caps_fit(const DeviceAttr& dev, const QpCap& cap, bool has_srq) {
  if (cap.max_send_wr > dev.max_qp_wr || cap.max_send_sge > dev.max_sge) return false;
  if (!has_srq && (cap.max_recv_wr > dev.max_qp_wr || cap.max_recv_sge > dev.max_sge)) {
    return false;
  }
  return cap.max_inline_data <= dev.max_inline_data;
}

// What rxe_qp_init_req()/rxe_qp_init_resp() make of the requested capabilities: a send WQE
// holds max(max_send_sge SGEs, max_inline_data bytes), and both limits grow to fill it (within
// the device limits, which rxe's newer 512-byte inline limit would not need).
QpCap actual_caps(const QpCap& cap, bool has_srq) {
  constexpr std::uint32_t kSgeBytes = 16;  // sizeof(struct ib_sge)
  QpCap a;
  const std::uint32_t wqe_bytes = std::max(cap.max_send_sge * kSgeBytes, cap.max_inline_data);
  a.max_send_sge = std::min(wqe_bytes / kSgeBytes, transport::kMaxSge);
  a.max_inline_data = std::min(wqe_bytes, transport::kMaxInlineData);
  a.max_send_wr = queue_entries(cap.max_send_wr, transport::kMaxQpWr);
  if (!has_srq) {
    a.max_recv_wr = queue_entries(cap.max_recv_wr, transport::kMaxQpWr);
    a.max_recv_sge = cap.max_recv_sge;
  }
  return a;
}

// Whether `peer` is known to run uroce: the CM found uroce's GUID mark (`cm_says`), or the
// configuration names it.
bool peer_is_uroce(const DeviceConfig& c, const wire::IpAddress& peer, bool cm_says) {
  if (cm_says || c.sr_all_peers) return true;
  return std::find(c.sr_peers.begin(), c.sr_peers.end(), peer) != c.sr_peers.end();
}

// Whether an RC QP connected to `peer` uses selective repeat: the device allows it, and the
// peer is uroce.
bool selective_repeat_towards(const DeviceConfig& c, const wire::IpAddress& peer, bool cm_says) {
  return c.selective_repeat && peer_is_uroce(c, peer, cm_says);
}

bool valid_state(QpState s) {
  return static_cast<unsigned>(s) <= static_cast<unsigned>(QpState::kErr);
}

// Copies the attributes named by `mask` (ibv_modify_qp's semantics for query_qp later).
void apply_mask(QpAttr& dst, const QpAttr& src, std::uint32_t mask) {
  if (mask & kQpState) dst.qp_state = src.qp_state;
  if (mask & kQpEnSqdAsyncNotify) dst.en_sqd_async_notify = src.en_sqd_async_notify;
  if (mask & kQpAccessFlags) dst.qp_access_flags = src.qp_access_flags;
  if (mask & kQpPkeyIndex) dst.pkey_index = src.pkey_index;
  if (mask & kQpPort) dst.port_num = src.port_num;
  if (mask & kQpQkey) dst.qkey = src.qkey;
  if (mask & kQpAv) dst.ah_attr = src.ah_attr;
  if (mask & kQpPathMtu) dst.path_mtu = src.path_mtu;
  if (mask & kQpTimeout) dst.timeout = src.timeout;
  if (mask & kQpRetryCnt) dst.retry_cnt = src.retry_cnt;
  if (mask & kQpRnrRetry) dst.rnr_retry = src.rnr_retry;
  if (mask & kQpRqPsn) dst.rq_psn = src.rq_psn & kPsnMask;
  if (mask & kQpMaxQpRdAtomic) dst.max_rd_atomic = src.max_rd_atomic;
  if (mask & kQpMinRnrTimer) dst.min_rnr_timer = src.min_rnr_timer;
  if (mask & kQpSqPsn) dst.sq_psn = src.sq_psn & kPsnMask;
  if (mask & kQpMaxDestRdAtomic) dst.max_dest_rd_atomic = src.max_dest_rd_atomic;
  if (mask & kQpDestQpn) dst.dest_qp_num = src.dest_qp_num;
}

// Copies into `r` the operands that wr's opcode carries (transport/wr_opcodes.def), BIND_MW's
// window and region aside (post_send looks them up). False for an opcode that no QP type may
// post (unknown values): the transport would refuse it too,
// but verbs cannot tell what to copy.
bool take_operands(const SendWr& wr, transport::SendRequest& r) {
  const transport::WrOpcodeInfo* op = transport::wr_opcode_info(wr.opcode);
  if (op == nullptr || op->qp_types == 0) return false;
  if (op->is(transport::kWrImm)) r.imm_data = wr.imm_data;
  // SEND with Invalidate: legal to send, the peer may have regions made for it.
  if (op->is(transport::kWrInvalidate) || wr.opcode == WrOpcode::kLocalInv) {
    r.imm_data = wr.invalidate_rkey;
  }
  if (op->is(transport::kWrAtomic)) {
    r.remote_addr = wr.atomic.remote_addr;
    r.rkey = wr.atomic.rkey;
    r.compare_add = wr.atomic.compare_add;
    r.swap = wr.atomic.swap;
  } else if (op->is(transport::kWrRemote)) {
    r.remote_addr = wr.rdma.remote_addr;
    r.rkey = wr.rdma.rkey;
  }
  if (op->is(transport::kWrFlush)) {
    r.flush_length = wr.flush.length;
    r.flush_placement = wr.flush.placement;
    r.flush_selectivity = wr.flush.selectivity;
  }
  return true;
}

}  // namespace

namespace {

bool is_xrc(QpType t) { return t == QpType::kXrcSend || t == QpType::kXrcRecv; }

// What a QP of init.qp_type uses, looked up and checked (rxe_qp_chk_init(): RC, UC, UD, and
// XRC's halves as mlx5 has them): its PD, CQs, SRQ and XRC domain. An XRC_RECV QP has only its
// domain; an XRC_SEND QP has no receive side.
struct QpParents {
  vd::PdObj* pd = nullptr;
  vd::CqObj* send_cq = nullptr;
  vd::CqObj* recv_cq = nullptr;
  vd::SrqObj* srq = nullptr;
  vd::XrcdObj* xrcd = nullptr;
};

Result<QpParents, Errc> qp_parents(vd::DeviceState& s, PdHandle pd, const QpInitAttr& init) {
  const QpType t = init.qp_type;
  if (t != QpType::kRc && t != QpType::kUc && t != QpType::kUd && !is_xrc(t)) {
    return Err{Errc::kNotSupported};
  }
  QpParents r;
  if (t == QpType::kXrcRecv) {
    r.xrcd = s.xrcds.get(to_raw(init.xrcd));
    if (r.xrcd == nullptr) return Err{Errc::kInvalidArgument};
    return r;
  }
  r.pd = s.pds.get(to_raw(pd));
  r.send_cq = s.cqs.get(to_raw(init.send_cq));
  if (r.pd == nullptr || r.send_cq == nullptr) return Err{Errc::kInvalidArgument};
  if (t == QpType::kXrcSend) return r;
  r.recv_cq = s.cqs.get(to_raw(init.recv_cq));
  if (r.recv_cq == nullptr) return Err{Errc::kInvalidArgument};
  if (!init.srq.is_null()) {
    r.srq = s.srqs.get(to_raw(init.srq));
    // An XRC SRQ serves XRC_RECV QPs only, by its number.
    if (r.srq == nullptr || !r.srq->xrcd.is_null()) return Err{Errc::kInvalidArgument};
  }
  return r;
}

// The transport's view of a new QP: its parents, its receive queue (an SRQ's, its own, or for
// XRC an empty placeholder) and XRC's role.
transport::QpEnv qp_env(vd::DeviceState& s, const QpParents& r, const vd::QpObj& q, QpType type) {
  const bool xrc = is_xrc(type);
  transport::QpEnv env;
  env.memory = &s;
  env.send_cq =
      r.send_cq != nullptr ? static_cast<transport::CompletionSink*>(r.send_cq) : &s.no_cq;
  env.recv_cq =
      r.recv_cq != nullptr ? static_cast<transport::CompletionSink*>(r.recv_cq) : &s.no_cq;
  env.rq = r.srq != nullptr ? &r.srq->rq : q.rq.get();
  env.rq_is_srq = r.srq != nullptr || type == QpType::kXrcRecv;
  env.events = &s;
  env.cc = q.cc.get();
  env.pd = r.pd != nullptr ? r.pd->id : 0;  // an XRC target takes the PD of each request's SRQ
  env.port_mtu_bytes = mtu_bytes(s.port.active_mtu);
  if (xrc) {
    env.xrc = type == QpType::kXrcSend ? transport::XrcRole::kSend : transport::XrcRole::kRecv;
    env.xrcd = r.xrcd != nullptr ? r.xrcd->id : 0;
    env.xrc_srqs = &s;
  }
  if (!s.config.adaptive_recovery) {
    env.recovery = transport::RecoveryParams::off();
  } else {
    env.recovery.ack_req_until_sampled = true;
  }
  return env;
}

// A QP moved to RESET leaves none of its completions in its CQs: the hardware providers of
// rdma-core do this in their modify_qp (mlx4, mlx5, mthca, hns: *_cq_clean at the RESET
// transition), and rdma-core's tests count on it. test_mr_rereg_pd and test_mr_rereg_addr run
// traffic until a WR fails, move both QPs through RESET back to RTS and run traffic again,
// whose first poll must not find the flush completions of the failed run. (rxe cleans nothing:
// its responder flushes the receive queue in the error state, and those completions stay.) As
// mlx5, completions already taken from an SRQ's receive queue go with them (an XRC target's
// land in its SRQs' CQs, which are not its own, and stay).
void clean_cqs_at_reset(vd::DeviceState& s, const vd::QpObj& q) {
  vd::CqObj* send_cq = s.cqs.get(to_raw(q.init.send_cq));
  vd::CqObj* recv_cq = s.cqs.get(to_raw(q.init.recv_cq));
  if (send_cq != nullptr) send_cq->remove_qp(q.qpn);
  if (recv_cq != nullptr && recv_cq != send_cq) recv_cq->remove_qp(q.qpn);
}

}  // namespace

Result<QpInfo, Errc> Device::create_qp(PdHandle pd, const QpInitAttr& init) {
  vd::DeviceState& s = *s_;
  auto parents = qp_parents(s, pd, init);
  if (!parents) return Err{parents.error()};
  const QpParents& r = *parents;
  const bool xrc = is_xrc(init.qp_type);
  // A QP without a receive queue of its own: an SRQ's, or XRC's (none, or the target's SRQs).
  const bool no_rq = r.srq != nullptr || xrc;
  QpInitAttr checked = init;
  if (init.qp_type == QpType::kXrcRecv) checked.cap = QpCap{};  // no send queue either
  if (!caps_fit(s.attr, checked.cap, no_rq)) return Err{Errc::kInvalidArgument};
  if (s.qps.full()) return Err{Errc::kNoMemory};
  const std::optional<std::uint32_t> qpn =
      s.qpn_source != nullptr ? s.qpn_source->allocate_qpn() : s.allocate_qpn();
  if (!qpn) return Err{Errc::kNoMemory};
  // A source shared with other processes is outside input: a number it should not have given
  // fails this create_qp instead of aliasing a QP.
  if (*qpn <= 1 || *qpn >= kQpnMask || s.qp_by_qpn.count(*qpn) != 0) return Err{Errc::kNoMemory};

  auto q = std::make_unique<vd::QpObj>();
  q->pd = r.pd != nullptr ? pd : PdHandle{};
  q->init = checked;
  q->init.cap = actual_caps(checked.cap, no_rq);
  q->qpn = *qpn;
  q->default_sport = verbs::rxe_default_udp_sport(*qpn);
  q->attr.cap = q->init.cap;
  q->attr.path_mtu = Mtu::k256;  // rxe_qp_init_misc(): path_mtu 1 until modify_qp sets it
  // XRC QPs get an empty placeholder: the transport needs a queue, and never fills this one.
  if (r.srq == nullptr) {
    q->rq = xrc ? std::make_unique<transport::RecvQueue>(1, 1)
                : std::make_unique<transport::RecvQueue>(q->init.cap.max_recv_wr,
                                                         q->init.cap.max_recv_sge);
  }
  q->cc = vd::make_congestion_control(s.config);
  const transport::QpEnv env = qp_env(s, r, *q, init.qp_type);
  q->qp = std::make_unique<transport::Qp>(*qpn, xrc ? QpType::kRc : init.qp_type, q->init.cap, env);

  vd::QpObj* raw = q.get();
  const RawHandle h = s.qps.insert(std::move(q));
  UROCE_CHECK(h.generation != 0);
  raw->self = from_raw<QpHandle>(h);
  s.qp_by_qpn.emplace(*qpn, raw);
  raw->live_pos = s.live_qps.size();
  s.live_qps.push_back(raw->qp.get());
  // Use counts as the kernel keeps them: one per reference (a CQ used for both send and
  // receive is counted twice).
  if (r.pd != nullptr) ++r.pd->use_count;
  if (r.send_cq != nullptr) ++r.send_cq->use_count;
  if (r.recv_cq != nullptr) ++r.recv_cq->use_count;
  if (r.srq != nullptr) ++r.srq->use_count;
  if (r.xrcd != nullptr) ++r.xrcd->use_count;
  return QpInfo{raw->self, *qpn, raw->init.cap};
}

namespace {

// Destroys the QP behind its last handle.
Errc destroy_qp_object(vd::DeviceState& s, vd::QpObj* q) {
  if (s.doorbell_handler != nullptr) {
    s.doorbell_handler->qp_changing(q->qpn);
    s.doorbell_handler->qp_destroying(q->qpn);
  }
  // Unlink from the engine's views first.
  s.destroyed_qps += q->qp->counters();
  s.forget_qpn(q->qpn);
  const std::size_t pos = q->live_pos;
  UROCE_ASSERT(s.live_qps[pos] == q->qp.get());
  s.live_qps[pos] = s.live_qps.back();
  s.live_qps.pop_back();
  if (pos < s.live_qps.size()) s.qp_by_qpn[s.live_qps[pos]->qpn()]->live_pos = pos;
  if (s.qpn_source != nullptr) {
    s.qpn_source->release_qpn(q->qpn);
  } else {
    s.qpn_alloc.release(q->qpn);
  }
  // Type 2 windows bound to it are bound to nothing now (rxe holds the QP until they are
  // invalidated; a QP number given again must not reach them).
  for (auto& [index, mw] : s.mw_by_index) {
    if (mw != nullptr && mw->type == MwType::kType2 && mw->mr != nullptr && mw->qpn == q->qpn) {
      vd::DeviceState::unbind(*mw);
    }
  }
  // Release the parents (as qp_parents() found them).
  const QpType type = q->init.qp_type;
  if (type == QpType::kXrcRecv) {
    vd::XrcdObj* x = s.xrcds.get(to_raw(q->init.xrcd));
    UROCE_CHECK(x != nullptr && x->use_count > 0);
    --x->use_count;
  } else {
    vd::PdObj* p = s.pds.get(to_raw(q->pd));
    vd::CqObj* scq = s.cqs.get(to_raw(q->init.send_cq));
    UROCE_CHECK(p != nullptr && scq != nullptr);
    --p->use_count;
    --scq->use_count;
  }
  if (type != QpType::kXrcRecv && type != QpType::kXrcSend) {
    vd::CqObj* rcq = s.cqs.get(to_raw(q->init.recv_cq));
    UROCE_CHECK(rcq != nullptr);
    --rcq->use_count;
  }
  if (!q->init.srq.is_null() && !is_xrc(type)) {
    vd::SrqObj* srq = s.srqs.get(to_raw(q->init.srq));
    UROCE_CHECK(srq != nullptr);
    --srq->use_count;
  }
  s.qps.remove(to_raw(q->self));
  return Errc::kOk;
}

}  // namespace

// A handle of an XRC target QP closes alone while the QP has others (the kernel's
// __ib_destroy_shared_qp()); the QP goes with its last one.
Errc Device::destroy_qp(QpHandle qp) {
  vd::DeviceState& s = *s_;
  vd::QpObj* q = s.qps.get(to_raw(qp));
  if (q == nullptr || q->closed) return Errc::kInvalidArgument;
  if (!q->opened_qp.is_null()) {
    vd::QpObj* real = s.qps.get(to_raw(q->opened_qp));
    vd::XrcdObj* x = s.xrcds.get(to_raw(q->init.xrcd));
    UROCE_CHECK(real != nullptr && x != nullptr && x->use_count > 0);
    std::erase(real->opened, qp);
    --x->use_count;
    s.qps.remove(to_raw(qp));
    return real->closed && real->opened.empty() ? destroy_qp_object(s, real) : Errc::kOk;
  }
  if (!q->opened.empty()) {
    q->closed = true;
    return Errc::kOk;
  }
  return destroy_qp_object(s, q);
}

Result<QpInfo, Errc> Device::open_qp(XrcdHandle xrcd, std::uint32_t qp_num, QpType type) {
  vd::DeviceState& s = *s_;
  // ib_uverbs_open_qp() and ib_open_qp(): the domain, the type, then the domain's target QPs.
  vd::XrcdObj* x = s.xrcds.get(to_raw(xrcd));
  if (x == nullptr || type != QpType::kXrcRecv) return Err{Errc::kInvalidArgument};
  vd::QpObj* real = s.qp_for_qpn(qp_num);
  if (real == nullptr || real->init.qp_type != QpType::kXrcRecv || real->init.xrcd != xrcd) {
    return Err{Errc::kInvalidArgument};
  }
  if (s.qps.full()) return Err{Errc::kNoMemory};
  auto h = std::make_unique<vd::QpObj>();
  h->opened_qp = real->self;
  h->qpn = qp_num;
  h->init.qp_type = QpType::kXrcRecv;
  h->init.xrcd = xrcd;
  vd::QpObj* raw = h.get();
  const RawHandle rh = s.qps.insert(std::move(h));
  UROCE_CHECK(rh.generation != 0);
  raw->self = from_raw<QpHandle>(rh);
  real->opened.push_back(raw->self);
  ++x->use_count;  // as the kernel's uxrcd refcnt: the domain stays while the handle does
  return QpInfo{raw->self, qp_num, real->init.cap};
}

// Long: the kernel's checks of a modify, one line each in rxe's order, then the apply.
Errc Device::modify_qp(QpHandle qp, const QpAttr& attr, std::uint32_t mask) {
  vd::DeviceState& s = *s_;
  vd::QpObj* q = s.qp_of(qp);
  if (q == nullptr) return Errc::kInvalidArgument;
  if (s.doorbell_handler != nullptr) s.doorbell_handler->qp_changing(q->qpn);
  const QpType type = q->init.qp_type;
  const QpState actual = q->qp->state();
  // uroce's own bit is no attribute of the kernel's table: only with RC's INIT -> RTR.
  const bool sr_bit = (mask & kQpSelectiveRepeat) != 0;
  mask &= ~static_cast<std::uint32_t>(kQpSelectiveRepeat);

  // The transition and the mask (rxe_qp_chk_attr() -> ib_modify_qp_is_ok()).
  if ((mask & kQpCurState) && !valid_state(attr.cur_qp_state)) return Errc::kInvalidArgument;
  if ((mask & kQpState) && !valid_state(attr.qp_state)) return Errc::kInvalidArgument;
  const QpState cur = (mask & kQpCurState) ? attr.cur_qp_state : actual;
  const QpState next = (mask & kQpState) ? attr.qp_state : cur;
  if (!verbs::modify_qp_is_ok(cur, next, type, mask)) return Errc::kInvalidArgument;
  const bool to_rtr = type == QpType::kRc && cur == QpState::kInit && next == QpState::kRtr;
  if (sr_bit && !to_rtr) return Errc::kInvalidArgument;
  // rxe trusts cur_qp_state; uroce requires it to be the QP's state, so that a transition is
  // never applied from a state the QP is not in (e.g. after an asynchronous move to ERR).
  if ((mask & kQpCurState) && cur != actual) return Errc::kInvalidArgument;
  // rxe: a QP still draining its send queue in SQD may only go to ERR.
  if (cur == QpState::kSqd && next != QpState::kErr && q->qp->attr().sq_draining) {
    return Errc::kInvalidArgument;
  }

  // The values (rxe_qp_chk_attr(), rxe_av_chk_attr(), and the core's RoCE rules).
  if ((mask & kQpPort) && attr.port_num != 1) return Errc::kInvalidArgument;
  if ((mask & kQpPkeyIndex) && attr.pkey_index != 0) return Errc::kInvalidArgument;
  // IB_ACCESS_SUPPORTED of kernels with FLUSH (6.2): the flush bits are QP access flags too,
  // and so are the region-only bits up to HUGETLB (zero-based, on-demand, huge pages), which the
  // kernel accepts and ignores on a QP (rdma-core's test_odp passes ON_DEMAND there).
  constexpr std::uint32_t kQpAccessBits = kAccessLocalWrite | kAccessRemoteWrite |
                                          kAccessRemoteRead | kAccessRemoteAtomic | kAccessMwBind |
                                          kAccessZeroBased | kAccessOnDemand | kAccessHugetlb |
                                          kAccessFlushGlobal | kAccessFlushPersistent;
  if ((mask & kQpAccessFlags) && (attr.qp_access_flags & ~kQpAccessBits) != 0) {
    return Errc::kInvalidArgument;
  }
  if (mask & kQpAltPath) return Errc::kInvalidArgument;  // the core bans alternate paths on RoCE
  if ((mask & kQpPathMtu) &&
      (attr.path_mtu < Mtu::k256 ||
       static_cast<unsigned>(attr.path_mtu) > static_cast<unsigned>(s.port.max_mtu))) {
    return Errc::kInvalidArgument;
  }
  if ((mask & kQpMaxQpRdAtomic) && attr.max_rd_atomic > s.attr.max_qp_init_rd_atom) {
    return Errc::kInvalidArgument;
  }
  if ((mask & kQpMaxDestRdAtomic) && attr.max_dest_rd_atomic > s.attr.max_qp_rd_atom) {
    return Errc::kInvalidArgument;
  }
  if ((mask & kQpTimeout) && attr.timeout > 31) return Errc::kInvalidArgument;
  // 3-bit and 5-bit fields of the IBTA (rxe stores whatever it is given).
  if ((mask & kQpRetryCnt) && attr.retry_cnt > 7) return Errc::kInvalidArgument;
  if ((mask & kQpRnrRetry) && attr.rnr_retry > 7) return Errc::kInvalidArgument;
  if ((mask & kQpMinRnrTimer) && attr.min_rnr_timer > 31) return Errc::kInvalidArgument;
  if ((mask & kQpDestQpn) && attr.dest_qp_num > kQpnMask) return Errc::kInvalidArgument;

  transport::AddressVector path = q->qp->path();
  if (mask & kQpAv) {
    auto av = s.resolve_ah_attr(attr.ah_attr);
    if (!av) return av.error();
    path = *av;
    // rxe_modify_qp(): rdma_get_udp_sport(flow_label, qpn, dest_qp_num), the destination QPN
    // being the one this same call sets, if it sets one.
    const std::uint32_t dest = (mask & kQpDestQpn) ? attr.dest_qp_num : q->attr.dest_qp_num;
    path.udp_sport = verbs::connected_udp_sport(path.flow_label, q->qpn, dest);
  }

  QpAttr applied = attr;
  applied.rq_psn &= kPsnMask;  // the core masks PSNs to 24 bits (with a warning)
  applied.sq_psn &= kPsnMask;
  applied.cur_qp_state = cur;
  q->qp->modify(applied, mask, path);
  apply_mask(q->attr, applied, mask);
  if ((mask & kQpState) && next == QpState::kReset) {
    clean_cqs_at_reset(s, *q);
    if (s.doorbell_handler != nullptr) s.doorbell_handler->qp_reset(q->qpn);
  }
  if (type != QpType::kUd && cur == QpState::kInit && next == QpState::kRtr) {
    // Source pinning (transport::Qp::set_peer_udp_port), set at every connection: a uroce peer
    // sends everything from 4791, which no other user of its host can bind; any other's port is
    // learned from its first packet in sequence.
    const bool uroce = peer_is_uroce(s.config, path.dst, sr_bit && attr.selective_repeat);
    q->qp->set_peer_udp_port(uroce ? std::optional<std::uint16_t>(wire::kRoceV2Port)
                                   : std::nullopt);
  }
  if (to_rtr) {
    // Selective repeat with a peer known to be uroce (docs/ARCHITECTURE.md, "Negotiation"), set
    // again at every connection: a QP reset and connected elsewhere starts from go-back-N.
    // Not for XRC: a target could place an out-of-order packet only with the PD of an SRQ its
    // turn has not bound yet.
    const bool on = !is_xrc(type) &&
                    selective_repeat_towards(s.config, path.dst, sr_bit && attr.selective_repeat);
    if (on != q->qp->selective_repeat()) q->qp->set_selective_repeat(on);
    q->attr.selective_repeat = on;
  }
  // A transition can leave work to transmit that no post_send() announced: WRs posted in SQD
  // go once the QP is back in RTS. Ring the doorbell as for a post, or a progress engine that
  // sleeps until told would never send them.
  if (s.doorbell_handler != nullptr && q->qp->has_transmit_work()) {
    s.doorbell_handler->doorbell(q->qp->qpn());
  }
  return Errc::kOk;
}

Result<QpQuery, Errc> Device::query_qp(QpHandle qp) const {
  const vd::QpObj* q = s_->qp_of(qp);
  if (q == nullptr) return Err{Errc::kInvalidArgument};
  QpQuery r;
  r.attr = q->attr;
  r.attr.selective_repeat = q->qp->selective_repeat();
  r.attr.qp_state = q->qp->state();
  r.attr.cur_qp_state = r.attr.qp_state;
  r.attr.sq_draining = r.attr.qp_state == QpState::kSqd && q->qp->attr().sq_draining;
  r.attr.cap = q->init.cap;
  r.init_attr = q->init;
  return r;
}

Errc Device::post_send(QpHandle qp, std::span<const SendWr> wrs, const SendWr** bad_wr) {
  if (bad_wr != nullptr) *bad_wr = nullptr;
  vd::DeviceState& s = *s_;
  vd::QpObj* q = s.qp_of(qp);
  auto fail = [&](const SendWr& wr, Errc e) {
    if (bad_wr != nullptr) *bad_wr = &wr;
    return e;
  };
  if (q == nullptr)
    return wrs.empty() ? Errc::kInvalidArgument : fail(wrs[0], Errc::kInvalidArgument);
  // The engine learns that this QP has work (like a NIC's doorbell), also when a later WR of
  // the batch fails: the ones before it are posted.
  struct Doorbell {
    DoorbellHandler* handler;
    std::uint32_t qpn;
    bool rang = false;
    ~Doorbell() {
      if (rang && handler != nullptr) handler->doorbell(qpn);
    }
  } doorbell{s.doorbell_handler, q->qp->qpn()};
  transport::AddressVector av;  // a UD WR's, copied by post_send()
  for (const SendWr& wr : wrs) {
    transport::SendRequest r;
    r.wr_id = wr.wr_id;
    r.opcode = wr.opcode;
    r.send_flags = wr.send_flags | (q->init.sq_sig_all ? std::uint32_t{kSendSignaled} : 0u);
    r.sges = wr.sg_list;
    if (!take_operands(wr, r)) return fail(wr, Errc::kInvalidArgument);
    if (q->init.qp_type == QpType::kXrcSend) r.xrc_srqn = wr.xrc.remote_srqn;
    vd::MwObj* mw = nullptr;
    if (wr.opcode == WrOpcode::kBindMw) {
      // The window and the region by handle; their keys, as the poster knows them, travel in
      // the WQE and are checked again when it executes (the region may be gone by then).
      mw = s.mws.get(to_raw(wr.bind_mw.mw));
      const MwBindInfo& b = wr.bind_mw.bind_info;
      const vd::MrObj* mr = b.mr.is_null() ? nullptr : s.mrs.get(to_raw(b.mr));
      if (mw == nullptr || (!b.mr.is_null() && mr == nullptr)) {
        return fail(wr, Errc::kInvalidArgument);
      }
      r.rkey = wr.bind_mw.rkey;
      r.remote_addr = b.addr;
      r.bind.mw_rkey = mw->posted_rkey;
      r.bind.mr_lkey = mr != nullptr ? mr->lkey : 0;
      r.bind.length = b.length;
      r.bind.access = b.access;
    }
    if (q->init.qp_type == QpType::kUd) {
      const vd::AhObj* ah = s.ahs.get(to_raw(wr.ud.ah));
      if (ah == nullptr) return fail(wr, Errc::kInvalidArgument);
      av = ah->av;
      if (av.flow_label == 0) av.udp_sport = q->default_sport;
      r.ud_av = &av;
      r.remote_qpn = wr.ud.remote_qpn;
      r.remote_qkey = wr.ud.remote_qkey;
    }
    const Errc e = q->qp->post_send(r);
    if (e != Errc::kOk) return fail(wr, e);
    if (mw != nullptr) mw->posted_rkey = (mw->posted_rkey & ~0xffu) | (wr.bind_mw.rkey & 0xffu);
    doorbell.rang = true;
  }
  return Errc::kOk;
}

Errc Device::post_recv(QpHandle qp, std::span<const RecvWr> wrs, const RecvWr** bad_wr) {
  if (bad_wr != nullptr) *bad_wr = nullptr;
  vd::QpObj* q = s_->qp_of(qp);
  auto fail = [&](const RecvWr& wr, Errc e) {
    if (bad_wr != nullptr) *bad_wr = &wr;
    return e;
  };
  if (wrs.empty()) return q == nullptr ? Errc::kInvalidArgument : Errc::kOk;
  // A QP with an SRQ has no receive queue of its own (rxe_post_recv(): EINVAL).
  if (q == nullptr || !q->init.srq.is_null() || is_xrc(q->init.qp_type)) {
    return fail(wrs[0], Errc::kInvalidArgument);
  }
  for (const RecvWr& wr : wrs) {
    const Errc e = q->qp->post_recv(wr.wr_id, wr.sg_list);
    if (e != Errc::kOk) return fail(wr, e);
  }
  return Errc::kOk;
}

}  // namespace uroce
