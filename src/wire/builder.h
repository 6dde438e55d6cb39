// Building RoCEv2 packets: transport headers from field values, then the outer Ethernet/IP/UDP
// headers and the ICRC. The caller provides the buffer; nothing allocates.
//
// The builder trusts its caller (the transport): an unknown opcode or a short buffer is a bug and
// aborts (UROCE_CHECK), it is not input validation.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "base/bytes.h"
#include "wire/headers.h"
#include "wire/ip.h"
#include "wire/opcode.h"
#include "wire/packet.h"

namespace uroce::wire {

// All transport header fields of a packet. Only the headers the opcode carries are written or
// read; the others stay zero in decoded values.
struct TransportHeaders {
  Bth bth;
  Feth feth;
  Reth reth;
  Aeth aeth;
  AtomicEth atomic_eth;
  std::uint64_t atomic_ack_orig = 0;
  Deth deth;
  std::uint32_t imm_data = 0;
  std::uint32_t ieth_rkey = 0;
  std::uint32_t xrc_srqn = 0;  // XRCETH (24 bits)
  bool operator==(const TransportHeaders&) const = default;
};

TransportHeaders decode_headers(const RocePacket& pkt);

constexpr std::uint8_t pad_for(std::size_t payload_bytes) {
  return static_cast<std::uint8_t>((4 - payload_bytes % 4) % 4);
}

// Bytes from BTH through ICRC for an opcode and payload length.
constexpr std::size_t roce_size(const OpcodeInfo& op, std::size_t payload_bytes) {
  return op.header_bytes + payload_bytes + pad_for(payload_bytes) + kIcrcBytes;
}

// Writes the BTH and extension headers; the BTH pad count is derived from `payload_bytes`.
// Returns the header length.
std::size_t write_headers(MutBytes out, const TransportHeaders& h, std::size_t payload_bytes);

// write_headers of a packet whose extension headers are all zero but for the XRCETH's SRQ number:
// the same bytes (BTH, zeros, XRCETH), without the table walk. The transport's request builder
// (transport::Qp::build_bth) writes the BTH of every request packet this way and fills the
// extension headers the opcode carries itself (issue 40: the message rate's send path).
std::size_t write_bth_headers(MutBytes out, const OpcodeInfo& op, const Bth& bth,
                              std::uint32_t xrc_srqn, std::size_t payload_bytes);

// Writes headers, payload and zero pad; the 4 ICRC bytes are reserved but not written (they need
// the outer headers: see write_icrc). Returns roce_size().
std::size_t write_roce(MutBytes out, const TransportHeaders& h, ConstBytes payload);

// Computes and stores the ICRC in the last 4 bytes of `roce_with_icrc`.
void write_icrc(ConstBytes ip_udp, MutBytes roce_with_icrc);

// Outer headers of a frame, with rxe's defaults (roce-facts.md): DF set, IPv4 identification 0
// (what a Linux UDP socket with IP_PMTUDISC_DO sends), UDP checksum 0.
struct OuterHeaders {
  IpAddress src;
  IpAddress dst;
  std::uint16_t src_port = 0xc000;
  std::uint16_t dst_port = kRoceV2Port;
  std::uint8_t traffic_class = 0;  // IPv4 TOS / IPv6 traffic class (DSCP and ECN)
  std::uint8_t ttl = 64;           // IPv4 TTL / IPv6 hop limit
  std::uint32_t flow_label = 0;    // IPv6 only
  std::uint16_t ipv4_id = 0;
  bool ipv4_df = true;   // IPv4 Don't Fragment (a socket with IP_PMTUDISC_DONT clears it)
  bool ethernet = true;  // prepend an Ethernet II header
  std::array<std::uint8_t, 6> src_mac{0x02, 0, 0, 0, 0, 1};
  std::array<std::uint8_t, 6> dst_mac{0x02, 0, 0, 0, 0, 2};
};

constexpr std::size_t outer_size(const OuterHeaders& o) {
  return (o.ethernet ? kEthernetBytes : 0) + (o.dst.v6 ? kIpv6Bytes : kIpv4Bytes) + kUdpBytes;
}

// Writes the outer headers for a RoCE part of `roce_bytes` (BTH..ICRC). Returns their length;
// the IP header starts at `outer_size - 28/48`.
std::size_t write_outer(MutBytes out, const OuterHeaders& o, std::size_t roce_bytes);

// A complete frame from already built transport headers and a payload gathered from several
// buffers (zero-copy sources): outer headers, transport headers, payload, pad and ICRC. The BTH
// pad count in `transport_headers` must match the payload length. Returns the frame length.
std::size_t build_frame_gather(MutBytes out, const OuterHeaders& o, ConstBytes transport_headers,
                               std::span<const ConstBytes> payload);

// A complete frame: outer headers, transport headers, payload, pad and ICRC. Returns its length.
std::size_t build_frame(MutBytes out, const OuterHeaders& o, const TransportHeaders& h,
                        ConstBytes payload);

}  // namespace uroce::wire
