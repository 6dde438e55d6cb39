#include "wire/ip.h"

#include <algorithm>

namespace uroce::wire {

namespace {

void load_addr(ConstBytes b, std::size_t off, std::size_t len, IpAddress& a) {
  for (std::size_t i = 0; i < len; ++i) a.bytes[i] = load_u8(b, off + i);
}
void store_addr(MutBytes b, std::size_t off, std::size_t len, const IpAddress& a) {
  for (std::size_t i = 0; i < len; ++i) store_u8(b, off + i, a.bytes[i]);
}

// The IPv4 address of an IPv4-mapped IPv6 address; any other address as it is, the bytes past
// an IPv4 address cleared.
IpAddress canonical(const IpAddress& a) {
  IpAddress c;
  const bool mapped =
      a.v6 &&
      std::all_of(a.bytes.begin(), a.bytes.begin() + 10, [](std::uint8_t x) { return x == 0; }) &&
      a.bytes[10] == 0xff && a.bytes[11] == 0xff;
  if (a.v6 && !mapped) return a;
  std::copy_n(a.bytes.begin() + (mapped ? 12 : 0), 4, c.bytes.begin());
  return c;
}

}  // namespace

bool same_host(const IpAddress& a, const IpAddress& b) {
  // Two IPv4 addresses (every received packet's check against its QP's peer, mostly): their
  // four bytes, without building either canonical form.
  if (!a.v6 && !b.v6) return std::equal(a.bytes.begin(), a.bytes.begin() + 4, b.bytes.begin());
  return canonical(a) == canonical(b);
}

Ethernet decode_ethernet(ConstBytes b) {
  Ethernet h;
  for (std::size_t i = 0; i < 6; ++i) {
    h.dst[i] = load_u8(b, i);
    h.src[i] = load_u8(b, 6 + i);
  }
  h.ether_type = load_be16(b, 12);
  return h;
}

void encode_ethernet(MutBytes b, const Ethernet& h) {
  for (std::size_t i = 0; i < 6; ++i) {
    store_u8(b, i, h.dst[i]);
    store_u8(b, 6 + i, h.src[i]);
  }
  store_be16(b, 12, h.ether_type);
}

Ipv4 decode_ipv4(ConstBytes b) {
  Ipv4 h;
  h.tos = load_u8(b, 1);
  h.total_length = load_be16(b, 2);
  h.identification = load_be16(b, 4);
  const std::uint16_t frag = load_be16(b, 6);
  h.dont_fragment = (frag & 0x4000u) != 0;
  h.more_fragments = (frag & 0x2000u) != 0;
  h.fragment_offset = static_cast<std::uint16_t>(frag & 0x1fffu);
  h.ttl = load_u8(b, 8);
  h.protocol = load_u8(b, 9);
  h.checksum = load_be16(b, 10);
  h.src.v6 = false;
  h.dst.v6 = false;
  load_addr(b, 12, 4, h.src);
  load_addr(b, 16, 4, h.dst);
  return h;
}

std::uint16_t ipv4_header_checksum(ConstBytes header20) {
  std::uint32_t sum = 0;
  for (std::size_t off = 0; off < kIpv4Bytes; off += 2) {
    if (off == 10) continue;  // the checksum field itself counts as zero
    sum += load_be16(header20, off);
  }
  while (sum >> 16) sum = (sum & 0xffffu) + (sum >> 16);
  return static_cast<std::uint16_t>(~sum);
}

void encode_ipv4(MutBytes b, const Ipv4& h, bool compute_checksum) {
  store_u8(b, 0, 0x45);  // version 4, IHL 5: uroce never sends IPv4 options
  store_u8(b, 1, h.tos);
  store_be16(b, 2, h.total_length);
  store_be16(b, 4, h.identification);
  store_be16(b, 6,
             static_cast<std::uint16_t>((h.dont_fragment ? 0x4000u : 0u) |
                                        (h.more_fragments ? 0x2000u : 0u) |
                                        (h.fragment_offset & 0x1fffu)));
  store_u8(b, 8, h.ttl);
  store_u8(b, 9, h.protocol);
  store_be16(b, 10, 0);
  store_addr(b, 12, 4, h.src);
  store_addr(b, 16, 4, h.dst);
  store_be16(b, 10, compute_checksum ? ipv4_header_checksum(b.first(kIpv4Bytes)) : h.checksum);
}

Ipv6 decode_ipv6(ConstBytes b) {
  Ipv6 h;
  const std::uint32_t w = load_be32(b, 0);
  h.traffic_class = static_cast<std::uint8_t>((w >> 20) & 0xffu);
  h.flow_label = w & 0xfffffu;
  h.payload_length = load_be16(b, 4);
  h.next_header = load_u8(b, 6);
  h.hop_limit = load_u8(b, 7);
  h.src.v6 = true;
  h.dst.v6 = true;
  load_addr(b, 8, 16, h.src);
  load_addr(b, 24, 16, h.dst);
  return h;
}

void encode_ipv6(MutBytes b, const Ipv6& h) {
  store_be32(b, 0, (6u << 28) | (std::uint32_t{h.traffic_class} << 20) | (h.flow_label & 0xfffffu));
  store_be16(b, 4, h.payload_length);
  store_u8(b, 6, h.next_header);
  store_u8(b, 7, h.hop_limit);
  store_addr(b, 8, 16, h.src);
  store_addr(b, 24, 16, h.dst);
}

Udp decode_udp(ConstBytes b) {
  return Udp{load_be16(b, 0), load_be16(b, 2), load_be16(b, 4), load_be16(b, 6)};
}

void encode_udp(MutBytes b, const Udp& h) {
  store_be16(b, 0, h.src_port);
  store_be16(b, 2, h.dst_port);
  store_be16(b, 4, h.length);
  store_be16(b, 6, h.checksum);
}

}  // namespace uroce::wire
