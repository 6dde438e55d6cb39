// How the drop-in librdmacm hands the per-connection key the CM agreed (docs/SECURITY.md,
// "Per-connection keys") to the drop-in libibverbs: ibv_modify_qp with uroce's own mask bit
// kQpConnectionKey (which the kernel refuses and no application sends), whose attribute pointer
// is the `attr` of a QpAttrWithKey. The bit may come alone (the passive side's key, which comes
// with ESTABLISHED once the QP is in RTS) or with the RTR transition (the active side). A move
// to RTR without the bit clears the QP's key: a QP connected again without the CM goes back to
// the device's pre-shared key.
#pragma once

#pragma GCC visibility push(default)
#include <infiniband/verbs.h>
#pragma GCC visibility pop

#include <cstdint>

namespace uroce::compat {

inline constexpr unsigned kQpConnectionKey = 1u << 29;

struct QpAttrWithKey {
  ibv_qp_attr attr{};
  std::uint32_t remote_qpn = 0;
  std::uint8_t peer_gid[16] = {};
  std::uint8_t key_bytes = 0;  // 16 or 32
  std::uint8_t key[32] = {};
};

}  // namespace uroce::compat
