#include "device/device_config.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>
#include <fstream>
#include <sstream>

#include "device/udp_device.h"  // open_device
#include "support/test_net.h"

namespace uroce::engine {
namespace {

TEST(DeviceConfig, ParsesNamedAndBareEntries) {
  auto list = parse_device_list("a=127.0.0.2, 127.0.0.3 b=::1");
  ASSERT_TRUE(list.ok()) << list.error();
  ASSERT_EQ(list.value().size(), 3u);
  EXPECT_EQ(list.value()[0].name, "a");
  EXPECT_EQ(ip_to_string(list.value()[0].ip), "127.0.0.2");
  EXPECT_EQ(list.value()[1].name, "uroce1");
  EXPECT_EQ(list.value()[2].name, "b");
  EXPECT_TRUE(list.value()[2].ip.v6);
}

TEST(DeviceConfig, RejectsBadEntriesWithTheEntryNamed) {
  auto bad = parse_device_list("x=300.1.1.1");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("x=300.1.1.1"), std::string::npos);
  EXPECT_FALSE(parse_device_list("").ok());
  EXPECT_FALSE(parse_device_list("0.0.0.0").ok());
  EXPECT_FALSE(parse_device_list("a=127.0.0.2 a=127.0.0.3").ok());
  EXPECT_FALSE(parse_device_list("a=127.0.0.2 b=127.0.0.2").ok());
  EXPECT_FALSE(parse_device_list("a/b=127.0.0.2").ok());
}

TEST(DeviceConfig, FileNamesLineOnError) {
  auto ok = parse_device_file("# devices\nrxe-like 10.0.0.1  # first\n\n", "f.conf");
  ASSERT_TRUE(ok.ok()) << ok.error();
  EXPECT_EQ(ok.value()[0].name, "rxe-like");
  auto bad = parse_device_file("a 10.0.0.1\nb\n", "f.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().find("f.conf:2"), std::string::npos);
}

TEST(DeviceConfig, FileChoosesTheCongestionControlPerDevice) {
  auto ok = parse_device_file(
      "a 10.0.0.1 cc=aimd\nb 10.0.0.2 faults=loss=1% cc=dcqcn-aimd\n"
      "c 10.0.0.3 cc=none faults=loss=1%\nd 10.0.0.4\n",
      "f.conf");
  ASSERT_TRUE(ok.ok()) << ok.error();
  ASSERT_EQ(ok.value().size(), 4u);
  EXPECT_EQ(ok.value()[0].congestion_control, DeviceConfig::CongestionControl::kAimd);
  EXPECT_EQ(ok.value()[1].congestion_control, DeviceConfig::CongestionControl::kDcqcnAimd);
  EXPECT_EQ(ok.value()[1].faults, "loss=1%");
  EXPECT_EQ(ok.value()[2].congestion_control, DeviceConfig::CongestionControl::kNone);
  EXPECT_EQ(ok.value()[2].faults, "loss=1%");
  EXPECT_FALSE(ok.value()[3].congestion_control);
  auto bad = parse_device_file("a 10.0.0.1\nb 10.0.0.2 cc=cubic\n", "f.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "f.conf:2: cc= must be none, dcqcn, aimd or dcqcn-aimd, not 'cubic'");
  for (const char* line : {"a 10.0.0.1 cc=aimd cc=none", "a 10.0.0.1 speed=1",
                           "a 10.0.0.1 cc=aimd faults=loss=1% x", "a 10.0.0.1 faults= faults="}) {
    auto r = parse_device_file(line, "f.conf");
    ASSERT_FALSE(r.ok()) << line;
    EXPECT_EQ(r.error(),
              "f.conf:1: expected 'name address [faults=SPEC] [cc=NAME] [sr=0|1] "
              "[sr_peers=PEERS] [rxe_flush_peers=PEERS] [recovery=0|1] [aead=MODE] [psk=HEX]'")
        << line;
  }
}

TEST(DeviceConfig, FileChoosesSelectiveRepeatAndItsPeersPerDevice) {
  auto ok = parse_device_file(
      "a 10.0.0.1 sr_peers=10.0.0.2,10.0.0.3\nb 10.0.0.2 sr=0 cc=aimd\n"
      "c 10.0.0.3 sr_peers=all sr=1\nd 10.0.0.4\n",
      "f.conf");
  ASSERT_TRUE(ok.ok()) << ok.error();
  ASSERT_EQ(ok.value().size(), 4u);
  ASSERT_TRUE(ok.value()[0].sr_peers);
  EXPECT_EQ(ok.value()[0].sr_peers->addresses,
            (std::vector<wire::IpAddress>{wire::IpAddress::v4(0x0a000002),
                                          wire::IpAddress::v4(0x0a000003)}));
  EXPECT_FALSE(ok.value()[0].selective_repeat);
  EXPECT_EQ(ok.value()[1].selective_repeat, false);
  EXPECT_EQ(ok.value()[2].selective_repeat, true);
  ASSERT_TRUE(ok.value()[2].sr_peers);
  EXPECT_TRUE(ok.value()[2].sr_peers->all);
  EXPECT_FALSE(ok.value()[3].selective_repeat);
  EXPECT_FALSE(ok.value()[3].sr_peers);
  auto bad = parse_device_file("a 10.0.0.1 sr=2\n", "f.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "f.conf:1: sr= must be 0 or 1, not '2'");
  bad = parse_device_file("a 10.0.0.1 sr_peers=10.0.0.2,nobody\n", "f.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(),
            "f.conf:1: sr_peers=: 'nobody' is neither 'all' nor an IPv4 or IPv6 address");
}

// rxe_flush_peers= (UROCE_RXE_FLUSH_PEERS in the file): the peers sent FLUSH with rxe's ICRC.
TEST(DeviceConfig, FileNamesThePeersThatGetRxesFlushIcrc) {
  auto ok = parse_device_file(
      "a 10.0.0.1 rxe_flush_peers=10.0.0.2,fd00::2\nb 10.0.0.2 rxe_flush_peers=all sr=0\n"
      "c 10.0.0.3\n",
      "f.conf");
  ASSERT_TRUE(ok.ok()) << ok.error();
  ASSERT_EQ(ok.value().size(), 3u);
  ASSERT_TRUE(ok.value()[0].rxe_flush_peers);
  EXPECT_FALSE(ok.value()[0].rxe_flush_peers->all);
  ASSERT_EQ(ok.value()[0].rxe_flush_peers->addresses.size(), 2u);
  EXPECT_EQ(ok.value()[0].rxe_flush_peers->addresses[0], wire::IpAddress::v4(0x0a000002));
  EXPECT_TRUE(ok.value()[0].rxe_flush_peers->addresses[1].v6);
  EXPECT_FALSE(ok.value()[0].sr_peers);  // a list of its own
  ASSERT_TRUE(ok.value()[1].rxe_flush_peers);
  EXPECT_TRUE(ok.value()[1].rxe_flush_peers->all);
  EXPECT_FALSE(ok.value()[2].rxe_flush_peers);
  auto bad = parse_device_file("a 10.0.0.1 rxe_flush_peers=rxe0\n", "f.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(),
            "f.conf:1: rxe_flush_peers=: 'rxe0' is neither 'all' nor an IPv4 or IPv6 address");
}

TEST(DeviceConfig, FileTurnsTheLossRecoveryOnOrOffPerDevice) {
  auto ok = parse_device_file("a 10.0.0.1 recovery=0\nb 10.0.0.2 recovery=1 sr=0\nc 10.0.0.3\n",
                              "f.conf");
  ASSERT_TRUE(ok.ok()) << ok.error();
  ASSERT_EQ(ok.value().size(), 3u);
  EXPECT_EQ(ok.value()[0].adaptive_recovery, false);
  EXPECT_EQ(ok.value()[1].adaptive_recovery, true);
  EXPECT_FALSE(ok.value()[2].adaptive_recovery);
  auto bad = parse_device_file("a 10.0.0.1 recovery=on\n", "f.conf");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error(), "f.conf:1: recovery= must be 0 or 1, not 'on'");
}

DeviceSelection by_name(const std::string& name) {
  DeviceSelection s;
  s.name = name;
  return s;
}
DeviceSelection by_ip(const std::string& ip) {
  DeviceSelection s;
  s.ip = ip;
  return s;
}

TEST(DeviceConfig, ResolvesFromTheListAndTheFile) {
  DeviceSource list;
  list.devices = "d0=127.0.0.5,d1=127.0.0.6";  // UROCE_DEVICES
  auto first = resolve_device({}, list);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first.value().name, "d0");
  auto named = resolve_device(by_name("d1"), list);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(ip_to_string(named.value().ip), "127.0.0.6");
  auto missing = resolve_device(by_name("nope"), list);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().find("d0 on 127.0.0.5"), std::string::npos);
  auto addr = resolve_device(by_ip("127.0.0.6"), list);
  ASSERT_TRUE(addr.ok());
  EXPECT_EQ(addr.value().name, "d1");
  DeviceSource file;
  file.config_path = "/nonexistent/uroce.conf";  // UROCE_CONFIG
  auto unreadable = resolve_device({}, file);
  ASSERT_FALSE(unreadable.ok());
  EXPECT_EQ(unreadable.error(), "cannot read UROCE_CONFIG file /nonexistent/uroce.conf");
  file.devices = "";  // UROCE_DEVICES set but empty: the file is read
  EXPECT_FALSE(resolve_device({}, file).ok());
}

// The host's interfaces as getifaddrs lists them (the edge's job), built by hand: an entry per
// address, and one without an address per interface.
InterfaceAddress entry(const std::string& name, const char* ip, bool up = true,
                       bool loopback = false) {
  InterfaceAddress a;
  a.name = name;
  a.up = up;
  a.loopback = loopback;
  if (ip != nullptr) a.ip = parse_ip(ip).value();
  return a;
}

std::string show(const std::vector<DeviceSpec>& list) {
  std::string s;
  for (const DeviceSpec& d : list) s += (s.empty() ? "" : " ") + d.name + "=" + ip_to_string(d.ip);
  return s;
}

TEST(InterfaceDevices, LoopbackAloneGivesNoDevice) {
  EXPECT_EQ(show(interface_devices({})), "");
  EXPECT_EQ(show(interface_devices({entry("lo", nullptr, true, true),
                                    entry("lo", "127.0.0.1", true, true),
                                    entry("lo", "::1", true, true)})),
            "");
}

TEST(InterfaceDevices, OneEthernetWithAnAddressGivesItsDevice) {
  EXPECT_EQ(show(interface_devices({entry("lo", "127.0.0.1", true, true), entry("eth0", nullptr),
                                    entry("eth0", "10.77.0.100")})),
            "uroce_eth0=10.77.0.100");
}

TEST(InterfaceDevices, InterfacesWithoutAnAddressOrDownGiveNone) {
  EXPECT_EQ(show(interface_devices({entry("dummy0", nullptr), entry("eth1", nullptr),
                                    entry("eth2", "192.0.2.7", /*up=*/false),
                                    entry("eth3", "fe80::1")})),  // link-local only
            "");
}

TEST(InterfaceDevices, SeveralAddressesGiveOneDeviceOnTheFirstIpv4) {
  EXPECT_EQ(show(interface_devices({entry("eth0", "fe80::1"), entry("eth0", "2001:db8::1"),
                                    entry("eth0", "10.0.0.1"), entry("eth0", "10.0.0.2")})),
            "uroce_eth0=10.0.0.1");
  // No IPv4: the first IPv6 address that needs no scope.
  EXPECT_EQ(show(interface_devices({entry("v6", "fe80::2"), entry("v6", "ff02::1"),
                                    entry("v6", "2001:db8::5"), entry("v6", "2001:db8::6")})),
            "uroce_v6=2001:db8::5");
}

TEST(InterfaceDevices, OrderIsByNameAndAddressesAreNotGivenTwice) {
  // Listed in index order (eth1 made first); the address of uroce0 and one repeated on two
  // interfaces go to one device only.
  DeviceSpec u0;
  u0.name = "uroce0";
  u0.ip = parse_ip("127.0.0.1").value();
  EXPECT_EQ(show(interface_devices({entry("eth1", "10.0.0.1"), entry("eth0", "10.0.0.2"),
                                    entry("br0", "10.0.0.1"), entry("odd", "127.0.0.1")},
                                   {u0})),
            "uroce_br0=10.0.0.1 uroce_eth0=10.0.0.2");
}

TEST(InterfaceDevices, NamesAreValidUniqueAndFitInIbvSysfsNameMax) {
  // a_b keeps its name; a#b and a@b, which become it, get a suffix (in name order).
  EXPECT_EQ(show(interface_devices(
                {entry("a@b", "10.0.0.1"), entry("a#b", "10.0.0.2"), entry("a_b", "10.0.0.3")})),
            "uroce_a_b_2=10.0.0.2 uroce_a_b_3=10.0.0.1 uroce_a_b=10.0.0.3");
  // Longer than Linux allows (IFNAMSIZ 16): still at most 63 bytes, distinct, and parseable.
  const std::string long_a(100, 'x');
  const std::string long_b = long_a + "y";
  auto list = interface_devices({entry(long_a, "10.0.0.4"), entry(long_b, "10.0.0.5")});
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].name, "uroce_" + long_a.substr(0, 57));
  EXPECT_EQ(list[1].name, "uroce_" + long_a.substr(0, 55) + "_2");
  for (const DeviceSpec& d : list) {
    EXPECT_LE(d.name.size(), 63u);  // IBV_SYSFS_NAME_MAX 64 with its NUL
    auto back = parse_device_list(d.name + "=" + ip_to_string(d.ip));
    EXPECT_TRUE(back.ok()) << back.error();
  }
}

