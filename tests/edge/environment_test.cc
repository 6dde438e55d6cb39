#include "edge/environment.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace uroce::edge {
namespace {

// An environment (environ's shape) from NAME=VALUE strings.
class Env {
 public:
  Env(std::initializer_list<const char*> entries) : strings_(entries.begin(), entries.end()) {
    for (const std::string& s : strings_) ptrs_.push_back(s.c_str());
    ptrs_.push_back(nullptr);
  }
  const char* const* get() const { return ptrs_.data(); }

 private:
  std::vector<std::string> strings_;
  std::vector<const char*> ptrs_;
};

Result<engine::DeviceOptions, std::string> read(std::initializer_list<const char*> entries) {
  const Env env(entries);
  return device_options(env.get());
}

TEST(EdgeEnvironment, NoVariableIsTheDefaultOptions) {
  auto o = read({"HOME=/root", "PATH=/bin"});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_FALSE(o->udp_gso);
  EXPECT_FALSE(o->udp_gro);
  EXPECT_FALSE(o->udp_batch);
  EXPECT_TRUE(o->shared);
  EXPECT_EQ(o->capture_path, "");
  EXPECT_TRUE(o->acks.hold);  // the device's defaults
  EXPECT_TRUE(o->acks.defer);
  EXPECT_EQ(o->acks.hold_for, engine::AckPolicyConfig{}.hold_for);
  EXPECT_EQ(o->stats_file, "");
  EXPECT_FALSE(o->faults);
  EXPECT_TRUE(o->device_faults.empty());
  EXPECT_FALSE(o->congestion_control);
  // A null environment is an empty one.
  auto n = device_options(nullptr);
  ASSERT_TRUE(n.ok()) << n.error();
  EXPECT_TRUE(n->shared);
}

TEST(EdgeEnvironment, EveryVariableLandsInItsField) {
  auto o = read({"UROCE_UDP_GSO=0", "UROCE_UDP_GRO=1", "UROCE_UDP_BATCH=7", "UROCE_SHARED=0",
                 "UROCE_PCAP=/tmp/x.pcap", "UROCE_HOLD_ACKS=0", "UROCE_DEFER_ACKS=yes",
                 "UROCE_STATS_FILE=/tmp/s.txt", "UROCE_FAULTS=dir=tx,loss=1%",
                 "UROCE_FAULTS_rxe_0=dir=rx,loss=2%", "UROCE_FAULTS_rxe_0=shadowed",
                 "UROCE_CC=dcqcn", "UROCE_PCAPX=ignored"});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->udp_gso, false);
  EXPECT_EQ(o->udp_gro, true);
  EXPECT_EQ(o->udp_batch, 7u);
  EXPECT_FALSE(o->shared);
  EXPECT_EQ(o->capture_path, "/tmp/x.pcap");
  EXPECT_FALSE(o->acks.hold);
  EXPECT_TRUE(o->acks.defer);  // anything but "0" is on, as before
  EXPECT_EQ(o->stats_file, "/tmp/s.txt");
  EXPECT_EQ(o->faults, "dir=tx,loss=1%");
  ASSERT_EQ(o->device_faults.size(), 1u);
  EXPECT_EQ(o->device_faults.at(engine::fault_key("rxe-0")), "dir=rx,loss=2%");  // the first
  EXPECT_EQ(o->congestion_control, DeviceConfig::CongestionControl::kDcqcn);
}

TEST(EdgeEnvironment, AsBeforeOnlyZeroSwitchesOffAndEmptySwitchesAreUnset) {
  auto o = read({"UROCE_SHARED=1", "UROCE_HOLD_ACKS=", "UROCE_DEFER_ACKS=0",
                 "UROCE_UDP_GSO=", "UROCE_CC=none"});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_TRUE(o->shared);
  EXPECT_TRUE(o->acks.hold);  // set, and not "0"
  EXPECT_FALSE(o->acks.defer);
  EXPECT_FALSE(o->udp_gso);
  EXPECT_EQ(o->congestion_control, DeviceConfig::CongestionControl::kNone);
}

TEST(EdgeEnvironment, RecoveryZeroTurnsTheLossRecoveryOff) {
  auto unset = read({});
  ASSERT_TRUE(unset.ok()) << unset.error();
  EXPECT_FALSE(unset->adaptive_recovery);
  auto off = read({"UROCE_RECOVERY=0"});
  ASSERT_TRUE(off.ok()) << off.error();
  EXPECT_EQ(off->adaptive_recovery, false);
  auto on = read({"UROCE_RECOVERY=1"});
  ASSERT_TRUE(on.ok()) << on.error();
  EXPECT_EQ(on->adaptive_recovery, true);
}

