// Address handles: GID -> address resolution and the RoCE checks.
#include <gtest/gtest.h>

#include "verbs/device_state.h"
#include "verbs_test_util.h"

namespace uroce {
namespace {

using testing::ah_to;
using testing::make_device;
using testing::test_config;

const verbs::detail::AhObj& ah_obj(Device& dev, AhHandle ah) {
  auto* a = DeviceTestAccess::state(dev).ahs.get(verbs::detail::to_raw(ah));
  EXPECT_NE(a, nullptr);
  return *a;
}

TEST(Ah, Ipv4MappedGidResolvesToIpv4) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  AhAttr attr = ah_to(wire::IpAddress::v4(0x0a000002));
  attr.hop_limit = 1;
  attr.traffic_class = 0x68;
  auto ah = dev->create_ah(pd, attr);
  ASSERT_TRUE(ah.ok());
  const auto& av = ah_obj(*dev, *ah).av;
  EXPECT_EQ(av.dst, wire::IpAddress::v4(0x0a000002));
  EXPECT_FALSE(av.dst.v6);
  EXPECT_EQ(av.hop_limit, 1);
  EXPECT_EQ(av.traffic_class, 0x68);
  EXPECT_EQ(av.udp_sport, 0);  // flow label 0: the sending QP's port, at post time
  auto q = dev->query_ah(*ah);
  ASSERT_TRUE(q.ok());
  EXPECT_EQ(q->dgid, attr.dgid);
}

TEST(Ah, NonzeroFlowLabelGivesTheUdpSourcePort) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  AhAttr attr = ah_to(wire::IpAddress::v4(0x0a000002));
  attr.flow_label = 0x12345;
  auto ah = dev->create_ah(pd, attr);
  ASSERT_TRUE(ah.ok());
  EXPECT_EQ(ah_obj(*dev, *ah).av.flow_label, 0x12345u);
  EXPECT_EQ(ah_obj(*dev, *ah).av.udp_sport, 0xe341);  // ibv_flow_label_to_udp_sport(0x12345)
}

TEST(Ah, Ipv6GidResolvesToIpv6OnAnIpv6Device) {
  DeviceConfig c = test_config();
  c.ip = wire::IpAddress{true, {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}};
  auto dev = make_device(c);
  PdHandle pd = *dev->alloc_pd();
  const wire::IpAddress peer{true, {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2}};
  auto ah = dev->create_ah(pd, ah_to(peer));
  ASSERT_TRUE(ah.ok());
  EXPECT_EQ(ah_obj(*dev, *ah).av.dst, peer);
  // An IPv4 destination cannot be reached from an IPv6 source GID.
  EXPECT_EQ(dev->create_ah(pd, ah_to(wire::IpAddress::v4(0x0a000002))).error(),
            Errc::kInvalidArgument);
}

TEST(Ah, RoceRulesAreEnforced) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  const AhAttr good = ah_to(wire::IpAddress::v4(0x0a000002));
  AhAttr a = good;
  a.is_global = false;  // RoCE needs the GRH
  EXPECT_EQ(dev->create_ah(pd, a).error(), Errc::kInvalidArgument);
  a = good;
  a.port_num = 2;
  EXPECT_EQ(dev->create_ah(pd, a).error(), Errc::kInvalidArgument);
  a = good;
  a.port_num = 0;
  EXPECT_EQ(dev->create_ah(pd, a).error(), Errc::kInvalidArgument);
  a = good;
  a.sgid_index = 1;  // an empty GID entry
  EXPECT_EQ(dev->create_ah(pd, a).error(), Errc::kInvalidArgument);
  a = good;
  a.dgid = Gid{};  // ::
  EXPECT_EQ(dev->create_ah(pd, a).error(), Errc::kInvalidArgument);
  a = ah_to(wire::IpAddress::v4(0));  // ::ffff:0.0.0.0
  EXPECT_EQ(dev->create_ah(pd, a).error(), Errc::kInvalidArgument);
  // An IPv6 destination from an IPv4 device.
  a.dgid.raw = {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2};
  EXPECT_EQ(dev->create_ah(pd, a).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->create_ah(PdHandle{}, good).error(), Errc::kInvalidArgument);
  EXPECT_TRUE(dev->create_ah(pd, good).ok());
}

TEST(Ah, DestroyDetectsStaleHandles) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  AhHandle ah = *dev->create_ah(pd, ah_to(wire::IpAddress::v4(0x0a000002)));
  EXPECT_EQ(dev->destroy_ah(ah), Errc::kOk);
  EXPECT_EQ(dev->destroy_ah(ah), Errc::kInvalidArgument);
  EXPECT_EQ(dev->query_ah(ah).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kOk);
}

}  // namespace
}  // namespace uroce
