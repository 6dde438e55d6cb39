// The uroce verbs API: a device with protection domains, memory regions, completion queues,
// shared receive queues, address handles and queue pairs, as libibverbs offers them over the
// kernel's Soft-RoCE (rxe), in C++. Numeric values of flags and enums are libibverbs' (see
// uroce/types.h), so that the drop-in libibverbs.so.1 converts without tables.
//
// Contract
// - Single-threaded: a Device and everything in it is used from one thread at a time (the
//   engine serializes access). Nothing here blocks, reads a clock or makes a system call.
// - Errors are values: calls return Errc or Result<T, Errc> with libibverbs' errno values.
//   API misuse (a bad argument, a stale handle) is an error value, never a crash.
// - Objects are named by handles (slot index + generation). A handle to a destroyed object is
//   detected: calls taking it return Errc::kInvalidArgument. The null handle ({}) names nothing.
// - Ownership: the Device owns every object. Destroying a parent that still has children
//   fails with Errc::kBusy, as the kernel does: a PD with MRs, QPs, AHs or SRQs; a CQ used by a
//   QP; an SRQ used by a QP. Destroying the Device frees everything that is left.
// - Memory registered with reg_mr() must stay valid until dereg_mr(); uroce reads and writes
//   it (through transport::MemoryResolver) whenever a QP accesses it. An on-demand (ODP) region
//   need not be mapped: each access first asks DeviceConfig::fault_in, and an access to pages
//   that are not mapped with the access it needs fails as a protection error instead.
//
// Engine side: find_qp() demultiplexes packets by QPN; live_qps() lists QPs to drive;
// set_completion_event_handler() tells the engine when an armed CQ gets a completion (it then
// signals the CQ's completion channel); has_async_event()/get_async_event() feed the async
// event channel.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "cc/aimd.h"
#include "cc/dcqcn.h"
#include "uroce/types.h"
#include "wire/ip.h"

