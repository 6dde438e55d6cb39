// What the simulated network reads from a frame: where the IP header is and its destination
// address, for routing; its ECN field, for marking. Only the Ethernet and IP headers are looked
// at (never UDP or the RoCE part), like a router.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "base/bytes.h"
#include "wire/ip.h"

namespace uroce::sim {

struct IpPeek {
  std::size_t ip_offset = 0;  // where the IPv4/IPv6 header starts in the frame
  bool v6 = false;
  wire::IpAddress dst;
};

// An Ethernet II frame (up to two 802.1Q/802.1ad tags) carrying IPv4 or IPv6 with a version
// field that matches the EtherType and a complete fixed header; nullopt otherwise. IPv4 options
// are allowed (the destination does not move), the IP length and checksum are not checked.
std::optional<IpPeek> peek_ip(ConstBytes frame);

// The 2-bit ECN field (RFC 3168: 00 not ECN-capable, 01/10 ECT, 11 CE).
std::uint8_t ecn_bits(ConstBytes frame, const IpPeek& ip);

// Sets the ECN field of an ECN-capable frame (ECN != 00) to CE and touches nothing else but, for
// IPv4, the header checksum, which is updated incrementally as a router does (RFC 1624 eqn. 3):
// a correct checksum stays correct, a wrong one stays wrong. Returns true when the frame
// changed (false for a not-ECN-capable frame and for one already marked CE).
bool mark_ce(MutBytes frame, const IpPeek& ip);

}  // namespace uroce::sim
