// What the network can throw at a device: garbage datagrams on port 4791, well-formed packets
// with a corrupted ICRC, and a peer that disappears mid-run. The device counts and drops, the
// traffic that matters completes with its data intact, and a vanished peer ends in error
// completions within the retry budget.
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "base/prng.h"
#include "engine/two_devices.h"
#include "wire/builder.h"

namespace uroce::engine {
namespace {

using test::Side;

// A plain UDP socket at `ip`:`port` that sends datagrams to a device, unconnected with
// IP_PMTUDISC_DO as uroce's own sockets are (so its identification is 0).
class RawSender {
 public:
  RawSender(const char* ip, std::uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_DGRAM, 0);
    EXPECT_GE(fd_, 0);
    int pmtu = IP_PMTUDISC_DO;
    ::setsockopt(fd_, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    ::inet_pton(AF_INET, ip, &a.sin_addr);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0) << std::strerror(errno);
  }
  ~RawSender() { ::close(fd_); }
  void send(const char* ip, ConstBytes data) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(wire::kRoceV2Port);
    ::inet_pton(AF_INET, ip, &a.sin_addr);
    const auto n =
        ::sendto(fd_, data.data(), data.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
    EXPECT_EQ(n, static_cast<ssize_t>(data.size())) << std::strerror(errno);
  }

 private:
  int fd_ = -1;
};

std::uint64_t total_drops(const datapath::UdpCounters& c) {
  std::uint64_t n = 0;
  for (auto d : c.rx_drops) n += d;
  return n;
}

TEST(BadInput, GarbageDatagramsAreCountedWhileRealTrafficCompletes) {
  Side a, b;
  test::make_side(a, "127.0.0.81");
  test::make_side(b, "127.0.0.82");
  test::connect(a, b, "127.0.0.82");
  test::connect(b, a, "127.0.0.81");
  for (std::size_t i = 0; i < 65536; ++i) a.buf[i] = static_cast<std::byte>(i * 31 + 7);

  RawSender junk("127.0.0.83", 0);
  Prng rng(4791);
  constexpr int kGarbage = 3000;
  constexpr int kWrites = 8;
  std::vector<Sge> sges(kWrites);
  std::vector<SendWr> wrs(kWrites);
  for (int i = 0; i < kWrites; ++i) {
    sges[i] = Sge{a.va(static_cast<std::size_t>(i) * 8192), 8192, a.mr.lkey};
    wrs[i].wr_id = static_cast<std::uint64_t>(i);
    wrs[i].opcode = WrOpcode::kRdmaWrite;
    wrs[i].sg_list = std::span(&sges[i], 1);
    wrs[i].rdma = {b.va(262144 + static_cast<std::size_t>(i) * 8192), b.mr.rkey};
    wrs[i].send_flags = kSendSignaled;
  }
  ASSERT_EQ(a.dev->device().post_send(a.qp, wrs, nullptr), Errc::kOk);
  // Garbage of every length from 0 to 1500 bytes, interleaved with the real packets.
  std::vector<std::byte> g(1500);
  for (int i = 0; i < kGarbage; ++i) {
    const std::size_t len = rng.below(g.size() + 1);
    for (std::size_t j = 0; j < len; ++j) g[j] = static_cast<std::byte>(rng.next());
    junk.send("127.0.0.82", ConstBytes(g).first(len));
    if (i % 16 == 0) {  // the receiver keeps up, so the kernel's socket buffer never overflows
      a.dev->progress();
      b.dev->progress();
    }
  }
  const auto wcs = test::run_until(a, b, kWrites);
  ASSERT_EQ(wcs.size(), static_cast<std::size_t>(kWrites));
  for (const Wc& wc : wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_name(wc.status);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 262144, kWrites * 8192), 0);
  // Drain what is left of the garbage, then account for every datagram.
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (b.dev->datapath().counters().rx_packets <
             static_cast<std::uint64_t>(kGarbage) + a.dev->datapath().counters().tx_packets &&
         UdpDevice::now() < give_up) {
    b.dev->wait(Duration::ms(1));
  }
  const auto& c = b.dev->datapath().counters();
  EXPECT_EQ(c.rx_packets,
            static_cast<std::uint64_t>(kGarbage) + a.dev->datapath().counters().tx_packets);
  // Nothing random reached a QP: every garbage datagram was dropped by the parser or the ICRC
  // check (random bytes pass the ICRC with probability 2^-16 at most; none does with this seed).
  EXPECT_EQ(total_drops(c), static_cast<std::uint64_t>(kGarbage));
  EXPECT_EQ(b.dev->engine().counters().rx_unknown_qpn, 0u);
  EXPECT_EQ(b.dev->device().find_qp(b.qpn)->counters().out_of_sequence, 0u);
}

