// Extended verbs: ibv_create_cq_ex with the ibv_start_poll / ibv_next_poll readers, and
// ibv_create_qp_ex with the ibv_wr_* work request builder, over the same Device calls as the
// ordinary verbs.
#include <endian.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "compat/ibverbs/compat.h"

namespace uroce::compat {

namespace {

// ---- CQ ----

engine::UdpDevice* udp_of(Cq* cq) { return cq->ctx->s->udp.load(std::memory_order_acquire); }

int poll_one(ibv_cq_ex* icq) {
  Cq* cq = cq_of(icq);
  engine::UdpDevice* u = udp_of(cq);
  if (u == nullptr) return ENOENT;
  auto r = u->lock()->poll_cq(cq->h, std::span<Wc>(&cq->cur, 1));
  // Empty: a round of progress from the polling thread itself (see op_poll_cq).
  if (r.ok() && r.value() == 0 && u->progress()) {
    r = u->lock()->poll_cq(cq->h, std::span<Wc>(&cq->cur, 1));
  }
  if (!r.ok()) return err(r.error());
  if (r.value() == 0) return ENOENT;
  icq->status = static_cast<ibv_wc_status>(cq->cur.status);
  icq->wr_id = cq->cur.wr_id;
  return 0;
}

int cq_start_poll(ibv_cq_ex* icq, ibv_poll_cq_attr* attr) {
  if (attr != nullptr && attr->comp_mask != 0) return EINVAL;
  return poll_one(icq);
}
int cq_next_poll(ibv_cq_ex* icq) { return poll_one(icq); }
void cq_end_poll(ibv_cq_ex*) {}

const Wc& cur(ibv_cq_ex* icq) { return cq_of(icq)->cur; }
ibv_wc_opcode cq_read_opcode(ibv_cq_ex* c) { return static_cast<ibv_wc_opcode>(cur(c).opcode); }
std::uint32_t cq_read_vendor_err(ibv_cq_ex* c) { return cur(c).vendor_err; }
std::uint32_t cq_read_byte_len(ibv_cq_ex* c) { return cur(c).byte_len; }
__be32 cq_read_imm_data(ibv_cq_ex* c) {
  // With IBV_WC_WITH_INV the field is the invalidated R_Key (host order), as in ibv_wc.
  return (cur(c).wc_flags & kWcWithInv) != 0 ? cur(c).imm_data : htobe32(cur(c).imm_data);
}
std::uint32_t cq_read_qp_num(ibv_cq_ex* c) { return cur(c).qp_num; }
std::uint32_t cq_read_src_qp(ibv_cq_ex* c) { return cur(c).src_qp; }
unsigned int cq_read_wc_flags(ibv_cq_ex* c) { return cur(c).wc_flags; }
std::uint32_t cq_read_slid(ibv_cq_ex* c) { return cur(c).slid; }
std::uint8_t cq_read_sl(ibv_cq_ex* c) { return wc_sl(cur(c)); }
std::uint8_t cq_read_dlid_path_bits(ibv_cq_ex* c) { return cur(c).dlid_path_bits; }
// Not offered (create_cq_ex refuses these wc_flags); present so that a stray call reads 0.
std::uint64_t cq_read_zero64(ibv_cq_ex*) { return 0; }
std::uint16_t cq_read_cvlan(ibv_cq_ex*) { return 0; }
std::uint32_t cq_read_flow_tag(ibv_cq_ex*) { return 0; }
void cq_read_tm_info(ibv_cq_ex*, ibv_wc_tm_info* info) { std::memset(info, 0, sizeof *info); }

// ---- QP: the ibv_wr_* builder ----

Qp::PendingWr* current(Qp* q) {
  if (q->batch.empty()) {
    if (q->batch_error == 0) q->batch_error = EINVAL;  // a setter before any WR
    return nullptr;
  }
  return &q->batch.back();
}

Qp::PendingWr* new_wr(ibv_qp_ex* iqp, WrOpcode op, std::uint64_t needed_flag) {
  Qp* q = qp_of(iqp);
  if ((q->send_ops & needed_flag) == 0 && q->batch_error == 0) q->batch_error = EINVAL;
  Qp::PendingWr* p = nullptr;
  try {
    p = &q->batch.emplace_back();
  } catch (...) {
    // Out of memory: the batch fails at wr_complete; this WR's fields go to a scratch entry.
    q->batch_error = ENOMEM;
    static thread_local Qp::PendingWr scratch;
    scratch = Qp::PendingWr{};
    p = &scratch;
  }
  p->wr.wr_id = iqp->wr_id;
  p->wr.send_flags = iqp->wr_flags;
  p->wr.opcode = op;
  return p;
}

void wr_rdma_write(ibv_qp_ex* q, std::uint32_t rkey, std::uint64_t addr) {
  auto* p = new_wr(q, WrOpcode::kRdmaWrite, IBV_QP_EX_WITH_RDMA_WRITE);
  p->wr.rdma.rkey = rkey;
  p->wr.rdma.remote_addr = addr;
}
void wr_rdma_write_imm(ibv_qp_ex* q, std::uint32_t rkey, std::uint64_t addr, __be32 imm) {
  auto* p = new_wr(q, WrOpcode::kRdmaWriteWithImm, IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM);
  p->wr.rdma.rkey = rkey;
  p->wr.rdma.remote_addr = addr;
  p->wr.imm_data = be32toh(imm);
}
void wr_rdma_read(ibv_qp_ex* q, std::uint32_t rkey, std::uint64_t addr) {
  auto* p = new_wr(q, WrOpcode::kRdmaRead, IBV_QP_EX_WITH_RDMA_READ);
  p->wr.rdma.rkey = rkey;
  p->wr.rdma.remote_addr = addr;
}
void wr_send(ibv_qp_ex* q) { new_wr(q, WrOpcode::kSend, IBV_QP_EX_WITH_SEND); }
void wr_send_imm(ibv_qp_ex* q, __be32 imm) {
  new_wr(q, WrOpcode::kSendWithImm, IBV_QP_EX_WITH_SEND_WITH_IMM)->wr.imm_data = be32toh(imm);
}
void wr_send_inv(ibv_qp_ex* q, std::uint32_t rkey) {
  new_wr(q, WrOpcode::kSendWithInv, IBV_QP_EX_WITH_SEND_WITH_INV)->wr.invalidate_rkey = rkey;
}
void wr_local_inv(ibv_qp_ex* q, std::uint32_t rkey) {
  new_wr(q, WrOpcode::kLocalInv, IBV_QP_EX_WITH_LOCAL_INV)->wr.invalidate_rkey = rkey;
}
void wr_atomic_cmp_swp(ibv_qp_ex* q, std::uint32_t rkey, std::uint64_t addr, std::uint64_t compare,
                       std::uint64_t swap) {
  auto* p = new_wr(q, WrOpcode::kAtomicCmpAndSwp, IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP);
  p->wr.atomic.rkey = rkey;
  p->wr.atomic.remote_addr = addr;
  p->wr.atomic.compare_add = compare;
  p->wr.atomic.swap = swap;
}
void wr_atomic_fetch_add(ibv_qp_ex* q, std::uint32_t rkey, std::uint64_t addr, std::uint64_t add) {
  auto* p = new_wr(q, WrOpcode::kAtomicFetchAndAdd, IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD);
  p->wr.atomic.rkey = rkey;
  p->wr.atomic.remote_addr = addr;
  p->wr.atomic.compare_add = add;
}

void wr_set_inline_data_list(ibv_qp_ex* iqp, std::size_t n, const ibv_data_buf* bufs);

// IBTA 1.5. ATOMIC WRITE: rdma-core's rxe copies the 8 bytes now; they go as inline data.
void wr_atomic_write(ibv_qp_ex* q, std::uint32_t rkey, std::uint64_t addr, const void* value) {
  auto* p = new_wr(q, WrOpcode::kAtomicWrite, IBV_QP_EX_WITH_ATOMIC_WRITE);
  p->wr.rdma.rkey = rkey;
  p->wr.rdma.remote_addr = addr;
  const ibv_data_buf b{const_cast<void*>(value), 8};
  wr_set_inline_data_list(q, 1, &b);
}
// FLUSH (rdma-core 45's ibv_wr_flush): type is the placement (IBV_FLUSH_GLOBAL 1,
// IBV_FLUSH_PERSISTENT 2), level the selectivity (IBV_FLUSH_RANGE 0, IBV_FLUSH_MR 1).
void wr_flush(ibv_qp_ex* q, std::uint32_t rkey, std::uint64_t addr, std::size_t len,
              std::uint8_t type, std::uint8_t level) {
  auto* p = new_wr(q, WrOpcode::kFlush, kQpExWithFlush);
  p->wr.rdma.rkey = rkey;
  p->wr.rdma.remote_addr = addr;
  p->wr.flush.length = static_cast<std::uint32_t>(std::min<std::size_t>(len, UINT32_MAX));
  p->wr.flush.placement = type;
  p->wr.flush.selectivity = level;
  if (len > UINT32_MAX && q != nullptr && qp_of(q)->batch_error == 0) {
    qp_of(q)->batch_error = EINVAL;  // a RETH's DMA length is 32 bits
  }
}

// Operations uroce does not have (TSO): the batch fails with EOPNOTSUPP at wr_complete
// (create_qp_ex already refuses their send_ops_flags).
void unsupported(ibv_qp_ex* iqp) {
  Qp* q = qp_of(iqp);
  if (q->batch_error == 0) q->batch_error = EOPNOTSUPP;
  try {
    q->batch.emplace_back();  // keeps the setters that follow attached to a WR
  } catch (...) {
  }
}
// rdma-core's rxe wr_bind_mw: the window, its new key, the region and range.
void wr_bind_mw(ibv_qp_ex* q, ibv_mw* mw, std::uint32_t rkey, const ibv_mw_bind_info* info) {
  auto* p = new_wr(q, WrOpcode::kBindMw, IBV_QP_EX_WITH_BIND_MW);
  if (mw == nullptr || info == nullptr) {
    if (qp_of(q)->batch_error == 0) qp_of(q)->batch_error = EINVAL;
    return;
  }
  p->wr.bind_mw.mw = mw_of(mw)->h;
  p->wr.bind_mw.rkey = rkey;
  p->wr.bind_mw.bind_info = MwBindInfo{info->mr != nullptr ? mr_of(info->mr)->h : MrHandle{},
                                       info->addr, info->length, info->mw_access_flags};
}
void wr_send_tso(ibv_qp_ex* q, void*, std::uint16_t, std::uint16_t) { unsupported(q); }
// The remote XRC SRQ of the WR being built (qp_type.xrc.remote_srqn of ibv_post_send); an
// XRC_SEND QP's only (mlx5 gives no other QP type the setter).
void wr_set_xrc_srqn(ibv_qp_ex* iqp, std::uint32_t remote_srqn) {
  Qp* q = qp_of(iqp);
  if (q->type != QpType::kXrcSend) {
    if (q->batch_error == 0) q->batch_error = EOPNOTSUPP;
    return;
  }
  Qp::PendingWr* p = current(q);
  if (p != nullptr) p->wr.xrc.remote_srqn = remote_srqn;
}

void wr_set_ud_addr(ibv_qp_ex* iqp, ibv_ah* ah, std::uint32_t remote_qpn,
                    std::uint32_t remote_qkey) {
  Qp* q = qp_of(iqp);
  Qp::PendingWr* p = current(q);
  if (p == nullptr) return;
  if (ah == nullptr) {
    if (q->batch_error == 0) q->batch_error = EINVAL;
    return;
  }
  p->wr.ud.ah = ah_of(ah)->h;
  p->wr.ud.remote_qpn = remote_qpn;
  p->wr.ud.remote_qkey = remote_qkey;
}

void wr_set_sge_list(ibv_qp_ex* iqp, std::size_t n, const ibv_sge* list) {
  Qp* q = qp_of(iqp);
  Qp::PendingWr* p = current(q);
  if (p == nullptr) return;
  p->inline_data = false;
  p->sge_first = q->sge_pool.size();
  p->sge_count = n;
  try {
    for (std::size_t i = 0; i < n; ++i) {
      q->sge_pool.push_back(Sge{list[i].addr, list[i].length, list[i].lkey});
    }
  } catch (...) {
    q->batch_error = ENOMEM;
    p->sge_count = 0;
  }
}
void wr_set_sge(ibv_qp_ex* iqp, std::uint32_t lkey, std::uint64_t addr, std::uint32_t length) {
  const ibv_sge s{addr, length, lkey};
  wr_set_sge_list(iqp, 1, &s);
}

// Inline data is copied now (the application may reuse its buffer at once); the SGEs hold
// offsets into the QP's inline pool until wr_complete.
void wr_set_inline_data_list(ibv_qp_ex* iqp, std::size_t n, const ibv_data_buf* bufs) {
  Qp* q = qp_of(iqp);
  Qp::PendingWr* p = current(q);
  if (p == nullptr) return;
  p->inline_data = true;
  p->wr.send_flags |= kSendInline;
  p->sge_first = q->sge_pool.size();
  p->sge_count = n;
  try {
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t off = q->inline_pool.size();
      const auto* b = static_cast<const std::byte*>(bufs[i].addr);
      q->inline_pool.insert(q->inline_pool.end(), b, b + bufs[i].length);
      q->sge_pool.push_back(Sge{off, static_cast<std::uint32_t>(bufs[i].length), 0});
    }
  } catch (...) {
    q->batch_error = ENOMEM;
    p->sge_count = 0;
  }
}
void wr_set_inline_data(ibv_qp_ex* iqp, void* addr, std::size_t length) {
  const ibv_data_buf b{addr, length};
  wr_set_inline_data_list(iqp, 1, &b);
}

void wr_start(ibv_qp_ex* iqp) {
  Qp* q = qp_of(iqp);
  q->batch.clear();
  q->sge_pool.clear();
  q->inline_pool.clear();
  q->batch_error = 0;
}

void wr_abort(ibv_qp_ex* iqp) { wr_start(iqp); }

thread_local std::vector<SendWr> t_batch;

int wr_complete_impl(ibv_qp_ex* iqp) {
  Qp* q = qp_of(iqp);
  int result = q->batch_error;
  if (result == 0 && !q->batch.empty()) {
    t_batch.clear();
    for (Qp::PendingWr& p : q->batch) {
      if (p.inline_data) {
        for (std::size_t i = 0; i < p.sge_count; ++i) {
          Sge& s = q->sge_pool[p.sge_first + i];
          s.addr = reinterpret_cast<std::uintptr_t>(q->inline_pool.data() + s.addr);
        }
      }
      p.wr.sg_list = std::span<const Sge>(q->sge_pool.data() + p.sge_first, p.sge_count);
      t_batch.push_back(p.wr);
    }
    engine::UdpDevice* u = ctx_of(iqp->qp_base.context)->s->udp.load(std::memory_order_acquire);
    const SendWr* bad = nullptr;
    result =
        err(post_then_transmit(u, [&](Device& d) { return d.post_send(q->h, t_batch, &bad); }));
  }
  wr_start(iqp);
  return result;
}

int wr_complete(ibv_qp_ex* iqp) noexcept {
  try {
    return wr_complete_impl(iqp);
  } catch (...) {  // growing the thread-local batch failed: nothing was posted
    wr_start(iqp);
    return ENOMEM;
  }
}

// ---- creation ----

// What each QP type can post, as rdma-core's rxe provider: BIND_MW on RC and UC, LOCAL_INV on
// RC (a type 2 window is what it can invalidate). SEND with Invalidate is an RC opcode only
// (IBTA has no UC one; uroce's UC refuses it at post time).
constexpr std::uint64_t kRcOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                 IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
                                 IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                                 IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_ATOMIC_WRITE |
                                 kQpExWithFlush | IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW;
constexpr std::uint64_t kUcOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                                 IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM |
                                 IBV_QP_EX_WITH_BIND_MW;
constexpr std::uint64_t kUdOps = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
// An XRC initiator posts RC's operations, except IBTA 1.5's ATOMIC WRITE and FLUSH, which have
// no XRC opcodes (transport::Qp::post_send refuses them).
constexpr std::uint64_t kXrcSendOps = kRcOps & ~(IBV_QP_EX_WITH_ATOMIC_WRITE | kQpExWithFlush);

}  // namespace

