// Two devices in one process over real UDP sockets on loopback: the transport, verbs and engine
// on the real network path, every RC operation with its data verified.
#include "device/udp_device.h"

#include "device/stats.h"
#include "device/two_devices.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cerrno>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace uroce::engine {
namespace {

using test::connect;
using test::make_side;
using test::run_until;
using test::Side;
using test::SideOptions;
using test::v4;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("uroce_udp_device_test_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(UdpDevice, EveryRcOperationOverLoopbackSockets) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  const std::string cap_a = temp_path("a.pcap"), cap_b = temp_path("b.pcap");
  make_side(a, a_ip, cap_a);
  make_side(b, b_ip, cap_b);
  connect(a, b, b_ip);
  connect(b, a, a_ip);
  for (std::size_t i = 0; i < 10000; ++i) a.buf[i] = static_cast<std::byte>(i * 7 + 1);
  for (std::size_t i = 0; i < 10000; ++i) b.buf[500000 + i] = static_cast<std::byte>(i * 3 + 5);
  std::uint64_t counter = 41;
  std::memcpy(b.buf.data() + 900000, &counter, 8);

  const Sge recv{b.va(200000), 8192, b.mr.lkey};
  const RecvWr rwr{77, std::span(&recv, 1)};
  ASSERT_EQ(b.dev->device().post_recv(b.qp, std::span(&rwr, 1), nullptr), Errc::kOk);

  const Sge send_sge{a.va(0), 5000, a.mr.lkey};
  const Sge read_sge{a.va(100000), 3000, a.mr.lkey};
  const Sge faa_sge{a.va(300000), 8, a.mr.lkey};
  std::vector<SendWr> wrs(4);
  wrs[0].wr_id = 1;
  wrs[0].opcode = WrOpcode::kSend;
  wrs[0].sg_list = std::span(&send_sge, 1);
  wrs[1].wr_id = 2;
  wrs[1].opcode = WrOpcode::kRdmaWrite;
  wrs[1].sg_list = std::span(&send_sge, 1);
  wrs[1].rdma = {b.va(400000), b.mr.rkey};
  wrs[2].wr_id = 3;
  wrs[2].opcode = WrOpcode::kRdmaRead;
  wrs[2].sg_list = std::span(&read_sge, 1);
  wrs[2].rdma = {b.va(500000), b.mr.rkey};
  wrs[3].wr_id = 4;
  wrs[3].opcode = WrOpcode::kAtomicFetchAndAdd;
  wrs[3].sg_list = std::span(&faa_sge, 1);
  wrs[3].atomic.remote_addr = b.va(900000);
  wrs[3].atomic.rkey = b.mr.rkey;
  wrs[3].atomic.compare_add = 1;
  for (auto& w : wrs) w.send_flags = kSendSignaled;
  ASSERT_EQ(a.dev->device().post_send(a.qp, wrs, nullptr), Errc::kOk);

  const auto wcs = run_until(a, b, 4);
  ASSERT_EQ(wcs.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(wcs[i].wr_id, i + 1);
    EXPECT_EQ(wcs[i].status, WcStatus::kSuccess) << wc_status_name(wcs[i].status);
  }
  // Data: the SEND landed, the WRITE landed, the READ brought b's bytes, the atomic added once.
  Wc rwc[4];
  auto rk = b.dev->device().poll_cq(b.cq, rwc);
  ASSERT_TRUE(rk.ok());
  ASSERT_EQ(rk.value(), 1u);
  EXPECT_EQ(rwc[0].wr_id, 77u);
  EXPECT_EQ(rwc[0].byte_len, 5000u);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 200000, 5000), 0);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 400000, 5000), 0);
  EXPECT_EQ(std::memcmp(a.buf.data() + 100000, b.buf.data() + 500000, 3000), 0);
  std::uint64_t orig = 0, now_value = 0;
  std::memcpy(&orig, a.buf.data() + 300000, 8);
  std::memcpy(&now_value, b.buf.data() + 900000, 8);
  EXPECT_EQ(orig, 41u);
  EXPECT_EQ(now_value, 42u);
  // The packets crossed real sockets with ICRCs the receiver verified.
  EXPECT_GT(b.dev->datapath().counters().rx_packets, 5u);
  // uroce's single packets carry identification 0; segment k of a GSO datagram carries k, which
  // the receiver recovers from the ICRC: exactly the segments after the first.
  const auto& ca = a.dev->datapath().counters();
  const auto& cb = b.dev->datapath().counters();
  EXPECT_EQ(cb.rx_icrc_id_recovered, ca.tx_gso_packets - ca.tx_gso_datagrams);
  EXPECT_EQ(ca.rx_icrc_id_recovered, cb.tx_gso_packets - cb.tx_gso_datagrams);
  EXPECT_EQ(cb.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  EXPECT_EQ(ca.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  EXPECT_EQ(a.dev->engine().counters().rx_unknown_qpn, 0u);
  // Both captures hold every packet sent and received, and every one is a valid RoCEv2 packet.
  const std::uint64_t sent_a = a.dev->datapath().counters().tx_packets;
  const std::uint64_t received_a = a.dev->datapath().counters().rx_packets;
  a.dev.reset();
  b.dev.reset();
  auto scan = capture::for_each_record(cap_a, [](const capture::PcapRecord& rec) {
    auto f = wire::parse_frame(wire::LinkType::kEthernet, rec.data);
    EXPECT_TRUE(f.ok()) << "frame " << rec.index << ": " << wire::drop_reason_name(f.error());
  });
  ASSERT_TRUE(scan.ok()) << scan.error();
  EXPECT_EQ(scan->records, sent_a + received_a);
  std::filesystem::remove(cap_a);
  std::filesystem::remove(cap_b);
}

// DeviceOptions::stats_file (UROCE_STATS_FILE): each device appends its counters as it closes,
// one `uroce stats` line (what the interop harness reads after a drop-in program exited).
// Selective repeat without rdma_cm (docs/ARCHITECTURE.md, "Negotiation"): the device's options
// (UROCE_SR_PEERS, UROCE_SR) decide for the RC QPs it moves to RTR, and `uroce stats --qp` shows
// it per QP.
TEST(UdpDevice, SelectiveRepeatTowardsTheConfiguredPeersShowsInTheQpStats) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool off : {false, true}) {
    Side a, b;
    SideOptions oa, ob;
    oa.device.sr_peers = SrPeers{false, {v4(b_ip)}};
    ob.device.sr_peers = SrPeers{true, {}};
    if (off) oa.device.selective_repeat = false;  // UROCE_SR=0 at A only
    make_side(a, a_ip, oa);
    make_side(b, b_ip, ob);
    connect(a, b, b_ip);
    connect(b, a, a_ip);
    EXPECT_EQ(a.dev->device().query_qp(a.qp)->attr.selective_repeat, !off);
    EXPECT_TRUE(b.dev->device().query_qp(b.qp)->attr.selective_repeat);
    const std::string text = format_stats_text(a.dev->stats(), true);
    EXPECT_NE(text.find(off ? " selective_repeat 0" : " selective_repeat 1"), std::string::npos)
        << text;
  }
}

