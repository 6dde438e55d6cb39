// The network probes of `uroce doctor` (doctor_cmd.h): what it learns by sending packets and
// asking the kernel, rather than by reading settings.
//   - loopback_delivery: whether a datagram this host sends to ADDRESS:4791 arrives there (a
//     firewall rule that drops UDP 4791, or all UDP input, stops it);
//   - nft_rules_dropping_4791: the nftables rules that drop or reject UDP port 4791, read from
//     `nft -a list ruleset` where nft is installed;
//   - coordinator_owner: the user of the coordinator listening on a device's unix socket
//     (SO_PEERCRED), and its process (found by its command line);
//   - probe_peer: a round trip to a RoCEv2 peer's QP 1: a CM REQ for a service nobody listens on
//     (kDoctorServiceId), which the kernel's ib_cm and uroce's coordinator both answer with a
//     REJ; the path MTU is a connected UDP socket's IP_MTU.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/time.h"
#include "wire/ip.h"

namespace uroce::tools {

// What a datagram sent to `ip`:4791 from this host did: arrived, did not arrive within `wait`,
// or could not be tried (the port is in use, no such local address: `error` says why).
struct Delivery {
  bool arrived = false;
  std::string error;
};
Delivery loopback_delivery(const wire::IpAddress& ip, Duration wait = Duration::ms(300));

// A rule of the host's nftables ruleset that drops or rejects UDP destination port 4791, and
// the command that deletes it.
struct NftRule {
  std::string text;            // the rule as nft prints it, without its handle
  std::string delete_command;  // nft delete rule FAMILY TABLE CHAIN handle N
};
// nullopt when nft cannot be run (not installed, or no permission to read the ruleset).
std::optional<std::vector<NftRule>> nft_rules_dropping_4791();
// The same from a ruleset as `nft -a list ruleset` prints it (pure: for tests).
std::vector<NftRule> nft_rules_dropping_4791(const std::string& ruleset);

// The coordinator listening on the abstract unix socket `name` (devd::socket_name) for the
// address `ip_text`: its user (SO_PEERCRED), and, where its process is found (by its command
// line, in this network namespace), its pid and whether it serves every user (--any-user).
// nullopt when nothing listens there.
struct SocketOwner {
  uid_t uid = 0;
  pid_t pid = 0;  // 0: not found
  bool any_user = false;
};
std::optional<SocketOwner> coordinator_owner(const std::string& name, const std::string& ip_text);

// A CM service ID nobody listens on: outside rdma_cm's port spaces (so that a uroce coordinator
// answers at once, with no listen grace) and IB's well-known ranges.
inline constexpr std::uint64_t kDoctorServiceId =
    0x0200'0075'7264'6f63ull;  // ..'u' 'r' 'd' 'o' 'c'

struct PeerProbe {
  std::optional<wire::IpAddress> local;   // where the route to the peer leaves from
  std::optional<std::uint32_t> path_mtu;  // IP_MTU (IPV6_MTU) of a socket connected to the peer
  std::optional<Duration> rtt;            // REQ to REJ, of the try that was answered
  std::uint16_t rej_reason = 0;           // the REJ's reason (CmRejReason)
  int tries = 0;
  std::string error;  // the probe could not run: why (no route, port 4791 in use, ...)
};
PeerProbe probe_peer(const wire::IpAddress& peer, int tries = 3, Duration wait = Duration::ms(300));

}  // namespace uroce::tools
