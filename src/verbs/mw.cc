// Memory windows (rxe_mw.c): allocation, the type 1 bind (ibv_bind_mw) and deallocation. The
// window table, binds and invalidations that the transport executes are in mr.cc, beside the
// region table they share keys with.
//
// Keys: a window's rkey is (index << 8) | key byte, as rxe's; the index is 24 random bits (rxe:
// a pool index), never one of a live window or of the last kKeyQuarantine freed, and never the
// top 24 bits of an MR key in use or in quarantine, so that a key names one object. The key
// byte starts random and a bind sets it (ibv_inc_rkey: the consumer's part of the key).
#include "verbs/device_state.h"

namespace uroce {

using verbs::detail::from_raw;
using verbs::detail::to_raw;
namespace vd = verbs::detail;

namespace {

MwInfo info_of(const vd::MwObj& w) { return MwInfo{w.self, w.rkey, w.type, w.pd}; }

// A window index that names nothing: no window, no MR key with these top bits.
std::uint32_t draw_mw_index(vd::DeviceState& s) {
  for (std::uint32_t draws = 0; draws < vd::kMaxKeyDraws; ++draws) {
    const std::uint32_t index = s.random_key_bits() >> 8;
    if (index == 0 || s.mw_by_index.contains(index)) continue;
    bool clash = false;
    for (std::uint32_t b = 0; b < 256 && !clash; ++b) clash = s.mr_by_key.contains(index << 8 | b);
    if (!clash) return index;
  }
  return 0;
}

}  // namespace

Result<MwInfo, Errc> Device::alloc_mw(PdHandle pd, MwType type) {
  vd::DeviceState& s = *s_;
  vd::PdObj* p = s.pds.get(to_raw(pd));
  if (p == nullptr) return Err{Errc::kInvalidArgument};
  if (type != MwType::kType1 && type != MwType::kType2) return Err{Errc::kInvalidArgument};
  if (s.mws.full()) return Err{Errc::kNoMemory};
  const std::uint32_t index = draw_mw_index(s);
  if (index == 0) return Err{Errc::kNoMemory};
  auto mw = std::make_unique<vd::MwObj>();
  mw->pd = pd;
  mw->pd_id = p->id;
  mw->type = type;
  mw->rkey = index << 8 | (s.random_key_bits() & 0xffu);
  mw->posted_rkey = mw->rkey;
  vd::MwObj* raw = mw.get();
  const RawHandle h = s.mws.insert(std::move(mw));
  UROCE_CHECK(h.generation != 0);  // checked full() above
  raw->self = from_raw<MwHandle>(h);
  s.mw_by_index[index] = raw;
  ++p->use_count;
  return info_of(*raw);
}

Result<MwInfo, Errc> Device::query_mw(MwHandle mw) const {
  const vd::MwObj* w = s_->mws.get(to_raw(mw));
  if (w == nullptr) return Err{Errc::kInvalidArgument};
  return info_of(*w);
}

Errc Device::dealloc_mw(MwHandle mw) {
  vd::DeviceState& s = *s_;
  std::unique_ptr<vd::MwObj> w = s.mws.remove(to_raw(mw));
  if (w == nullptr) return Errc::kInvalidArgument;
  vd::DeviceState::unbind(*w);  // rxe_mw_cleanup(): the MR's count drops
  const std::uint32_t index = w->rkey >> 8;
  const auto it = s.mw_by_index.find(index);
  UROCE_ASSERT(it != s.mw_by_index.end() && it->second == w.get());
  it->second = nullptr;
  if (s.mw_quarantine.full()) {
    const auto old = s.mw_by_index.find(s.mw_quarantine.front());
    s.mw_quarantine.pop_front();
    UROCE_ASSERT(old != s.mw_by_index.end() && old->second == nullptr);
    s.mw_by_index.erase(old);
  }
  s.mw_quarantine.push_back(index);
  vd::PdObj* p = s.pds.get(to_raw(w->pd));
  UROCE_CHECK(p != nullptr && p->use_count > 0);
  --p->use_count;
  return Errc::kOk;
}

// rdma-core's rxe provider (rxe_bind_mw): a type 1 window only; no range without a region; no
// zero-based window; the region in the window's PD (EPERM). The new key is the posted one with
// its key byte incremented; the bind itself is a BIND_MW work request on the QP.
Result<std::uint32_t, Errc> Device::bind_mw(QpHandle qp, MwHandle mw, std::uint64_t wr_id,
                                            std::uint32_t send_flags, const MwBindInfo& bind) {
  vd::DeviceState& s = *s_;
  const vd::MwObj* w = s.mws.get(to_raw(mw));
  if (w == nullptr || w->type != MwType::kType1) return Err{Errc::kInvalidArgument};
  if (bind.mr.is_null() && (bind.addr != 0 || bind.length != 0)) {
    return Err{Errc::kInvalidArgument};
  }
  if ((bind.access & kAccessZeroBased) != 0) return Err{Errc::kInvalidArgument};
  if (!bind.mr.is_null()) {
    const vd::MrObj* m = s.mrs.get(to_raw(bind.mr));
    if (m == nullptr) return Err{Errc::kInvalidArgument};
    if (m->pd != w->pd) return Err{Errc::kPermission};
  }
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = WrOpcode::kBindMw;
  wr.send_flags = send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = (w->posted_rkey & ~0xffu) | ((w->posted_rkey + 1) & 0xffu);
  wr.bind_mw.bind_info = bind;
  const Errc e = post_send(qp, std::span(&wr, 1), nullptr);
  if (e != Errc::kOk) return Err{e};
  return wr.bind_mw.rkey;
}

}  // namespace uroce
