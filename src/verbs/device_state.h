// The Device's insides (private to src/verbs and its tests): object tables, the MR key table
// that implements transport::MemoryResolver, the QPN table, and the async event queue.
//
// Objects live in HandleTables (stable addresses), so that a transport::Qp may keep pointers
// to its CQs, its receive queue and the device's resolver and event sink: a CQ or SRQ cannot be
// destroyed while a QP uses it (kBusy), and the device outlives its QPs.
#pragma once

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "base/handle_table.h"
#include "base/prng.h"
#include "base/ring.h"
#include "cc/congestion_control.h"
#include "transport/interfaces.h"
#include "transport/qp.h"
#include "transport/recv_queue.h"
#include "uroce/verbs.h"
#include "verbs/id_allocator.h"

namespace uroce::verbs::detail {

// rxe's limits (rxe_param.h of the kernels roce-facts.md describes: max_qp_wr 16K, inline 400).
inline constexpr std::uint32_t kMaxQp = 0x10000;
inline constexpr std::uint32_t kMinQpn = 0x11;     // rxe: index 16 is the GSI QP (QPN 1) ...
inline constexpr std::uint32_t kMaxQpn = 0x20000;  // ... so user QPNs start at 0x11
inline constexpr std::uint32_t kMaxCq = 16384;
inline constexpr std::uint32_t kMaxCqe = (1u << 15) - 1;
inline constexpr std::uint32_t kMaxMr = 256 * 1024;
inline constexpr std::uint32_t kMaxMw = 256 * 1024;  // rxe's RXE_MAX_MW beside RXE_MAX_MR
// The keys of this many deregistered MRs are not handed out again until as many more MRs have
// been deregistered after them (mr.cc): a peer that still holds a stale rkey, or guesses a key it
// saw before, never reaches the region registered next.
inline constexpr std::uint32_t kKeyQuarantine = 4096;
// A registration draws at most this many keys before it gives up (ENOMEM). A real random source
// needs more than one with probability (live MRs + quarantine) / 2^32 at most, below 2^-13.
inline constexpr std::uint32_t kMaxKeyDraws = 64;
inline constexpr std::uint32_t kMaxPd = 0x7ffc;
inline constexpr std::uint32_t kMaxResRdAtom = 0x3f000;
inline constexpr std::uint32_t kMaxAh = (1u << 15) - 1;  // rxe since 5.17 (was 100)
inline constexpr std::uint32_t kMaxSrq = 960;
inline constexpr std::uint32_t kMaxXrcd = 1024;
inline constexpr std::uint32_t kMaxSrqWr = 0x4000;
inline constexpr std::uint32_t kMaxSrqSge = 27;
inline constexpr std::uint32_t kGidTableLen = 1024;
inline constexpr std::uint32_t kPortCmSup = 1u << 16;  // IBV_PORT_CM_SUP
inline constexpr std::uint16_t kDefaultPkey = 0xffff;

template <class H>
RawHandle to_raw(H h) {
  return RawHandle{h.index, h.generation};
}
template <class H>
H from_raw(RawHandle r) {
  return H{r.index, r.generation};
}

struct DeviceState;

struct PdObj {
  std::uint32_t id = 0;  // what QPs and MRs carry for the PD check
  std::uint32_t use_count = 0;
};

struct MrObj {
  MrHandle self;
  PdHandle pd;
  std::uint32_t pd_id = 0;
  std::byte* base = nullptr;
  std::uint64_t iova = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  std::uint32_t mw_count = 0;  // memory windows bound to it (rxe: num_mw)
  // The implicit ODP region: the whole address space (reg_mr of nullptr, SIZE_MAX, iova 0).
  bool is_implicit() const { return base == nullptr && iova == 0 && length == UINT64_MAX; }
};

// A memory window (rxe_mw.c). Its rkey is (index << 8) | key byte: the index, 24 random bits,
// names it in DeviceState::mw_by_index; a bind changes only the key byte.
struct MwObj {
  MwHandle self;
  PdHandle pd;
  std::uint32_t pd_id = 0;
  MwType type = MwType::kType1;
  std::uint32_t rkey = 0;         // the key in force
  std::uint32_t posted_rkey = 0;  // after the binds posted so far (what ibv_mw.rkey holds)
  // Bound: type 1 valid with a length, type 2 valid (rxe: RXE_MW_STATE_VALID with an MR).
  MrObj* mr = nullptr;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
  std::uint32_t qpn = 0;  // type 2: the QP it is bound to
};

class CqObj final : public transport::CompletionSink {
 public:
  enum class Arm : std::uint8_t { kNone, kNextComp, kSolicited };
  // A queued completion, and whether its message asked for a solicited event (what a
  // solicited-only arming looks for among the completions queued when it is made).
  struct Queued {
    Wc wc;
    bool solicited = false;
  };
  CqObj(DeviceState& dev, std::uint32_t cqe, std::uint64_t channel_tag)
      : ring(cqe), channel(channel_tag), dev_(dev) {}
  void push(const Wc& wc, bool solicited) override;
  // ibv_req_notify_cq: arms the CQ once. A completion the arming asks for that is queued
  // already fires the event at once (cq.cc says why).
  void request_notify(bool solicited_only);
  // Takes every completion of QP `qpn` out of the queue, the others keeping their order (a QP
  // moved to RESET: verbs/qp.cc says why). Returns how many went.
  std::size_t remove_qp(std::uint32_t qpn);

