#include "verbs/address.h"

#include <algorithm>

#include "wire/cm_mad.h"

namespace uroce::verbs {

std::optional<Mtu> port_mtu_for_netdev(std::uint32_t netdev_mtu) {
  constexpr std::uint32_t kOverheadBytes = 80;  // rxe's RXE_MAX_HDR_LENGTH budget
  if (netdev_mtu < kOverheadBytes + 256) return std::nullopt;
  return mtu_from_bytes(netdev_mtu - kOverheadBytes);
}

Gid gid_from_ip(const wire::IpAddress& ip) {
  Gid g;
  if (ip.v6) {
    g.raw = ip.bytes;
  } else {
    g.raw[10] = 0xff;
    g.raw[11] = 0xff;
    std::copy_n(ip.bytes.begin(), 4, g.raw.begin() + 12);
  }
  return g;
}

bool gid_is_ipv4_mapped(const Gid& gid) {
  for (int i = 0; i < 10; ++i) {
    if (gid.raw[static_cast<std::size_t>(i)] != 0) return false;
  }
  return gid.raw[10] == 0xff && gid.raw[11] == 0xff;
}

bool ip_is_unspecified(const wire::IpAddress& ip) {
  const std::size_t n = ip.v6 ? 16 : 4;
  return std::all_of(ip.bytes.begin(), ip.bytes.begin() + static_cast<std::ptrdiff_t>(n),
                     [](std::uint8_t b) { return b == 0; });
}

std::optional<wire::IpAddress> ip_from_gid(const Gid& gid) {
  wire::IpAddress ip;
  if (gid_is_ipv4_mapped(gid)) {
    std::copy_n(gid.raw.begin() + 12, 4, ip.bytes.begin());
  } else {
    ip.v6 = true;
    ip.bytes = gid.raw;
  }
  if (ip_is_unspecified(ip)) return std::nullopt;
  return ip;
}

std::uint64_t node_guid_from_ip(const wire::IpAddress& ip) {
  std::uint8_t w[4];
  if (ip.v6) {
    for (std::size_t i = 0; i < 4; ++i) {
      w[i] = static_cast<std::uint8_t>(ip.bytes[i] ^ ip.bytes[4 + i] ^ ip.bytes[8 + i] ^
                                       ip.bytes[12 + i]);
    }
  } else {
    std::copy_n(ip.bytes.begin(), 4, w);
  }
  // rxe's would be the EUI-64 of the MAC 02:00:w0:w1:w2:w3, 00:00:w0:ff:fe:w1:w2:w3; uroce's
  // carries its mark instead (wire::kUroceGuidMark): 02:00:w0:75:72:w1:w2:w3.
  std::uint64_t v = 0;
  for (std::uint8_t b : w) v = (v << 8) | b;
  const std::uint64_t spread = ((v & 0xff000000u) << 16) | (v & 0x00ffffffu);
  return wire::kUroceGuidMark | spread;
}

std::uint16_t rxe_default_udp_sport(std::uint32_t qpn) {
  const std::uint32_t hash14 = (qpn * 0x61C88647u) >> (32 - 14);
  return static_cast<std::uint16_t>(0xc000u + (hash14 & 0x3fffu));
}

std::uint16_t connected_udp_sport(std::uint32_t flow_label, std::uint32_t lqpn,
                                  std::uint32_t rqpn) {
  const std::uint32_t fl = flow_label != 0 ? flow_label : wire::rxe_flow_label(lqpn, rqpn);
  return wire::flow_label_to_udp_sport(fl);
}

}  // namespace uroce::verbs
