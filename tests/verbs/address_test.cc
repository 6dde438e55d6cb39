#include "verbs/address.h"
#include "wire/cm_mad.h"

#include <gtest/gtest.h>

namespace uroce::verbs {
namespace {

wire::IpAddress v6(std::array<std::uint8_t, 16> b) { return wire::IpAddress{true, b}; }

TEST(PortMtu, LargestPowerOfTwoBelowNetdevMtuMinus80CappedAt4096) {
  EXPECT_EQ(port_mtu_for_netdev(1500), Mtu::k1024);  // roce-facts.md: 1500 -> 1024
  EXPECT_EQ(port_mtu_for_netdev(9000), Mtu::k4096);  // 9000 -> 4096
  EXPECT_EQ(port_mtu_for_netdev(1104), Mtu::k1024);
  EXPECT_EQ(port_mtu_for_netdev(1103), Mtu::k512);
  EXPECT_EQ(port_mtu_for_netdev(2128), Mtu::k2048);
  EXPECT_EQ(port_mtu_for_netdev(4176), Mtu::k4096);
  EXPECT_EQ(port_mtu_for_netdev(4175), Mtu::k2048);
  EXPECT_EQ(port_mtu_for_netdev(336), Mtu::k256);
  EXPECT_EQ(port_mtu_for_netdev(335), std::nullopt);
  EXPECT_EQ(port_mtu_for_netdev(0), std::nullopt);
  EXPECT_EQ(port_mtu_for_netdev(65536), Mtu::k4096);
}

TEST(Gid, Ipv4IsMappedAndIpv6IsItself) {
  const Gid g4 = gid_from_ip(wire::IpAddress::v4(0x0a000001));
  const Gid want4{{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}};
  EXPECT_EQ(g4, want4);
  EXPECT_TRUE(gid_is_ipv4_mapped(g4));
  const auto ip6 = v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  const Gid g6 = gid_from_ip(ip6);
  EXPECT_EQ(g6.raw, ip6.bytes);
  EXPECT_FALSE(gid_is_ipv4_mapped(g6));
}

TEST(Gid, ResolvesBackToTheAddress) {
  const auto ip4 = wire::IpAddress::v4(0xc0a80102);
  EXPECT_EQ(ip_from_gid(gid_from_ip(ip4)), ip4);
  const auto ip6 = v6({0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(ip_from_gid(gid_from_ip(ip6)), ip6);
  // ::ffff:0:1 style with a nonzero byte before the ffff is plain IPv6.
  Gid odd = gid_from_ip(ip4);
  odd.raw[9] = 1;
  ASSERT_TRUE(ip_from_gid(odd).has_value());
  EXPECT_TRUE(ip_from_gid(odd)->v6);
}

TEST(Gid, UnspecifiedAddressesResolveToNothing) {
  EXPECT_EQ(ip_from_gid(Gid{}), std::nullopt);
  EXPECT_EQ(ip_from_gid(gid_from_ip(wire::IpAddress::v4(0))), std::nullopt);
  EXPECT_TRUE(ip_is_unspecified(wire::IpAddress{}));
  EXPECT_TRUE(ip_is_unspecified(wire::IpAddress{true, {}}));
  EXPECT_FALSE(ip_is_unspecified(wire::IpAddress::v4(1)));
}

TEST(NodeGuid, LocallyAdministeredEui64WithTheUroceMarkAndTheAddress) {
  // 10.0.0.1 -> 02:00:0a:75:72:00:00:01: rxe's would be 00:00:0a:ff:fe:00:00:01.
  EXPECT_EQ(node_guid_from_ip(wire::IpAddress::v4(0x0a000001)), 0x02000a7572000001ull);
  EXPECT_EQ(node_guid_from_ip(wire::IpAddress::v4(0xc0a80102)), 0x0200c07572a80102ull);
  // IPv6: the XOR of the four 32-bit words.
  const auto ip6 = v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  EXPECT_EQ(node_guid_from_ip(ip6), 0x0200207572010db9ull);
  for (std::uint32_t ip : {0x0a000001u, 0x7f000001u, 0xffffffffu, 0x01020304u}) {
    const std::uint64_t g = node_guid_from_ip(wire::IpAddress::v4(ip));
    EXPECT_TRUE(wire::is_uroce_guid(g));
    EXPECT_EQ(g >> 56 & 0x03, 0x02u);  // U/L set (locally administered), I/G clear
  }
  // Different addresses, different GUIDs: every address bit is in the GUID.
  for (int bit = 0; bit < 32; ++bit) {
    EXPECT_NE(node_guid_from_ip(wire::IpAddress::v4(0x0a000001u ^ (1u << bit))),
              node_guid_from_ip(wire::IpAddress::v4(0x0a000001u)));
  }
  // rxe's GUIDs (the EUI-64 of a MAC: ff:fe in bytes 3-4) and vendor GUIDs never carry it.
  EXPECT_FALSE(wire::is_uroce_guid(0x00000afffe000001ull));
  EXPECT_FALSE(wire::is_uroce_guid(0x02000afffe000001ull));  // rxe on MAC 00:00:0a:00:00:01
  EXPECT_FALSE(wire::is_uroce_guid(0x0002c90300a1b2c3ull));  // a Mellanox OUI
  EXPECT_FALSE(wire::is_uroce_guid(0));
}

TEST(UdpSport, QpDefaultIsRxeHashOfTheQpn) {
  // 0xC000 + (hash_32(qpn, 14) & 0x3fff), hash_32(x, 14) = (x * 0x61C88647) >> 18.
  EXPECT_EQ(rxe_default_udp_sport(0x11), 0xdf94);
  EXPECT_EQ(rxe_default_udp_sport(0x12), 0xf806);
  EXPECT_EQ(rxe_default_udp_sport(0xffffff), 0xf94d);
}

TEST(UdpSport, ConnectedQpUsesTheFlowLabelOrOneComputedFromTheQpns) {
  EXPECT_EQ(connected_udp_sport(0x12345, 0x11, 0x22), 0xe341);
  // Flow label 0: rdma_calc_flow_label(0x11, 0x22) = 0x242.
  EXPECT_EQ(connected_udp_sport(0, 0x11, 0x22), 0xc242);
  EXPECT_EQ(connected_udp_sport(0, 0x11, 0x1234), 0xf570);
}

}  // namespace
}  // namespace uroce::verbs