// FLUSH towards a peer configured as the kernel's Soft-RoCE (UROCE_RXE_FLUSH_PEERS;
// docs/INTEROP.md, "FLUSH and rxe"): A's FLUSH leaves with rxe's ICRC, B (any uroce device)
// accepts it and counts it, the WRITE before it and B's answer keep the IBTA's, and the FLUSH
// completes behind the WRITE, its data in place. Without the option nothing is rxe's.
TEST(UdpDevice, FlushToAnRxePeerCarriesRxesIcrcAndCompletes) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool rxe : {true, false}) {
    Side a, b;
    SideOptions oa;
    if (rxe) oa.device.rxe_flush_peers = SrPeers{false, {v4(b_ip)}};
    make_side(a, a_ip, oa);
    make_side(b, b_ip);
    constexpr std::uint32_t kFlushAccess = test::kAllAccess | kAccessFlushGlobal;
    connect(a, b, b_ip, 14, 7, Mtu::k1024, kFlushAccess);
    connect(b, a, a_ip, 14, 7, Mtu::k1024, kFlushAccess);
    auto target = b.dev->device().reg_mr(b.pd, b.buf.data(), b.buf.size(), kFlushAccess);
    ASSERT_TRUE(target.ok());
    for (std::size_t i = 0; i < 256; ++i) a.buf[i] = static_cast<std::byte>(i * 5 + 3);
    const Sge sge{a.va(0), 256, a.mr.lkey};
    SendWr wrs[2];
    wrs[0] = test::write_wr(1, sge, b, 4096);
    wrs[0].rdma.rkey = target->rkey;
    wrs[1].wr_id = 2;
    wrs[1].opcode = WrOpcode::kFlush;
    wrs[1].rdma = {b.va(4096), target->rkey};
    wrs[1].flush.length = 256;
    wrs[1].flush.placement = wire::kFlushGlobal;
    wrs[1].flush.selectivity = wire::kFlushRange;
    wrs[1].send_flags = kSendSignaled;
    ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(wrs), nullptr), Errc::kOk);
    const std::vector<Wc> wcs = run_until(a, b, 2);
    ASSERT_EQ(wcs.size(), 2u);
    EXPECT_EQ(wcs[0].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[1].status, WcStatus::kSuccess);
    EXPECT_EQ(wcs[1].opcode, WcOpcode::kFlush);
    EXPECT_EQ(std::memcmp(b.buf.data() + 4096, a.buf.data(), 256), 0);
    const NamedCounters ca = a.dev->stats().device_counters();
    const NamedCounters cb = b.dev->stats().device_counters();
    const std::uint64_t sent = test::named_counter(ca, "tx_rxe_flush_icrc");
    const std::uint64_t taken = test::named_counter(cb, "rxe_flush_icrc");
    if (rxe) {
      // Retransmissions aside (none on loopback, unless the machine stalls), one each.
      EXPECT_GE(taken, 1u);
      EXPECT_LE(taken, sent);
    } else {
      EXPECT_EQ(sent, 0u);
      EXPECT_EQ(taken, 0u);
    }
    EXPECT_EQ(test::named_counter(cb, "icrc_err"), 0u);
    EXPECT_EQ(test::named_counter(ca, "icrc_err"), 0u);
    EXPECT_EQ(test::named_counter(ca, "rxe_flush_icrc"), 0u);  // B's answer: the IBTA's
    EXPECT_EQ(test::named_counter(cb, "tx_rxe_flush_icrc"), 0u);
  }
}

