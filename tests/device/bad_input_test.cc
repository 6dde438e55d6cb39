// What the network can throw at a device: garbage datagrams on port 4791, well-formed packets
// with a corrupted ICRC, and a peer that disappears mid-run. The device counts and drops, the
// traffic that matters completes with its data intact, and a vanished peer ends in error
// completions within the retry budget.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "base/prng.h"
#include "device/stats.h"
#include "device/two_devices.h"
#include "wire/aeth.h"
#include "wire/builder.h"

namespace uroce::engine {
namespace {

using test::RawSender;
using test::Side;

std::uint64_t total_drops(const datapath::UdpCounters& c) {
  std::uint64_t n = 0;
  for (auto d : c.rx_drops) n += d;
  return n;
}

TEST(BadInput, GarbageDatagramsAreCountedWhileRealTrafficCompletes) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const junk_ip = test::unique_ip();
  // Exclusive devices: on a shared one, garbage whose QPN bytes name no context goes to the
  // coordinator, which counts it there (SharedDeviceInfo::unsteered), not here.
  Side a, b;
  test::SideOptions excl;
  excl.sharing = UdpDevice::Sharing::kExclusive;
  test::make_side(a, a_ip, excl);
  test::make_side(b, b_ip, excl);
  test::connect(a, b, b_ip);
  test::connect(b, a, a_ip);
  for (std::size_t i = 0; i < 65536; ++i) a.buf[i] = static_cast<std::byte>(i * 31 + 7);

  RawSender junk(junk_ip, 0);
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
    junk.send(b_ip, ConstBytes(g).first(len));
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
  // check (random bytes pass the ICRC with probability 2^-16 at most; none does with this seed),
  // the datapath's or, for what parses as a message continuation, the engine's (issue 14).
  const std::uint64_t engine_bad_icrc =
      b.dev->engine().counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)];
  EXPECT_EQ(total_drops(c) + engine_bad_icrc, static_cast<std::uint64_t>(kGarbage));
  EXPECT_EQ(b.dev->engine().counters().rx_unknown_qpn, 0u);
  EXPECT_EQ(b.dev->device().find_qp(b.qpn)->counters().out_of_sequence, 0u);
}