  CqHandle self;
  BoundedRing<Queued> ring;
  std::uint64_t channel;
  Arm arm = Arm::kNone;
  bool error = false;           // overflowed: completions are dropped, polls fail
  std::uint32_t use_count = 0;  // QPs using it (as send or receive CQ, counted once each)
  std::uint64_t dropped = 0;
  std::uint64_t events = 0;  // completion events fired

 private:
  bool armed_for(const Wc& wc, bool solicited) const {
    // Solicited-only arming also fires for unsuccessful completions (IBTA 11.4.2.2; rxe passes
    // solicited = 1 for the receive completions it flushes).
    return arm == Arm::kNextComp ||
           (arm == Arm::kSolicited && (solicited || wc.status != WcStatus::kSuccess));
  }
  void fire();
  DeviceState& dev_;
};

struct XrcdObj {
  std::uint32_t id = 0;         // what XRC_RECV QPs name their domain by (transport::QpEnv)
  std::uint32_t use_count = 0;  // XRC SRQs and XRC_RECV QPs in it
};

// A completion queue for the side an XRC QP does not have (an initiator's receive side, a
// target's send side): nothing ever completes into it.
class NoCq final : public transport::CompletionSink {
 public:
  void push(const Wc&, bool) override { UROCE_CHECK(false); }
};

struct SrqObj {
  SrqObj(std::uint32_t max_wr, std::uint32_t max_sge) : rq(max_wr, max_sge) {}
  SrqHandle self;
  PdHandle pd;
  XrcdHandle xrcd;  // null: a basic SRQ
  CqHandle cq;      // an XRC SRQ's CQ
  std::uint32_t srq_num = 0;
  std::uint64_t serial = 0;  // an XRC SRQ's (transport::XrcSrqTarget::serial)
  SrqAttr attr;
  transport::RecvQueue rq;
  std::uint32_t use_count = 0;
};

struct AhObj {
  PdHandle pd;
  AhAttr attr;
  transport::AddressVector av;  // udp_sport filled at post time when flow_label is 0
};

// A QP, or another handle on an XRC target QP (Device::open_qp): such a handle has `opened_qp`
// set and nothing else. The QP lists its opened handles; it lives while any handle does (the
// kernel's shared XRC target QPs), `closed` once its creator's handle is destroyed.
struct QpObj {
  QpHandle self;
  QpHandle opened_qp;
  std::vector<QpHandle> opened;
  bool closed = false;
  PdHandle pd;
  QpInitAttr init;
  QpAttr attr;  // what modify_qp() set (state is read from the transport)
  std::uint32_t qpn = 0;
  std::uint16_t default_sport = 0;
  std::size_t live_pos = 0;  // index in DeviceState::live_qps
  std::unique_ptr<transport::RecvQueue> rq;
  std::unique_ptr<cc::CongestionControl> cc;
  std::unique_ptr<transport::Qp> qp;
};

struct DeviceState final : transport::MemoryResolver, transport::EventSink, transport::XrcSrqTable {
  explicit DeviceState(const DeviceConfig& cfg);