namespace uroce {

namespace transport {
class Qp;
struct QpCounters;
class MemoryResolver;
}  // namespace transport

namespace verbs::detail {
struct DeviceState;
}  // namespace verbs::detail

// ---- handles ----

template <class Tag>
struct Handle {
  std::uint32_t index = 0;
  std::uint32_t generation = 0;  // 0: the null handle
  bool is_null() const { return generation == 0; }
  bool operator==(const Handle&) const = default;
};
using PdHandle = Handle<struct PdTag>;
using MrHandle = Handle<struct MrTag>;
using MwHandle = Handle<struct MwTag>;
using CqHandle = Handle<struct CqTag>;
using SrqHandle = Handle<struct SrqTag>;
using XrcdHandle = Handle<struct XrcdTag>;
using AhHandle = Handle<struct AhTag>;
using QpHandle = Handle<struct QpTag>;

// ---- device, port and GID attributes (struct ibv_device_attr, ibv_port_attr) ----

// IBV_ATOMIC_*
enum class AtomicCap : std::uint8_t { kNone = 0, kHca = 1, kGlob = 2 };
// IBV_PORT_* states, IBV_LINK_LAYER_*, IBV_GID_TYPE_*
enum class PortState : std::uint8_t { kNop = 0, kDown = 1, kInit = 2, kArmed = 3, kActive = 4 };
enum class LinkLayer : std::uint8_t { kUnspecified = 0, kInfiniband = 1, kEthernet = 2 };
enum class GidType : std::uint8_t { kIb = 0, kRoceV1 = 1, kRoceV2 = 2 };

// IBV_DEVICE_* capability flags that uroce reports.
enum DeviceCapFlag : std::uint32_t {
  kDeviceBadPkeyCntr = 1u << 1,
  kDeviceBadQkeyCntr = 1u << 2,
  kDeviceUdAvPortEnforce = 1u << 6,
  kDevicePortActiveEvent = 1u << 10,
  kDeviceSysImageGuid = 1u << 11,
  kDeviceRcRnrNakGen = 1u << 12,
  kDeviceMemWindow = 1u << 17,
  kDeviceXrc = 1u << 20,
  kDeviceMemWindowType2B = 1u << 24,
};
// The extended flags above bit 31 (IB_UVERBS_DEVICE_*, ibv_device_attr_ex.device_cap_flags_ex)
// that uroce reports: FLUSH to global visibility and ATOMIC WRITE, as rxe since 6.2. Not
// FLUSH_PERSISTENT: rxe has it only for persistent memory (it refuses to register other pages
// for it), and uroce has none.
inline constexpr std::uint64_t kDeviceExFlushGlobal = 1ull << 38;
inline constexpr std::uint64_t kDeviceExFlushPersistent = 1ull << 39;
inline constexpr std::uint64_t kDeviceExAtomicWrite = 1ull << 40;

// Access flags beyond the four of uroce/types.h (IBV_ACCESS_*). reg_mr() accepts MW_BIND (memory
// windows may be bound to the region) and ON_DEMAND (below), rejects ZERO_BASED with
// kNotSupported, accepts HUGETLB as a hint and ignores the optional range (bits 20..29, e.g.
// RELAXED_ORDERING), as libibverbs does for a device without them.
inline constexpr std::uint32_t kAccessMwBind = 16;
inline constexpr std::uint32_t kAccessZeroBased = 32;
inline constexpr std::uint32_t kAccessOnDemand = 64;
inline constexpr std::uint32_t kAccessHugetlb = 128;
inline constexpr std::uint32_t kAccessRelaxedOrdering = 1u << 20;

// On-demand paging (IBV_ODP_*, ibv_device_attr_ex.odp_caps). uroce pins nothing: every region
// is paged by the kernel as the process's own memory is, so ODP is its natural mode. An ODP
// region (kAccessOnDemand) differs from an ordinary one in what it asks of the application:
// its pages need not be mapped while it is registered, and an access to a page that is not
// mapped (or not writable, for a write) fails as a protection error (NAK Remote Access Error
// at the peer, IBV_WC_LOC_PROT_ERR locally) where an ordinary region's would be the
// application's crash. The implicit region, reg_mr(pd, nullptr, SIZE_MAX, ON_DEMAND | ...)
// with iova 0, covers the whole address space (rxe refuses it). uroce accepts it but does not
// advertise kOdpSupportImplicit: UCX 1.13 crashes when a verbs device has it (verbs/device.cc).
inline constexpr std::uint64_t kOdpSupport = 1u << 0;          // IBV_ODP_SUPPORT
inline constexpr std::uint64_t kOdpSupportImplicit = 1u << 1;  // IBV_ODP_SUPPORT_IMPLICIT
// Per transport (IBV_ODP_SUPPORT_SEND ... _SRQ_RECV): which operations may use ODP regions.
inline constexpr std::uint32_t kOdpSend = 1u << 0;
inline constexpr std::uint32_t kOdpRecv = 1u << 1;
inline constexpr std::uint32_t kOdpWrite = 1u << 2;
inline constexpr std::uint32_t kOdpRead = 1u << 3;
inline constexpr std::uint32_t kOdpAtomic = 1u << 4;
inline constexpr std::uint32_t kOdpSrqRecv = 1u << 5;

struct OdpCaps {
  std::uint64_t general_caps = 0;  // kOdpSupport*
  std::uint32_t rc_odp_caps = 0;   // kOdp* per transport
  std::uint32_t uc_odp_caps = 0;
  std::uint32_t ud_odp_caps = 0;
  std::uint32_t xrc_odp_caps = 0;
};

// ibv_advise_mr's advice (IBV_ADVISE_MR_ADVICE_*) and its one flag.
enum class AdviseMr : std::uint32_t { kPrefetch = 0, kPrefetchWrite = 1, kPrefetchNoFault = 2 };
inline constexpr std::uint32_t kAdviseMrFlagFlush = 1u << 0;  // IBV_ADVISE_MR_FLAG_FLUSH

struct DeviceAttr {
  std::string fw_ver;           // "0.0.0", as libibverbs formats rxe's fw_ver 0
  std::uint64_t node_guid = 0;  // the GUID's 8 bytes as a big-endian number (byte 0 = MSB)
  std::uint64_t sys_image_guid = 0;
  std::uint64_t max_mr_size = 0;
  std::uint64_t page_size_cap = 0;
  std::uint32_t vendor_id = 0;
  std::uint32_t vendor_part_id = 0;
  std::uint32_t hw_ver = 0;
  std::uint32_t max_qp = 0;
  std::uint32_t max_qp_wr = 0;
  std::uint32_t device_cap_flags = 0;     // DeviceCapFlag bits
  std::uint64_t device_cap_flags_ex = 0;  // kDeviceEx* bits (those above bit 31 only)
  std::uint32_t max_sge = 0;
  std::uint32_t max_sge_rd = 0;
  std::uint32_t max_cq = 0;
  std::uint32_t max_cqe = 0;
  std::uint32_t max_mr = 0;
  std::uint32_t max_pd = 0;
  std::uint32_t max_qp_rd_atom = 0;
  std::uint32_t max_ee_rd_atom = 0;
  std::uint32_t max_res_rd_atom = 0;
  std::uint32_t max_qp_init_rd_atom = 0;
  std::uint32_t max_ee_init_rd_atom = 0;
  AtomicCap atomic_cap = AtomicCap::kNone;
  std::uint32_t max_ee = 0;
  std::uint32_t max_rdd = 0;
  std::uint32_t max_mw = 0;
  std::uint32_t max_raw_ipv6_qp = 0;
  std::uint32_t max_raw_ethy_qp = 0;
  std::uint32_t max_mcast_grp = 0;
  std::uint32_t max_mcast_qp_attach = 0;
  std::uint32_t max_total_mcast_qp_attach = 0;
  std::uint32_t max_ah = 0;
  std::uint32_t max_fmr = 0;
  std::uint32_t max_map_per_fmr = 0;
  std::uint32_t max_srq = 0;
  std::uint32_t max_srq_wr = 0;
  std::uint32_t max_srq_sge = 0;
  std::uint16_t max_pkeys = 0;
  std::uint8_t local_ca_ack_delay = 0;
  std::uint8_t phys_port_cnt = 0;
  std::uint32_t max_inline_data = 0;  // not in ibv_device_attr: the QP cap limit
  OdpCaps odp;                        // ibv_device_attr_ex.odp_caps
};

struct PortAttr {
  PortState state = PortState::kDown;
  Mtu max_mtu = Mtu::k4096;
  Mtu active_mtu = Mtu::k1024;
  std::uint32_t gid_tbl_len = 0;
  std::uint32_t port_cap_flags = 0;
  std::uint32_t max_msg_sz = 0;
  std::uint32_t bad_pkey_cntr = 0;
  std::uint32_t qkey_viol_cntr = 0;
  std::uint16_t pkey_tbl_len = 0;
  std::uint16_t lid = 0;
  std::uint16_t sm_lid = 0;
  std::uint8_t lmc = 0;
  std::uint8_t max_vl_num = 0;
  std::uint8_t sm_sl = 0;
  std::uint8_t subnet_timeout = 0;
  std::uint8_t init_type_reply = 0;
  std::uint8_t active_width = 0;  // IBV_WIDTH_1X = 1
  std::uint8_t active_speed = 0;  // IBV_SPEED_SDR = 1
  std::uint8_t phys_state = 0;    // 5 = LinkUp
  LinkLayer link_layer = LinkLayer::kEthernet;
};

struct GidEntry {
  Gid gid;
  GidType type = GidType::kRoceV2;
};

// ---- device configuration ----

struct DeviceConfig {
  std::string name = "uroce0";      // 1..63 characters (IBV_SYSFS_NAME_MAX - 1)
  wire::IpAddress ip;               // the local address; neither 0.0.0.0 nor ::
  std::uint32_t netdev_mtu = 1500;  // >= 336: the active MTU must be at least 256
  std::uint64_t seed = 0;           // for MR keys: one seed, one sequence of keys
  // Where MR keys get their random bits (all 32 of a key's), when set: a function that fills its
  // argument with unpredictable bytes. A device that serves real peers gets the kernel's CSPRNG
  // from the edge (engine::UdpDevice::open, unless it was given a seed), so that no key can be
  // guessed from others (issue 44). Empty: a PRNG seeded with `seed`, reproducible (the
  // simulator, tests).
  std::function<void(std::span<std::byte>)> random_bytes;
  // Makes [addr, addr + length) of this process present for an access to an on-demand (ODP)
  // region, as the kernel's ODP page fault does for a NIC (for a write when `write`): true when
  // every page of it is mapped with that access, false otherwise (the access then fails as a
  // protection error, kAccessOnDemand). A device that serves real memory gets the kernel's
  // (engine::UdpDevice::open: madvise MADV_POPULATE_READ/WRITE). Empty: every address of an ODP
  // region counts as mapped (the simulator, whose regions are its own arrays).
  std::function<bool(std::byte* addr, std::size_t length, bool write)> fault_in;
  std::uint32_t async_event_queue_depth = 1024;
  // Completion vectors (ibv_context.num_comp_vectors): rxe has one per CPU. uroce's CQs share
  // the device's progress, so a vector only has to be accepted: any below this number is.
  std::uint32_t num_comp_vectors = 1;
  // The interface's speed in Mb/s, from which the port's active width and speed derive as the
  // kernel derives them for RoCE (link_rate_for_eth_speed); 0 when unknown, which the kernel
  // reads as 1000.
  std::uint32_t link_speed_mbps = 0;
  // Congestion control of every QP (cc/): none, as the kernel's Soft-RoCE; DCQCN, as
  // ConnectX: packets leave ECN-capable (ECT(0)), CE-marked packets are answered with a CNP, and
  // a CNP slows the QP down (cc/dcqcn.h, its parameters the mlx5 defaults, the line rate
  // link_speed_mbps when known); Aimd, a window driven by loss and delay for networks that drop
  // instead of marking, TCP-friendly (cc/aimd.h); or both at once (cc/dcqcn_aimd.h). Named
  // none, dcqcn, aimd and dcqcn-aimd (congestion_control_name). dcqcn-aimd by default: it
  // marks, and answers marks, as ConnectX does, and holds its share beside TCP where nothing
  // marks (docs/ARCHITECTURE.md, "Congestion control"); none is the kernel's Soft-RoCE.
  enum class CongestionControl : std::uint8_t { kNone, kDcqcn, kAimd, kDcqcnAimd };
  CongestionControl congestion_control = CongestionControl::kDcqcnAimd;
  // DCQCN's parameters (mlx5's cc_params and defaults); line_rate_mbps 0 takes link_speed_mbps.
  cc::DcqcnParams dcqcn;
  // Aimd's parameters (cc/aimd.h's defaults).
  cc::AimdParams aimd;
  // RC loss recovery (transport/recovery.cc): an adaptive retransmission timeout from measured
  // RTTs, a tail-loss probe and a window sized to the bandwidth-delay product. Off: IBTA's fixed
  // ACK timeout and rxe's 128-PSN window only (transport::RecoveryParams::off()).
  // Off by default for now (UROCE_RECOVERY=1 turns it on; docs/TRANSPORT.md, "Loss recovery",
  // says what still holds it back); the lossy-flow scenario (sim/lossy_flow.h) turns it on.
  bool adaptive_recovery = false;
  // Selective repeat (transport/selective_repeat.cc) on RC QPs whose peer is uroce: those that
  // modify_qp moves to RTR with kQpSelectiveRepeat (the CM saw uroce's GUID mark on the peer),
  // and those it moves to RTR towards an address of sr_peers (or any, with sr_all_peers). False:
  // none, go-back-N everywhere (UROCE_SR=0). Both ends need it on; if only one has it, both
  // recover by go-back-N.
  bool selective_repeat = true;
  // Peers known to run uroce, for QPs connected without rdma_cm (UROCE_SR_PEERS, the config
  // file's sr_peers=). Empty (and sr_all_peers false): none.
  std::vector<wire::IpAddress> sr_peers;
  bool sr_all_peers = false;
};

// The port's active_width (IBV_WIDTH_*) and active_speed (IBV_SPEED_*) for an Ethernet link
// of `mbps` (0: unknown), as the kernel's ib_get_eth_speed() gives them for a RoCE port: its
// table without lane counts (Linux before 6.2, and 6.2+ when the driver reports none), up to
// 4X EDR for anything above 40 Gb/s. Applications turn these into a bandwidth and a latency
// (UCX does), so they should say roughly what the link carries.
struct LinkRate {
  std::uint8_t width = 1;  // 1X
  std::uint8_t speed = 1;  // SDR
};
LinkRate link_rate_for_eth_speed(std::uint32_t mbps);

// The name of a congestion control as UROCE_CC and the config file's cc= give it ("none",
// "dcqcn", "aimd", "dcqcn-aimd"), and back (nullopt for any other name).
const char* congestion_control_name(DeviceConfig::CongestionControl cc);
// The IP ECN codepoint a QP's packets leave with under the rule (unless their traffic class
// names one): ECT(0), 2, where the rule answers CE marks with CNPs (dcqcn, dcqcn-aimd), else 0.
std::uint8_t congestion_control_ecn(DeviceConfig::CongestionControl cc);
std::optional<DeviceConfig::CongestionControl> congestion_control_from_name(std::string_view name);

// What ibv_rereg_mr changes (IBV_REREG_MR_CHANGE_*).
inline constexpr std::uint32_t kReregTranslation = 1;
inline constexpr std::uint32_t kReregPd = 2;
inline constexpr std::uint32_t kReregAccess = 4;

// ---- object attributes ----

struct MrInfo {
  MrHandle handle;
  std::uint32_t lkey = 0;
  std::uint32_t rkey = 0;
  std::uint64_t iova = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
  PdHandle pd;
};

// Memory windows (IBV_MW_TYPE_*): type 1 is bound by bind_mw() (ibv_bind_mw), type 2 (2B) by a
// BIND_MW work request, which ties it to the QP that posted it.
enum class MwType : std::uint8_t { kType1 = 1, kType2 = 2 };
struct MwInfo {
  MwHandle handle;
  std::uint32_t rkey = 0;  // (index << 8) | key byte, as rxe
  MwType type = MwType::kType1;
  PdHandle pd;
};
// What a bind gives the window (struct ibv_mw_bind_info): [addr, addr + length) of `mr` with
// the remote access `access` (IBV_ACCESS_REMOTE_*). A null mr and length 0 unbind a type 1
// window.
struct MwBindInfo {
  MrHandle mr;
  std::uint64_t addr = 0;
  std::uint64_t length = 0;
  std::uint32_t access = 0;
};

struct CqInitAttr {
  std::uint32_t cqe = 0;          // 1..max_cqe; rounded up as rxe does (see CqInfo)
  std::uint64_t channel = 0;      // opaque tag handed to the CompletionEventHandler
  std::uint32_t comp_vector = 0;  // below DeviceConfig::num_comp_vectors
};
struct CqInfo {
  CqHandle handle;
  std::uint32_t cqe = 0;  // actual capacity: 2^k - 1 >= requested (rxe's queue sizing)
};

// ibv_srq_attr_mask
enum SrqAttrMask : std::uint32_t { kSrqMaxWr = 1, kSrqLimit = 2 };
struct SrqAttr {
  std::uint32_t max_wr = 0;
  std::uint32_t max_sge = 0;
  std::uint32_t srq_limit = 0;  // 0: disarmed
};
struct SrqInfo {
  SrqHandle handle;
  SrqAttr attr;               // actual values
  std::uint32_t srq_num = 0;  // an XRC SRQ's number, which initiators name (ibv_get_srq_num)
};

struct QpInitAttr {
  QpType qp_type = QpType::kRc;
  CqHandle send_cq;
  CqHandle recv_cq;
  SrqHandle srq;  // null: the QP has its own receive queue
  QpCap cap;
  bool sq_sig_all = false;
  // XRC_RECV: its XRC domain (the QP has no PD, CQs, SRQ nor send queue; pass a null PD).
  // XRC_SEND: no receive side (recv_cq and srq null). Last, so that code that initialises the
  // fields above in order (tests/install/write_consumer) builds as before.
  XrcdHandle xrcd;
};
struct QpInfo {
  QpHandle handle;
  std::uint32_t qp_num = 0;
  QpCap cap;  // actual values (rounded as rxe does)
};
struct QpQuery {
  QpAttr attr;
  QpInitAttr init_attr;
};

// ---- work requests (struct ibv_send_wr, ibv_recv_wr) ----

struct SendWr {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sg_list;
  WrOpcode opcode = WrOpcode::kSend;
  std::uint32_t send_flags = 0;  // SendFlag bits
  std::uint32_t imm_data = 0;    // as carried in ImmDt (network-order value, like ibv's __be32)
  struct {
    std::uint64_t remote_addr = 0;
    std::uint32_t rkey = 0;
  } rdma;
  struct {
    std::uint64_t remote_addr = 0;
    std::uint64_t compare_add = 0;
    std::uint64_t swap = 0;
    std::uint32_t rkey = 0;
  } atomic;
  struct {
    AhHandle ah;
    std::uint32_t remote_qpn = 0;
    std::uint32_t remote_qkey = 0;
  } ud;
  // FLUSH (ibv_wr_flush): rdma names the region, this the FETH and the range's length.
  struct {
    std::uint32_t length = 0;      // selectivity wire::kFlushRange: bytes from rdma.remote_addr
    std::uint8_t placement = 0;    // wire::kFlushGlobal | wire::kFlushPersistent
    std::uint8_t selectivity = 0;  // wire::kFlushRange or wire::kFlushMr
  } flush;
  std::uint32_t invalidate_rkey = 0;  // SEND with Invalidate, LOCAL_INV
  struct {
    std::uint32_t remote_srqn = 0;  // XRC_SEND: the target's XRC SRQ (qp_type.xrc.remote_srqn)
  } xrc;
  // BIND_MW (type 2): the window, its new key (the low 8 bits count, ibv_inc_rkey) and the bind.
  struct {
    MwHandle mw;
    std::uint32_t rkey = 0;
    MwBindInfo bind_info;
  } bind_mw;
};

struct RecvWr {
  std::uint64_t wr_id = 0;
  std::span<const Sge> sg_list;
};

// ---- events ----

// An asynchronous event (struct ibv_async_event): `type` says which element is meaningful.
struct AsyncEvent {
  AsyncEventType type = AsyncEventType::kDeviceFatal;
  QpHandle qp;  // QP events (kQpFatal, kCommEst, kSqDrained, kQpLastWqeReached ...)
  std::uint32_t qp_num = 0;
  CqHandle cq;            // kCqErr
  SrqHandle srq;          // kSrqLimitReached, kSrqErr
  std::uint8_t port = 0;  // port events
};

// Told when an armed CQ gets a completion that matches its arming (req_notify_cq); the CQ is
// disarmed first. Called from inside the transport's handle_* calls: it must not call back
// into the Device (the engine records the event and signals the channel later).
class CompletionEventHandler {
 public:
  virtual ~CompletionEventHandler() = default;
  virtual void cq_event(CqHandle cq, std::uint64_t channel) = 0;
};

// Told when post_send() queued work on a QP, so that the progress engine transmits it (what a
// NIC's doorbell does). Called from inside post_send(); must not call back into the Device.
// Where a Device's QP numbers come from. The default is the Device's own cyclic range
// (0x11..0x20000, as rxe's pool). A device shared by several contexts or processes (the UDP
// device's coordinator) hands out numbers unique across all of them instead. allocate_qpn()
// returns nullopt when none is free (create_qp fails with kNoMemory); numbers are never 0 or 1
// and never above 0xfffffe. Called from create_qp/destroy_qp only.
class QpnSource {
 public:
  virtual ~QpnSource() = default;
  virtual std::optional<std::uint32_t> allocate_qpn() = 0;
  virtual void release_qpn(std::uint32_t qpn) = 0;
};

class DoorbellHandler {
 public:
  virtual ~DoorbellHandler() = default;
  virtual void doorbell(std::uint32_t qpn) = 0;
  // The QP is about to be modified or destroyed: a progress engine that holds packets back for
  // it (an ACK waiting to leave with the next request) sends them now, while they still can.
  virtual void qp_changing(std::uint32_t /*qpn*/) {}
  // The QP is about to be destroyed (after qp_changing, while the engine can still find it): a
  // progress engine may keep what it needs to acknowledge its peer's retransmissions
  // (transport/closed_qps.h).
  virtual void qp_destroying(std::uint32_t /*qpn*/) {}
  // The QP was moved to RESET (after the transition): as the QP forgets its connection (its
  // queues, PSNs and peer), a progress engine forgets what it kept for that connection (a
  // per-connection key: docs/SECURITY.md).
  virtual void qp_reset(std::uint32_t /*qpn*/) {}
};

// ---- the device ----

class Device {
 public:
  // kInvalidArgument for a bad configuration (see DeviceConfig).
  static Result<std::unique_ptr<Device>, Errc> create(const DeviceConfig& config);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  const std::string& name() const;
  const DeviceAttr& query_device() const;
  Result<PortAttr, Errc> query_port(std::uint8_t port_num) const;  // port 1 only
  // libibverbs' ibv_query_gid: an empty entry reads as the zero GID; an index beyond
  // gid_tbl_len is kInvalidArgument.
  Result<Gid, Errc> query_gid(std::uint8_t port_num, std::uint32_t index) const;
  // ibv_query_gid_ex: kNoEntry for an empty entry.
  Result<GidEntry, Errc> query_gid_entry(std::uint8_t port_num, std::uint32_t index) const;
  Result<std::uint16_t, Errc> query_pkey(std::uint8_t port_num, std::uint32_t index) const;

