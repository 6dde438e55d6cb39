// Public value types of the uroce verbs API. Numeric values match libibverbs (<infiniband/
// verbs.h>, rdma-core 44) so that the drop-in libibverbs.so.1 converts without tables.
#pragma once

#include <array>
#include <cstdint>

namespace uroce {

// Errors returned by verbs calls, as errno values (what libibverbs returns).
enum class Errc : int {
  kOk = 0,
  kPermission = 1,        // EPERM
  kNoEntry = 2,           // ENOENT
  kInterrupted = 4,       // EINTR: a signal ended a blocking wait
  kNoMemory = 12,         // ENOMEM
  kBadAddress = 14,       // EFAULT: memory that is not mapped with the access asked for
  kBusy = 16,             // EBUSY: resource still has children or is in use
  kInvalidArgument = 22,  // EINVAL
  kNoSpace = 28,          // ENOSPC
  kNotSupported = 95,     // EOPNOTSUPP
};
const char* errc_name(Errc e);

// ibv_qp_type's values. XRC_SEND (the initiator) and XRC_RECV (the target) are RC's protocol
// under XRC opcodes (IBTA 9.8.1.1); the transport runs them as RC QPs (transport::XrcRole).
enum class QpType : std::uint8_t { kRc = 2, kUc = 3, kUd = 4, kXrcSend = 9, kXrcRecv = 10 };

enum class QpState : std::uint8_t { kReset, kInit, kRtr, kRts, kSqd, kSqe, kErr };
const char* qp_state_name(QpState s);

enum class Mtu : std::uint8_t { k256 = 1, k512 = 2, k1024 = 3, k2048 = 4, k4096 = 5 };
constexpr std::uint32_t mtu_bytes(Mtu m) { return 128u << static_cast<unsigned>(m); }
// The largest MTU not above `bytes` (256 at least, 4096 at most).
constexpr Mtu mtu_from_bytes(std::uint32_t bytes) {
  return bytes >= 4096   ? Mtu::k4096
         : bytes >= 2048 ? Mtu::k2048
         : bytes >= 1024 ? Mtu::k1024
         : bytes >= 512  ? Mtu::k512
                         : Mtu::k256;
}

// Memory region / QP access flags (IBV_ACCESS_*).
enum AccessFlag : std::uint32_t {
  kAccessLocalWrite = 1,
  kAccessRemoteWrite = 2,
  kAccessRemoteRead = 4,
  kAccessRemoteAtomic = 8,
  // FLUSH (IBTA 1.5): a region, and a QP, must allow each placement type it is asked for.
  kAccessFlushGlobal = 1u << 8,
  kAccessFlushPersistent = 1u << 9,
};

// Send work request opcodes (IBV_WR_*).
enum class WrOpcode : std::uint8_t {
  kRdmaWrite = 0,
  kRdmaWriteWithImm = 1,
  kSend = 2,
  kSendWithImm = 3,
  kRdmaRead = 4,
  kAtomicCmpAndSwp = 5,
  kAtomicFetchAndAdd = 6,
  kLocalInv = 7,
  kBindMw = 8,
  kSendWithInv = 9,
  kFlush = 14,        // IBTA 1.5 (rdma-core 45+)
  kAtomicWrite = 15,  // IBTA 1.5 (rdma-core 44+)
};

// Send flags (IBV_SEND_*).
enum SendFlag : std::uint32_t {
  kSendFence = 1,
  kSendSignaled = 2,
  kSendSolicited = 4,
  kSendInline = 8,
};

// Work completion status (IBV_WC_*).
enum class WcStatus : std::uint8_t {
  kSuccess = 0,
  kLocLenErr = 1,
  kLocQpOpErr = 2,
  kLocEecOpErr = 3,
  kLocProtErr = 4,
  kWrFlushErr = 5,
  kMwBindErr = 6,
  kBadRespErr = 7,
  kLocAccessErr = 8,
  kRemInvReqErr = 9,
  kRemAccessErr = 10,
  kRemOpErr = 11,
  kRetryExcErr = 12,
  kRnrRetryExcErr = 13,
  kLocRddViolErr = 14,
  kRemInvRdReqErr = 15,
  kRemAbortErr = 16,
  kInvEecnErr = 17,
  kInvEecStateErr = 18,
  kFatalErr = 19,
  kRespTimeoutErr = 20,
  kGeneralErr = 21,
};
const char* wc_status_name(WcStatus s);

// Work completion opcodes (IBV_WC_*).
enum class WcOpcode : std::uint8_t {
  kSend = 0,
  kRdmaWrite = 1,
  kRdmaRead = 2,
  kCompSwap = 3,
  kFetchAdd = 4,
  kBindMw = 5,
  kLocalInv = 6,
  kFlush = 8,
  kAtomicWrite = 9,
  kRecv = 128,
  kRecvRdmaWithImm = 129,
};

// Work completion flags (IBV_WC_*).
enum WcFlag : std::uint32_t {
  kWcGrh = 1,
  kWcWithImm = 2,
  kWcWithInv = 8,
};

// The network header a received datagram came in (the kernel's enum rdma_network_type, which
// rxe sets in ib_wc.network_hdr_type): what a UD receive's GRH area holds.
enum class NetworkHdr : std::uint8_t {
  kNone = 0,  // not a UD receive, or not known
  kIpv4 = 1,  // the GRH area: 20 bytes of padding, then the IPv4 header
  kIpv6 = 2,  // the GRH area: the IPv6 header
};

struct Sge {
  std::uint64_t addr = 0;
  std::uint32_t length = 0;
  std::uint32_t lkey = 0;
};

// A work completion (struct ibv_wc's fields that RoCE uses).
struct Wc {
  std::uint64_t wr_id = 0;
  WcStatus status = WcStatus::kSuccess;
  WcOpcode opcode = WcOpcode::kSend;
  std::uint32_t vendor_err = 0;
  std::uint32_t byte_len = 0;
  std::uint32_t imm_data = 0;  // network byte order value as carried in ImmDt; or invalidated rkey
  std::uint32_t qp_num = 0;
  std::uint32_t src_qp = 0;
  std::uint32_t wc_flags = 0;
  std::uint16_t pkey_index = 0;
  std::uint16_t slid = 0;
  std::uint8_t sl = 0;
  std::uint8_t dlid_path_bits = 0;
  NetworkHdr network_hdr = NetworkHdr::kNone;  // successful UD receives only
};

// Asynchronous events (IBV_EVENT_*).
enum class AsyncEventType : std::uint8_t {
  kCqErr = 0,
  kQpFatal = 1,
  kQpReqErr = 2,
  kQpAccessErr = 3,
  kCommEst = 4,
  kSqDrained = 5,
  kPathMig = 6,
  kPathMigErr = 7,
  kDeviceFatal = 8,
  kPortActive = 9,
  kPortErr = 10,
  kLidChange = 11,
  kPkeyChange = 12,
  kSmChange = 13,
  kSrqErr = 14,
  kSrqLimitReached = 15,
  kQpLastWqeReached = 16,
  kClientReregister = 17,
  kGidChange = 18,
};

// A 128-bit GID. For RoCEv2 over IPv4 it is the IPv4-mapped IPv6 address ::ffff:a.b.c.d.
struct Gid {
  std::array<std::uint8_t, 16> raw{};
  bool operator==(const Gid&) const = default;
};

// Address handle attributes (struct ibv_ah_attr with its GRH, as RoCE always has one).
struct AhAttr {
  Gid dgid;
  std::uint32_t flow_label = 0;
  std::uint8_t sgid_index = 0;
  std::uint8_t hop_limit = 64;
  std::uint8_t traffic_class = 0;
  std::uint8_t sl = 0;
  std::uint8_t port_num = 1;
  bool is_global = true;
};

struct QpCap {
  std::uint32_t max_send_wr = 0;
  std::uint32_t max_recv_wr = 0;
  std::uint32_t max_send_sge = 0;
  std::uint32_t max_recv_sge = 0;
  std::uint32_t max_inline_data = 0;
};

// Attribute mask bits of modify_qp (IBV_QP_*).
enum QpAttrMask : std::uint32_t {
  kQpState = 1u << 0,
  kQpCurState = 1u << 1,
  kQpEnSqdAsyncNotify = 1u << 2,
  kQpAccessFlags = 1u << 3,
  kQpPkeyIndex = 1u << 4,
  kQpPort = 1u << 5,
  kQpQkey = 1u << 6,
  kQpAv = 1u << 7,
  kQpPathMtu = 1u << 8,
  kQpTimeout = 1u << 9,
  kQpRetryCnt = 1u << 10,
  kQpRnrRetry = 1u << 11,
  kQpRqPsn = 1u << 12,
  kQpMaxQpRdAtomic = 1u << 13,
  kQpAltPath = 1u << 14,
  kQpMinRnrTimer = 1u << 15,
  kQpSqPsn = 1u << 16,
  kQpMaxDestRdAtomic = 1u << 17,
  kQpPathMigState = 1u << 18,
  kQpCap = 1u << 19,
  kQpDestQpn = 1u << 20,
  kQpRateLimit = 1u << 25,
  // uroce's own, no IBV_QP_* bit (the kernel refuses bits it does not know): RC, INIT -> RTR
  // only, QpAttr::selective_repeat. What the connection manager found out about the peer (both
  // ends uroce); the device's configuration decides (DeviceConfig::selective_repeat).
  kQpSelectiveRepeat = 1u << 30,
};

// struct ibv_qp_attr's fields that RoCE uses.
struct QpAttr {
  QpState qp_state = QpState::kReset;
  QpState cur_qp_state = QpState::kReset;
  Mtu path_mtu = Mtu::k1024;
  std::uint32_t qkey = 0;
  std::uint32_t rq_psn = 0;
  std::uint32_t sq_psn = 0;
  std::uint32_t dest_qp_num = 0;
  std::uint32_t qp_access_flags = 0;
  QpCap cap;
  AhAttr ah_attr;
  std::uint16_t pkey_index = 0;
  bool en_sqd_async_notify = false;
  bool sq_draining = false;
  std::uint8_t max_rd_atomic = 0;
  std::uint8_t max_dest_rd_atomic = 0;
  std::uint8_t min_rnr_timer = 0;
  std::uint8_t port_num = 1;
  std::uint8_t timeout = 0;    // local ACK timeout 4.096 us * 2^timeout; 0 = infinite
  std::uint8_t retry_cnt = 0;  // retries after a timeout or NAK; 7 = 7 (IBTA; rxe: infinite)
  std::uint8_t rnr_retry = 0;  // 7 = infinite
  // kQpSelectiveRepeat: the peer is uroce. query_qp: whether the QP recovers by selective repeat.
  bool selective_repeat = false;
};

}  // namespace uroce