  // transport::MemoryResolver
  Result<MutBytes, transport::AccessError> resolve(std::uint32_t pd, std::uint32_t qpn,
                                                   std::uint32_t key, bool remote,
                                                   std::uint64_t addr, std::uint64_t length,
                                                   std::uint32_t access) override;
  Result<MutBytes, transport::AccessError> resolve_region(std::uint32_t pd, std::uint32_t qpn,
                                                          std::uint32_t rkey,
                                                          std::uint32_t access) override;
  Result<bool, transport::AccessError> invalidate(std::uint32_t pd, std::uint32_t qpn,
                                                  std::uint32_t rkey, bool remote) override;
  Result<bool, transport::AccessError> bind_mw(const transport::MwBindRequest& bind) override;
  // The bound window `mw` for QP `qpn` in `pd`, with `access` all granted (rxe_lookup_mw()).
  Result<const MwObj*, transport::AccessError> checked_window(const MwObj& mw, std::uint32_t pd,
                                                              std::uint32_t qpn,
                                                              std::uint32_t access) const;
  // The window an rkey names (its index and key byte both), or nullptr.
  MwObj* mw_for_key(std::uint32_t rkey) const;
  // Drops a window's binding (its MR's count with it).
  static void unbind(MwObj& mw);

  // transport::XrcSrqTable
  std::optional<transport::XrcSrqTarget> xrc_srq(std::uint32_t xrcd, std::uint32_t srqn) override;

  // transport::EventSink
  void qp_event(std::uint32_t qpn, AsyncEventType type) override;
  void srq_limit_reached(transport::RecvQueue* srq) override;

  void push_event(const AsyncEvent& ev);
  // Reports an armed SRQ whose limit fired (RecvQueue disarms itself when it crosses the
  // limit): told by the transport (srq_limit_reached), or found by sweep_srq_limits() when the
  // queue was popped by anyone else.
  void report_srq_limit(SrqObj* srq);
  void sweep_srq_limits();
  MrObj* mr_for_key(std::uint32_t key) const;
  // The MR `key` names (an rkey when `remote`) for a QP in `pd`, with `access` all granted.
  Result<const MrObj*, transport::AccessError> checked_mr(std::uint32_t pd, std::uint32_t key,
                                                          bool remote, std::uint32_t access) const;
  static Result<const MrObj*, transport::AccessError> check_mr(const MrObj* mr, std::uint32_t pd,
                                                               std::uint32_t key, bool remote,
                                                               std::uint32_t access);
  // The bytes of [addr, addr + length), inside `mr`, for `access`: an ODP region's pages made
  // present first (config.fault_in), kNotMapped when they cannot be.
  Result<MutBytes, transport::AccessError> present(const MrObj& mr, std::uint64_t addr,
                                                   std::uint64_t length,
                                                   std::uint32_t access) const;
  // The QP numbered `qpn`, or nullptr. The last one found is kept at hand: a ping-pong's packets,
  // doorbells and turns all name one QP (issue 40). forget_qpn() drops it with the QP.
  QpObj* qp_for_qpn(std::uint32_t qpn) const {
    if (qpn == last_qpn_ && last_qp_ != nullptr) return last_qp_;
    return look_up_qpn(qpn);
  }
  QpObj* look_up_qpn(std::uint32_t qpn) const;  // in qp_by_qpn, kept at hand when found
  void forget_qpn(std::uint32_t qpn) {
    qp_by_qpn.erase(qpn);
    last_qp_ = nullptr;
  }
  // The QP a live handle names (its creator's or one of open_qp), or nullptr.
  QpObj* qp_of(QpHandle h);
  // Checks an AH / QP address vector as rdma_check_ah_attr() and rxe_av_chk_attr() do and
  // resolves it (udp_sport left at 0).
  Result<transport::AddressVector, Errc> resolve_ah_attr(const AhAttr& attr) const;

