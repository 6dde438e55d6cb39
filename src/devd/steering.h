// The classic BPF program that steers a shared device's datagrams to the socket of the context
// that owns their destination QP (SO_ATTACH_REUSEPORT_CBPF; no privilege needed).
//
// The kernel runs it on each datagram for the reuseport group, with the packet's data starting
// at the UDP payload (the BTH), and uses its result as an index into the group's sockets (one
// at or beyond the group's size falls back to a hash). The program reads the 24-bit DestQP
// (BTH bytes 5..7), sends QPN 1 to `qp1_index`, and otherwise looks the QPN's block
// (devd_protocol.h) up in the table: a block held by a context goes to that context's socket,
// anything else (unknown blocks, datagrams too short to hold a BTH) to index 0, the
// coordinator's own socket, which counts and drops them.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <span>
#include <vector>

namespace uroce::engine {

// The blocks one socket of the group holds.
struct SteeringEntry {
  std::uint32_t index = 0;  // the socket's index in the reuseport group
  std::span<const std::uint32_t> blocks;
};

// The program: 6 instructions, plus per entry one per block and two per run of up to 200
// blocks. The kernel takes at most BPF_MAXINSNS (4096) instructions, about 4000 blocks (a
// million QPs).
std::vector<sock_filter> steering_program(std::span<const SteeringEntry> entries,
                                          std::uint32_t qp1_index);
// Attaches it to the group of `fd` (any member). 0 or errno (E2BIG: longer than the kernel
// takes).
int attach_steering_program(int fd, const std::vector<sock_filter>& program);

}  // namespace uroce::engine