TEST(BadInput, CorruptedIcrcNeverTouchesMemory) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const forger_ip = test::unique_ip();
  Side a, b;
  test::make_side(a, a_ip);
  test::make_side(b, b_ip);
  test::connect(a, b, b_ip);
  test::connect(b, a, a_ip);
  // Well-formed RDMA WRITEs to b's QP, PSN and rkey right, every one with one payload bit
  // flipped after its ICRC was computed.
  constexpr std::uint16_t kPort = 4791;
  RawSender forger(forger_ip, kPort);
  constexpr int kPackets = 64;
  std::vector<std::byte> payload(512, std::byte{0xee});
  std::vector<std::byte> frame(2048);
  for (int i = 0; i < kPackets; ++i) {
    wire::OuterHeaders o;
    o.src = test::v4(forger_ip);
    o.dst = test::v4(b_ip);
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
    forger.send(b_ip, ConstBytes(frame).subspan(28));
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

// A third host that knows a live connection's QPNs, PSNs, rkey and address (all easy to guess)
// sends well-formed packets with valid ICRCs into it: an RDMA WRITE at the responder's expected
// PSN, and an RNR NAK, a sequence NAK, an ACK of everything and a remote access NAK at the
// requester's outstanding PSNs. The QPs take packets only from their path's address (rxe's
// check_addr()): every forged packet is counted and dropped, and the connection's own traffic
// before and after completes with its data.
TEST(BadInput, PacketsFromAThirdHostNeverReachAConnection) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const forger_ip = test::unique_ip();
  Side a, b;
  test::make_side(a, a_ip);
  test::make_side(b, b_ip);
  // ACK timeout 0, no ACK timer: only a NAK (a forged one, if it were taken) could make a
  // retransmit while a is driven alone below, however slow the machine (loopback loses none of
  // this test's few packets).
  test::connect(a, b, b_ip, 0);
  test::connect(b, a, a_ip);
  for (std::size_t i = 0; i < 131072; ++i) a.buf[i] = static_cast<std::byte>(i * 31 + 7);
  constexpr std::size_t kLen = 8192;  // 8 packets at MTU 1024
  constexpr std::size_t kTarget = 262144;
  std::vector<Sge> sges(12);
  auto post_writes = [&](int first, int n) {
    std::vector<SendWr> wrs(static_cast<std::size_t>(n));
    for (int i = 0; i < n; ++i) {
      const auto k = static_cast<std::size_t>(first + i);
      sges[k] = Sge{a.va(k * kLen), static_cast<std::uint32_t>(kLen), a.mr.lkey};
      wrs[static_cast<std::size_t>(i)] = test::write_wr(k, sges[k], b, kTarget + k * kLen);
    }
    ASSERT_EQ(a.dev->device().post_send(a.qp, wrs, nullptr), Errc::kOk);
  };
  // Before: 8 WRITEs (PSNs 0x100..0x13f).
  post_writes(0, 8);
  auto wcs = test::run_until(a, b, 8);
  ASSERT_EQ(wcs.size(), 8u);
  for (const Wc& wc : wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_name(wc.status);
  ASSERT_EQ(std::memcmp(a.buf.data(), b.buf.data() + kTarget, 8 * kLen), 0);
  constexpr std::uint32_t kNextPsn = 0x100 + 8 * 8;

  constexpr std::uint16_t kPort = 4791;
  RawSender forger(forger_ip, kPort);
  std::vector<std::byte> frame(2048);
  auto forge = [&](const char* to, const wire::TransportHeaders& h, ConstBytes payload) {
    wire::OuterHeaders o;
    o.src = test::v4(forger_ip);
    o.dst = test::v4(to);
    o.src_port = kPort;  // what the receiver sees and puts in the ICRC's UDP header
    o.ethernet = false;
    frame.resize(2048);
    frame.resize(wire::build_frame(frame, o, h, payload));
    forger.send(to, ConstBytes(frame).subspan(wire::kIpv4Bytes + wire::kUdpBytes));
  };
  const transport::Qp& qa = *a.dev->device().find_qp(a.qpn);
  const transport::Qp& qb = *b.dev->device().find_qp(b.qpn);

  // An RDMA WRITE over the data just written, at b's expected PSN, with b's rkey.
  wire::TransportHeaders w;
  w.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteOnly);
  w.bth.dest_qpn = b.qpn;
  w.bth.psn = kNextPsn;
  w.bth.ack_req = true;
  const std::vector<std::byte> junk(512, std::byte{0xee});
  w.reth = wire::Reth{b.va(kTarget), b.mr.rkey, static_cast<std::uint32_t>(junk.size())};
  const std::uint64_t b_sent = qb.counters().packets_sent;
  forge(b_ip, w, junk);
  test::receive(b, 1);
  EXPECT_EQ(qb.counters().src_addr_mismatch, 1u);
  EXPECT_EQ(qb.counters().packets_received, 64u);
  EXPECT_EQ(qb.counters().packets_sent, b_sent);  // no ACK for it
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + kTarget, 8 * kLen), 0);

  // After: 4 more WRITEs (PSNs 0x140..0x15f), sent but not yet received by b; the forged
  // responses reach a first.
  const std::uint64_t a_sent = qa.counters().packets_sent + 32;
  post_writes(8, 4);
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (qa.counters().packets_sent < a_sent && UdpDevice::now() < give_up) a.dev->progress();
  ASSERT_EQ(qa.counters().packets_sent, a_sent);
  auto response = [&](std::uint32_t psn, std::uint8_t syndrome) {
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcAcknowledge);
    h.bth.dest_qpn = a.qpn;
    h.bth.psn = psn;
    h.aeth = wire::Aeth{syndrome, 12};
    forge(a_ip, h, {});
  };
  response(kNextPsn, wire::make_rnr_nak_syndrome(31));
  response(kNextPsn, wire::make_nak_syndrome(wire::NakCode::kPsnSequenceError));
  response(kNextPsn + 31, wire::make_ack_syndrome());
  response(kNextPsn, wire::make_nak_syndrome(wire::NakCode::kRemoteAccessError));
  test::receive(a, 4);
  Wc early[16];
  EXPECT_EQ(a.dev->device().poll_cq(a.cq, early).value(), 0u);  // nothing completed or failed
  EXPECT_EQ(qa.counters().src_addr_mismatch, 4u);
  EXPECT_EQ(qa.counters().rnr_naks_received, 0u);
  EXPECT_EQ(qa.counters().seq_naks_received, 0u);
  EXPECT_EQ(qa.counters().other_naks_received, 0u);
  EXPECT_EQ(qa.counters().packets_sent, a_sent);  // no retransmission
  EXPECT_EQ(qa.state(), QpState::kRts);
  EXPECT_EQ(qa.outstanding_send_wqes(), 4u);

  wcs = test::run_until(a, b, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (const Wc& wc : wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_name(wc.status);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + kTarget, 12 * kLen), 0);
  EXPECT_EQ(qb.counters().out_of_sequence, 0u);
  EXPECT_EQ(qb.counters().duplicate_requests, 0u);
  // Every forged packet passed the ICRC check and reached its QP.
  for (Side* s : {&a, &b}) {
    EXPECT_EQ(total_drops(s->dev->datapath().counters()), 0u);
    EXPECT_EQ(s->dev->engine().counters().rx_unknown_qpn, 0u);
  }
  // `uroce stats`: per QP and summed on the device line.
  const std::string text = format_stats_text(a.dev->stats(), true);
  EXPECT_NE(text.find(" src_addr_drops 4 src_port_drops 0 unknown_qpn "), std::string::npos)
      << text;
  EXPECT_NE(text.find(" src_addr_drops 4 src_port_drops 0 outstanding_send_wqes "),
            std::string::npos)
      << text;
  EXPECT_NE(format_stats_json(b.dev->stats(), false).find(",\"src_addr_drops\":1,"),
            std::string::npos);
}