  DeviceConfig config;
  DeviceAttr attr;
  PortAttr port;
  GidEntry gid;  // index 0, the only entry
  Prng prng;

  std::uint32_t next_pd_id = 1;
  // MRs by key (lkey = rkey); a null entry is a key in quarantine (kKeyQuarantine), whose keys in
  // the order they were released are `key_quarantine`.
  std::unordered_map<std::uint32_t, MrObj*> mr_by_key;
  BoundedRing<std::uint32_t> key_quarantine{kKeyQuarantine};
  // 32 random bits for a key: config.random_bytes, else `prng`.
  std::uint32_t random_key_bits();
  // Windows by index (rkey >> 8); a null entry is an index in quarantine (`mw_quarantine`, as
  // key_quarantine). No MR key has a window's index in its top 24 bits (mr.cc draws around them).
  std::unordered_map<std::uint32_t, MwObj*> mw_by_index;
  BoundedRing<std::uint32_t> mw_quarantine{kKeyQuarantine};
  CyclicIdAllocator qpn_alloc;
  QpnSource* qpn_source = nullptr;  // replaces qpn_alloc when set
  // A QPN of this device's own (no qpn_source): drawn at random from qpn_alloc's range where the
  // device draws its keys from the kernel (config.random_bytes: a real device without a seed),
  // so that one connection's QPN says nothing of the next (issue 44); in turn from kMinQpn, as
  // rxe numbers them, where it is seeded (the simulator, tests).
  std::optional<std::uint32_t> allocate_qpn();
  std::unordered_map<std::uint32_t, QpObj*> qp_by_qpn;
  // qp_for_qpn()'s last find (single-threaded, as the Device: uroce/verbs.h).
  mutable std::uint32_t last_qpn_ = 0;
  mutable QpObj* last_qp_ = nullptr;
  std::vector<transport::Qp*> live_qps;
  transport::QpCounters destroyed_qps;  // summed at destroy_qp
  std::vector<SrqObj*> armed_srqs;      // armed and not yet reported
  std::uint32_t next_xrcd_id = 1;
  std::uint32_t next_srq_num = 1;  // 24 bits, never 0
  std::uint64_t next_srq_serial = 1;
  std::unordered_map<std::uint32_t, SrqObj*> xrc_srq_by_num;  // live XRC SRQs
  NoCq no_cq;

  BoundedRing<AsyncEvent> events;
  std::uint64_t events_dropped = 0;
  CompletionEventHandler* comp_handler = nullptr;
  // Completion events that an arming fired at once, for a completion queued before it
  // (CqObj::request_notify): wake-ups that IBTA's "next completion" rule alone would have lost.
  std::uint64_t cq_events_at_arm = 0;
  DoorbellHandler* doorbell_handler = nullptr;

  // Declared children last: destroyed first (QPs before the CQs and SRQs they point to).
  HandleTable<PdObj> pds{kMaxPd};
  HandleTable<MrObj> mrs{kMaxMr};
  HandleTable<MwObj> mws{kMaxMw};
  HandleTable<CqObj> cqs{kMaxCq};
  HandleTable<XrcdObj> xrcds{kMaxXrcd};
  HandleTable<SrqObj> srqs{kMaxSrq};
  HandleTable<AhObj> ahs{kMaxAh};
  HandleTable<QpObj> qps{kMaxQp};
};

// A QP's congestion control as the device's configuration names it (NoCongestionControl for
// none); dcqcn's line rate is the link's where its parameters leave it 0.
std::unique_ptr<cc::CongestionControl> make_congestion_control(const DeviceConfig& config);

}  // namespace uroce::verbs::detail

namespace uroce {
// White-box access for tests (e.g. to drain an SRQ as the transport would).
struct DeviceTestAccess {
  static verbs::detail::DeviceState& state(Device& d) { return *d.s_; }
};
}  // namespace uroce
