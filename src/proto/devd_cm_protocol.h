// The connection manager's half of the coordinator protocol (devd_protocol.h): what the drop-in
// librdmacm.so.1 (src/compat/rdmacm) and the CM in uroce-devd (cm_server.h) say to each other.
//
// uroce-devd runs the device's IB CM (cm/cm.h) on QP 1, as the kernel runs it for a kernel
// device, and librdmacm talks to it as the stock library talks to the kernel through
// /dev/infiniband/rdma_cm: one connection per event channel and device (kHello with
// MsgType::kCmHello, answered kWelcome), then CmMsg both ways. A command (kCreateId ... kMigrate)
// gets exactly one kReply; events (kEvent) may come at any time, before or after a reply, in the
// order the CM produced them. An rdma_cm ID lives in the coordinator as `id` (its number on that
// connection's device); the connection that created it (or the one it migrated to) gets its
// events, and when that connection closes (the process exited, or destroyed its channel) the
// coordinator destroys its IDs as the kernel does when its file is closed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "cm/cm.h"

namespace uroce::engine::devd {

// An address as rdma_cm sees it (sockaddr_in / sockaddr_in6): port in host order.
struct CmAddr {
  std::uint8_t family = 0;  // 0 (none), 4 or 6
  std::uint8_t bytes[16] = {};
  std::uint16_t port = 0;
};

enum class CmMsgType : std::uint32_t {
  kReply = 200,   // to a command: status (0 or an errno), and what the command returns
  kEvent,         // event: an rdma_cm_event_type, for `id`
  kCreateId,      // ps, qp_type -> id
  kDestroyId,     // id
  kBind,          // id, src -> src (with the port chosen)
  kResolveAddr,   // id, src (may be empty), dst -> src; event ADDR_RESOLVED
  kResolveRoute,  // id -> event ROUTE_RESOLVED
  kListen,        // id, backlog
  kConnect,       // id, conn -> events CONNECT_RESPONSE / ESTABLISHED (UD) / REJECTED / ...
  kAccept,        // id, conn -> qp (passive); id (active, rdma_establish): the RTU
  kReject,        // id, conn.private_data
  kDisconnect,    // id
  kNotify,        // id (IBV_EVENT_COMM_EST)
  kMigrate,       // id (sent on the connection that takes the ID over) -> value: events sent
};

// What rdma_conn_param and rdma_ud_param carry, plus what the library knows of its QP.
struct CmConnParam {
  std::uint8_t private_data[224] = {};
  std::uint8_t private_data_len = 0;
  std::uint8_t responder_resources = 0;
  std::uint8_t initiator_depth = 0;
  std::uint8_t flow_control = 0;
  std::uint8_t retry_count = 0;
  std::uint8_t rnr_retry_count = 0;
  std::uint8_t srq = 0;
  std::uint8_t path_mtu = 0;       // the QP's device's active MTU (IB enum); 0: the port's
  std::uint32_t qp_num = 0;        // the QP's number (a UD ID's for kAccept)
  std::uint32_t starting_psn = 0;  // the QP's first PSN (chosen by the library)
  std::uint32_t qkey = 0;          // UD: the Q_Key
};

struct CmMsg {
  CmMsgType type = CmMsgType::kReply;
  std::int32_t status = 0;  // kReply: 0 or an errno; kEvent: the event's status (as the kernel's)
  std::uint32_t id = 0;
  std::uint32_t listen_id = 0;  // kEvent CONNECT_REQUEST: the listener's ID
  std::uint32_t event = 0;      // kEvent: rdma_cm_event_type
  std::uint32_t ps = 0;         // rdma_port_space
  std::uint32_t qp_type = 0;    // ibv_qp_type (IBV_QPT_RC 2, IBV_QPT_UD 4)
  std::int32_t backlog = 0;
  std::uint32_t value = 0;
  CmAddr src;  // the ID's local address (events: as the ID now has it)
  CmAddr dst;  // the peer's address
  CmConnParam conn;
  // CONNECT_REQUEST, CONNECT_RESPONSE, ESTABLISHED and the passive kAccept's reply: what the QP
  // is to be set to (rdma_init_qp_attr). UD events: the peer's QPN and Q_Key in conn.
  cm::QpAttributes qp;
  // kListen, kConnect, kAccept: the ID's device's aead= mode (seal::Mode; 0: off), for the
  // per-connection key (devd/cm_keys.h). Events: qp.seal_key holds the key agreed.
  std::uint8_t seal_mode = 0;
  // With seal_mode: the device's pre-shared key (psk=; 16 or 32 bytes, 0: none), which the
  // coordinator turns into the CM's secret (seal::cm_psk_from) that authenticates the key
  // exchange (devd/cm_keys.h).
  std::uint8_t psk_bytes = 0;
  std::uint8_t psk[32] = {};
};
static_assert(std::is_trivially_copyable_v<CmMsg>);
static_assert(sizeof(CmMsg) < 1024);

}  // namespace uroce::engine::devd
