// uroce-devd: the coordinator of one shared device (devd_protocol.h). It runs as its own process
// (src/tools/devd_main.cc), started by the first context that opens the device
// (shared_port.cc), and returns once no context has used the device for `linger`.
//
// What it keeps, in the order the kernel keeps the reuseport group: index 0 is its own socket
// (the sink: what no context owns, QP1 while nobody claims it), then one socket per context in
// the order they joined. When a context leaves, the kernel moves the group's last socket into
// the vacated index; the coordinator holds a reference to every context's socket and closes it
// itself, at a moment it chooses, so its copy of the order never differs from the kernel's:
// after a context's kBye (its own reference is closed already), or, when a process dies, once
// the process has exited (a pidfd), when the kernel has closed its files. Right after each
// change it attaches the new steering program.
#pragma once

#include <cstdint>
#include <string>

#include "wire/ip.h"

namespace uroce::engine {

struct CoordinatorOptions {
  wire::IpAddress ip;
  std::uint16_t port = 0;
  // After the last context leaves, wait this long for a new one before exiting.
  std::int64_t linger_ms = 2000;
  // Serve contexts of other users too (UROCE_SHARE=all where the coordinator was started).
  bool any_user = false;
  // Write every packet its own socket (the sink: QP 1's CM MADs, and what no context owns) sends
  // and receives to this pcap file (UROCE_DEVD_PCAP where the coordinator was started); empty:
  // none. A context's own packets are in its UROCE_PCAP capture.
  std::string capture_path;
  // How long a REQ for a port nobody listens on waits for a listen
  // (UROCE_CM_LISTEN_GRACE_MS; see CmServer).
  std::int64_t cm_listen_grace_ms = 100;
  // Faults on the coordinator's own packets (the CM's MADs): UROCE_FAULTS where it was started.
  std::string faults;
  // The seed of the QPN blocks' random choice (BlockAllocator); 0: the kernel's CSPRNG.
  std::uint64_t seed = 0;
};

// Serves the device. `listen_fd`: the listening SOCK_SEQPACKET socket bound to
// devd::socket_name(ip, port); `sink_fd`: the group's first socket (datapath::make_group_socket).
// Both are closed on return (the sink first, so that a successor's sink never joins this group).
// Returns 0, or 1 on an unrecoverable error.
int run_coordinator(int listen_fd, int sink_fd, const CoordinatorOptions& options);

}  // namespace uroce::engine
