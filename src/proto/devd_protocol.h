// The shared device's coordinator (uroce-devd) and its clients: names, QP number blocks, and
// the messages they exchange. See docs/ARCHITECTURE.md, "One device, many processes".
//
// A uroce device is one local address and UDP port (IP:4791). Every context that opens it, in
// any process of the user, gets its own UDP socket bound to that address: the sockets form one
// SO_REUSEPORT group, and a classic BPF program attached to the group steers each datagram to
// the socket of the context that owns its destination QP (the BTH's DestQP, bytes 5..7 of the
// UDP payload). One coordinator process per address, started by the first context that needs
// it and gone when the last has left, creates those sockets (so that it alone decides when one
// leaves the group and knows every socket's index), hands out QP numbers in blocks of 256,
// keeps the steering program in step, and owns QP1 and whatever no context claims.
//
// The protocol: a SOCK_SEQPACKET connection per context to the abstract unix socket
// socket_name(ip, port). Every message is one Msg. The context says kHello and gets kWelcome
// with its socket attached (SCM_RIGHTS) or kError; then kAllocBlock -> kBlock,
// kReleaseBlock -> kReleased, kClaimQp1 -> kQp1; kBye before it closes the connection says its
// socket is closed already. A connection that says kCmHello is librdmacm's (devd_cm_protocol.h).
// A connection that says kList instead of kHello gets one kMember per
// context, one kCmId per rdma_cm ID, a kCmStats and then kListEnd (for `uroce stats`: value the
// datagrams no context owned, blocks the QPN blocks handed out and not given back, index the
// closed QPs still answered for).
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "transport/closed_qps.h"
#include "wire/ip.h"

namespace uroce::engine::devd {

// 2: kClosedQp. 3: CmMsg's qp.selective_repeat (cm::QpAttributes). 4: kClosedQp is not answered
// (a context that destroyed 10,000 QPs waited for 10,000 round trips). 5: CmMsg's seal_mode and
// qp.seal_key (per-connection keys, devd/cm_keys.h). 6: CmMsg's psk and qp.peer_offers_key
// (authenticated key exchange). A coordinator refuses a context of another version at its hello
// (the context's open fails with a message), rather than meet a message it does not know mid-run.
inline constexpr std::uint32_t kVersion = 6;

// QP numbers are handed out in aligned blocks of 256: block b holds QPNs [b*256, b*256 + 255].
// Block 0 (QPN 0, the SMI; QPN 1, the GSI) and block 0xffff (QPN 0xffffff, multicast) are never
// handed out.
inline constexpr unsigned kBlockBits = 8;
inline constexpr std::uint32_t kBlockSize = 1u << kBlockBits;
inline constexpr std::uint32_t kFirstBlock = 1;
inline constexpr std::uint32_t kLastBlock = 0xfffe;
inline constexpr std::uint32_t block_of(std::uint32_t qpn) { return qpn >> kBlockBits; }

enum class MsgType : std::uint32_t {
  kHello = 1,
  kWelcome,
  kError,
  kAllocBlock,
  kBlock,
  kReleaseBlock,
  kReleased,
  kClaimQp1,  // value 1: deliver QP1's packets to this context; 0: give them back
  kQp1,
  kList,
  kMember,
  kListEnd,
  kBye,
  kCmHello,  // the connection is an rdma_cm event channel's (devd_cm_protocol.h)
  kCmId,     // kList: one rdma_cm ID (pid, index: port space, value: port, text: its state)
  kCmStats,  // kList: the CM's counters (text: "name value" pairs)
  // A context destroyed an RC QP: value its QPN, index the peer's QPN, blocks the responder's
  // ePSN, qp1 its MSN, status how long to answer for it (ms), text the path (ClosedQpPath).
  // Not answered: a destroy does not wait for the coordinator (the connection keeps the order).
  kClosedQp,
};

struct Msg {
  MsgType type{};
  std::int32_t status = 0;  // 0 or an errno value
  std::uint32_t version = kVersion;
  std::uint32_t value = 0;  // a block, a flag
  std::int32_t pid = 0;     // kMember (the coordinator takes a client's pid from SO_PEERCRED)
  std::uint32_t uid = 0;
  std::uint32_t blocks = 0;  // kMember: blocks held
  std::uint32_t index = 0;   // kMember: the socket's index in the group (0 is the coordinator's)
  std::uint32_t qp1 = 0;     // kMember: 1 if it owns QP1
  char device[64] = {};      // kHello, kMember: the context's device name
  char comm[32] = {};        // kHello, kMember: the process's name
  char text[256] = {};       // kError: why
};

// "uroce-devd/<ip>/<port>": the abstract unix socket name (without its leading NUL).
std::string socket_name(const wire::IpAddress& ip, std::uint16_t port);

// Copies `s` into a fixed field, truncated and NUL-terminated.
template <std::size_t N>
void set_text(char (&field)[N], const std::string& s) {
  const std::size_t n = s.size() < N - 1 ? s.size() : N - 1;
  for (std::size_t i = 0; i < n; ++i) field[i] = s[i];
  field[n] = '\0';
}
template <std::size_t N>
std::string get_text(const char (&field)[N]) {
  std::size_t n = 0;
  while (n < N && field[n] != '\0') ++n;
  return std::string(field, n);
}

// kClosedQp: a destroyed QP's closed state, answered for `life` from its arrival.
inline Msg closed_qp_msg(const transport::ClosedQp& q, Duration life) {
  static_assert(std::is_trivially_copyable_v<transport::AddressVector> &&
                sizeof(transport::AddressVector) <= sizeof(Msg::text));
  Msg m;
  m.type = MsgType::kClosedQp;
  m.value = q.qpn;
  m.index = q.remote_qpn;
  m.blocks = q.epsn;
  m.qp1 = q.msn;
  const std::int64_t ms = life.count_ns() / 1'000'000;
  m.status = static_cast<std::int32_t>(ms < 0 ? 0 : (ms > 3'600'000 ? 3'600'000 : ms));
  std::memcpy(m.text, &q.path, sizeof q.path);
  return m;
}
inline transport::ClosedQp closed_qp_from(const Msg& m, Instant now) {
  transport::ClosedQp q;
  q.qpn = m.value & 0xffffff;
  q.remote_qpn = m.index & 0xffffff;
  q.epsn = m.blocks & 0xffffff;
  q.msn = m.qp1 & 0xffffff;
  std::memcpy(&q.path, m.text, sizeof q.path);
  q.until = now + Duration::ms(m.status < 0 ? 0 : m.status);
  return q;
}

}  // namespace uroce::engine::devd
