// `uroce doctor [PEER]`: checks what running programs over uroce needs on this host and
// explains each problem with its fix, a line each:
//   - the drop-ins (as `uroce run` finds them) and uroce-devd (UROCE_DEVD, beside uroce, or the
//     build tree's);
//   - the configured devices: each address local, UDP port 4791 on it free or held by the
//     device's own coordinator (uroce-devd) of this user (or one started with UROCE_SHARE=all),
//     not by another user's coordinator or another program (the kernel's rdma_rxe);
//   - each device's interface, its MTU and the RoCE MTU it gives (a problem below 1024);
//   - the firewall: a datagram from this host to a free device port must arrive, and no nftables
//     rule may drop or reject UDP 4791 (read with nft where it is installed);
//   - net.core.rmem_max against the 16 MiB receive buffer a device asks for (granted whole to
//     a process with CAP_NET_ADMIN, capped by rmem_max for others); wmem_max, for information;
//   - notes: each device's congestion control and whether its packets carry ECT(0), the CPU's
//     CRC-32 kernel, and UCX not seeing a device (no /dev/infiniband/uverbsN: `uroce setup`);
//   - with PEER: a round trip on UDP 4791 (a CM REQ that uroce and the kernel's ib_cm answer
//     with a REJ), its RTT and the path MTU; no answer is a problem.
// Exit status 0 when every check passed, 1 when any found a problem (notes do not count).
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>

namespace uroce::tools {

struct DoctorOptions {
  std::string sysctl_dir = "/proc/sys/net/core";  // tests give their own
  std::string ib_dir = "/dev/infiniband";
  std::string proc_net_unix = "/proc/net/unix";
  std::string peer;  // PEER: a round trip to it (empty: none)
};
void add_doctor_options(CLI::App& doctor, DoctorOptions& options);

// The receive-buffer problem, with its fix, for this rmem_max (nullopt: none). `privileged`:
// the process may force its buffer size (CAP_NET_ADMIN).
std::optional<std::string> rmem_problem(std::uint64_t rmem_max, bool privileged);

// The RoCE MTU problem, with its fix, for an interface of this MTU: a RoCE MTU below 1024
// (nullopt: none).
std::optional<std::string> roce_mtu_problem(std::uint32_t netdev_mtu, const std::string& ifname);

int doctor_run(const DoctorOptions& options, std::FILE* out);

}  // namespace uroce::tools
