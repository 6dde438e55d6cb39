// Device, port and GID attributes as rxe reports them; PD lifetime; the async event queue.
#include <gtest/gtest.h>

#include <array>

#include "verbs/device_state.h"
#include "verbs_test_util.h"

namespace uroce {
namespace {

using testing::make_device;
using testing::test_config;

TEST(Device, RejectsBadConfigurations) {
  DeviceConfig c = test_config();
  c.name = "";
  EXPECT_EQ(Device::create(c).error(), Errc::kInvalidArgument);
  c = test_config();
  c.name = std::string(64, 'x');
  EXPECT_EQ(Device::create(c).error(), Errc::kInvalidArgument);
  c = test_config();
  c.ip = wire::IpAddress::v4(0);
  EXPECT_EQ(Device::create(c).error(), Errc::kInvalidArgument);
  c = test_config();
  c.ip = wire::IpAddress{true, {}};
  EXPECT_EQ(Device::create(c).error(), Errc::kInvalidArgument);
  c = test_config();
  c.netdev_mtu = 335;
  EXPECT_EQ(Device::create(c).error(), Errc::kInvalidArgument);
  c = test_config();
  c.async_event_queue_depth = 0;
  EXPECT_EQ(Device::create(c).error(), Errc::kInvalidArgument);
  EXPECT_TRUE(Device::create(test_config()).ok());
}

TEST(Device, AttributesAreRxes) {
  auto dev = make_device();
  const DeviceAttr& a = dev->query_device();
  EXPECT_EQ(dev->name(), "uroce0");
  EXPECT_EQ(a.fw_ver, "0.0.0");
  EXPECT_EQ(a.vendor_id, 0xffffffu);  // RXE_VENDOR_ID
  EXPECT_EQ(a.vendor_part_id, 0u);
  EXPECT_EQ(a.hw_ver, 0u);
  EXPECT_EQ(a.max_qp_wr, 16384u);
  EXPECT_EQ(a.max_sge, 32u);
  EXPECT_EQ(a.max_sge_rd, 32u);
  EXPECT_EQ(a.max_inline_data, 400u);
  EXPECT_EQ(a.max_qp_rd_atom, 128u);
  EXPECT_EQ(a.max_qp_init_rd_atom, 128u);
  EXPECT_EQ(a.max_res_rd_atom, 0x3f000u);
  EXPECT_EQ(a.max_mr_size, UINT64_MAX);
  EXPECT_EQ(a.page_size_cap, 0xfffff000u);
  EXPECT_EQ(a.max_qp, 0x10000u);
  EXPECT_EQ(a.max_cq, 16384u);
  EXPECT_EQ(a.max_cqe, 32767u);
  EXPECT_EQ(a.max_mr, 256u * 1024);
  EXPECT_EQ(a.max_pd, 0x7ffcu);
  EXPECT_EQ(a.max_srq, 960u);
  EXPECT_EQ(a.max_srq_wr, 0x4000u);
  EXPECT_EQ(a.max_srq_sge, 27u);
  EXPECT_EQ(a.max_ah, 32767u);
  EXPECT_EQ(a.atomic_cap, AtomicCap::kHca);
  EXPECT_EQ(a.phys_port_cnt, 1);
  EXPECT_EQ(a.local_ca_ack_delay, 15);
  EXPECT_EQ(a.max_mw, 256u * 1024);  // RXE_MAX_MW
  EXPECT_NE(a.device_cap_flags & kDeviceMemWindow, 0u);
  EXPECT_NE(a.device_cap_flags & kDeviceMemWindowType2B, 0u);
  EXPECT_NE(a.device_cap_flags & kDeviceRcRnrNakGen, 0u);
  EXPECT_NE(a.device_cap_flags & kDeviceSysImageGuid, 0u);
  // node_guid: uroce's marked GUID of 10.0.0.1 (verbs::node_guid_from_ip).
  EXPECT_EQ(a.node_guid, 0x02000a7572000001ull);
  EXPECT_EQ(a.sys_image_guid, a.node_guid);
}

TEST(Device, PortIsActiveEthernetWithTheNetdevsMtu) {
  auto dev = make_device();
  auto p = dev->query_port(1);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->state, PortState::kActive);
  EXPECT_EQ(p->max_mtu, Mtu::k4096);
  EXPECT_EQ(p->active_mtu, Mtu::k1024);  // netdev MTU 1500
  EXPECT_EQ(p->link_layer, LinkLayer::kEthernet);
  EXPECT_EQ(p->gid_tbl_len, 1024u);
  EXPECT_EQ(p->pkey_tbl_len, 1);
  EXPECT_EQ(p->lid, 0);
  EXPECT_EQ(p->phys_state, 5);
  EXPECT_EQ(dev->active_mtu(), Mtu::k1024);
  EXPECT_EQ(dev->active_mtu_bytes(), 1024u);
  EXPECT_EQ(dev->query_port(0).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->query_port(2).error(), Errc::kInvalidArgument);