// Issue 44's attack, from the peer's own host: any user there can bind the peer's address on an
// ephemeral port, and send SEND Only packets with the right QPN, a window of PSNs from the
// responder's next expected one on, and valid ICRCs, ahead of the peer's own SENDs at those
// PSNs. Against a check of the address alone one such SEND, too long for the receive buffer,
// failed the connection (a local length error at the responder, retry exceeded at the
// requester). The QP also holds its peer to its UDP source port, known (a peer named as uroce:
// 4791) or learned from the peer's first packet in sequence: every forged packet is counted and
// dropped, and the connection's own SENDs complete with their data.
void forged_sends_from_the_peers_address(bool peer_named_as_uroce) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  test::SideOptions oa, ob;
  if (peer_named_as_uroce) {
    oa.device.sr_peers = SrPeers{false, {test::v4(b_ip)}};
    ob.device.sr_peers = SrPeers{false, {test::v4(a_ip)}};
  }
  test::make_side(a, a_ip, oa);
  test::make_side(b, b_ip, ob);
  test::connect(a, b, b_ip);
  test::connect(b, a, a_ip);
  const transport::Qp& qb = *b.dev->device().find_qp(b.qpn);
  EXPECT_EQ(qb.peer_udp_port(),
            peer_named_as_uroce ? std::optional<std::uint16_t>(wire::kRoceV2Port) : std::nullopt);
  constexpr std::size_t kLen = 256;
  constexpr int kRound = 8;
  for (std::size_t i = 0; i < 2 * kRound * kLen; ++i) a.buf[i] = static_cast<std::byte>(i * 13 + 1);
  std::vector<Sge> rsges;
  std::vector<RecvWr> recvs;
  for (int i = 0; i < 2 * kRound; ++i) {
    rsges.push_back(Sge{b.va(65536 + static_cast<std::size_t>(i) * kLen), kLen, b.mr.lkey});
  }
  for (int i = 0; i < 2 * kRound; ++i) recvs.push_back(RecvWr{100u + i, std::span(&rsges[i], 1)});
  ASSERT_EQ(b.dev->device().post_recv(b.qp, recvs, nullptr), Errc::kOk);
  std::vector<Sge> sges(2 * kRound);
  auto post_sends = [&](int first) {
    std::vector<SendWr> wrs(kRound);
    for (int i = 0; i < kRound; ++i) {
      const auto k = static_cast<std::size_t>(first + i);
      sges[k] = Sge{a.va(k * kLen), static_cast<std::uint32_t>(kLen), a.mr.lkey};
      wrs[static_cast<std::size_t>(i)].wr_id = k;
      wrs[static_cast<std::size_t>(i)].opcode = WrOpcode::kSend;
      wrs[static_cast<std::size_t>(i)].sg_list = std::span(&sges[k], 1);
      wrs[static_cast<std::size_t>(i)].send_flags = kSendSignaled;
    }
    ASSERT_EQ(a.dev->device().post_send(a.qp, wrs, nullptr), Errc::kOk);
  };
  auto expect_round = [&](int first) {
    const auto wcs = test::run_until(a, b, kRound);
    ASSERT_EQ(wcs.size(), static_cast<std::size_t>(kRound));
    for (const Wc& wc : wcs) EXPECT_EQ(wc.status, WcStatus::kSuccess) << wc_status_name(wc.status);
    Wc got[kRound];
    std::size_t n = 0;
    const Instant give_up = UdpDevice::now() + Duration::s(20);
    while (n < kRound && UdpDevice::now() < give_up) {
      b.dev->progress();
      auto k = b.dev->device().poll_cq(b.cq, std::span(got + n, kRound - n));
      if (k.ok()) n += k.value();
    }
    ASSERT_EQ(n, static_cast<std::size_t>(kRound));
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(got[i].status, WcStatus::kSuccess) << wc_status_name(got[i].status);
      EXPECT_EQ(got[i].wr_id, 100u + static_cast<std::uint64_t>(first) + i);
      EXPECT_EQ(got[i].byte_len, kLen);
    }
    const std::size_t at = static_cast<std::size_t>(first) * kLen;
    EXPECT_EQ(std::memcmp(a.buf.data() + at, b.buf.data() + 65536 + at, kRound * kLen), 0);
  };
  // The connection runs: PSNs 0x100..0x107.
  post_sends(0);
  expect_round(0);
  EXPECT_EQ(qb.peer_udp_port(), wire::kRoceV2Port);

  // The attacker, on a's address, forges the next 32 PSNs before a sends them.
  RawSender attacker(a_ip, 0);
  const std::uint16_t port = attacker.port();
  ASSERT_NE(port, wire::kRoceV2Port);
  constexpr std::uint32_t kWindow = 32;
  const std::vector<std::byte> junk(512, std::byte{0xee});  // longer than a receive buffer
  std::vector<std::byte> frame(2048);
  for (std::uint32_t i = 0; i < kWindow; ++i) {
    wire::OuterHeaders o;
    o.src = test::v4(a_ip);
    o.dst = test::v4(b_ip);
    o.src_port = port;  // in the ICRC: a valid one for the packet as b receives it
    o.ethernet = false;
    wire::TransportHeaders h;
    h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
    h.bth.dest_qpn = b.qpn;
    h.bth.psn = 0x100 + kRound + i;
    h.bth.ack_req = true;
    frame.resize(2048);
    frame.resize(wire::build_frame(frame, o, h, junk));
    attacker.send(b_ip, ConstBytes(frame).subspan(wire::kIpv4Bytes + wire::kUdpBytes));
  }
  const std::uint64_t b_sent = qb.counters().packets_sent;
  const std::uint64_t b_received = qb.counters().packets_received;
  test::receive(b, kWindow);
  EXPECT_EQ(qb.counters().src_port_mismatch, kWindow);
  EXPECT_EQ(qb.counters().src_addr_mismatch, 0u);
  EXPECT_EQ(qb.counters().packets_received, b_received);
  EXPECT_EQ(qb.counters().packets_sent, b_sent);  // no ACK, no NAK
  EXPECT_EQ(qb.state(), QpState::kRts);
  EXPECT_EQ(total_drops(b.dev->datapath().counters()), 0u);  // every ICRC was valid

  // The peer's own SENDs at those PSNs: new, executed, with their data.
  post_sends(kRound);
  expect_round(kRound);
  EXPECT_EQ(qb.counters().duplicate_requests, 0u);
  EXPECT_EQ(qb.counters().out_of_sequence, 0u);
  const std::string text = format_stats_text(b.dev->stats(), true);
  EXPECT_NE(text.find(" src_addr_drops 0 src_port_drops 32 "), std::string::npos) << text;
}