void init_cq_ex_ops(Cq* cq) {
  ibv_cq_ex& c = cq->ibv;
  c.start_poll = cq_start_poll;
  c.next_poll = cq_next_poll;
  c.end_poll = cq_end_poll;
  c.read_opcode = cq_read_opcode;
  c.read_vendor_err = cq_read_vendor_err;
  c.read_byte_len = cq_read_byte_len;
  c.read_imm_data = cq_read_imm_data;
  c.read_qp_num = cq_read_qp_num;
  c.read_src_qp = cq_read_src_qp;
  c.read_wc_flags = cq_read_wc_flags;
  c.read_slid = cq_read_slid;
  c.read_sl = cq_read_sl;
  c.read_dlid_path_bits = cq_read_dlid_path_bits;
  c.read_completion_ts = cq_read_zero64;
  c.read_cvlan = cq_read_cvlan;
  c.read_flow_tag = cq_read_flow_tag;
  c.read_tm_info = cq_read_tm_info;
  c.read_completion_wallclock_ns = cq_read_zero64;
}

void init_qp_ex_ops(Qp* qp) {
  ibv_qp_ex& x = qp->ibv;
  x.comp_mask = 0;
  x.wr_atomic_cmp_swp = wr_atomic_cmp_swp;
  x.wr_atomic_fetch_add = wr_atomic_fetch_add;
  x.wr_bind_mw = wr_bind_mw;
  x.wr_local_inv = wr_local_inv;
  x.wr_rdma_read = wr_rdma_read;
  x.wr_rdma_write = wr_rdma_write;
  x.wr_rdma_write_imm = wr_rdma_write_imm;
  x.wr_send = wr_send;
  x.wr_send_imm = wr_send_imm;
  x.wr_send_inv = wr_send_inv;
  x.wr_send_tso = wr_send_tso;
  x.wr_set_ud_addr = wr_set_ud_addr;
  x.wr_set_xrc_srqn = wr_set_xrc_srqn;
  x.wr_set_inline_data = wr_set_inline_data;
  x.wr_set_inline_data_list = wr_set_inline_data_list;
  x.wr_set_sge = wr_set_sge;
  x.wr_set_sge_list = wr_set_sge_list;
  x.wr_start = wr_start;
  x.wr_complete = wr_complete;
  x.wr_abort = wr_abort;
  x.wr_atomic_write = wr_atomic_write;
  qp->wr_flush = wr_flush;           // where 45+ applications find it with 44's layout
  set_wr_flush_member(x, wr_flush);  // and in ibv_qp_ex, when built with 45+ headers
}