  // Protection domains. kNoMemory beyond max_pd.
  Result<PdHandle, Errc> alloc_pd();
  Errc dealloc_pd(PdHandle pd);

  // Memory regions: [addr, addr + length) of this process, addressed by the peer and by SGEs
  // as [iova, iova + length) (reg_mr: iova = addr). Access flags are checked as the kernel
  // does (REMOTE_WRITE or REMOTE_ATOMIC without LOCAL_WRITE: kInvalidArgument).
  Result<MrInfo, Errc> reg_mr(PdHandle pd, void* addr, std::size_t length, std::uint32_t access);
  Result<MrInfo, Errc> reg_mr_iova(PdHandle pd, void* addr, std::size_t length, std::uint64_t iova,
                                   std::uint32_t access);
  Result<MrInfo, Errc> query_mr(MrHandle mr) const;
  // ibv_rereg_mr: changes what `flags` (kRereg*, at least one) names and keeps the keys, as rxe
  // does for PD and access changes. Translation: the region becomes [addr, addr + length) with
  // iova = addr (rxe refuses that change; uroce pins nothing, so it can). pd, addr, length and
  // access are read only for their flag. kInvalidArgument for unknown or no flags and whatever
  // reg_mr would refuse; the MR is unchanged on any error. Takes effect at once: the next packet
  // or SGE that names a key checks the new PD, access and range.
  Result<MrInfo, Errc> rereg_mr(MrHandle mr, std::uint32_t flags, PdHandle pd, void* addr,
                                std::size_t length, std::uint32_t access);
  // kInvalidArgument while memory windows are bound to it (rxe_dereg_mr, IBA 10.6.7.2.6).
  Errc dereg_mr(MrHandle mr);
  // ibv_advise_mr for ODP regions, as rxe's rxe_ib_advise_mr: kPrefetch and kPrefetchWrite
  // fault the ranges in (DeviceConfig::fault_in), kPrefetchNoFault has nothing to do (nothing
  // is pinned, so there is no snapshot to take). Every SGE must name an ODP region of `pd` by
  // its lkey, inside it (kInvalidArgument otherwise; kPermission for kPrefetchWrite into
  // a region without LOCAL_WRITE). With kAdviseMrFlagFlush the call is synchronous and a range
  // that cannot be faulted in is kBadAddress; without, it is best effort, as the kernel's
  // queued prefetch: such a range is skipped. Unknown advice: kNotSupported; unknown flags or
  // no SGE: kInvalidArgument.
  Errc advise_mr(PdHandle pd, AdviseMr advice, std::uint32_t flags, std::span<const Sge> sges);

