// Addresses as RoCE v2 names them, and the values rxe derives from them.
//
// - GID <-> IP: a RoCE v2 GID is an IPv6 address; an IPv4 address a.b.c.d appears as the
//   IPv4-mapped address ::ffff:a.b.c.d (what the kernel's GID table shows for an IPv4 netdev).
// - Port MTU: the largest IB MTU (power of two) <= netdev MTU - 80, capped at 4096
//   (rxe's eth_mtu_int_to_enum: 80 bytes for the Ethernet, IP, UDP, BTH and ICRC overhead).
// - UDP source port: rxe gives a QP 0xC000 | hash_32(qpn, 14) at creation; modify_qp with an
//   address vector replaces it by the port derived from the flow label, or, when that is 0,
//   from rdma_calc_flow_label(lqpn, rqpn) (rdma_get_udp_sport()).
// - Node GUID: rxe derives it from the netdev's MAC (EUI-48 -> EUI-64, addrconf_addr_eui48).
//   uroce has no MAC: it builds the locally administered MAC 02:00:w:x:y:z from the address
//   (w.x.y.z the IPv4 address; for IPv6 the XOR of its four 32-bit words) and applies the same
//   EUI-64 rule: flip the U/L bit of byte 0 and insert ff:fe in the middle, giving
//   00:00:w:ff:fe:x:y:z.
#pragma once

#include <cstdint>
#include <optional>

#include "uroce/types.h"
#include "wire/ip.h"

namespace uroce::verbs {

// nullopt when the netdev MTU leaves less than 256 bytes.
std::optional<Mtu> port_mtu_for_netdev(std::uint32_t netdev_mtu);

Gid gid_from_ip(const wire::IpAddress& ip);
bool gid_is_ipv4_mapped(const Gid& gid);
// The address a GID names; nullopt for the unspecified address (:: or ::ffff:0.0.0.0).
std::optional<wire::IpAddress> ip_from_gid(const Gid& gid);
bool ip_is_unspecified(const wire::IpAddress& ip);

// The device's node GUID (its bytes as a big-endian number): unique per IPv4 address and
// carrying uroce's mark (wire::kUroceGuidMark, wire::is_uroce_guid), 02:00:a0:75:72:a1:a2:a3 for
// a0.a1.a2.a3; an IPv6 address is folded to 4 bytes first (its 4-byte words XORed).
std::uint64_t node_guid_from_ip(const wire::IpAddress& ip);

// rxe_qp_init_req(): 0xC000 + (hash_32(qpn, 14) & 0x3fff), hash_32 being the kernel's
// multiplicative hash (x * 0x61C88647) >> (32 - bits).
std::uint16_t rxe_default_udp_sport(std::uint32_t qpn);
// rdma_get_udp_sport(): the flow label's port, computing the label from the QPNs when it is 0.
std::uint16_t connected_udp_sport(std::uint32_t flow_label, std::uint32_t lqpn, std::uint32_t rqpn);

}  // namespace uroce::verbs
