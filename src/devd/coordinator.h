// uroce-devd: the coordinator of one shared device (devd_protocol.h). It runs as its own process
// (src/tools/devd_main.cc), started by the first context that opens the device
// (shared_port.cc), and returns once no context has used the device for `linger`.
//
// What it keeps, in the order the kernel keeps the reuseport group: index 0 is its own socket
// (the sink: what no context owns, QP1 while nobody claims it), then one socket per slot. The
// coordinator creates every context's socket and holds a reference to each, so a socket leaves
// the group only when the coordinator closes it. A context's index never changes while it lives:
// when a context leaves (its kBye, its own reference closed already; or, when its process dies,
// once the process has exited, a pidfd), its blocks are steered to index 0 again and its slot
// stays in the group, free, its socket drained of what was queued for the old owner; the next
// context that joins gets that socket. Only free slots at the group's end are closed: closing
// any other socket would make the kernel move the group's last socket into its index, and until
// the next steering program every datagram for that last context's QPs would reach the wrong
// socket (a lost UC or UD message; the soak saw them, issue 43). Right after each change it
// attaches the new steering program.
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
