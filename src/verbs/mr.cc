// Memory regions and the key table behind transport::MemoryResolver.
//
// Keys (issue 44): lkey = rkey, as rxe, but all 32 bits random (rxe's are a 24-bit index and 8
// random bits, from a PRNG seeded with the clock and the pid): an off-path attacker who knows one
// key learns nothing about the next, and must guess 32 bits. The bits come from the kernel's
// CSPRNG on a real device (DeviceConfig::random_bytes), from the seeded PRNG in the simulator and
// tests. A key is drawn again while it names a live MR or one of the last kKeyQuarantine
// deregistered, so a stale key never names a region registered soon after. The table is a hash
// map from the key (a key no longer holds an index).
#include <array>
#include <unordered_map>

#include "base/bytes.h"
#include "verbs/device_state.h"

namespace uroce {

using verbs::detail::from_raw;
using verbs::detail::to_raw;
namespace vd = verbs::detail;
using transport::AccessError;

namespace verbs::detail {

namespace {

// The region a key names in `table` (DeviceState::mr_by_key), or nullptr: in line, as resolve()
// looks one up for every RDMA access and SGE.
MrObj* find_mr(const std::unordered_map<std::uint32_t, MrObj*>& table, std::uint32_t key) {
  const auto it = table.find(key);
  return it == table.end() ? nullptr : it->second;
}

// Where `addr` of `mr` lies (checked inside it), through the address rather than `base` (an
// implicit ODP region's base is address 0, and no pointer may be offset from null).
std::byte* address_in(const MrObj& mr, std::uint64_t addr) {
  return reinterpret_cast<std::byte*>(reinterpret_cast<std::uintptr_t>(mr.base) + (addr - mr.iova));
}

}  // namespace

MrObj* DeviceState::mr_for_key(std::uint32_t key) const { return find_mr(mr_by_key, key); }

std::uint32_t DeviceState::random_key_bits() {
  if (!config.random_bytes) return static_cast<std::uint32_t>(prng.next() >> 32);
  std::array<std::byte, 4> b{};
  config.random_bytes(b);
  return load_le32(b, 0);
}

// [addr, addr + length) inside [base, base + size), without overflow (addr + length may pass
// 2^64).
static bool inside(std::uint64_t addr, std::uint64_t length, std::uint64_t base,
                   std::uint64_t size) {
  if (addr < base) return false;
  return length <= size && addr - base <= size - length;
}

// The bytes of [addr, addr + length) of `mr` (checked inside it). An ODP region's pages are made
// present first (config.fault_in): pages that are not mapped with the access fail it, as a NIC's
// ODP page fault that the kernel cannot serve.
Result<MutBytes, AccessError> DeviceState::present(const MrObj& mr, std::uint64_t addr,
                                                   std::uint64_t length,
                                                   std::uint32_t access) const {
  std::byte* const p = address_in(mr, addr);
  const auto n = static_cast<std::size_t>(length);
  if ((mr.access & kAccessOnDemand) != 0 && n != 0 && config.fault_in) {
    constexpr std::uint32_t kWrites = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteAtomic;
    if (!config.fault_in(p, n, (access & kWrites) != 0)) return Err{AccessError::kNotMapped};
  }
  return MutBytes(p, n);
}

// Called for every RDMA access and every SGE (what rxe does in lookup_mr() and
// mr_check_range()). All bound arithmetic avoids overflow: [addr, addr + length) must lie in
// [iova, iova + mr_length), with addr + length possibly past 2^64.
Result<const MrObj*, AccessError> DeviceState::checked_mr(std::uint32_t pd, std::uint32_t key,
                                                          bool remote, std::uint32_t access) const {
  return check_mr(mr_for_key(key), pd, key, remote, access);
}

// checked_mr's checks of `mr`, the region `key` names (nullptr: none), so that a caller that
// has looked the key up already does not look it up again (one hash look-up per RDMA access).
Result<const MrObj*, AccessError> DeviceState::check_mr(const MrObj* mr, std::uint32_t pd,
                                                        std::uint32_t key, bool remote,
                                                        std::uint32_t access) {
  if (mr == nullptr) return Err{AccessError::kInvalidKey};
  if ((remote ? mr->rkey : mr->lkey) != key) return Err{AccessError::kInvalidKey};
  if (mr->pd_id != pd) return Err{AccessError::kWrongPd};
  if ((access & ~mr->access) != 0) return Err{AccessError::kNoPermission};
  return mr;
}

Result<MutBytes, AccessError> DeviceState::resolve(std::uint32_t pd, std::uint32_t qpn,
                                                   std::uint32_t key, bool remote,
                                                   std::uint64_t addr, std::uint64_t length,
                                                   std::uint32_t access) {
  const MrObj* const named = find_mr(mr_by_key, key);
  // An ordinary region that the key names and that grants the access, in line (issue 40: the
  // resolve of every WRITE packet); anything else takes the checks below, which name the error.
  if (named != nullptr && (remote ? named->rkey : named->lkey) == key && named->pd_id == pd &&
      (access & ~named->access) == 0 && (named->access & kAccessOnDemand) == 0 &&
      inside(addr, length, named->iova, named->length)) {
    return MutBytes(address_in(*named, addr), static_cast<std::size_t>(length));
  }
  if (remote && named == nullptr) {
    if (const MwObj* mw = mw_for_key(key); mw != nullptr) {
      auto checked = checked_window(*mw, pd, qpn, access);
      if (!checked.ok()) return Err{checked.error()};
      // Inside the window, and inside its region (which rereg_mr may have changed since).
      if (!inside(addr, length, mw->addr, mw->length) ||
          !inside(addr, length, mw->mr->iova, mw->mr->length)) {
        return Err{AccessError::kOutOfBounds};
      }
      return present(*mw->mr, addr, length, access);
    }
  }
  auto checked = check_mr(named, pd, key, remote, access);
  if (!checked.ok()) return Err{checked.error()};
  const MrObj* mr = checked.value();
  if (!inside(addr, length, mr->iova, mr->length)) return Err{AccessError::kOutOfBounds};
  return present(*mr, addr, length, access);
}

// A FLUSH of a whole region (IBTA 1.5; rxe check_rkey() skips the range check for it), or of a
// whole window.
Result<MutBytes, AccessError> DeviceState::resolve_region(std::uint32_t pd, std::uint32_t qpn,
                                                          std::uint32_t rkey,
                                                          std::uint32_t access) {
  const MrObj* const named = mr_for_key(rkey);
  if (named == nullptr) {
    if (const MwObj* mw = mw_for_key(rkey); mw != nullptr) {
      auto checked = checked_window(*mw, pd, qpn, access);
      if (!checked.ok()) return Err{checked.error()};
      if (!inside(mw->addr, mw->length, mw->mr->iova, mw->mr->length)) {
        return Err{AccessError::kOutOfBounds};
      }
      return present(*mw->mr, mw->addr, mw->length, access);
    }
  }
  auto checked = check_mr(named, pd, rkey, true, access);
  if (!checked.ok()) return Err{checked.error()};
  const MrObj& mr = *checked.value();
  // An implicit ODP region has no pages to name as a whole: its FLUSH flushes nothing it could
  // fault in (uroce's memory is coherent; FLUSH orders, it moves no bytes).
  if (mr.is_implicit()) return MutBytes();
  return present(mr, mr.iova, mr.length, access);
}

// SEND with Invalidate and LOCAL_INV. IBTA o10-37 and rxe (rxe_invalidate_mr(): -EINVAL unless
// the type is IB_MR_TYPE_MEM_REG) allow invalidation only of regions made for it: fast-register
// MRs and memory windows. uroce has no fast-register MRs, so every MR refuses: after the key and
// PD checks, the answer is kNotInvalidatable and the region stays valid. A window: type 2 only
// (o10-37.2.26, rxe_check_invalidate_mw()), bound, in the QP's PD (rxe checks no PD), and for a
// SEND with Invalidate bound to the QP that received it (rxe checks no QP either). The responder
// turns any refusal into NAK Invalid Request (IBV_WC_REM_INV_REQ_ERR at the requester) and the
// error state, as rxe's responder does; the requester fails a LOCAL_INV (IBV_WC_LOC_QP_OP_ERR).
Result<bool, AccessError> DeviceState::invalidate(std::uint32_t pd, std::uint32_t qpn,
                                                  std::uint32_t rkey, bool remote) {
  if (MwObj* mw = mw_for_key(rkey); mw != nullptr) {
    if (mw->pd_id != pd) return Err{AccessError::kWrongPd};
    if (mw->type == MwType::kType1) return Err{AccessError::kNotInvalidatable};
    if (mw->mr == nullptr) return Err{AccessError::kInvalidKey};  // not bound
    if (remote && mw->qpn != qpn) return Err{AccessError::kWrongQp};
    unbind(*mw);
    return true;
  }
  const MrObj* mr = mr_for_key(rkey);
  if (mr == nullptr || mr->rkey != rkey) return Err{AccessError::kInvalidKey};
  if (mr->pd_id != pd) return Err{AccessError::kWrongPd};
  return Err{AccessError::kNotInvalidatable};
}

MwObj* DeviceState::mw_for_key(std::uint32_t rkey) const {
  const auto it = mw_by_index.find(rkey >> 8);
  if (it == mw_by_index.end() || it->second == nullptr || it->second->rkey != rkey) return nullptr;
  return it->second;
}

// rxe_lookup_mw(): bound (a type 1 window with a length, a type 2 one valid), the QP's PD, a
// type 2 window's own QP, every access asked for granted.
Result<const MwObj*, AccessError> DeviceState::checked_window(const MwObj& mw, std::uint32_t pd,
                                                              std::uint32_t qpn,
                                                              std::uint32_t access) const {
  if (mw.mr == nullptr || mw.length == 0) return Err{AccessError::kInvalidKey};
  if (mw.pd_id != pd) return Err{AccessError::kWrongPd};
  if (mw.type == MwType::kType2 && mw.qpn != qpn) return Err{AccessError::kWrongQp};
  if ((access & ~mw.access) != 0) return Err{AccessError::kNoPermission};
  return &mw;
}

void DeviceState::unbind(MwObj& mw) {
  if (mw.mr != nullptr) {
    UROCE_CHECK(mw.mr->mw_count > 0);
    --mw.mr->mw_count;
  }
  mw.mr = nullptr;
  mw.addr = 0;
  mw.length = 0;
  mw.access = 0;
  mw.qpn = 0;
}

// rxe_bind_mw() and rxe_check_bind_mw(): the window and the region by their keys; a type 2
// window free (o10-37.2.30), in the QP's PD (C10-72) and given a region and a length
// (o10-37.2.40); the region allows MW_BIND (C10-73), local write if the window grants remote
// write or atomic (C10-74), and holds the whole range (C10-75). uroce also wants the region in
// the window's PD and has no zero-based windows. Nothing changes on an error.
Result<bool, AccessError> DeviceState::bind_mw(const transport::MwBindRequest& b) {
  MwObj* mw = mw_for_key(b.mw_rkey);
  if (mw == nullptr) return Err{AccessError::kInvalidKey};
  MrObj* mr = nullptr;
  if (b.length != 0) {
    mr = mr_for_key(b.mr_lkey);
    if (mr == nullptr || mr->lkey != b.mr_lkey) return Err{AccessError::kInvalidKey};
  }
  constexpr std::uint32_t kWindowAccess =
      kAccessRemoteRead | kAccessRemoteWrite | kAccessRemoteAtomic | kAccessLocalWrite;
  if ((b.access & ~kWindowAccess) != 0) return Err{AccessError::kNoPermission};
  if (mw->type == MwType::kType2) {
    if (mw->mr != nullptr) return Err{AccessError::kInvalidKey};
    if (mw->pd_id != b.pd) return Err{AccessError::kWrongPd};
    if (mr == nullptr) return Err{AccessError::kInvalidKey};
  }
  if (mr != nullptr) {
    if (mr->pd_id != mw->pd_id) return Err{AccessError::kWrongPd};
    if ((mr->access & kAccessMwBind) == 0) return Err{AccessError::kNoPermission};
    if ((b.access & (kAccessRemoteWrite | kAccessRemoteAtomic)) != 0 &&
        (mr->access & kAccessLocalWrite) == 0) {
      return Err{AccessError::kNoPermission};
    }
    if (!inside(b.addr, b.length, mr->iova, mr->length)) return Err{AccessError::kOutOfBounds};
  }
  unbind(*mw);
  mw->rkey = (mw->rkey & ~0xffu) | (b.new_rkey & 0xffu);
  if (mr != nullptr) {
    mw->mr = mr;
    ++mr->mw_count;
    mw->addr = b.addr;
    mw->length = b.length;
    mw->access = b.access;
    if (mw->type == MwType::kType2) mw->qpn = b.qpn;
  }
  return true;
}

}  // namespace verbs::detail

namespace {

constexpr std::uint32_t kOptionalRange = 0x3ff00000;  // IBV_ACCESS_OPTIONAL_RANGE: ignored

// ib_check_mr_access(): remote write or atomic needs local write; then what uroce supports.
Errc check_mr_access(std::uint32_t access) {
  access &= ~kOptionalRange;
  if ((access & (kAccessRemoteWrite | kAccessRemoteAtomic)) != 0 &&
      (access & kAccessLocalWrite) == 0) {
    return Errc::kInvalidArgument;
  }
  // FLUSH_PERSISTENT: a device without IB_DEVICE_FLUSH_PERSISTENT refuses it (the kernel's
  // ib_check_mr_access()); uroce has no persistent memory (verbs.h kDeviceExFlushPersistent).
  if ((access & (kAccessZeroBased | kAccessFlushPersistent)) != 0) return Errc::kNotSupported;
  constexpr std::uint32_t kKnown = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead |
                                   kAccessRemoteAtomic | kAccessHugetlb | kAccessFlushGlobal |
                                   kAccessMwBind | kAccessOnDemand;
  if ((access & ~kKnown) != 0) return Errc::kInvalidArgument;
  return Errc::kOk;
}

// ib_umem_get(): no empty regions, none that wrap around the address space (a region may end
// exactly at 2^64: its last byte is at 2^64 - 1).
Errc check_mr_range(const void* addr, std::size_t length, std::uint64_t iova,
                    std::uint64_t max_mr_size) {
  if (length == 0 || addr == nullptr) return Errc::kInvalidArgument;
  const auto start = reinterpret_cast<std::uintptr_t>(addr);
  const std::uint64_t last = length - 1;
  if (start + last < start || iova + last < iova) return Errc::kInvalidArgument;
  if (length > max_mr_size) return Errc::kInvalidArgument;
  return Errc::kOk;
}

MrInfo info_of(const vd::MrObj& m) {
  return MrInfo{m.self, m.lkey, m.rkey, m.iova, m.length, m.access, m.pd};
}

}  // namespace

Result<MrInfo, Errc> Device::reg_mr(PdHandle pd, void* addr, std::size_t length,
                                    std::uint32_t access) {
  return reg_mr_iova(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), access);
}