TEST(UdpDevice, CloseAppendsTheCountersToUroceStatsFile) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const std::string path = temp_path("stats.txt");
  std::filesystem::remove(path);
  Side a, b;
  SideOptions o;
  o.device.stats_file = path;
  make_side(a, a_ip, o);
  make_side(b, b_ip, o);
  connect(a, b, b_ip);
  connect(b, a, a_ip);
  const Sge recv{b.va(0), 64, b.mr.lkey};
  const RecvWr rwr{1, std::span(&recv, 1)};
  ASSERT_EQ(b.dev->device().post_recv(b.qp, std::span(&rwr, 1), nullptr), Errc::kOk);
  const Sge send{a.va(0), 10, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 2;
  wr.sg_list = std::span(&send, 1);
  wr.send_flags = kSendSignaled;
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&wr, 1), nullptr), Errc::kOk);
  ASSERT_EQ(run_until(a, b, 1).size(), 1u);  // the SEND completed: b received it and ACKed

  a.dev->close();
  b.dev->close();
  a.dev->close();  // idempotent: no second line
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 2u);
  // a sent one SEND and received its ACK; b the reverse; neither dropped anything.
  for (const std::string& l : lines) {
    EXPECT_TRUE(l.starts_with("link uroce0/1 pid " + std::to_string(::getpid()) + " ")) << l;
    EXPECT_NE(l.find(" sent_pkts 1 rcvd_pkts 1 "), std::string::npos) << l;
    EXPECT_NE(l.find(" rx_drops 0 icrc_err 0 "), std::string::npos) << l;
  }
  std::filesystem::remove(path);
}

// A program that exits with its device open (librdmacm keeps its contexts until then) still leaves
// its counters: the device stops at exit and appends them, once.
TEST(UdpDevice, ADeviceLeftOpenAppendsItsCountersAtExit) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const std::string path = temp_path("stats-exit.txt");
  std::filesystem::remove(path);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    SideOptions o;
    o.device.stats_file = path;
    // Never closed, as the drop-in's contexts are (and still reachable: no leak report).
    static Side* kept[2];
    kept[0] = new Side();
    kept[1] = new Side();
    Side& a = *kept[0];
    Side& b = *kept[1];
    make_side(a, a_ip, o);
    make_side(b, b_ip, o);
    connect(a, b, b_ip);
    connect(b, a, a_ip);
    const Sge recv{b.va(0), 64, b.mr.lkey};
    const RecvWr rwr{1, std::span(&recv, 1)};
    bool ok = b.dev->device().post_recv(b.qp, std::span(&rwr, 1), nullptr) == Errc::kOk;
    const Sge send{a.va(0), 10, a.mr.lkey};
    SendWr wr;
    wr.wr_id = 2;
    wr.sg_list = std::span(&send, 1);
    wr.send_flags = kSendSignaled;
    ok = ok && a.dev->device().post_send(a.qp, std::span(&wr, 1), nullptr) == Errc::kOk;
    ok = ok && run_until(a, b, 1).size() == 1u;
    std::exit(ok && !::testing::Test::HasFailure() ? 0 : 3);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 2u);
  for (const std::string& l : lines) {
    EXPECT_TRUE(l.starts_with("link uroce0/1 pid " + std::to_string(pid) + " ")) << l;
    EXPECT_NE(l.find(" sent_pkts 1 rcvd_pkts 1 "), std::string::npos) << l;
    EXPECT_NE(l.find(" rx_drops 0 icrc_err 0 "), std::string::npos) << l;
  }
  std::filesystem::remove(path);
}