TEST(BadInput, ForgedSendsFromThePeersAddressOnAnotherPortAreDropped) {
  forged_sends_from_the_peers_address(false);
}

TEST(BadInput, ForgedSendsFromAUrocePeersAddressOnAnotherPortAreDropped) {
  forged_sends_from_the_peers_address(true);
}

// The other side of the check: over IPv6 a legitimate peer's packets pass it. Loopback has one
// IPv6 address, so the two QPs share one device at ::1 (its packets cross its socket).
TEST(BadInput, AnIpv6PeerPassesTheSourceCheck) {
  std::vector<std::byte> buf(1 << 16);
  DeviceConfig cfg;
  cfg.name = "uroce6";
  cfg.ip.v6 = true;
  ASSERT_EQ(::inet_pton(AF_INET6, "::1", cfg.ip.bytes.data()), 1);
  {
    // A host without IPv6 (disabled in some containers) has no ::1 to test with.
    const int fd = ::socket(AF_INET6, SOCK_DGRAM, 0);
    sockaddr_in6 sa{};
    sa.sin6_family = AF_INET6;
    sa.sin6_addr = in6addr_loopback;
    const bool have_ipv6 = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0;
    if (fd >= 0) ::close(fd);
    if (!have_ipv6) GTEST_SKIP() << "no IPv6 loopback address";
  }
  // A device sends to port 4791 only, and ::1 is one address: this test waits for its turn on
  // [::1]:4791 (support/test_net.h).
  auto turn = ::uroce::test::FixedClaim::wait("[::1]:4791");
  ASSERT_TRUE(turn) << "another test process held [::1]:4791 for two minutes";
  auto opened = UdpDevice::open(cfg, wire::kRoceV2Port, "");
  ASSERT_TRUE(opened.ok()) << opened.error();
  UdpDevice& ud = *opened.value();
  Device& dev = ud.device();
  const PdHandle pd = dev.alloc_pd().value();
  const MrInfo mr = dev.reg_mr(pd, buf.data(), buf.size(), test::kAllAccess).value();
  const CqHandle cq = dev.create_cq(CqInitAttr{64, 0, 0})->handle;
  QpInitAttr init;
  init.send_cq = cq;
  init.recv_cq = cq;
  init.cap = QpCap{16, 16, 1, 1, 64};
  const QpInfo q[2] = {dev.create_qp(pd, init).value(), dev.create_qp(pd, init).value()};
  for (int i = 0; i < 2; ++i) {
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.port_num = 1;
    a.qp_access_flags = test::kAllAccess;
    ASSERT_EQ(dev.modify_qp(q[i].handle, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags),
              Errc::kOk);
    a.qp_state = QpState::kRtr;
    a.ah_attr.dgid = verbs::gid_from_ip(cfg.ip);
    a.ah_attr.is_global = true;
    a.path_mtu = Mtu::k1024;
    a.dest_qp_num = q[1 - i].qp_num;
    a.max_dest_rd_atomic = 1;
    ASSERT_EQ(dev.modify_qp(q[i].handle, a,
                            kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                                kQpMaxDestRdAtomic | kQpMinRnrTimer),
              Errc::kOk);
    a.qp_state = QpState::kRts;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    ASSERT_EQ(dev.modify_qp(
                  q[i].handle, a,
                  kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic),
              Errc::kOk);
  }
  for (std::size_t i = 0; i < 4096; ++i) buf[i] = static_cast<std::byte>(i * 7 + 1);
  const Sge sge{reinterpret_cast<std::uint64_t>(buf.data()), 4096, mr.lkey};
  SendWr w;
  w.wr_id = 1;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = std::span(&sge, 1);
  w.rdma = {reinterpret_cast<std::uint64_t>(buf.data()) + 32768, mr.rkey};
  w.send_flags = kSendSignaled;
  ASSERT_EQ(dev.post_send(q[0].handle, std::span(&w, 1), nullptr), Errc::kOk);
  std::vector<Wc> got;
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (got.empty() && UdpDevice::now() < give_up) {
    ud.wait(Duration::ms(1));
    Wc wcs[4];
    auto k = dev.poll_cq(cq, wcs);
    if (k.ok()) got.insert(got.end(), wcs, wcs + k.value());
  }
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].status, WcStatus::kSuccess) << wc_status_name(got[0].status);
  EXPECT_EQ(std::memcmp(buf.data(), buf.data() + 32768, 4096), 0);
  for (const QpInfo& i : q) EXPECT_EQ(dev.find_qp(i.qp_num)->counters().src_addr_mismatch, 0u);
  EXPECT_EQ(dev.find_qp(q[1].qp_num)->counters().packets_received, 4u);
}

TEST(BadInput, PeerGoneMidRunEndsInErrorCompletionsWithinTheRetryBudget) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  test::SideOptions deep;
  deep.max_send_wr = 64;
  test::make_side(a, a_ip, deep);
  test::make_side(b, b_ip);
  // ACK timeout 4.096 us * 2^8 (about 1 ms), 3 retries.
  test::connect(a, b, b_ip, 8, 3);
  test::connect(b, a, a_ip);
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
