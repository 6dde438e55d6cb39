// `uroce stats`: the counters of every running uroce device, in the spirit of the kernel's
// `rdma statistic show`.
//
// Each open engine::UdpDevice serves its counters on the abstract unix datagram socket
// "@uroce/<pid>/<device>" (see src/device/udp_device.h for the protocol). The command finds
// them in /proc/net/unix (the sockets of this network namespace), asks each, and prints one
// line per device (and with --qp one per QP):
//
//   link uroce0/1 pid 4242 sent_pkts 12 rcvd_pkts 12 duplicate_request 0 ...
//   qp uroce0/1 pid 4242 lqpn 17 type RC state RTS sent_pkts 6 ...
//
// or with --json one JSON array of device objects. In text, each shared device (a coordinator's
// socket "@uroce-devd/<ip>/<port>", device/shared_port.h) then gets one line per context that
// uses it and a summary:
//
//   member 127.0.0.1:4791 pid 4242 comm ibv_rc_pingpong device uroce0 index 1 qpn_blocks 1
//   shared 127.0.0.1:4791 contexts 2 unsteered_pkts 0 qpn_blocks_used 2 closed_qps 0
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "base/time.h"

namespace uroce::tools {

// Exit codes of `uroce stats`.
inline constexpr int kStatsExitOk = 0;        // every device found answered
inline constexpr int kStatsExitNoDevice = 1;  // no running device (or none of that name)
inline constexpr int kStatsExitNoAnswer = 2;  // a device found did not answer in time

struct StatsCommand {
  std::string device;  // empty: every device
  bool qp = false;
  bool json = false;
  Duration timeout = Duration::s(1);  // per device
  std::string proc_net_unix = "/proc/net/unix";
};

struct StatsEndpoint {
  std::string socket_name;  // without the leading '@' / NUL
  int pid = 0;
  std::string device;
};

// The stats endpoints listed in `proc_net_unix`, sorted by pid and device name.
std::vector<StatsEndpoint> find_stats_endpoints(const std::string& proc_net_unix);

// Sends `request` ("text" or "json", optionally followed by " qp") to the endpoint and returns
// the whole answer, or an error message (no answer within `timeout`, incomplete answer, ...).
Result<std::string, std::string> query_stats_endpoint(const std::string& socket_name,
                                                      const std::string& request, Duration timeout);

// The shared devices (address, port) whose coordinators are listed in `proc_net_unix`.
std::vector<std::pair<std::string, std::uint16_t>> find_shared_devices(
    const std::string& proc_net_unix);
// Prints each coordinator's lines (members, rdma_cm IDs, its CM's counters); returns how many
// answered.
std::size_t print_shared_devices(const StatsCommand& cmd, std::FILE* out);

// The command: prints to `out`, problems to `err`; returns one of the exit codes above.
int stats_run(const StatsCommand& cmd, std::FILE* out, std::FILE* err);

}  // namespace uroce::tools