TEST(BadInput, CorruptedIcrcNeverTouchesMemory) {
  Side a, b;
  test::make_side(a, "127.0.0.84");
  test::make_side(b, "127.0.0.85");
  test::connect(a, b, "127.0.0.85");
  test::connect(b, a, "127.0.0.84");
  // Well-formed RDMA WRITEs to b's QP, PSN and rkey right, every one with one payload bit
  // flipped after its ICRC was computed.
  constexpr std::uint16_t kPort = 4791;
  RawSender forger("127.0.0.86", kPort);
  constexpr int kPackets = 64;
  std::vector<std::byte> payload(512, std::byte{0xee});
  std::vector<std::byte> frame(2048);
  for (int i = 0; i < kPackets; ++i) {
    wire::OuterHeaders o;
    o.src = test::v4("127.0.0.86");
    o.dst = test::v4("127.0.0.85");
    o.src_port = kPort;
    o.ethernet = false;
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly);
    h.bth.dest_qpn = b.qpn;
    h.bth.psn = 0x100;
    h.reth = wire::Reth{b.va(4096), b.mr.rkey, static_cast<std::uint32_t>(payload.size())};
    frame.resize(2048);
    frame.resize(wire::build_frame(frame, o, h, payload));
    const std::size_t bit = 28 * 8 + 28 * 8 + static_cast<std::size_t>(i) * 61;  // in payload
    frame[bit / 8] ^= std::byte{static_cast<std::uint8_t>(1u << (bit % 8))};
    forger.send("127.0.0.85", ConstBytes(frame).subspan(28));
  }
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (b.dev->datapath().counters().rx_packets < kPackets && UdpDevice::now() < give_up) {
    b.dev->wait(Duration::ms(1));
  }
  const auto& c = b.dev->datapath().counters();
  EXPECT_EQ(c.rx_packets, static_cast<std::uint64_t>(kPackets));
  EXPECT_EQ(c.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)],
            static_cast<std::uint64_t>(kPackets));
  for (std::size_t i = 0; i < 4096 + 512; ++i) ASSERT_EQ(b.buf[i], std::byte{0}) << i;
  EXPECT_EQ(b.dev->device().find_qp(b.qpn)->counters().packets_received, 0u);
}

TEST(BadInput, PeerGoneMidRunEndsInErrorCompletionsWithinTheRetryBudget) {
  Side a, b;
  test::make_side(a, "127.0.0.87", "", 64);
  test::make_side(b, "127.0.0.88");
  // ACK timeout 4.096 us * 2^8 (about 1 ms), 3 retries.
  test::connect(a, b, "127.0.0.88", 8, 3);
  test::connect(b, a, "127.0.0.87");
  constexpr int kWrites = 64;
  std::vector<Sge> sges(kWrites);
  std::vector<SendWr> wrs(kWrites);
  for (int i = 0; i < kWrites; ++i) {
    sges[i] = Sge{a.va(static_cast<std::size_t>(i) * 16384), 16384, a.mr.lkey};
    wrs[i].wr_id = static_cast<std::uint64_t>(i);
    wrs[i].opcode = WrOpcode::kRdmaWrite;
    wrs[i].sg_list = std::span(&sges[i], 1);
    wrs[i].rdma = {b.va(static_cast<std::size_t>(i) * 16384), b.mr.rkey};
    wrs[i].send_flags = kSendSignaled;
  }
  ASSERT_EQ(a.dev->device().post_send(a.qp, wrs, nullptr), Errc::kOk);
  // Let some of it through, then the peer's device goes away (its socket closes).
  std::vector<Wc> got;
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (got.size() < 4 && UdpDevice::now() < give_up) {
    a.dev->progress();
    b.dev->progress();
    Wc wcs[16];
    auto k = a.dev->device().poll_cq(a.cq, wcs);
    if (k.ok()) got.insert(got.end(), wcs, wcs + k.value());
  }
  ASSERT_GE(got.size(), 4u);
  b.dev.reset();
  const auto rest = test::run_until(a, b, kWrites - got.size());
  got.insert(got.end(), rest.begin(), rest.end());
  ASSERT_EQ(got.size(), static_cast<std::size_t>(kWrites));
  // In order: successes, then one RETRY_EXC_ERR, then the rest flushed.
  std::size_t i = 0;
  while (i < got.size() && got[i].status == WcStatus::kSuccess) ++i;
  ASSERT_LT(i, got.size());
  EXPECT_EQ(got[i].status, WcStatus::kRetryExcErr) << wc_status_name(got[i].status);
  for (std::size_t j = i + 1; j < got.size(); ++j) {
    EXPECT_EQ(got[j].status, WcStatus::kWrFlushErr) << j;
  }
  for (std::size_t j = 0; j < got.size(); ++j) EXPECT_EQ(got[j].wr_id, j);
}

}  // namespace
}  // namespace uroce::engine