  DeviceConfig jumbo = test_config();
  jumbo.netdev_mtu = 9000;
  EXPECT_EQ(make_device(jumbo)->query_port(1)->active_mtu, Mtu::k4096);
}

TEST(Device, PortWidthAndSpeedFollowTheLinkSpeedAsTheKernelsForRoce) {
  // ib_get_eth_speed() without lane counts: (Mb/s, IB_WIDTH_*, IB_SPEED_*).
  const std::array<std::array<std::uint32_t, 3>, 9> table = {{{0, 1, 1},  // unknown: as 1000
                                                              {100, 1, 1},
                                                              {1000, 1, 1},
                                                              {10000, 1, 8},   // 1X FDR10
                                                              {20000, 2, 2},   // 4X DDR
                                                              {25000, 1, 32},  // 1X EDR
                                                              {40000, 2, 8},   // 4X FDR10
                                                              {100000, 2, 32},
                                                              {400000, 2, 32}}};  // not NDR
  for (const auto& [mbps, width, speed] : table) {
    const LinkRate r = link_rate_for_eth_speed(mbps);
    EXPECT_EQ(r.width, width) << mbps;
    EXPECT_EQ(r.speed, speed) << mbps;
  }
  DeviceConfig cfg = test_config();
  EXPECT_EQ(make_device(cfg)->query_port(1)->active_speed, 1);  // unknown: 1X SDR
  cfg.link_speed_mbps = 25000;
  auto p = make_device(cfg)->query_port(1);
  EXPECT_EQ(p->active_width, 1);
  EXPECT_EQ(p->active_speed, 32);
}

TEST(Device, GidTableHoldsTheIpv4MappedAddress) {
  auto dev = make_device();
  auto g = dev->query_gid(1, 0);
  ASSERT_TRUE(g.ok());
  const Gid want{{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 1}};
  EXPECT_EQ(*g, want);
  auto e = dev->query_gid_entry(1, 0);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->gid, want);
  EXPECT_EQ(e->type, GidType::kRoceV2);
  // Empty entries read as zero (ibv_query_gid) or as missing (ibv_query_gid_ex).
  EXPECT_EQ(*dev->query_gid(1, 1), Gid{});
  EXPECT_EQ(*dev->query_gid(1, 1023), Gid{});
  EXPECT_EQ(dev->query_gid_entry(1, 1).error(), Errc::kNoEntry);
  // Beyond the table, or another port: errors.
  EXPECT_EQ(dev->query_gid(1, 1024).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->query_gid(2, 0).error(), Errc::kInvalidArgument);
  EXPECT_EQ(dev->local_ip(), wire::IpAddress::v4(0x0a000001));
}

TEST(Device, GidTableHoldsTheIpv6AddressItself) {
  DeviceConfig c = test_config();
  c.ip = wire::IpAddress{true, {0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x42}};
  auto dev = make_device(c);
  EXPECT_EQ(dev->query_gid(1, 0)->raw, c.ip.bytes);
}

TEST(Device, PkeyTableHasTheDefaultPkeyOnly) {
  auto dev = make_device();
  EXPECT_EQ(*dev->query_pkey(1, 0), 0xffff);
  EXPECT_EQ(dev->query_pkey(1, 1).error(), Errc::kInvalidArgument);
}