// The fault spec comes from the options (the edge reads them from UROCE_FAULTS_<NAME> and
// UROCE_FAULTS): this device's first, then every device's; a malformed one opens nothing.
TEST(UdpDevice, FaultsComeFromTheOptionsThisDevicesFirst) {
  DeviceConfig cfg;
  cfg.name = "fx-1";
  cfg.ip = v4(test::unique_ip());
  cfg.netdev_mtu = 0;
  DeviceOptions o;
  o.faults = "nonsense";
  auto bad = UdpDevice::open(cfg, wire::kRoceV2Port, "", UdpDevice::Sharing::kExclusive, o);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, EINVAL);
  EXPECT_TRUE(bad.error().text.starts_with("fx-1: ")) << bad.error();
  o.device_faults[fault_key("fx-1")] = "";  // this device's: none, whatever UROCE_FAULTS says
  auto good = UdpDevice::open(cfg, wire::kRoceV2Port, "", UdpDevice::Sharing::kExclusive, o);
  ASSERT_TRUE(good.ok()) << good.error();
}

TEST(UdpDevice, PortMtuFollowsTheInterfaceAsRxe) {
  const char* const first_ip = test::unique_ip();
  const char* const second_ip = test::unique_ip();
  DeviceConfig cfg;
  cfg.ip = v4(first_ip);
  cfg.netdev_mtu = 0;  // from the interface: lo, 64 KiB -> 4096
  auto d = UdpDevice::open(cfg);
  ASSERT_TRUE(d.ok()) << d.error();
  EXPECT_EQ(d.value()->device().active_mtu(), Mtu::k4096);
  cfg.ip = v4(second_ip);
  cfg.netdev_mtu = 1500;  // given: 1500 -> 1024
  auto e = UdpDevice::open(cfg);
  ASSERT_TRUE(e.ok()) << e.error();
  EXPECT_EQ(e.value()->device().active_mtu(), Mtu::k1024);
}

// MR keys (issue 44): two devices opened alike, with no seed, draw their keys from the kernel's
// CSPRNG, so that one's keys say nothing about the other's; a seed makes them reproducible.
TEST(UdpDevice, KeysDifferBetweenDevicesOpenedWithoutASeed) {
  auto keys = [](std::uint64_t seed) {
    DeviceConfig cfg;
    cfg.ip = v4(test::unique_ip());
    cfg.seed = seed;
    auto d = UdpDevice::open(cfg, wire::kRoceV2Port, "", UdpDevice::Sharing::kExclusive);
    EXPECT_TRUE(d.ok()) << d.error();
    std::vector<std::uint32_t> k;
    if (!d.ok()) return k;
    Device& dev = d.value()->device();
    const PdHandle pd = dev.alloc_pd().value();
    static std::byte region[64];
    for (int i = 0; i < 4; ++i) k.push_back(dev.reg_mr(pd, region, sizeof region, 0)->rkey);
    return k;
  };
  const auto a = keys(0);
  const auto b = keys(0);
  ASSERT_EQ(a.size(), 4u);
  EXPECT_NE(a, b);
  EXPECT_EQ(keys(77), keys(77));
}

