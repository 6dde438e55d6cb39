#include "device/device_config.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cerrno>

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
              "[sr_peers=PEERS] [aead=MODE] [psk=HEX]'")
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