Result<MrInfo, Errc> Device::reg_mr_iova(PdHandle pd, void* addr, std::size_t length,
                                         std::uint64_t iova, std::uint32_t access) {
  vd::DeviceState& s = *s_;
  vd::PdObj* p = s.pds.get(to_raw(pd));
  if (p == nullptr) return Err{Errc::kInvalidArgument};
  if (const Errc e = check_mr_access(access); e != Errc::kOk) return Err{e};
  // The implicit ODP region (ib_uverbs_reg_mr's start 0 and length U64_MAX, iova 0): the whole
  // address space, each access faulted in on its own.
  const bool implicit = addr == nullptr && length == SIZE_MAX && (access & kAccessOnDemand) != 0;
  if (implicit && iova != 0) return Err{Errc::kInvalidArgument};
  if (!implicit) {
    const Errc e = check_mr_range(addr, length, iova, s.attr.max_mr_size);
    if (e != Errc::kOk) return Err{e};
  }
  if (s.mrs.full()) return Err{Errc::kNoMemory};
  // Neither 0 nor a key in use or in quarantine (a hash map entry, live or null).
  std::uint32_t key = 0;
  for (std::uint32_t draws = 0; key == 0 && draws < vd::kMaxKeyDraws; ++draws) {
    key = s.random_key_bits();
    if (s.mr_by_key.contains(key) || s.mw_by_index.contains(key >> 8)) key = 0;
  }
  if (key == 0) return Err{Errc::kNoMemory};

  auto mr = std::make_unique<vd::MrObj>();
  mr->pd = pd;
  mr->pd_id = p->id;
  mr->base = static_cast<std::byte*>(addr);
  mr->iova = iova;
  mr->length = length;
  mr->access = access & ~kOptionalRange;
  mr->lkey = key;
  mr->rkey = key;  // rxe uses one key for both
  vd::MrObj* raw = mr.get();
  const RawHandle h = s.mrs.insert(std::move(mr));
  UROCE_CHECK(h.generation != 0);  // checked full() above
  raw->self = from_raw<MrHandle>(h);
  s.mr_by_key[key] = raw;
  ++p->use_count;
  return info_of(*raw);
}