  // Memory windows (rxe_mw.c). alloc_mw: kNoMemory beyond max_mw. A window holds its PD (a PD
  // with windows cannot be freed). dealloc_mw unbinds it first.
  Result<MwInfo, Errc> alloc_mw(PdHandle pd, MwType type);
  Errc dealloc_mw(MwHandle mw);
  Result<MwInfo, Errc> query_mw(MwHandle mw) const;
  // ibv_bind_mw: binds type 1 window `mw` through a BIND_MW work request posted on `qp` (wr_id
  // and send_flags its own), and returns the window's new rkey (its key byte incremented), in
  // force once the request executes. kInvalidArgument for a type 2 window, a range without a
  // region, or ZERO_BASED; kPermission when the region's PD is not the window's (rdma-core's
  // rxe provider); what post_send refuses.
  Result<std::uint32_t, Errc> bind_mw(QpHandle qp, MwHandle mw, std::uint64_t wr_id,
                                      std::uint32_t send_flags, const MwBindInfo& bind);

  // Completion queues.
  Result<CqInfo, Errc> create_cq(const CqInitAttr& attr);
  Errc destroy_cq(CqHandle cq);
  // ibv_resize_cq: the CQ holds at least `cqe` completions from now on (rounded as create_cq
  // rounds) and keeps the ones queued, in order; returns the new capacity. As rxe
  // (rxe_cq_chk_attr): kInvalidArgument for 0, more than max_cqe, or fewer than are queued.
  Result<std::uint32_t, Errc> resize_cq(CqHandle cq, std::uint32_t cqe);
  // Moves up to out.size() completions into `out`, oldest first; returns how many. After an
  // overflow the CQ is in error: kNoSpace (the completions queued before it are lost too).
  Result<std::size_t, Errc> poll_cq(CqHandle cq, std::span<Wc> out);
  // Arms the CQ once: the next completion (solicited_only: the next solicited or unsuccessful
  // one) calls the CompletionEventHandler.
  Errc req_notify_cq(CqHandle cq, bool solicited_only);
  // What each live CQ holds and how it is armed (`uroce stats --qp`): where a consumer that
  // waits for an event stands.
  struct CqState {
    CqHandle cq;
    std::uint32_t queued = 0;    // completions not yet polled
    std::uint32_t capacity = 0;  // cqe
    std::uint8_t arm = 0;        // 0: not armed, 1: next completion, 2: solicited only
    bool error = false;          // overflowed
    std::uint64_t events = 0;    // completion events fired
    std::uint64_t channel = 0;   // its completion channel's tag (0: none)
  };
  std::vector<CqState> cq_states() const;
  void set_completion_event_handler(CompletionEventHandler* handler);
  void set_doorbell_handler(DoorbellHandler* handler);
  // Before the first create_qp (kBusy once a QP exists). nullptr: the Device's own range.
  Errc set_qpn_source(QpnSource* source);

