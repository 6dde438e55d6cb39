// Shared receive queues: a transport::RecvQueue with verbs' limits and the SRQ limit event.
#include <algorithm>
#include <bit>

#include "verbs/device_state.h"

namespace uroce {

using verbs::detail::from_raw;
using verbs::detail::to_raw;
namespace vd = verbs::detail;

namespace {

// A basic SRQ on `p` (XRC's fields left null): create_srq and create_xrc_srq.
Result<vd::SrqObj*, Errc> make_srq(vd::DeviceState& s, PdHandle pd, vd::PdObj& p,
                                   const SrqAttr& attr) {
  // rxe_srq_chk_init(): 1..max_srq_wr WRs, up to max_srq_sge SGEs (0 is raised to 1).
  if (attr.max_wr == 0 || attr.max_wr > s.attr.max_srq_wr) return Err{Errc::kInvalidArgument};
  if (attr.max_sge > s.attr.max_srq_sge) return Err{Errc::kInvalidArgument};
  if (s.srqs.full()) return Err{Errc::kNoMemory};
  SrqAttr actual;
  // rxe_queue_init(): 2^k - 1 >= max_wr, here capped at the device limit.
  actual.max_wr =
      std::min(static_cast<std::uint32_t>(std::bit_ceil(std::uint64_t{attr.max_wr} + 1) - 1),
               s.attr.max_srq_wr);
  actual.max_sge = std::max<std::uint32_t>(attr.max_sge, 1);
  actual.srq_limit = 0;  // ignored at creation (ibv_create_srq(3)); rxe would arm it
  auto srq = std::make_unique<vd::SrqObj>(actual.max_wr, actual.max_sge);
  srq->pd = pd;
  srq->attr = actual;
  vd::SrqObj* raw = srq.get();
  const RawHandle h = s.srqs.insert(std::move(srq));
  UROCE_CHECK(h.generation != 0);
  raw->self = from_raw<SrqHandle>(h);
  ++p.use_count;
  return raw;
}

}  // namespace

Result<SrqInfo, Errc> Device::create_srq(PdHandle pd, const SrqAttr& attr) {
  vd::DeviceState& s = *s_;
  vd::PdObj* p = s.pds.get(to_raw(pd));
  if (p == nullptr) return Err{Errc::kInvalidArgument};
  auto srq = make_srq(s, pd, *p, attr);
  if (!srq) return Err{srq.error()};
  return SrqInfo{(*srq)->self, (*srq)->attr};
}

Result<XrcdHandle, Errc> Device::open_xrcd() {
  vd::DeviceState& s = *s_;
  if (s.xrcds.full()) return Err{Errc::kNoMemory};
  auto x = std::make_unique<vd::XrcdObj>();
  x->id = s.next_xrcd_id++;
  const RawHandle h = s.xrcds.insert(std::move(x));
  UROCE_CHECK(h.generation != 0);
  return from_raw<XrcdHandle>(h);
}

Errc Device::close_xrcd(XrcdHandle xrcd) {
  vd::DeviceState& s = *s_;
  vd::XrcdObj* x = s.xrcds.get(to_raw(xrcd));
  if (x == nullptr) return Errc::kInvalidArgument;
  if (x->use_count != 0) return Errc::kBusy;
  s.xrcds.remove(to_raw(xrcd));
  return Errc::kOk;
}

Result<SrqInfo, Errc> Device::create_xrc_srq(PdHandle pd, XrcdHandle xrcd, CqHandle cq,
                                             const SrqAttr& attr) {
  vd::DeviceState& s = *s_;
  vd::PdObj* p = s.pds.get(to_raw(pd));
  vd::XrcdObj* x = s.xrcds.get(to_raw(xrcd));
  vd::CqObj* c = s.cqs.get(to_raw(cq));
  if (p == nullptr || x == nullptr || c == nullptr) return Err{Errc::kInvalidArgument};
  // A 24-bit number no live XRC SRQ has (there are at most kMaxSrq of them).
  std::uint32_t num = s.next_srq_num;
  while (s.xrc_srq_by_num.count(num) != 0) num = num % 0xffffffu + 1;
  auto srq = make_srq(s, pd, *p, attr);
  if (!srq) return Err{srq.error()};
  vd::SrqObj* q = *srq;
  q->xrcd = xrcd;
  q->cq = cq;
  q->srq_num = num;
  q->serial = s.next_srq_serial++;
  s.next_srq_num = num % 0xffffffu + 1;
  s.xrc_srq_by_num.emplace(num, q);
  ++x->use_count;
  ++c->use_count;
  return SrqInfo{q->self, q->attr, num};
}

std::optional<transport::XrcSrqTarget> vd::DeviceState::xrc_srq(std::uint32_t xrcd,
                                                                std::uint32_t srqn) {
  auto it = xrc_srq_by_num.find(srqn);
  if (it == xrc_srq_by_num.end()) return std::nullopt;
  SrqObj* q = it->second;
  const XrcdObj* x = xrcds.get(to_raw(q->xrcd));
  if (x == nullptr || x->id != xrcd) return std::nullopt;  // another domain's SRQ
  CqObj* c = cqs.get(to_raw(q->cq));
  const PdObj* p = pds.get(to_raw(q->pd));
  UROCE_CHECK(c != nullptr && p != nullptr);  // held by the SRQ
  return transport::XrcSrqTarget{&q->rq, c, p->id, q->serial};
}

Errc Device::modify_srq(SrqHandle srq, const SrqAttr& attr, std::uint32_t mask) {
  vd::DeviceState& s = *s_;
  vd::SrqObj* q = s.srqs.get(to_raw(srq));
  if (q == nullptr) return Errc::kInvalidArgument;
  if ((mask & ~std::uint32_t{kSrqMaxWr | kSrqLimit}) != 0) return Errc::kInvalidArgument;
  if ((mask & kSrqMaxWr) != 0) return Errc::kNotSupported;  // no resize (no IBV_DEVICE_SRQ_RESIZE)
  if ((mask & kSrqLimit) != 0) {
    // rxe_srq_chk_attr(): the limit cannot exceed the queue's size.
    if (attr.srq_limit > q->attr.max_wr) return Errc::kInvalidArgument;
    s.sweep_srq_limits();  // report a limit that fired before it is re-armed
    q->attr.srq_limit = attr.srq_limit;
    q->rq.arm_limit(attr.srq_limit);
    auto it = std::find(s.armed_srqs.begin(), s.armed_srqs.end(), q);
    if (attr.srq_limit != 0 && it == s.armed_srqs.end()) s.armed_srqs.push_back(q);
    if (attr.srq_limit == 0 && it != s.armed_srqs.end()) s.armed_srqs.erase(it);
  }
  return Errc::kOk;
}

Result<SrqAttr, Errc> Device::query_srq(SrqHandle srq) const {
  vd::SrqObj* q = s_->srqs.get(to_raw(srq));
  if (q == nullptr) return Err{Errc::kInvalidArgument};
  s_->sweep_srq_limits();  // a fired limit reads as 0
  return q->attr;
}

Errc Device::destroy_srq(SrqHandle srq) {
  vd::DeviceState& s = *s_;
  vd::SrqObj* q = s.srqs.get(to_raw(srq));
  if (q == nullptr) return Errc::kInvalidArgument;
  // use_count counts the QPs created on the SRQ, as the kernel's srq->usecnt: XRC_RECV QPs
  // are not, so an XRC SRQ goes while target QPs use it, even mid-message (each drops that
  // message at its next step: transport::Qp::drop_stale_xrc_srq).
  if (q->use_count != 0) return Errc::kBusy;
  auto it = std::find(s.armed_srqs.begin(), s.armed_srqs.end(), q);
  if (it != s.armed_srqs.end()) s.armed_srqs.erase(it);
  vd::PdObj* p = s.pds.get(to_raw(q->pd));
  UROCE_CHECK(p != nullptr && p->use_count > 0);
  --p->use_count;
  if (!q->xrcd.is_null()) {
    vd::XrcdObj* x = s.xrcds.get(to_raw(q->xrcd));
    vd::CqObj* c = s.cqs.get(to_raw(q->cq));
    UROCE_CHECK(x != nullptr && c != nullptr && x->use_count > 0 && c->use_count > 0);
    --x->use_count;
    --c->use_count;
    s.xrc_srq_by_num.erase(q->srq_num);
  }
  s.srqs.remove(to_raw(srq));
  return Errc::kOk;
}

Errc Device::post_srq_recv(SrqHandle srq, std::span<const RecvWr> wrs, const RecvWr** bad_wr) {
  if (bad_wr != nullptr) *bad_wr = nullptr;
  vd::SrqObj* q = s_->srqs.get(to_raw(srq));
  if (q == nullptr) {
    if (bad_wr != nullptr && !wrs.empty()) *bad_wr = &wrs[0];
    return Errc::kInvalidArgument;
  }
  for (const RecvWr& wr : wrs) {
    const Errc e = q->rq.post(wr.wr_id, wr.sg_list);
    if (e != Errc::kOk) {
      if (bad_wr != nullptr) *bad_wr = &wr;
      return e;
    }
  }
  return Errc::kOk;
}

}  // namespace uroce