Result<MrInfo, Errc> Device::query_mr(MrHandle mr) const {
  const vd::MrObj* m = s_->mrs.get(to_raw(mr));
  if (m == nullptr) return Err{Errc::kInvalidArgument};
  return info_of(*m);
}

// ib_uverbs_rereg_mr() (flags known and not empty, the new access checked as at registration)
// and rxe_rereg_user_mr() (the keys stay, the PD's references move). Every check comes before
// the first change.
Result<MrInfo, Errc> Device::rereg_mr(MrHandle mr, std::uint32_t flags, PdHandle pd, void* addr,
                                      std::size_t length, std::uint32_t access) {
  vd::DeviceState& s = *s_;
  vd::MrObj* m = s.mrs.get(to_raw(mr));
  if (m == nullptr) return Err{Errc::kInvalidArgument};
  constexpr std::uint32_t kAll = kReregTranslation | kReregPd | kReregAccess;
  if (flags == 0 || (flags & ~kAll) != 0) return Err{Errc::kInvalidArgument};
  vd::PdObj* new_pd = nullptr;
  if ((flags & kReregPd) != 0) {
    new_pd = s.pds.get(to_raw(pd));
    if (new_pd == nullptr) return Err{Errc::kInvalidArgument};
  }
  if ((flags & kReregAccess) != 0) {
    if (const Errc e = check_mr_access(access); e != Errc::kOk) return Err{e};
    // The implicit region stays on demand unless it gets a range of its own: without ODP it
    // would hand out the whole address space unchecked.
    if (m->is_implicit() && (access & kAccessOnDemand) == 0 && (flags & kReregTranslation) == 0) {
      return Err{Errc::kInvalidArgument};
    }
  }
  const auto new_iova = reinterpret_cast<std::uintptr_t>(addr);
  if ((flags & kReregTranslation) != 0) {
    const Errc e = check_mr_range(addr, length, new_iova, s.attr.max_mr_size);
    if (e != Errc::kOk) return Err{e};
  }
  if (new_pd != nullptr) {
    vd::PdObj* old_pd = s.pds.get(to_raw(m->pd));
    UROCE_CHECK(old_pd != nullptr && old_pd->use_count > 0);
    --old_pd->use_count;
    ++new_pd->use_count;
    m->pd = pd;
    m->pd_id = new_pd->id;
  }
  if ((flags & kReregAccess) != 0) m->access = access & ~kOptionalRange;
  if ((flags & kReregTranslation) != 0) {
    m->base = static_cast<std::byte*>(addr);
    m->iova = new_iova;
    m->length = length;
  }
  return info_of(*m);
}

