// `uroce doctor`: checks what running programs over uroce needs on this host and explains each
// problem with its fix, a line each:
//   - the drop-ins (as `uroce run` finds them) and uroce-devd (UROCE_DEVD, beside uroce, or the
//     build tree's);
//   - the configured devices: each address local, UDP port 4791 on it free or held by the
//     device's own coordinator (uroce-devd), not by another program (the kernel's rdma_rxe);
//   - net.core.rmem_max against the 16 MiB receive buffer a device asks for (granted whole to
//     a process with CAP_NET_ADMIN, capped by rmem_max for others);
//   - a note when UCX would not see a device (no /dev/infiniband/uverbsN: `uroce setup`).
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
};
void add_doctor_options(CLI::App& doctor, DoctorOptions& options);

// The receive-buffer problem, with its fix, for this rmem_max (nullopt: none). `privileged`:
// the process may force its buffer size (CAP_NET_ADMIN).
std::optional<std::string> rmem_problem(std::uint64_t rmem_max, bool privileged);

int doctor_run(const DoctorOptions& options, std::FILE* out);

}  // namespace uroce::tools
