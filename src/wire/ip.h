// Outer headers of a RoCEv2 packet: Ethernet II (with optional 802.1Q/802.1ad tags), IPv4 without
// options, IPv6 without extension headers, and UDP. RoCEv2 uses UDP destination port 4791.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>

#include "base/bytes.h"

namespace uroce::wire {

inline constexpr std::uint16_t kRoceV2Port = 4791;
inline constexpr std::uint16_t kEtherTypeIpv4 = 0x0800;
inline constexpr std::uint16_t kEtherTypeIpv6 = 0x86dd;
inline constexpr std::uint16_t kEtherTypeVlan = 0x8100;
inline constexpr std::uint16_t kEtherTypeQinQ = 0x88a8;
inline constexpr std::uint8_t kIpProtoUdp = 17;
inline constexpr std::uint8_t kEcnEct0 = 0b10;  // the IP ECN codepoint ECT(0) (RFC 3168)
inline constexpr std::size_t kEthernetBytes = 14;
inline constexpr std::size_t kIpv4Bytes = 20;
inline constexpr std::size_t kIpv6Bytes = 40;
inline constexpr std::size_t kUdpBytes = 8;

// An IPv4 or IPv6 address. IPv4 addresses are kept in the low 4 bytes of `bytes` (network order)
// with `v6 == false`.
struct IpAddress {
  bool v6 = false;
  std::array<std::uint8_t, 16> bytes{};

  static IpAddress v4(std::uint32_t host_order) {
    IpAddress a;
    a.bytes[0] = static_cast<std::uint8_t>(host_order >> 24);
    a.bytes[1] = static_cast<std::uint8_t>(host_order >> 16);
    a.bytes[2] = static_cast<std::uint8_t>(host_order >> 8);
    a.bytes[3] = static_cast<std::uint8_t>(host_order);
    return a;
  }
  std::uint32_t v4_host_order() const {
    return (std::uint32_t{bytes[0]} << 24) | (std::uint32_t{bytes[1]} << 16) |
           (std::uint32_t{bytes[2]} << 8) | std::uint32_t{bytes[3]};
  }
  // Every member, as a defaulted == would compare them, but as two 8-byte loads each instead of
  // a library memcmp: the datapath compares addresses per packet (its ICRC state cache, GSO runs).
  bool operator==(const IpAddress& o) const {
    std::uint64_t a[2];
    std::uint64_t b[2];
    std::memcpy(a, bytes.data(), sizeof a);
    std::memcpy(b, o.bytes.data(), sizeof b);
    return v6 == o.v6 && a[0] == b[0] && a[1] == b[1];
  }
};

// Whether `a` and `b` name the same host: the same family and address, comparing only the
// family's bytes (4 for IPv4), and an IPv4-mapped IPv6 address ::ffff:a.b.c.d (the form of an
// IPv4 address in a RoCE v2 GID, and what a dual-stack socket reports for an IPv4 peer) being
// the IPv4 address a.b.c.d.
bool same_host(const IpAddress& a, const IpAddress& b);

struct Ethernet {
  std::array<std::uint8_t, 6> dst{};
  std::array<std::uint8_t, 6> src{};
  std::uint16_t ether_type = kEtherTypeIpv4;
  bool operator==(const Ethernet&) const = default;
};

struct Ipv4 {
  std::uint8_t tos = 0;  // DSCP (6 bits) and ECN (2 bits)
  std::uint16_t total_length = 0;
  std::uint16_t identification = 0;
  bool dont_fragment = true;
  bool more_fragments = false;
  std::uint16_t fragment_offset = 0;
  std::uint8_t ttl = 64;
  std::uint8_t protocol = kIpProtoUdp;
  std::uint16_t checksum = 0;  // as on the wire; encode_ipv4 computes it when asked
  IpAddress src;
  IpAddress dst;
  bool operator==(const Ipv4&) const = default;
};

struct Ipv6 {
  std::uint8_t traffic_class = 0;
  std::uint32_t flow_label = 0;  // 20 bits
  std::uint16_t payload_length = 0;
  std::uint8_t next_header = kIpProtoUdp;
  std::uint8_t hop_limit = 64;
  IpAddress src{true, {}};
  IpAddress dst{true, {}};
  bool operator==(const Ipv6&) const = default;
};

struct Udp {
  std::uint16_t src_port = 0;
  std::uint16_t dst_port = kRoceV2Port;
  std::uint16_t length = 0;
  std::uint16_t checksum = 0;  // rxe sends 0 (no checksum) for IPv4 and IPv6
  bool operator==(const Udp&) const = default;
};

Ethernet decode_ethernet(ConstBytes b);  // b.size() >= 14
void encode_ethernet(MutBytes b, const Ethernet& h);

Ipv4 decode_ipv4(ConstBytes b);  // b.size() >= 20
// Writes the 20-byte header; with `compute_checksum` the checksum field is computed, otherwise
// h.checksum is written as given.
void encode_ipv4(MutBytes b, const Ipv4& h, bool compute_checksum = true);
std::uint16_t ipv4_header_checksum(ConstBytes header20);

Ipv6 decode_ipv6(ConstBytes b);  // b.size() >= 40
void encode_ipv6(MutBytes b, const Ipv6& h);

Udp decode_udp(ConstBytes b);  // b.size() >= 8
void encode_udp(MutBytes b, const Udp& h);

// P_Key matching (IBTA 10.9.3): the low 15 bits must be equal, and at least one of the two keys
// must be a full member (bit 15 set). rxe's default and only P_Key is 0xffff.
constexpr bool pkey_matches(std::uint16_t a, std::uint16_t b) {
  return (a & 0x7fffu) == (b & 0x7fffu) && ((a | b) & 0x8000u) != 0 && (a & 0x7fffu) != 0;
}

// The UDP source port rxe derives from a flow label (rdma-core's ibv_flow_label_to_udp_sport).
constexpr std::uint16_t flow_label_to_udp_sport(std::uint32_t fl) {
  const std::uint32_t fl_low = fl & 0x03fffu;
  const std::uint32_t fl_high = fl & 0xfc000u;
  return static_cast<std::uint16_t>((fl_low ^ (fl_high >> 14)) | 0xc000u);
}

// The flow label rxe computes for an RC QP pair when the address vector's flow label is 0.
constexpr std::uint32_t rxe_flow_label(std::uint32_t lqpn, std::uint32_t rqpn) {
  std::uint64_t v = std::uint64_t{lqpn} * std::uint64_t{rqpn};
  v ^= v >> 20;
  v ^= v >> 40;
  return static_cast<std::uint32_t>(v & 0xfffffu);
}

}  // namespace uroce::wire
