#include "sim/frame_peek.h"

namespace uroce::sim {

std::optional<IpPeek> peek_ip(ConstBytes frame) {
  if (frame.size() < wire::kEthernetBytes) return std::nullopt;
  std::size_t off = 12;
  std::uint16_t ether_type = load_be16(frame, off);
  // Up to two VLAN tags (802.1ad outer, 802.1Q inner), as wire::parse_frame accepts.
  for (int tags = 0;
       tags < 2 && (ether_type == wire::kEtherTypeVlan || ether_type == wire::kEtherTypeQinQ);
       ++tags) {
    off += 4;
    if (frame.size() < off + 2) return std::nullopt;
    ether_type = load_be16(frame, off);
  }
  IpPeek p;
  p.ip_offset = off + 2;
  const ConstBytes ip = frame.subspan(p.ip_offset);
  if (ether_type == wire::kEtherTypeIpv4) {
    if (ip.size() < wire::kIpv4Bytes || (load_u8(ip, 0) >> 4) != 4) return std::nullopt;
    p.dst = wire::decode_ipv4(ip).dst;
    return p;
  }
  if (ether_type == wire::kEtherTypeIpv6) {
    if (ip.size() < wire::kIpv6Bytes || (load_u8(ip, 0) >> 4) != 6) return std::nullopt;
    p.v6 = true;
    p.dst = wire::decode_ipv6(ip).dst;
    return p;
  }
  return std::nullopt;
}

std::uint8_t ecn_bits(ConstBytes frame, const IpPeek& ip) {
  // IPv4: the low 2 bits of the TOS byte (byte 1). IPv6: the traffic class straddles bytes 0
  // and 1; its low 2 bits are bits 5..4 of byte 1.
  return ip.v6 ? load_bits8(frame, ip.ip_offset + 1, 4, 2)
               : load_bits8(frame, ip.ip_offset + 1, 0, 2);
}

bool mark_ce(MutBytes frame, const IpPeek& ip) {
  const std::uint8_t ecn = ecn_bits(frame, ip);
  if (ecn == 0b00 || ecn == 0b11) return false;
  if (ip.v6) {
    store_bits8(frame, ip.ip_offset + 1, 4, 2, 0b11);
    return true;
  }
  // RFC 1624: HC' = ~(~HC + ~m + m') in one's complement arithmetic, over the 16-bit word m
  // that holds version/IHL and TOS.
  const std::size_t off = ip.ip_offset;
  const std::uint16_t old_word = load_be16(frame, off);
  store_bits8(frame, off + 1, 0, 2, 0b11);
  const std::uint16_t new_word = load_be16(frame, off);
  const std::uint16_t old_sum = load_be16(frame, off + 10);
  std::uint32_t sum = std::uint32_t{static_cast<std::uint16_t>(~old_sum)} +
                      std::uint32_t{static_cast<std::uint16_t>(~old_word)} + new_word;
  while (sum >> 16) sum = (sum & 0xffffu) + (sum >> 16);
  store_be16(frame, off + 10, static_cast<std::uint16_t>(~sum));
  return true;
}

}  // namespace uroce::sim
