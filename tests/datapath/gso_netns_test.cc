// UDP GSO on a real (virtual) wire: the kernel cuts uroce's GSO datagrams into packets in
// software, and every packet it puts on the wire must carry a valid ICRC, which covers the IPv4
// identification the kernel gives each segment.
//
// Two network namespaces made by the test, joined by a veth pair; the sending end has UDP
// segmentation offload and GSO switched off (ethtool -K), so that the stack segments before the
// driver (validate_xmit_skb -> inet_gso_segment), as it would for a NIC without USO. An
// AF_PACKET socket on the receiving end sees each frame as it arrived; uroce's wire parser
// checks its ICRC. Needs root and `ip`/`ethtool`: skipped otherwise. Addresses are from
// 198.18.0.0/15 (RFC 2544, benchmarking) and exist only inside the test's namespaces.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "datapath/udp.h"
#include "support/ip_text.h"
#include "wire/builder.h"
#include "wire/packet.h"

namespace uroce::datapath {
namespace {

using Bytes = std::vector<std::byte>;

using test::v4;

bool run(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

// Runs the calling thread in a network namespace while it lives (sockets keep the namespace
// they were made in).
class InNetns {
 public:
  explicit InNetns(const std::string& name) {
    self_ = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const int target = ::open(("/var/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
    ok_ = self_ >= 0 && target >= 0 && ::setns(target, CLONE_NEWNET) == 0;
    if (target >= 0) ::close(target);
  }
  ~InNetns() {
    if (ok_) ::setns(self_, CLONE_NEWNET);
    if (self_ >= 0) ::close(self_);
  }
  bool ok() const { return ok_; }

 private:
  int self_ = -1;
  bool ok_ = false;
};

class GsoNetns : public ::testing::Test {
 protected:
  void SetUp() override {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root (network namespaces)";
    const std::string id = std::to_string(::getpid());
    a_ = "uroce_gso_a" + id;
    b_ = "uroce_gso_b" + id;
    if (!run("ip netns add " + a_)) GTEST_SKIP() << "cannot create a network namespace";
    made_ = true;
    ASSERT_TRUE(run("ip netns add " + b_));
    ASSERT_TRUE(run("ip link add ugso_a netns " + a_ +
                    " address 02:00:c6:12:00:01 type veth peer " + "name ugso_b netns " + b_ +
                    " address 02:00:c6:12:00:02"));
    ASSERT_TRUE(run("ip -n " + a_ + " addr add 198.18.0.1/30 dev ugso_a"));
    ASSERT_TRUE(run("ip -n " + b_ + " addr add 198.18.0.2/30 dev ugso_b"));
    ASSERT_TRUE(run("ip -n " + a_ + " link set ugso_a up"));
    ASSERT_TRUE(run("ip -n " + b_ + " link set ugso_b up"));
    // No ARP on the way: the first GSO datagram goes straight out.
    ASSERT_TRUE(run("ip -n " + a_ + " neigh add 198.18.0.2 lladdr 02:00:c6:12:00:02 dev ugso_a"));
    ASSERT_TRUE(run("ip -n " + b_ + " neigh add 198.18.0.1 lladdr 02:00:c6:12:00:01 dev ugso_b"));
    // Software segmentation on the sender; no coalescing on the receiver, so that the capture
    // sees each packet as it was on the wire.
    if (!run("ip netns exec " + a_ + " ethtool -K ugso_a tx-udp-segmentation off gso off") ||
        !run("ip netns exec " + b_ + " ethtool -K ugso_b gro off")) {
      GTEST_SKIP() << "ethtool -K failed (no ethtool?)";
    }
  }
  void TearDown() override {
    if (!made_) return;
    run("ip netns del " + a_);  // takes the veth pair with it
    run("ip netns del " + b_);
  }
  std::string a_, b_;
  bool made_ = false;
};

// RDMA WRITE packets of `mtu` bytes (Middle packets, as most of a long message) followed by a
// shorter Last one: one GSO run (or more, when the run exceeds 64 segments or 64 KiB).
void queue_message(UdpDatapath& dp, const Bytes& data, std::uint32_t psn, std::size_t packets,
                   std::size_t mtu, std::size_t last) {
  for (std::size_t i = 0; i < packets; ++i) {
    const bool end = i + 1 == packets;
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(end ? wire::Opcode::kRcRdmaWriteLast
                                                 : wire::Opcode::kRcRdmaWriteMiddle);
    h.bth.dest_qpn = 0x33;
    h.bth.psn = psn + static_cast<std::uint32_t>(i);
    const std::size_t bytes = end ? last : mtu;
    h.bth.pad_count = wire::pad_for(bytes);
    std::array<std::byte, 64> hdr{};
    const std::size_t n = wire::write_headers(hdr, h, bytes);
    const std::array<ConstBytes, 1> piece = {ConstBytes(data).subspan(i * mtu, bytes)};
    wire::OuterHeaders o;
    o.dst = v4("198.18.0.2");
    ASSERT_TRUE(dp.send(Instant{}, o, ConstBytes(hdr).first(n), piece));
  }
}

TEST_F(GsoNetns, SoftwareSegmentsCarryIncrementingIdsAndValidIcrcs) {
  int capture = -1;
  std::unique_ptr<UdpDatapath> rx, tx;
  {
    InNetns in(b_);
    ASSERT_TRUE(in.ok());
    capture = ::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, htons(ETH_P_ALL));
    ASSERT_GE(capture, 0);
    sockaddr_ll ll{};
    ll.sll_family = AF_PACKET;
    ll.sll_protocol = htons(ETH_P_ALL);
    ll.sll_ifindex = static_cast<int>(::if_nametoindex("ugso_b"));
    ASSERT_NE(ll.sll_ifindex, 0);
    ASSERT_EQ(::bind(capture, reinterpret_cast<sockaddr*>(&ll), sizeof ll), 0);
    const int big = 8 << 20;
    ::setsockopt(capture, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
    UdpOptions o(v4("198.18.0.2"));
    o.gro = false;
    auto r = UdpDatapath::open(o);
    ASSERT_TRUE(r.ok()) << r.error();
    rx = std::move(r.value());
    ::setsockopt(rx->fd(), SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big);
  }
  {
    InNetns in(a_);
    ASSERT_TRUE(in.ok());
    // The feature as ethtool set it, read back through the ioctl the datapath uses; a veth
    // has no backing device, so it never counts as hardware segmentation.
    EXPECT_EQ(udp_segmentation_feature("ugso_a"), std::optional<bool>(false));
    EXPECT_FALSE(hardware_udp_segmentation("ugso_a"));
    UdpOptions o(v4("198.18.0.1"));
    o.gso = true;
    auto t = UdpDatapath::open(o);
    ASSERT_TRUE(t.ok()) << t.error();
    tx = std::move(t.value());
  }
  if (!tx->gso()) GTEST_SKIP() << "this kernel has no UDP_SEGMENT";
  Bytes data(80 * 1024);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::byte>(i * 7 + 3);
  // 1 KiB packets on a 1500-byte link: a run of 20 with a short last, one of 70 (cut at 62 by
  // the 64 KiB datagram limit), and one of 2.
  std::size_t expected = 0;
  std::uint32_t psn = 1000;
  for (const auto& [packets, last] :
       std::vector<std::pair<std::size_t, std::size_t>>{{20, 100}, {70, 1024}, {2, 8}}) {
    queue_message(*tx, data, psn, packets, 1024, last);
    tx->flush(Instant{});
    psn += static_cast<std::uint32_t>(packets);
    expected += packets;
  }
  EXPECT_EQ(tx->counters().tx_packets, expected);
  EXPECT_EQ(tx->counters().tx_errors, 0u);
  EXPECT_EQ(tx->counters().tx_gso_fallbacks, 0u) << "the kernel refused GSO on the veth";
  EXPECT_GE(tx->counters().tx_gso_datagrams, 4u);

  // Every frame as it arrived on the receiving veth.
  std::vector<Bytes> frames;
  Bytes buf(70000);
  while (frames.size() < expected) {
    pollfd p{capture, POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) break;  // hang guard: the frames are long there by now
    for (;;) {
      const ssize_t n = ::recv(capture, buf.data(), buf.size(), 0);
      if (n <= 0) break;
      const Bytes f(buf.begin(), buf.begin() + n);
      // Only RoCEv2: IPv4, UDP, port 4791 (no ARP, IPv6 neighbour discovery, ...).
      if (n < 42 || f[12] != std::byte{0x08} || f[13] != std::byte{0x00} ||
          f[23] != std::byte{17} || load_be16(f, 36) != wire::kRoceV2Port) {
        continue;
      }
      frames.push_back(f);
    }
  }
  ::close(capture);
  ASSERT_EQ(frames.size(), expected);

  // Each packet: on the wire alone (segmented, not one large datagram), its ICRC valid with the
  // identification it carries, ids 0, 1, 2, ... within each GSO datagram, PSNs in order.
  std::uint32_t want_psn = 1000;
  std::uint16_t want_id = 0;
  std::size_t nonzero_ids = 0;
  std::map<std::uint16_t, std::size_t> ids;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    auto f = wire::parse_frame(wire::LinkType::kEthernet, frames[i]);
    ASSERT_TRUE(f.ok()) << "frame " << i << ": " << wire::drop_reason_name(f.error());
    EXPECT_LE(frames[i].size(), 1514u);
    EXPECT_TRUE(f->ipv4.dont_fragment);
    const auto& bth = f->roce.bth();
    EXPECT_EQ(bth.psn(), want_psn) << i;
    ++want_psn;
    const std::uint16_t id = f->ipv4.identification;
    if (id != want_id) {
      EXPECT_EQ(id, 0) << "frame " << i << ": a new datagram starts at identification 0";
    }
    want_id = static_cast<std::uint16_t>(id + 1);
    nonzero_ids += id != 0 ? 1 : 0;
    ++ids[id];
  }
  std::printf("%zu packets on the wire in %llu datagrams (%llu GSO); identifications 0..%u\n",
              frames.size(), static_cast<unsigned long long>(tx->counters().tx_datagrams),
              static_cast<unsigned long long>(tx->counters().tx_gso_datagrams),
              static_cast<unsigned>(ids.rbegin()->first));
  EXPECT_GE(nonzero_ids, expected - 8) << "GSO datagrams were not segmented with rising ids";
  EXPECT_EQ(ids[0], tx->counters().tx_datagrams);

  // The receiving datapath: every packet verified, most by the id its ICRC reveals.
  std::size_t got = 0;
  while (got < expected) {
    pollfd p{rx->fd(), POLLIN, 0};
    if (::poll(&p, 1, 5000) != 1) break;
    got += rx->receive(
        64, [&](const wire::RocePacket&, const RxMeta& m) { EXPECT_TRUE(m.icrc_verified); });
  }
  EXPECT_EQ(got, expected);
  EXPECT_EQ(rx->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  EXPECT_EQ(rx->counters().rx_icrc_id_recovered, nonzero_ids);
}

}  // namespace
}  // namespace uroce::datapath