Errc Device::dereg_mr(MrHandle mr) {
  vd::DeviceState& s = *s_;
  {
    const vd::MrObj* bound = s.mrs.get(to_raw(mr));
    if (bound == nullptr) return Errc::kInvalidArgument;
    // rxe_dereg_mr(): not while windows are bound to it (IBA 10.6.7.2.6), -EINVAL.
    if (bound->mw_count != 0) return Errc::kInvalidArgument;
  }
  std::unique_ptr<vd::MrObj> m = s.mrs.remove(to_raw(mr));
  if (m == nullptr) return Errc::kInvalidArgument;
  // Its key goes into quarantine, and the oldest key there out of it.
  const auto it = s.mr_by_key.find(m->lkey);
  UROCE_ASSERT(it != s.mr_by_key.end() && it->second == m.get());
  it->second = nullptr;
  if (s.key_quarantine.full()) {
    const std::uint32_t oldest = s.key_quarantine.front();
    s.key_quarantine.pop_front();
    const auto old = s.mr_by_key.find(oldest);
    UROCE_ASSERT(old != s.mr_by_key.end() && old->second == nullptr);
    s.mr_by_key.erase(old);
  }
  s.key_quarantine.push_back(m->lkey);
  vd::PdObj* p = s.pds.get(to_raw(m->pd));
  UROCE_CHECK(p != nullptr && p->use_count > 0);  // a PD with MRs cannot be freed
  --p->use_count;
  return Errc::kOk;
}