TEST(EdgeEnvironment, SelectiveRepeatSwitchAndPeers) {
  auto unset = read({});
  ASSERT_TRUE(unset.ok()) << unset.error();
  EXPECT_FALSE(unset->selective_repeat);
  EXPECT_FALSE(unset->sr_peers);
  auto off = read({"UROCE_SR=0"});
  ASSERT_TRUE(off.ok()) << off.error();
  EXPECT_EQ(off->selective_repeat, false);
  auto peers = read({"UROCE_SR=1", "UROCE_SR_PEERS=10.0.0.2, 10.0.0.3,fd00::7"});
  ASSERT_TRUE(peers.ok()) << peers.error();
  EXPECT_EQ(peers->selective_repeat, true);
  ASSERT_TRUE(peers->sr_peers);
  EXPECT_FALSE(peers->sr_peers->all);
  ASSERT_EQ(peers->sr_peers->addresses.size(), 3u);
  EXPECT_EQ(peers->sr_peers->addresses[1], wire::IpAddress::v4(0x0a000003));
  EXPECT_TRUE(peers->sr_peers->addresses[2].v6);
  auto all = read({"UROCE_SR_PEERS=all"});
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_TRUE(all->sr_peers);
  EXPECT_TRUE(all->sr_peers->all);
  auto bad = read({"UROCE_SR=yes"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "UROCE_SR must be 0 or 1, not 'yes'");
  auto bad_peer = read({"UROCE_SR_PEERS=10.0.0.2,host"});
  ASSERT_FALSE(bad_peer.ok());
  EXPECT_EQ(bad_peer.error(),
            "UROCE_SR_PEERS: 'host' is neither 'all' nor an IPv4 or IPv6 address");
}

TEST(EdgeEnvironment, RxeFlushPeers) {
  auto unset = read({});
  ASSERT_TRUE(unset.ok()) << unset.error();
  EXPECT_FALSE(unset->rxe_flush_peers);
  auto peers = read({"UROCE_RXE_FLUSH_PEERS=10.123.0.2"});
  ASSERT_TRUE(peers.ok()) << peers.error();
  ASSERT_TRUE(peers->rxe_flush_peers);
  EXPECT_FALSE(peers->rxe_flush_peers->all);
  ASSERT_EQ(peers->rxe_flush_peers->addresses.size(), 1u);
  EXPECT_EQ(peers->rxe_flush_peers->addresses[0], wire::IpAddress::v4(0x0a7b0002));
  EXPECT_FALSE(peers->sr_peers);
  auto all = read({"UROCE_RXE_FLUSH_PEERS=all"});
  ASSERT_TRUE(all.ok()) << all.error();
  ASSERT_TRUE(all->rxe_flush_peers);
  EXPECT_TRUE(all->rxe_flush_peers->all);
  auto bad = read({"UROCE_RXE_FLUSH_PEERS=rxe0"});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(),
            "UROCE_RXE_FLUSH_PEERS: 'rxe0' is neither 'all' nor an IPv4 or IPv6 address");
}

TEST(EdgeEnvironment, InvalidValuesAreClearErrors) {
  auto gso = read({"UROCE_UDP_GSO=yes"});
  ASSERT_FALSE(gso.ok());
  EXPECT_EQ(gso.error(), "UROCE_UDP_GSO must be 0 or 1, not 'yes'");
  auto gro = read({"UROCE_UDP_GRO=2"});
  ASSERT_FALSE(gro.ok());
  EXPECT_EQ(gro.error(), "UROCE_UDP_GRO must be 0 or 1, not '2'");
  for (const char* b : {"UROCE_UDP_BATCH=0", "UROCE_UDP_BATCH=257", "UROCE_UDP_BATCH=4x"}) {
    auto r = read({b});
    ASSERT_FALSE(r.ok()) << b;
    EXPECT_NE(r.error().find("UROCE_UDP_BATCH must be a number from 1 to 256"), std::string::npos)
        << r.error();
  }
  auto cc = read({"UROCE_CC=cubic"});
  ASSERT_FALSE(cc.ok());
  EXPECT_EQ(cc.error(), "UROCE_CC must be none, dcqcn, aimd or dcqcn-aimd, not 'cubic'");
  auto upper = read({"UROCE_CC=AIMD"});
  ASSERT_FALSE(upper.ok());
  EXPECT_EQ(upper.error(), "UROCE_CC must be none, dcqcn, aimd or dcqcn-aimd, not 'AIMD'");
}

