// `uroce ping`: an RC ping-pong that pairs with rdma-core's ibv_rc_pingpong in either role.
//
// It speaks ibv_rc_pingpong's protocol (rdma-core 44, libibverbs/examples/rc_pingpong.c):
// - TCP port 18515 (-p); the client connects to the server named on the command line.
// - Each side sends its "LID:QPN:PSN:GID" as the 52-byte string `%04x:%06x:%06x:<32 hex>`
//   plus NUL (the GID's 16 bytes in order); the server moves its QP to RTR with the client's
//   values before it answers; the client then sends exactly "done\0".
// - QP setup: INIT with access 0; RTR with max_dest_rd_atomic 1, min_rnr_timer 12 and a GRH
//   with hop limit 1 when the peer's GID has a nonzero interface id; RTS with timeout 14,
//   retry_cnt 7, rnr_retry 7, max_rd_atomic 1; PSN random, 24 bits. (rnr_retry 7 is
//   infinite; retry_cnt 7 is 7 retries in uroce, as in IBTA and hardware, so a SEND to a peer
//   that stopped answering fails with RETRY_EXC_ERR after 8 x 67 ms; rxe retries it forever.)
// - Traffic: rx_depth receives posted up front into the one buffer (filled with 0x7b); the
//   client sends first; each side posts its next SEND once its previous SEND and a RECV have
//   completed, `iters` times. Receives are reposted when at most one is left.
// - --chk: the client sets the first byte of every page of its buffer to 0 before it starts
//   (rc_pingpong's `i / page_size % sizeof(char)`, always 0); the server checks those bytes at
//   the end and prints "invalid data in page N". uroce checks more: with --chk, every
//   received message, in either role, must have the full expected length and content (0x7b,
//   0 at page starts), and any mismatch fails the run.
// - Output lines as rc_pingpong's: "  local address:  LID ...", "  remote address: LID ...",
//   "N bytes in S seconds = X Mbit/sec", "N iters in S seconds = X usec/iter".
//
// Unlike rc_pingpong, every wait is bounded (--timeout: TCP connect/accept/read and the time
// between two completions), and any failure ends with a message and exit status 1.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "uroce/types.h"

namespace uroce::tools {

struct PingOptions {
  std::string server;            // empty: the server role
  std::uint32_t port = 18515;    // -p: TCP port of the exchange
  std::string ib_dev;            // -d: device name (empty: the first configured)
  std::string address;           // -a: the local address to serve (uroce's own option)
  int ib_port = 1;               // -i
  std::uint32_t size = 4096;     // -s
  std::uint32_t mtu = 1024;      // -m: 256, 512, 1024, 2048 or 4096
  std::uint32_t rx_depth = 500;  // -r
  std::uint32_t iters = 1000;    // -n
  int sl = 0;                    // -l
  bool events = false;           // -e: block between completions instead of spinning
  int gid_idx = 0;               // -g: rc_pingpong sends the zero GID without -g; RoCE always
                                 // needs one, so uroce defaults to its only GID, index 0
  bool odp = false;              // -o, -O, -P: on-demand paging (not supported)
  bool ts = false;               // -t: completion timestamps (not supported)
  bool dm = false;               // -j: device memory (not supported)
  bool chk = false;              // -c, --chk
  double timeout_s = 30;         // --timeout: bound of every wait
  bool stats = false;            // --stats: packet counters on stderr at the end
};

// One side's address as exchanged over TCP.
struct PingDest {
  std::uint32_t lid = 0;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  Gid gid;
};

inline constexpr std::size_t kPingMsgBytes = 52;  // sizeof "0000:000000:000000:" + 32 hex + NUL

// The 52 bytes (with the trailing NUL) that rc_pingpong sends for `d`.
std::string format_ping_dest(const PingDest& d);
// Parses a peer's message; nullopt with `why` set when it is not one.
std::optional<PingDest> parse_ping_dest(std::string_view msg, std::string* why);
// inet_ntop(AF_INET6) of the GID, as rc_pingpong prints it.
std::string gid_to_text(const Gid& gid);

// Runs the ping-pong. Returns 0 on success, 1 on any failure (a message on `err`).
int ping_run(const PingOptions& opt, std::FILE* out, std::FILE* err);

}  // namespace uroce::tools