  // Shared receive queues. srq_limit is ignored at creation (as libibverbs documents); arm it
  // with modify_srq(kSrqLimit). Resizing (kSrqMaxWr) is not supported.
  Result<SrqInfo, Errc> create_srq(PdHandle pd, const SrqAttr& attr);
  Errc modify_srq(SrqHandle srq, const SrqAttr& attr, std::uint32_t mask);
  Result<SrqAttr, Errc> query_srq(SrqHandle srq) const;
  Errc destroy_srq(SrqHandle srq);
  Errc post_srq_recv(SrqHandle srq, std::span<const RecvWr> wrs, const RecvWr** bad_wr);

  // XRC (IBTA 9.8.1.1; ibv_open_xrcd(3), ibv_create_srq_ex(3)). An XRC domain is this device's
  // only (no sharing between processes through a file: a process owns its device). An XRC SRQ
  // belongs to a domain, takes its WQEs' keys from `pd` and completes into `cq`; XRC_RECV QPs of
  // the same domain place requests into it by its number. close_xrcd: kBusy while SRQs or QPs
  // use the domain. kNoMemory beyond the device's limit of domains.
  Result<XrcdHandle, Errc> open_xrcd();
  Errc close_xrcd(XrcdHandle xrcd);
  Result<SrqInfo, Errc> create_xrc_srq(PdHandle pd, XrcdHandle xrcd, CqHandle cq,
                                       const SrqAttr& attr);