namespace {
// The guard above on both layouts, whichever headers this is built with.
struct QpEx44 {
  int wr_atomic_write = 0;
};
struct QpEx45 {
  WrFlushFn wr_flush = nullptr;
};
constexpr bool guard_sets_45_member() {
  QpEx44 a;
  QpEx45 b;
  set_wr_flush_member(a, wr_flush);
  set_wr_flush_member(b, wr_flush);
  return a.wr_atomic_write == 0 && b.wr_flush == &wr_flush;
}
static_assert(!kHasWrFlush<QpEx44> && kHasWrFlush<QpEx45> && guard_sets_45_member());
}  // namespace

ibv_cq_ex* create_cq_ex(ibv_context* context, ibv_cq_init_attr_ex* attr) {
  return guarded<ibv_cq_ex*>(nullptr, [&]() -> ibv_cq_ex* {
    if (attr == nullptr || (attr->comp_mask & ~std::uint32_t{IBV_CQ_INIT_ATTR_MASK_FLAGS |
                                                             IBV_CQ_INIT_ATTR_MASK_PD}) != 0) {
      errno = EINVAL;
      return nullptr;
    }
    // Timestamps, VLAN, flow tags and tag matching are not reported (as rxe).
    if ((attr->wc_flags & ~std::uint64_t{IBV_WC_STANDARD_FLAGS}) != 0) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
    if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS) != 0 &&
        (attr->flags & ~std::uint32_t{IBV_CREATE_CQ_ATTR_SINGLE_THREADED}) != 0) {
      errno = EOPNOTSUPP;  // IGNORE_OVERRUN
      return nullptr;
    }
    if (attr->cqe > static_cast<std::uint32_t>(INT32_MAX)) {
      errno = EINVAL;
      return nullptr;
    }
    ibv_cq* cq = create_cq_common(ctx_of(context), static_cast<int>(attr->cqe), attr->cq_context,
                                  attr->channel, static_cast<int>(attr->comp_vector), true);
    return cq != nullptr ? &cq_of(cq)->ibv : nullptr;
  });
}