TEST(InterfaceDevices, TheDefaultListKeepsUroce0FirstAndConfigurationWins) {
  std::ifstream etc("/etc/uroce/devices.conf");
  if (etc) GTEST_SKIP() << "/etc/uroce/devices.conf exists here: it is the configuration";
  DeviceSource host;
  host.interfaces = {entry("lo", "127.0.0.1", true, true), entry("eth0", "10.77.0.100")};
  auto list = configured_devices(host);
  ASSERT_TRUE(list.ok()) << list.error();
  EXPECT_EQ(show(list.value()), "uroce0=127.0.0.1 uroce_eth0=10.77.0.100");
  EXPECT_EQ(resolve_device({}, host).value().name, "uroce0");  // the first device
  EXPECT_EQ(ip_to_string(resolve_device(by_name("uroce_eth0"), host).value().ip), "10.77.0.100");
  EXPECT_EQ(resolve_device(by_ip("10.77.0.100"), host).value().name, "uroce_eth0");
  DeviceSource none;  // no interfaces read (a DeviceSource built by hand): uroce0 alone
  EXPECT_EQ(show(configured_devices(none).value()), "uroce0=127.0.0.1");
  host.devices = "10.77.0.100";  // UROCE_DEVICES wins
  EXPECT_EQ(show(configured_devices(host).value()), "uroce0=10.77.0.100");
  host.devices.reset();
  char path[] = "/tmp/uroce-ifdev-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  const std::string text = "mine 127.0.0.9\n";
  ASSERT_EQ(::write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
  ::close(fd);
  host.config_path = path;  // and so does a config file
  EXPECT_EQ(show(configured_devices(host).value()), "mine=127.0.0.9");
  ::unlink(path);
}

// The package ships /etc/uroce/devices.conf as a commented example (cmake/debian/devices.conf):
// a file that names no device leaves the default list in place, where a file that names one
// replaces it.
TEST(InterfaceDevices, AConfigFileThatNamesNoDeviceKeepsTheDefaultList) {
  std::ifstream shipped(std::string(UROCE_TEST_DATA_DIR) + "/../../cmake/debian/devices.conf");
  ASSERT_TRUE(shipped) << "the package's example config file";
  std::stringstream text;
  text << shipped.rdbuf();
  auto parsed = parse_device_file(text.str(), "devices.conf");
  ASSERT_TRUE(parsed.ok()) << parsed.error();
  EXPECT_TRUE(parsed.value().empty());
  char path[] = "/tmp/uroce-conf-XXXXXX";
  const int fd = ::mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, text.str().data(), text.str().size()),
            static_cast<ssize_t>(text.str().size()));
  ::close(fd);
  DeviceSource host;
  host.interfaces = {entry("lo", "127.0.0.1", true, true), entry("eth0", "10.77.0.100")};
  host.config_path = path;
  auto list = configured_devices(host);
  ASSERT_TRUE(list.ok()) << list.error();
  EXPECT_EQ(show(list.value()), "uroce0=127.0.0.1 uroce_eth0=10.77.0.100");
  // Uncommenting one example makes the file the list.
  std::ofstream(path, std::ios::app) << "rxe0 10.0.0.11\n";
  EXPECT_EQ(show(configured_devices(host).value()), "rxe0=10.0.0.11");
  // A bad line is still an error, not the default list.
  std::ofstream(path, std::ios::trunc) << "# nothing\nbroken\n";
  EXPECT_FALSE(configured_devices(host).ok());
  ::unlink(path);
}

TEST(DeviceConfig, OpenReportsAddressThatIsNotLocal) {
  auto dev = open_device(by_ip("192.0.2.1"));  // TEST-NET-1: never local here
  ASSERT_FALSE(dev.ok());
  EXPECT_EQ(dev.error().code, EADDRNOTAVAIL);
  EXPECT_NE(dev.error().text.find("192.0.2.1"), std::string::npos) << dev.error();
}

TEST(DeviceConfig, ASecondOpenSharesTheDevice) {
  const char* const dev_ip = test::unique_ip();
  auto a = open_device(by_ip(dev_ip));
  ASSERT_TRUE(a.ok()) << a.error();
  auto b = open_device(by_ip(dev_ip));
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_NE(a.value()->shared_port(), nullptr);
  EXPECT_NE(b.value()->shared_port(), nullptr);
}

TEST(DeviceConfig, OpenReportsPortInUseByAProgramThatDoesNotShareIt) {
  const char* const dev_ip = test::unique_ip();
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(wire::kRoceV2Port);
  ::inet_pton(AF_INET, dev_ip, &sa.sin_addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  auto b = open_device(by_ip(dev_ip));
  ::close(fd);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, EADDRINUSE) << b.error();
}

}  // namespace
}  // namespace uroce::engine
