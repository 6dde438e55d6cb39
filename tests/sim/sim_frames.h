// Test helpers for the simulated network: real RoCEv2 frames from the wire builder, and a
// network with hosts at fixed addresses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/network.h"
#include "wire/builder.h"

namespace uroce::sim::test {

using Bytes = std::vector<std::byte>;

inline wire::IpAddress v4(std::uint8_t last) { return wire::IpAddress::v4(0x0a000000u | last); }

inline wire::IpAddress v6(std::uint8_t last) {
  wire::IpAddress a;
  a.v6 = true;
  a.bytes = {0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, last};
  return a;
}

inline MacAddress mac(std::uint8_t last) { return {0x02, 0, 0, 0, 0, last}; }

// An RC SEND Only frame from `src` to `dst` whose PSN is `psn` and whose payload bytes are
// `payload_bytes` copies of the PSN's low byte. `traffic_class` is the IPv4 TOS / IPv6 traffic
// class, ECN in its low 2 bits.
inline Bytes roce_frame(const wire::IpAddress& src, const wire::IpAddress& dst,
                        std::size_t payload_bytes, std::uint32_t psn,
                        std::uint8_t traffic_class = 0) {
  wire::OuterHeaders o;
  o.src = src;
  o.dst = dst;
  o.traffic_class = traffic_class;
  wire::TransportHeaders h;
  h.bth.opcode = wire::opcode_info(wire::Opcode::kRcSendOnly).value;
  h.bth.dest_qpn = 0x11;
  h.bth.psn = psn & 0xffffffu;
  const Bytes payload(payload_bytes, std::byte{static_cast<std::uint8_t>(psn)});
  Bytes f(128 + payload_bytes);
  f.resize(wire::build_frame(f, o, h, payload));
  return f;
}

// A frame of exactly `total_bytes` (>= 58) routed like roce_frame(src, dst, 0, psn): for timing
// tests, where the RoCE part does not matter (its ICRC is not valid once resized).
inline Bytes sized_frame(const wire::IpAddress& src, const wire::IpAddress& dst,
                         std::size_t total_bytes, std::uint32_t psn) {
  Bytes f = roce_frame(src, dst, 0, psn);
  UROCE_CHECK(total_bytes >= f.size());
  f.resize(total_bytes, std::byte{0xee});
  return f;
}

inline std::uint32_t psn_of(const Bytes& f) {
  // Ethernet 14 + IPv4 20 + UDP 8, then BTH bytes 9..11.
  return load_be24(f, 14 + 20 + 8 + 9);
}

inline HostId must_add(Network& net, const wire::IpAddress& ip, std::uint8_t m) {
  auto h = net.add_host(ip, mac(m));
  UROCE_CHECK(h.ok());
  return h.value();
}

}  // namespace uroce::sim::test