TEST(EdgeEnvironment, UroceCcNamesEveryRule) {
  const std::pair<const char*, DeviceConfig::CongestionControl> names[] = {
      {"UROCE_CC=none", DeviceConfig::CongestionControl::kNone},
      {"UROCE_CC=dcqcn", DeviceConfig::CongestionControl::kDcqcn},
      {"UROCE_CC=aimd", DeviceConfig::CongestionControl::kAimd},
      {"UROCE_CC=dcqcn-aimd", DeviceConfig::CongestionControl::kDcqcnAimd},
  };
  for (const auto& [entry, want] : names) {
    auto o = read({entry});
    ASSERT_TRUE(o.ok()) << entry << ": " << o.error();
    EXPECT_EQ(o->congestion_control, want) << entry;
    EXPECT_STREQ(congestion_control_name(want), std::string_view(entry).substr(9).data());
  }
}

TEST(EdgeEnvironment, TheCoordinatorsSettingsLandInDevdOptions) {
  auto none = read({});
  ASSERT_TRUE(none.ok()) << none.error();
  EXPECT_EQ(none->devd.path, "");
  EXPECT_EQ(none->devd.linger_ms, 2000);
  EXPECT_FALSE(none->devd.any_user);
  EXPECT_FALSE(none->devd.cm_listen_grace_ms);
  auto o = read({"UROCE_DEVD=/opt/devd", "UROCE_DEVD_LINGER_MS=0", "UROCE_SHARE=all",
                 "UROCE_DEVD_LOG=/tmp/devd.log", "UROCE_DEVD_PCAP=/tmp/devd.pcap",
                 "UROCE_FAULTS=dir=tx,class=cm,loss=100%", "UROCE_CM_LISTEN_GRACE_MS=600000"});
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->devd.path, "/opt/devd");
  EXPECT_EQ(o->devd.linger_ms, 0);
  EXPECT_TRUE(o->devd.any_user);
  EXPECT_EQ(o->devd.log_path, "/tmp/devd.log");
  EXPECT_EQ(o->devd.capture_path, "/tmp/devd.pcap");
  EXPECT_EQ(o->devd.faults, "dir=tx,class=cm,loss=100%");
  EXPECT_EQ(o->devd.cm_listen_grace_ms, 600000);
  auto grace = read({"UROCE_CM_LISTEN_GRACE_MS=3600001"});
  ASSERT_FALSE(grace.ok());
  EXPECT_EQ(grace.error(),
            "UROCE_CM_LISTEN_GRACE_MS must be a number from 0 to 3600000, not '3600001'");
  auto share = read({"UROCE_SHARE=1"});
  ASSERT_TRUE(share.ok()) << share.error();
  EXPECT_FALSE(share->devd.any_user);  // only "all"
}

TEST(EdgeEnvironment, TheDeviceListsSourceAsTheEnvironmentSaysIt) {
  auto none = device_source(Env({}).get());
  EXPECT_FALSE(none.devices);
  EXPECT_EQ(none.config_path, "");
  // No UROCE_DEVICES: the host's interfaces are read for the default list; lo is in every
  // network namespace.
  ASSERT_TRUE(none.interfaces);
  bool lo = false;
  for (const auto& i : *none.interfaces) lo = lo || (i.name == "lo" && i.loopback);
  EXPECT_TRUE(lo);
  EXPECT_FALSE(device_source(Env({"UROCE_DEVICES=127.0.0.2"}).get()).interfaces);
  const Env env({"UROCE_DEVICES=", "UROCE_CONFIG=/etc/x.conf"});
  auto set = device_source(env.get());
  EXPECT_EQ(set.devices, "");  // set, if empty: the config file's faults= are not used
  EXPECT_EQ(set.config_path, "/etc/x.conf");
  auto o = device_options(env.get());
  ASSERT_TRUE(o.ok()) << o.error();
  EXPECT_EQ(o->source.config_path, "/etc/x.conf");
}

TEST(EdgeEnvironment, FaultKeyIsTheNameWithOnlyLettersAndDigits) {
  EXPECT_EQ(engine::fault_key("uroce0"), "uroce0");
  EXPECT_EQ(engine::fault_key("rxe-0.a"), "rxe_0_a");
}

}  // namespace
}  // namespace uroce::edge
