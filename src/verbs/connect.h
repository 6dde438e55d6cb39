// Bringing an RC QP up to RTS in one call: RESET -> INIT -> RTR -> RTS with the attributes each
// transition requires (the kernel's and rxe's attribute-mask rules, verbs/qp_state_table.h), as
// every harness, simulator and tool that connects a QP without rdma_cm does by hand otherwise.
#pragma once

#include <cstdint>

#include "uroce/verbs.h"
#include "wire/ip.h"

namespace uroce::verbs {

// One side's view of an RC connection. Defaults as ibv_rc_pingpong and perftest set them.
struct RcConnection {
  wire::IpAddress peer_ip;
  std::uint32_t peer_qpn = 0;
  Mtu path_mtu = Mtu::k1024;
  std::uint32_t sq_psn = 0;  // this side's first PSN
  std::uint32_t rq_psn = 0;  // the peer's first PSN
  std::uint32_t access =
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
  std::uint8_t timeout = 14;  // 4.096 us * 2^14 = 67 ms
  std::uint8_t retry_cnt = 7;
  std::uint8_t rnr_retry = 7;  // infinite
  std::uint8_t min_rnr_timer = 12;
  std::uint8_t max_rd_atomic = 4;       // this side's outstanding READs/atomics
  std::uint8_t max_dest_rd_atomic = 4;  // the peer's it takes
  std::uint8_t traffic_class = 0;
  // The peer is known to be uroce (as rdma_cm finds it: kQpSelectiveRepeat at RTR); the
  // device's configuration decides (DeviceConfig::selective_repeat).
  bool selective_repeat = false;
};

// Moves `qp` (in RESET) to RTS. The first failing transition's error; kOk.
Errc connect_rc_qp(Device& dev, QpHandle qp, const RcConnection& c);

}  // namespace uroce::verbs