TEST(Pd, AllocAndDeallocDetectStaleHandles) {
  auto dev = make_device();
  auto pd = dev->alloc_pd();
  ASSERT_TRUE(pd.ok());
  auto pd2 = dev->alloc_pd();
  ASSERT_TRUE(pd2.ok());
  EXPECT_NE(*pd, *pd2);
  EXPECT_EQ(dev->dealloc_pd(*pd), Errc::kOk);
  EXPECT_EQ(dev->dealloc_pd(*pd), Errc::kInvalidArgument);  // already gone
  EXPECT_EQ(dev->dealloc_pd(PdHandle{}), Errc::kInvalidArgument);
  // A new PD that reuses the slot is not reachable through the old handle.
  auto pd3 = dev->alloc_pd();
  ASSERT_TRUE(pd3.ok());
  EXPECT_EQ(dev->dealloc_pd(*pd), Errc::kInvalidArgument);
  EXPECT_EQ(dev->dealloc_pd(*pd3), Errc::kOk);
  EXPECT_EQ(dev->dealloc_pd(*pd2), Errc::kOk);
}

TEST(Pd, AtMostMaxPd) {
  auto dev = make_device();
  const std::uint32_t max_pd = dev->query_device().max_pd;
  PdHandle last;
  for (std::uint32_t i = 0; i < max_pd; ++i) {
    auto pd = dev->alloc_pd();
    ASSERT_TRUE(pd.ok()) << i;
    last = *pd;
  }
  EXPECT_EQ(dev->alloc_pd().error(), Errc::kNoMemory);
  EXPECT_EQ(dev->dealloc_pd(last), Errc::kOk);
  EXPECT_TRUE(dev->alloc_pd().ok());
}

TEST(Pd, BusyWhileMrsAhsOrSrqsUseIt) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  std::byte buf[64];
  MrHandle mr = dev->reg_mr(pd, buf, sizeof buf, 0)->handle;
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kBusy);
  EXPECT_EQ(dev->dereg_mr(mr), Errc::kOk);

  AhHandle ah = *dev->create_ah(pd, testing::ah_to(wire::IpAddress::v4(0x0a000002)));
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kBusy);
  EXPECT_EQ(dev->destroy_ah(ah), Errc::kOk);

  SrqHandle srq = dev->create_srq(pd, SrqAttr{4, 1, 0})->handle;
  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kBusy);
  EXPECT_EQ(dev->destroy_srq(srq), Errc::kOk);

  EXPECT_EQ(dev->dealloc_pd(pd), Errc::kOk);
}

TEST(Device, DestroyingTheDeviceFreesWhatIsLeft) {
  auto dev = make_device();
  PdHandle pd = *dev->alloc_pd();
  std::byte buf[64];
  ASSERT_TRUE(dev->reg_mr(pd, buf, sizeof buf, kAccessLocalWrite).ok());
  ASSERT_TRUE(dev->create_cq(CqInitAttr{16, 0, 0}).ok());
  ASSERT_TRUE(dev->create_srq(pd, SrqAttr{4, 1, 0}).ok());
  dev.reset();  // no leak (ASan), no crash
}

TEST(AsyncEvents, BoundedQueueCountsWhatItDrops) {
  DeviceConfig c = test_config();
  c.async_event_queue_depth = 2;
  auto dev = make_device(c);
  EXPECT_FALSE(dev->has_async_event());
  EXPECT_EQ(dev->get_async_event(), std::nullopt);
  auto& s = DeviceTestAccess::state(*dev);
  for (std::uint8_t i = 0; i < 3; ++i) {
    AsyncEvent ev;
    ev.type = AsyncEventType::kPortActive;
    ev.port = i;
    s.push_event(ev);
  }
  EXPECT_EQ(dev->async_events_dropped(), 1u);
  ASSERT_TRUE(dev->has_async_event());
  EXPECT_EQ(dev->get_async_event()->port, 0);
  EXPECT_EQ(dev->get_async_event()->port, 1);
  EXPECT_FALSE(dev->get_async_event().has_value());
}

// The ECN codepoint a device's socket takes as its own (datapath/udp.h, default_tos): ECT(0)
// exactly for the rules that answer CE marks with CNPs, as their QPs' packets leave.
TEST(Device, CongestionControlEcnIsEct0ForTheRulesThatReactToCnps) {
  using Cc = DeviceConfig::CongestionControl;
  EXPECT_EQ(congestion_control_ecn(Cc::kNone), 0);
  EXPECT_EQ(congestion_control_ecn(Cc::kAimd), 0);
  EXPECT_EQ(congestion_control_ecn(Cc::kDcqcn), 2);
  EXPECT_EQ(congestion_control_ecn(Cc::kDcqcnAimd), 2);
  EXPECT_EQ(congestion_control_ecn(DeviceConfig{}.congestion_control), 2);  // the default
}

}  // namespace
}  // namespace uroce