ibv_qp* create_qp_ex(ibv_context* context, ibv_qp_init_attr_ex* attr) {
  return guarded<ibv_qp*>(nullptr, [&]() -> ibv_qp* {
    // An XRC target names its domain instead of a PD (ibv_create_qp_ex(3)).
    const bool target = attr != nullptr && attr->qp_type == IBV_QPT_XRC_RECV;
    if (attr == nullptr ||
        (target ? (attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) == 0 || attr->xrcd == nullptr
                : (attr->comp_mask & IBV_QP_INIT_ATTR_PD) == 0 || attr->pd == nullptr)) {
      errno = EINVAL;
      return nullptr;
    }
    const std::uint32_t known = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD |
                                IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_CREATE_FLAGS;
    if ((attr->comp_mask & ~known) != 0 ||
        ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) != 0 && attr->create_flags != 0)) {
      errno = EOPNOTSUPP;  // TSO, RSS, source QPN, create flags
      return nullptr;
    }
    const bool ex = (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) != 0;
    std::uint64_t ops = 0;
    if (ex) {
      ops = attr->send_ops_flags;
      const std::uint64_t allowed = attr->qp_type == IBV_QPT_RC         ? kRcOps
                                    : attr->qp_type == IBV_QPT_UC       ? kUcOps
                                    : attr->qp_type == IBV_QPT_UD       ? kUdOps
                                    : attr->qp_type == IBV_QPT_XRC_SEND ? kXrcSendOps
                                                                        : 0;
      if ((ops & ~allowed) != 0) {
        errno = EOPNOTSUPP;
        return nullptr;
      }
    }
    // ibv_qp_init_attr_ex begins with the fields of ibv_qp_init_attr.
    ibv_qp_init_attr base;
    std::memcpy(&base, attr, sizeof base);
    ibv_pd* pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) != 0 ? attr->pd : nullptr;
    ibv_xrcd* xrcd = (attr->comp_mask & IBV_QP_INIT_ATTR_XRCD) != 0 ? attr->xrcd : nullptr;
    return create_qp_common(ctx_of(context), pd, base, ex, ops, &attr->cap, xrcd);
  });
}

}  // namespace uroce::compat