  // Address handles (RoCE: is_global must be set; dgid names an IPv4-mapped or IPv6 address of
  // the same family as the device's).
  Result<AhHandle, Errc> create_ah(PdHandle pd, const AhAttr& attr);
  Result<AhAttr, Errc> query_ah(AhHandle ah) const;
  Errc destroy_ah(AhHandle ah);

  // Queue pairs (RC, UC, UD). modify_qp() checks the state transition and attribute mask as
  // the kernel's ib_modify_qp_is_ok() does, then the values as rxe does; any violation is
  // kInvalidArgument and changes nothing.
  Result<QpInfo, Errc> create_qp(PdHandle pd, const QpInitAttr& attr);
  Errc modify_qp(QpHandle qp, const QpAttr& attr, std::uint32_t mask);
  Result<QpQuery, Errc> query_qp(QpHandle qp) const;
  Errc destroy_qp(QpHandle qp);
  // ibv_open_qp(3): another handle on the XRC_RECV QP numbered `qp_num` in domain `xrcd` (one
  // process's share of a target QP). Each handle modifies and queries the one QP and gets its
  // async events; destroy_qp of a handle closes that handle, and the QP goes with its last one
  // (the kernel's shared XRC target QPs). The handle holds the domain (close_xrcd: kBusy).
  // kInvalidArgument, as the kernel's ib_open_qp(): no such domain, `type` not kXrcRecv, or no
  // target QP of that number in that domain.
  Result<QpInfo, Errc> open_qp(XrcdHandle xrcd, std::uint32_t qp_num, QpType type);
  // Posts in order; on the first failure stops, sets *bad_wr (if bad_wr is not null) to the
  // failing request and returns its error: the requests before it are posted. On success
  // *bad_wr is set to nullptr.
  Errc post_send(QpHandle qp, std::span<const SendWr> wrs, const SendWr** bad_wr);
  Errc post_recv(QpHandle qp, std::span<const RecvWr> wrs, const RecvWr** bad_wr);

  // Asynchronous events: a bounded queue (DeviceConfig::async_event_queue_depth); when full,
  // new events are counted in async_events_dropped() and lost.
  bool has_async_event();
  std::optional<AsyncEvent> get_async_event();
  std::uint64_t async_events_dropped() const;
  // Completion events an arming fired at once for a completion queued before it (req_notify_cq).
  std::uint64_t cq_events_at_arm() const;

  // ---- for the engine ----
  const wire::IpAddress& local_ip() const;
  Mtu active_mtu() const;
  std::uint32_t active_mtu_bytes() const;
  // The QP with this number (24 bits), or nullptr.
  transport::Qp* find_qp(std::uint32_t qpn) const;
  // Every live QP; invalidated by create_qp() and destroy_qp().
  std::span<transport::Qp* const> live_qps() const;
  // The sums of the counters of every QP destroyed so far (device-wide counters keep them).
  const transport::QpCounters& destroyed_qp_counters() const;
  // The resolver that every QP of this device uses (the MR table).
  transport::MemoryResolver& memory();

 private:
  friend struct DeviceTestAccess;
  explicit Device(std::unique_ptr<verbs::detail::DeviceState> state);
  std::unique_ptr<verbs::detail::DeviceState> s_;
};

}  // namespace uroce
