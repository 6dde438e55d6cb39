// The seal trailer and the interface MTU (issue 44, docs/SECURITY.md): a device that seals
// offers a port MTU that leaves room for the 28-byte trailer, so that a full-MTU sealed packet
// still fits its interface. Run in a network namespace of the test's own whose loopback has an
// MTU of 1104: just enough for a plain packet of 1024 bytes of payload (IPv4 20 + UDP 8 + BTH 12
// + RETH 16 + 1024 + ICRC 4 = 1084 bytes, within rxe's 80-byte budget), not for a sealed one
// (1112). Skipped where the test may not make a network namespace.

#include <net/if.h>
#include <sched.h>
#include <sys/ioctl.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "capture/pcap_file.h"
#include "datapath/udp.h"
#include "device/two_devices.h"

namespace uroce::engine {
namespace {

using test::Side;

constexpr std::uint32_t kLoMtu = 1104;
constexpr const char* kA = "127.0.44.1";
constexpr const char* kB = "127.0.44.2";

seal::Settings sealing(seal::Mode m) {
  seal::Settings s;
  s.mode = m;
  if (m != seal::Mode::kOff)
    s.key = seal::parse_key_hex("00112233445566778899aabbccddeeff").value();
  return s;
}

// Moves this process into a new network namespace and brings its loopback up with kLoMtu; the
// reason when it cannot (the test is then skipped).
std::string enter_small_loopback() {
  static std::string why = [] {
    if (::unshare(CLONE_NEWNET) != 0)
      return std::string("unshare(CLONE_NEWNET): ") + std::strerror(errno);
    const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    ifreq req{};
    std::strncpy(req.ifr_name, "lo", IFNAMSIZ - 1);
    req.ifr_mtu = static_cast<int>(kLoMtu);
    const bool ok = ::ioctl(fd, SIOCSIFMTU, &req) == 0 && ::ioctl(fd, SIOCGIFFLAGS, &req) == 0;
    req.ifr_flags |= IFF_UP;
    const bool up = ok && ::ioctl(fd, SIOCSIFFLAGS, &req) == 0;
    ::close(fd);
    return up ? std::string() : std::string("loopback MTU: ") + std::strerror(errno);
  }();
  return why;
}

// The IPv4 total length of every frame of a capture (Ethernet II framing).
std::vector<std::size_t> ip_lengths(const std::string& pcap) {
  std::vector<std::size_t> out;
  auto scan = capture::for_each_record(pcap, [&](const capture::PcapRecord& rec) {
    if (rec.data.size() >= 14 + 20) out.push_back(load_be16(rec.data, 14 + 2));
  });
  EXPECT_TRUE(scan.ok()) << scan.error();
  return out;
}

void open_side(Side& s, const char* ip, seal::Mode mode, const std::string& capture = {}) {
  test::SideOptions o;
  o.device.seal = sealing(mode);
  o.capture = capture;
  o.buf_bytes = 1 << 19;
  o.netdev_mtu = 0;  // the interface's
  test::make_side(s, ip, o);
}

// Without a namespace: the port MTU a device offers, from an interface MTU it is given.
TEST(SealedMtu, ThePortMtuLeavesRoomForTheTrailer) {
  EXPECT_EQ(seal::roce_share_of_mtu(1104, seal::Mode::kOff), 1104u);
  for (seal::Mode m : {seal::Mode::kAuthenticate, seal::Mode::kEncrypt, seal::Mode::kRequire}) {
    EXPECT_EQ(seal::roce_share_of_mtu(1104, m), 1104u - wire::kSealTrailerBytes);
    EXPECT_EQ(seal::roce_share_of_mtu(20, m), 0u);
  }
  // rxe's derivation (80 bytes of headers) on what is left: 1104 gives 1024 plain, 512 sealed;
  // 4204 (4096 + 80 + 28) is the least that gives 4096 sealed.
  EXPECT_EQ(verbs::port_mtu_for_netdev(seal::roce_share_of_mtu(1104, seal::Mode::kOff)),
            Mtu::k1024);
  EXPECT_EQ(verbs::port_mtu_for_netdev(seal::roce_share_of_mtu(1104, seal::Mode::kEncrypt)),
            Mtu::k512);
  EXPECT_EQ(verbs::port_mtu_for_netdev(seal::roce_share_of_mtu(4204, seal::Mode::kEncrypt)),
            Mtu::k4096);
  EXPECT_EQ(verbs::port_mtu_for_netdev(seal::roce_share_of_mtu(4203, seal::Mode::kEncrypt)),
            Mtu::k2048);
}

class SealedMtuOnSmallLoopback : public ::testing::TestWithParam<seal::Mode> {};

// Both ends on the 1104-byte loopback: a plain device offers 1024, a sealing one 512. A 256 KiB
// WRITE between two sealing devices at the path MTU they offer completes, and no packet either
// sent is longer than the interface MTU, nor was any lost to a send error.
TEST_P(SealedMtuOnSmallLoopback, AFullMtuSealedPacketFitsTheInterface) {
  if (const std::string why = enter_small_loopback(); !why.empty()) GTEST_SKIP() << why;
  const seal::Mode mode = GetParam();
  ASSERT_EQ(datapath::interface_mtu(test::v4(kA)).value(), kLoMtu);
  const std::string cap = (std::filesystem::temp_directory_path() /
                           ("uroce-aead-mtu-" + std::to_string(::getpid()) + ".pcap"))
                              .string();
  Side a, b;
  open_side(a, kA, mode, cap);
  open_side(b, kB, mode);
  const std::uint32_t offered = mode == seal::Mode::kOff ? 1024u : 512u;
  ASSERT_EQ(a.dev->device().active_mtu_bytes(), offered);
  ASSERT_EQ(b.dev->device().active_mtu_bytes(), offered);
  test::connect(a, b, kB, 14, 7, a.dev->device().active_mtu());
  test::connect(b, a, kA, 14, 7, b.dev->device().active_mtu());
  constexpr std::size_t kBytes = 256 * 1024;
  for (std::size_t i = 0; i < kBytes; ++i) a.buf[i] = static_cast<std::byte>(i * 7 + 1);
  const Sge sge{a.va(0), static_cast<std::uint32_t>(kBytes), a.mr.lkey};
  const SendWr w = test::write_wr(1, sge, b, 0);
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&w, 1), nullptr), Errc::kOk);
  const auto wcs = test::run_until(a, b, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << wc_status_name(wcs[0].status);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data(), kBytes), 0);
  a.dev->flush_capture();
  const auto lengths = ip_lengths(cap);
  EXPECT_GE(lengths.size(), kBytes / offered);
  std::size_t longest = 0;
  for (std::size_t n : lengths) longest = std::max(longest, n);
  EXPECT_LE(longest, kLoMtu);
  // A full packet: 1084 bytes plain, 600 sealed (20 + 8 + 12 + 16 + 512 + 28 + 4).
  EXPECT_EQ(longest, mode == seal::Mode::kOff ? 1084u : 600u);
  EXPECT_EQ(a.dev->datapath().counters().tx_errors, 0u);
  EXPECT_EQ(b.dev->datapath().counters().tx_errors, 0u);
  std::filesystem::remove(cap);
}

INSTANTIATE_TEST_SUITE_P(Modes, SealedMtuOnSmallLoopback,
                         ::testing::Values(seal::Mode::kOff, seal::Mode::kAuthenticate,
                                           seal::Mode::kEncrypt),
                         [](const auto& info) { return std::string(seal::mode_name(info.param)); });

}  // namespace
}  // namespace uroce::engine
