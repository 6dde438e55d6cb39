// IP addresses: which two name the same host (the transport's source-address check relies on it).
#include "wire/ip.h"

#include <gtest/gtest.h>

namespace uroce::wire {
namespace {

IpAddress v6(std::array<std::uint8_t, 16> bytes) { return IpAddress{true, bytes}; }

TEST(IpAddress, SameHostComparesFamilyAndAddress) {
  EXPECT_TRUE(same_host(IpAddress::v4(0x0a000002), IpAddress::v4(0x0a000002)));
  EXPECT_FALSE(same_host(IpAddress::v4(0x0a000002), IpAddress::v4(0x0a000003)));
  const IpAddress a = v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1});
  const IpAddress b = v6({0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2});
  EXPECT_TRUE(same_host(a, a));
  EXPECT_FALSE(same_host(a, b));
  // An IPv6 address whose first 4 bytes are an IPv4 address's is another host.
  EXPECT_FALSE(
      same_host(v6({10, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}), IpAddress::v4(0x0a000002)));
}

TEST(IpAddress, Ipv4MappedIsItsIpv4Address) {
  // ::ffff:10.0.0.2, the form of 10.0.0.2 in a GID and on a dual-stack socket.
  const IpAddress mapped = v6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2});
  EXPECT_TRUE(same_host(mapped, IpAddress::v4(0x0a000002)));
  EXPECT_TRUE(same_host(IpAddress::v4(0x0a000002), mapped));
  EXPECT_FALSE(same_host(mapped, IpAddress::v4(0x0a000003)));
  // ::10.0.0.2 (IPv4-compatible, deprecated) and ::fffe:10.0.0.2 are not mapped.
  EXPECT_FALSE(
      same_host(v6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 10, 0, 0, 2}), IpAddress::v4(0x0a000002)));
  EXPECT_FALSE(same_host(v6({0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 10, 0, 0, 2}),
                         IpAddress::v4(0x0a000002)));
}

TEST(IpAddress, SameHostIgnoresBytesPastAnIpv4Address) {
  IpAddress dirty = IpAddress::v4(0x7f000002);
  dirty.bytes[15] = 0x55;
  EXPECT_TRUE(same_host(dirty, IpAddress::v4(0x7f000002)));
}

}  // namespace
}  // namespace uroce::wire