// rxe_ib_advise_mr() and rxe_ib_prefetch_sg_list(): each SGE's region found by lkey in `pd` (and,
// as mlx5's get_prefetchable_mr(), on demand), checked, then faulted in. Every SGE is checked
// before the first is faulted in, so that a bad one leaves nothing half done.
Errc Device::advise_mr(PdHandle pd, AdviseMr advice, std::uint32_t flags,
                       std::span<const Sge> sges) {
  vd::DeviceState& s = *s_;
  if (advice != AdviseMr::kPrefetch && advice != AdviseMr::kPrefetchWrite &&
      advice != AdviseMr::kPrefetchNoFault) {
    return Errc::kNotSupported;
  }
  if ((flags & ~kAdviseMrFlagFlush) != 0 || sges.empty()) return Errc::kInvalidArgument;
  const vd::PdObj* p = s.pds.get(to_raw(pd));
  if (p == nullptr) return Errc::kInvalidArgument;
  const bool write = advice == AdviseMr::kPrefetchWrite;
  for (const Sge& g : sges) {
    const vd::MrObj* mr = s.mr_for_key(g.lkey);
    if (mr == nullptr || mr->lkey != g.lkey || mr->pd_id != p->id) return Errc::kInvalidArgument;
    if ((mr->access & kAccessOnDemand) == 0) return Errc::kInvalidArgument;
    if (!vd::inside(g.addr, g.length, mr->iova, mr->length)) return Errc::kInvalidArgument;
    if (write && (mr->access & kAccessLocalWrite) == 0) return Errc::kPermission;
  }
  // No fault: nothing is pinned, so there is no mapping to snapshot.
  if (advice == AdviseMr::kPrefetchNoFault) return Errc::kOk;
  const bool sync = (flags & kAdviseMrFlagFlush) != 0;
  for (const Sge& g : sges) {
    const vd::MrObj& mr = *s.mr_for_key(g.lkey);
    auto got = s.present(mr, g.addr, g.length, write ? std::uint32_t{kAccessLocalWrite} : 0u);
    // Without FLUSH the kernel queues the prefetch and ignores its failure: best effort.
    if (!got.ok() && sync) return Errc::kBadAddress;
  }
  return Errc::kOk;
}

}  // namespace uroce