// QPNs (issue 44): a device of its own (no coordinator) opened without a seed draws its QPNs at
// random from its range, as the coordinator does for a shared one; with a seed it numbers them
// in turn from 0x11, as rxe does.
TEST(UdpDevice, QpNumbersOfAnExclusiveDeviceWithoutASeedAreRandom) {
  auto qpns = [](std::uint64_t seed) {
    DeviceConfig cfg;
    cfg.ip = v4(test::unique_ip());
    cfg.seed = seed;
    auto d = UdpDevice::open(cfg, wire::kRoceV2Port, "", UdpDevice::Sharing::kExclusive);
    EXPECT_TRUE(d.ok()) << d.error();
    std::vector<std::uint32_t> q;
    if (!d.ok()) return q;
    Device& dev = d.value()->device();
    const PdHandle pd = dev.alloc_pd().value();
    const CqHandle cq = dev.create_cq(CqInitAttr{16, 0, 0})->handle;
    QpInitAttr init;
    init.send_cq = init.recv_cq = cq;
    init.cap = QpCap{4, 4, 1, 1, 0};
    for (int i = 0; i < 8; ++i) {
      auto qp = dev.create_qp(pd, init);
      EXPECT_TRUE(qp.ok());
      if (qp.ok()) q.push_back(qp->qp_num);
    }
    return q;
  };
  const std::vector<std::uint32_t> in_turn{0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18};
  EXPECT_EQ(qpns(77), in_turn);
  const auto a = qpns(0);
  const auto b = qpns(0);
  ASSERT_EQ(a.size(), 8u);
  EXPECT_NE(a, in_turn);  // in turn from 0x11: one chance in about 2^136
  EXPECT_NE(a, b);
  for (const std::uint32_t n : a) {
    EXPECT_GE(n, 0x11u);
    EXPECT_LE(n, 0x20000u);
    EXPECT_EQ(std::count(a.begin(), a.end(), n), 1);
  }
}

TEST(UdpDevice, UnreachablePeerEndsInRetryExceeded) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const nobody_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip);
  make_side(b, b_ip);
  // Nobody listens at nobody_ip; ACK timeout 4.096 us * 2^8 (about 1 ms), 2 retries.
  connect(a, b, nobody_ip, 8, 2);
  Device& dev = a.dev->device();
  const Sge s{a.va(0), 100, a.mr.lkey};
  SendWr wr;
  wr.wr_id = 9;
  wr.sg_list = std::span(&s, 1);
  wr.send_flags = kSendSignaled;
  ASSERT_EQ(dev.post_send(a.qp, std::span(&wr, 1), nullptr), Errc::kOk);
  const auto wcs = run_until(a, b, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kRetryExcErr);
}

// A long RDMA WRITE goes out in UDP GSO runs (Middle packets of one size), the receiver
// verifies every ICRC, GSO segments' included (their identification is not 0), and nothing stays
// queued in the datapath once the engine has flushed.
TEST(UdpDevice, LongWriteGoesOutInGsoRunsWithVerifiedIcrcs) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Side a, b;
  make_side(a, a_ip);
  make_side(b, b_ip);
  connect(a, b, b_ip);
  connect(b, a, a_ip);
  if (!a.dev->datapath().gso() || a.dev->datapath().tx_batch() < 2) {
    GTEST_SKIP() << "no UDP GSO here (or UROCE_UDP_GSO=0 / UROCE_UDP_BATCH=1)";
  }
  constexpr std::size_t kLen = 300000;  // 293 packets at MTU 1024, the last shorter
  for (std::size_t i = 0; i < kLen; ++i) a.buf[i] = static_cast<std::byte>(i * 13 + 7);
  const Sge sge{a.va(0), static_cast<std::uint32_t>(kLen), a.mr.lkey};
  SendWr wr;
  wr.wr_id = 9;
  wr.opcode = WrOpcode::kRdmaWrite;
  wr.sg_list = std::span(&sge, 1);
  wr.rdma = {b.va(500000), b.mr.rkey};
  wr.send_flags = kSendSignaled;
  ASSERT_EQ(a.dev->device().post_send(a.qp, std::span(&wr, 1), nullptr), Errc::kOk);
  const auto wcs = run_until(a, b, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, WcStatus::kSuccess) << wc_status_name(wcs[0].status);
  EXPECT_EQ(std::memcmp(a.buf.data(), b.buf.data() + 500000, kLen), 0);
  const auto& tx = a.dev->datapath().counters();
  const auto& rx = b.dev->datapath().counters();
  EXPECT_GT(tx.tx_gso_datagrams, 0u);
  EXPECT_GT(tx.tx_gso_packets, 100u);
  EXPECT_EQ(a.dev->datapath().queued(), 0u);
  EXPECT_EQ(rx.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  EXPECT_GT(rx.rx_icrc_id_recovered, 0u);  // GSO segments 1, 2, ...
  EXPECT_EQ(b.dev->engine().counters().rx_packets, rx.rx_packets);
}

}  // namespace
}  // namespace uroce::engine
