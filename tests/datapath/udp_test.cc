// datapath/udp on loopback: real sockets, real kernel headers, the ICRC computed for the headers
// the kernel writes. Traffic stays on 127.0.0.0/8 and ::1, on addresses and ports of this test
// process's own (support/test_net.h).
#include "datapath/udp.h"
#include "support/ip_text.h"
#include "support/test_net.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/udp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <algorithm>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <vector>

#include "wire/builder.h"

namespace uroce::datapath {
namespace {

using Bytes = std::vector<std::byte>;

using test::v4;
wire::IpAddress loopback6() {
  wire::IpAddress a;
  a.v6 = true;
  a.bytes[15] = 1;
  return a;
}

// Waits (bounded) until the socket is readable: synchronization, not a sleep.
bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, 5000) == 1;
}

struct Received {
  wire::TransportHeaders h;
  Bytes payload;
  RxMeta meta;  // its spans are valid only in the handler: see ip_header
  Bytes ip_header;
};

std::vector<Received> receive_all(UdpDatapath& dp, std::size_t want) {
  std::vector<Received> out;
  for (int tries = 0; tries < 10 && out.size() < want; ++tries) {
    if (!readable(dp.fd())) break;
    dp.receive(64, [&](const wire::RocePacket& p, const RxMeta& m) {
      out.push_back(Received{wire::decode_headers(p), Bytes(p.payload.begin(), p.payload.end()), m,
                             Bytes(m.ip_header.begin(), m.ip_header.end())});
    });
  }
  return out;
}

wire::TransportHeaders send_only(std::size_t payload) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcSendOnly);
  h.bth.dest_qpn = 0x11;
  h.bth.psn = 0x123456;
  h.bth.ack_req = true;
  h.bth.pad_count = wire::pad_for(payload);
  return h;
}

void send_gathered(UdpDatapath& from, const wire::IpAddress& to, std::uint16_t port,
                   const Bytes& data, std::uint8_t traffic_class = 0) {
  std::array<std::byte, 64> hdr{};
  const std::size_t n = wire::write_headers(hdr, send_only(data.size()), data.size());
  // Three pieces, as from three SGEs.
  const ConstBytes all(data);
  const std::size_t third = data.size() / 3;
  const std::array<ConstBytes, 3> pieces = {all.first(third), all.subspan(third, third),
                                            all.subspan(2 * third)};
  wire::OuterHeaders o;
  o.dst = to;
  o.dst_port = port;
  o.traffic_class = traffic_class;
  ASSERT_TRUE(from.send(Instant{}, o, ConstBytes(hdr).first(n), pieces));
  from.flush(Instant{});
}

Bytes data_of(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(i * 31 + 7);
  return b;
}

// A datapath with the given switches, whatever the environment says.
std::unique_ptr<UdpDatapath> open_dp(const char* ip, bool gso, bool gro, std::size_t batch = 64,
                                     std::function<int(int, mmsghdr*, unsigned)> hook = {}) {
  UdpOptions o;
  o.local = v4(ip);
  o.gso = gso;
  o.gro = gro;
  o.tx_batch = batch;
  o.sendmmsg_hook = std::move(hook);
  auto dp = UdpDatapath::open(o);
  EXPECT_TRUE(dp.ok()) << dp.error();
  return dp.ok() ? std::move(dp.value()) : nullptr;
}

// An RDMA WRITE packet of a message: the opcode, the PSN and `payload` bytes of `data` from
// `offset` (one piece, straight from the buffer).
struct Packet {
  wire::Opcode op;
  std::uint32_t psn;
  std::size_t offset;
  std::size_t bytes;
  const char* to = nullptr;  // destination address (default: the test's receiver)
};

void queue(UdpDatapath& dp, const Packet& p, const Bytes& data, const char* to) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(p.op);
  h.bth.dest_qpn = 0x22;
  h.bth.psn = p.psn;
  h.bth.pad_count = wire::pad_for(p.bytes);
  if (p.op == wire::Opcode::kRcRdmaWriteFirst || p.op == wire::Opcode::kRcRdmaWriteOnly) {
    h.reth = wire::Reth{0x1000, 0x42, static_cast<std::uint32_t>(data.size())};
  }
  std::array<std::byte, 64> hdr{};
  const std::size_t n = wire::write_headers(hdr, h, p.bytes);
  const std::array<ConstBytes, 1> piece = {ConstBytes(data).subspan(p.offset, p.bytes)};
  wire::OuterHeaders o;
  o.dst = v4(p.to != nullptr ? p.to : to);
  ASSERT_TRUE(dp.send(Instant{}, o, ConstBytes(hdr).first(n), piece)) << "psn " << p.psn;
}

// Checks that `got` are exactly `want` (those sent to `to`), in order, with the right bytes and
// a verified ICRC.
void expect_packets(const std::vector<Received>& got, const std::vector<Packet>& want,
                    const Bytes& data) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(got[i].h.bth.psn, want[i].psn) << i;
    EXPECT_EQ(got[i].h.bth.opcode, static_cast<std::uint8_t>(want[i].op)) << i;
    EXPECT_EQ(got[i].payload,
              Bytes(data.begin() + static_cast<long>(want[i].offset),
                    data.begin() + static_cast<long>(want[i].offset + want[i].bytes)))
        << i;
    EXPECT_TRUE(got[i].meta.icrc_verified) << "packet " << i;
  }
}

// A WRITE of `packets` MTU-size packets (the last `last` bytes long), PSNs from `psn`.
std::vector<Packet> write_message(std::size_t packets, std::size_t mtu, std::size_t last,
                                  std::uint32_t psn = 100) {
  std::vector<Packet> v;
  for (std::size_t i = 0; i < packets; ++i) {
    const bool first = i == 0, end = i + 1 == packets;
    const wire::Opcode op = first && end ? wire::Opcode::kRcRdmaWriteOnly
                            : first      ? wire::Opcode::kRcRdmaWriteFirst
                            : end        ? wire::Opcode::kRcRdmaWriteLast
                                         : wire::Opcode::kRcRdmaWriteMiddle;
    v.push_back(Packet{op, psn + static_cast<std::uint32_t>(i), i * mtu, end ? last : mtu});
  }
  return v;
}

TEST(UdpDatapath, BatchedSendArrivesInOrderWithAVerifiedIcrc) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool gso : {false, true}) {
    auto a = open_dp(a_ip, gso, false);
    auto b = open_dp(b_ip, false, false);
    ASSERT_TRUE(a && b);
    const auto pkts = write_message(40, 1024, 300);
    const Bytes data = data_of(40 * 1024);
    for (const Packet& p : pkts) queue(*a, p, data, b_ip);
    EXPECT_EQ(a->queued(), 40u);  // nothing sent before the flush
    EXPECT_EQ(a->counters().tx_packets, 0u);
    a->flush(Instant{});
    EXPECT_EQ(a->queued(), 0u);
    EXPECT_EQ(a->counters().tx_packets, 40u);
    EXPECT_EQ(a->counters().tx_calls, 1u);  // one sendmmsg for the batch
    if (gso) {
      // First (RETH: larger) alone, then Middle..Last in one GSO datagram.
      EXPECT_EQ(a->counters().tx_datagrams, 2u);
      EXPECT_EQ(a->counters().tx_gso_packets, 39u);
    } else {
      EXPECT_EQ(a->counters().tx_datagrams, 40u);
    }
    expect_packets(receive_all(*b, 40), pkts, data);
    EXPECT_EQ(b->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  }
}

TEST(UdpDatapath, MixedSizesAndDestinationsInOneBatch) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const c_ip = test::unique_ip();
  auto a = open_dp(a_ip, true, false);
  auto b = open_dp(b_ip, false, false);
  auto c = open_dp(c_ip, false, true);
  ASSERT_TRUE(a && b && c);
  const Bytes data = data_of(64 * 1024);
  using wire::Opcode;
  // Runs broken by the destination, a larger packet, a shorter one in the middle, and runs that
  // continue after another destination's packet.
  const std::vector<Packet> pkts = {
      {Opcode::kRcRdmaWriteMiddle, 1, 0, 512, b_ip},
      {Opcode::kRcRdmaWriteMiddle, 2, 512, 512, b_ip},
      {Opcode::kRcRdmaWriteMiddle, 3, 0, 256, c_ip},
      {Opcode::kRcRdmaWriteMiddle, 4, 1024, 512, b_ip},
      {Opcode::kRcRdmaWriteMiddle, 5, 2048, 1024, b_ip},
      {Opcode::kRcRdmaWriteMiddle, 6, 3072, 1024, b_ip},
      {Opcode::kRcRdmaWriteMiddle, 7, 5000, 100, b_ip},
      {Opcode::kRcRdmaWriteMiddle, 8, 6000, 1024, b_ip},
      {Opcode::kRcRdmaWriteLast, 9, 7000, 13, b_ip},
      {Opcode::kRcRdmaWriteMiddle, 10, 256, 256, c_ip},
      {Opcode::kRcRdmaWriteMiddle, 11, 512, 256, c_ip},
      {Opcode::kRcRdmaWriteLast, 12, 768, 256, c_ip},
      {Opcode::kRcRdmaWriteOnly, 13, 9000, 4096, c_ip},
      {Opcode::kRcRdmaWriteOnly, 14, 0, 0, c_ip},
  };
  for (const Packet& p : pkts) queue(*a, p, data, nullptr);
  a->flush(Instant{});
  EXPECT_EQ(a->counters().tx_packets, pkts.size());
  EXPECT_GE(a->counters().tx_gso_datagrams, 2u);
  std::vector<Packet> to_b, to_c;
  for (const Packet& p : pkts) (std::strcmp(p.to, b_ip) == 0 ? to_b : to_c).push_back(p);
  expect_packets(receive_all(*b, to_b.size()), to_b, data);
  expect_packets(receive_all(*c, to_c.size()), to_c, data);
}

TEST(UdpDatapath, GsoRunWithAShortLastSegment) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  // The receiver without GRO: the kernel cuts the GSO datagram into datagrams on receive.
  auto a = open_dp(a_ip, true, false);
  auto b = open_dp(b_ip, false, false);
  ASSERT_TRUE(a && b);
  if (!a->gso()) GTEST_SKIP() << "this kernel has no UDP_SEGMENT";
  const Bytes data = data_of(16 * 1024);
  std::vector<Packet> pkts;
  for (std::uint32_t i = 0; i < 12; ++i) {
    pkts.push_back(Packet{wire::Opcode::kRcRdmaWriteMiddle, 500 + i, i * 1024u, 1024});
  }
  pkts.push_back(Packet{wire::Opcode::kRcRdmaWriteLast, 512, 12 * 1024, 333});  // pad 3
  for (const Packet& p : pkts) queue(*a, p, data, b_ip);
  a->flush(Instant{});
  EXPECT_EQ(a->counters().tx_datagrams, 1u);
  EXPECT_EQ(a->counters().tx_gso_datagrams, 1u);
  EXPECT_EQ(a->counters().tx_gso_packets, 13u);
  const auto got = receive_all(*b, pkts.size());
  expect_packets(got, pkts, data);
  // Segment k went out with identification k, and its ICRC says so.
  EXPECT_EQ(b->counters().rx_icrc_id_recovered, 12u);
  EXPECT_EQ(b->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  for (std::size_t k = 0; k < got.size(); ++k) {
    EXPECT_EQ(load_be16(got[k].ip_header, 4), k) << k;
  }
}

TEST(UdpDatapath, GroReceiveIsSplitByTheSegmentSize) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  auto a = open_dp(a_ip, true, false);
  auto b = open_dp(b_ip, false, true);
  ASSERT_TRUE(a && b);
  if (!a->gso() || !b->gro()) GTEST_SKIP() << "this kernel has no UDP_SEGMENT or UDP_GRO";
  const Bytes data = data_of(64 * 1024);
  auto pkts = write_message(30, 2048, 1000);
  for (const Packet& p : pkts) queue(*a, p, data, b_ip);
  a->flush(Instant{});
  const auto got = receive_all(*b, pkts.size());
  expect_packets(got, pkts, data);
  // On loopback the GSO datagram reaches the GRO socket whole: one buffer, split here.
  EXPECT_GE(b->counters().rx_gro_datagrams, 1u);
  EXPECT_EQ(b->counters().rx_gro_packets, 29u);
  EXPECT_EQ(b->counters().rx_packets, 30u);
  EXPECT_EQ(b->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
}

// Backpressure: the socket refuses (EAGAIN) or takes only part of a batch. Nothing is lost or
// sent twice, and a payload buffer reused after the flush does not change what is sent.
TEST(UdpDatapath, BackpressureKeepsUnsentPacketsForTheNextFlush) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool gso : {false, true}) {
    int mode = 0;  // 0: EAGAIN; 1: at most 3 messages per call; 2: as the system call
    std::size_t calls = 0;
    auto hook = [&](int fd, mmsghdr* v, unsigned n) -> int {
      ++calls;
      if (mode == 0) {
        errno = EAGAIN;
        return -1;
      }
      if (mode == 1) n = std::min(n, 3u);
      return ::sendmmsg(fd, v, n, 0);
    };
    auto a = open_dp(a_ip, gso, false, 8, hook);
    auto b = open_dp(b_ip, false, false);
    ASSERT_TRUE(a && b);
    Bytes data = data_of(20 * 1024);
    const Bytes original = data;
    std::vector<Packet> pkts;
    for (std::uint32_t i = 0; i < 12; ++i) {
      // Sizes vary in pairs so that GSO makes runs of two.
      pkts.push_back(Packet{wire::Opcode::kRcRdmaWriteMiddle, i, i * 1024u, 512u + (i / 2) * 64u});
    }
    // The first 8 fill the queue; the ninth finds it full and the socket blocked.
    for (std::size_t i = 0; i < 8; ++i) queue(*a, pkts[i], data, b_ip);
    EXPECT_EQ(a->queued(), 8u);
    EXPECT_EQ(a->counters().tx_blocked, 1u);  // the 8th tried to flush
    {
      wire::TransportHeaders h;
      h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kRcRdmaWriteMiddle);
      std::array<std::byte, 64> hdr{};
      const std::size_t n = wire::write_headers(hdr, h, 4);
      const std::array<ConstBytes, 1> piece = {ConstBytes(data).first(4)};
      wire::OuterHeaders o;
      o.dst = v4(b_ip);
      EXPECT_FALSE(a->send(Instant{}, o, ConstBytes(hdr).first(n), piece));
    }
    a->flush(Instant{});
    EXPECT_EQ(a->queued(), 8u);
    EXPECT_TRUE(a->tx_queued());
    EXPECT_EQ(a->counters().tx_packets, 0u);
    // The application reuses its buffer: the queued packets keep what they were sent with.
    for (auto& x : data) x = std::byte{0xee};
    mode = 1;
    a->flush(Instant{});
    EXPECT_EQ(a->queued(), 0u);
    EXPECT_EQ(a->counters().tx_packets, 8u);
    EXPECT_EQ(a->counters().tx_errors, 0u);
    data = original;
    mode = 2;
    for (std::size_t i = 8; i < pkts.size(); ++i) queue(*a, pkts[i], data, b_ip);
    a->flush(Instant{});
    expect_packets(receive_all(*b, pkts.size()), pkts, original);
    EXPECT_EQ(b->counters().rx_packets, pkts.size());  // no duplicates
    EXPECT_EQ(a->counters().tx_packets, pkts.size());
  }
}

TEST(UdpDatapath, GsoRefusedByTheKernelFallsBackToSinglePackets) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  // A hook that refuses GSO datagrams as a kernel without segmentation support on the path would
  // (EINVAL), and sends the rest.
  auto gso = [](const msghdr& m) {
    for (const cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr*>(&m), const_cast<cmsghdr*>(c))) {
      if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_SEGMENT) return true;
    }
    return false;
  };
  auto hook = [&](int fd, mmsghdr* v, unsigned n) -> int {
    if (gso(v[0].msg_hdr)) {
      errno = EINVAL;
      return -1;
    }
    unsigned k = 0;
    while (k < n && !gso(v[k].msg_hdr)) ++k;
    return ::sendmmsg(fd, v, k, 0);
  };
  auto a = open_dp(a_ip, true, false, 64, hook);
  auto b = open_dp(b_ip, false, false);
  ASSERT_TRUE(a && b);
  const Bytes data = data_of(8 * 1024);
  auto pkts = write_message(6, 1024, 1024);
  for (const Packet& p : pkts) queue(*a, p, data, b_ip);
  a->flush(Instant{});
  EXPECT_FALSE(a->gso());
  EXPECT_NE(a->gso_note().find("refused"), std::string::npos) << a->gso_note();
  EXPECT_EQ(a->counters().tx_gso_fallbacks, 1u);
  EXPECT_EQ(a->counters().tx_errors, 0u);
  expect_packets(receive_all(*b, pkts.size()), pkts, data);
  EXPECT_EQ(b->counters().rx_icrc_id_recovered, 0u);  // single packets: identification 0
}

// The capture tap sees every packet of a batch, GSO segments included, each as a valid RoCEv2
// frame: the sender's with the identification and ICRC it went out with, the receiver's with the
// identification its ICRC revealed.
TEST(UdpDatapath, TapSeesEveryBatchedPacketAsAValidFrame) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool gso : {false, true}) {
    auto a = open_dp(a_ip, gso, false);
    auto b = open_dp(b_ip, false, gso);
    ASSERT_TRUE(a && b);
    std::vector<Bytes> sent, received;
    a->set_tap([&](ConstBytes f, bool out) {
      EXPECT_TRUE(out);
      sent.emplace_back(f.begin(), f.end());
    });
    b->set_tap([&](ConstBytes f, bool out) {
      EXPECT_FALSE(out);
      received.emplace_back(f.begin(), f.end());
    });
    const Bytes data = data_of(20 * 1024);
    const auto pkts = write_message(20, 1024, 77);
    for (const Packet& p : pkts) queue(*a, p, data, b_ip);
    EXPECT_TRUE(sent.empty());  // queued, not sent yet
    a->flush(Instant{});
    expect_packets(receive_all(*b, pkts.size()), pkts, data);
    ASSERT_EQ(sent.size(), pkts.size());
    ASSERT_EQ(received.size(), pkts.size());
    std::size_t nonzero = 0;
    for (std::size_t i = 0; i < pkts.size(); ++i) {
      for (const Bytes* f : {&sent[i], &received[i]}) {
        auto fr = wire::parse_frame(wire::LinkType::kEthernet, *f);
        ASSERT_TRUE(fr.ok()) << "packet " << i << ": " << wire::drop_reason_name(fr.error());
        EXPECT_EQ(fr->roce.bth().psn(), pkts[i].psn);
        nonzero += fr->ipv4.identification != 0 ? 1 : 0;
      }
      EXPECT_EQ(load_be16(sent[i], 14 + 4), load_be16(received[i], 14 + 4)) << i;
    }
    EXPECT_EQ(nonzero, gso ? 2 * 18u : 0u);  // First alone; Middle..Last ids 0..18
  }
}

// The payload bytes of a captured frame (after the outer headers, BTH and extension headers,
// without pad and ICRC), checked as a valid RoCEv2 frame (its ICRC included).
Bytes captured_payload(const Bytes& frame) {
  auto fr = wire::parse_frame(wire::LinkType::kEthernet, frame);
  EXPECT_TRUE(fr.ok()) << (fr.ok() ? "" : wire::drop_reason_name(fr.error()));
  if (!fr.ok()) return {};
  return Bytes(fr->roce.payload.begin(), fr->roce.payload.end());
}

Bytes slice_of(const Bytes& data, const Packet& p) {
  return Bytes(data.begin() + static_cast<long>(p.offset),
               data.begin() + static_cast<long>(p.offset + p.bytes));
}

// A READ response's payload comes straight from the responder's registered memory, which its
// application may rewrite at any moment (a NIC sends whatever it reads, with a CRC over those
// same bytes). The packet must leave with the bytes its ICRC was computed over: here the
// buffer is rewritten between send() and the flush, and the receiver still gets every packet,
// ICRC verified, with the bytes as they were at send().
TEST(UdpDatapath, ReadResponsePayloadRewrittenBeforeTheFlushStillLeavesConsistent) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool gso : {false, true}) {
    SCOPED_TRACE(gso ? "gso" : "no gso");
    auto a = open_dp(a_ip, gso, false);
    auto b = open_dp(b_ip, false, false);
    ASSERT_TRUE(a && b);
    Bytes data = data_of(8 * 1024);
    const Bytes original = data;
    const std::vector<Packet> pkts = {
        {wire::Opcode::kRcRdmaReadResponseFirst, 300, 0, 1024},
        {wire::Opcode::kRcRdmaReadResponseMiddle, 301, 1024, 1024},
        {wire::Opcode::kRcRdmaReadResponseMiddle, 302, 2048, 1024},
        {wire::Opcode::kRcRdmaReadResponseLast, 303, 3072, 1021},  // pad 3
        {wire::Opcode::kRcRdmaReadResponseOnly, 304, 5000, 700},
    };
    for (const Packet& p : pkts) queue(*a, p, data, b_ip);
    // The responder's application rewrites the memory before the datapath flushes.
    for (auto& x : data) x = std::byte{0x5a};
    a->flush(Instant{});
    EXPECT_EQ(a->counters().tx_packets, pkts.size());
    EXPECT_EQ(a->counters().tx_snapshots, pkts.size());
    expect_packets(receive_all(*b, pkts.size()), pkts, original);
    EXPECT_EQ(b->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  }
  // Other payloads (SEND, WRITE: the application keeps them until the WQE completes) are not
  // counted as snapshots (they are copied into the staging ring all the same).
  auto a = open_dp(a_ip, true, false);
  auto b = open_dp(b_ip, false, false);
  ASSERT_TRUE(a && b);
  const Bytes data = data_of(8 * 1024);
  const auto pkts = write_message(4, 1024, 500);
  for (const Packet& p : pkts) queue(*a, p, data, b_ip);
  a->flush(Instant{});
  expect_packets(receive_all(*b, pkts.size()), pkts, data);
  EXPECT_EQ(a->counters().tx_snapshots, 0u);
}

// Small packets (at most kInlinePayload payload bytes, CRC'd in one call) and larger ones alike
// leave whole from the staging ring, their payload copied when they were queued: one iovec per
// datagram, a GSO run of small packets included (the segments' ICRCs for identifications 1, 2, ...
// stored behind each), and a run of a larger packet with a shorter small one behind it.
TEST(UdpDatapath, SmallAndLargePacketsLeaveWholeOneIovecPerDatagram) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  constexpr std::size_t kInline = UdpDatapath::kInlinePayload;
  for (const bool gso : {false, true}) {
    SCOPED_TRACE(gso ? "gso" : "no gso");
    std::vector<std::size_t> iovs;  // per message sent, its iovec count
    auto a = open_dp(a_ip, gso, false, 64, [&](int fd, mmsghdr* m, unsigned n) {
      for (unsigned i = 0; i < n; ++i) iovs.push_back(m[i].msg_hdr.msg_iovlen);
      return ::sendmmsg(fd, m, n, 0);
    });
    auto b = open_dp(b_ip, false, false);
    ASSERT_TRUE(a && b);
    Bytes data = data_of(4096);
    const Bytes original = data;
    using wire::Opcode;
    const std::vector<Packet> pkts = {
        {Opcode::kRcRdmaWriteOnly, 1, 0, 0},                     // no payload (an ACK's size)
        {Opcode::kRcRdmaWriteOnly, 2, 100, 8},                   // 8 bytes, no pad
        {Opcode::kRcRdmaWriteMiddle, 3, 200, 13},                // a run of 13-byte packets
        {Opcode::kRcRdmaWriteMiddle, 4, 213, 13},                // (pad 3), the last shorter:
        {Opcode::kRcRdmaWriteMiddle, 5, 226, 13},                // one GSO datagram
        {Opcode::kRcRdmaWriteLast, 6, 239, 5},                   //
        {Opcode::kRcRdmaWriteOnly, 7, 300, kInline},             // the largest inline
        {Opcode::kRcRdmaWriteOnly, 8, 400, kInline + 1},         // from the staging ring
        {Opcode::kRcRdmaReadResponseOnly, 9, 600, kInline - 1},  // a small READ response
    };
    for (const Packet& p : pkts) queue(*a, p, data, b_ip);
    // Rewritten before the flush: every packet's bytes were taken when it was queued.
    for (std::size_t i = 0; i < 600 + kInline; ++i) data[i] = std::byte{0x5a};
    a->flush(Instant{});
    EXPECT_EQ(a->counters().tx_packets, pkts.size());
    EXPECT_EQ(a->counters().tx_snapshots, 1u);  // the READ response
    // One iovec per datagram.
    if (gso && a->gso()) {
      // 1, 2, the run 3-6, 7, and 8 with the shorter 9 behind it.
      EXPECT_EQ(iovs, (std::vector<std::size_t>{1, 1, 1, 1, 1}));
      EXPECT_EQ(a->counters().tx_gso_packets, 6u);
    } else {
      EXPECT_EQ(iovs, std::vector<std::size_t>(pkts.size(), 1));
    }
    expect_packets(receive_all(*b, pkts.size()), pkts, original);
    EXPECT_EQ(b->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  }
}

// The packets of a GSO run lie one after the other in the staging ring and leave as one iovec:
// a WRITE message's Middle packets, each its headers, payload, pad and ICRC (for the
// identification its place gives it), then the short Last packet.
TEST(UdpDatapath, GsoRunLeavesAsOneIovecFromTheStagingRing) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  std::vector<std::size_t> iovs;
  auto a = open_dp(a_ip, true, false, 64, [&](int fd, mmsghdr* m, unsigned n) {
    for (unsigned i = 0; i < n; ++i) iovs.push_back(m[i].msg_hdr.msg_iovlen);
    return ::sendmmsg(fd, m, n, 0);
  });
  auto b = open_dp(b_ip, false, true);
  ASSERT_TRUE(a && b);
  if (!a->gso()) GTEST_SKIP() << "no UDP GSO here: " << a->gso_note();
  const Bytes data = data_of(64 * 1024);
  // First (with its RETH) alone; 14 Middles and the Last (pad 1) in one datagram.
  const auto pkts = write_message(16, 4096, 1021);
  for (const Packet& p : pkts) queue(*a, p, data, b_ip);
  a->flush(Instant{});
  EXPECT_EQ(iovs, (std::vector<std::size_t>{1, 1}));
  EXPECT_EQ(a->counters().tx_gso_packets, 15u);
  expect_packets(receive_all(*b, pkts.size()), pkts, data);
  EXPECT_EQ(b->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
}

// A packet with more payload than any path MTU carries (a caller's bug: no receiver takes it) is
// counted lost, as a packet the wire drops; it does not disturb the packets around it.
TEST(UdpDatapath, OversizedPayloadIsCountedLost) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  auto a = open_dp(a_ip, true, false);
  auto b = open_dp(b_ip, false, false);
  ASSERT_TRUE(a && b);
  const Bytes data = data_of(16 * 1024);
  const std::vector<Packet> pkts = {
      {wire::Opcode::kRcRdmaWriteMiddle, 1, 0, UdpDatapath::kStagePayload},
      {wire::Opcode::kRcRdmaWriteMiddle, 2, 0, UdpDatapath::kStagePayload + 4},
      {wire::Opcode::kRcRdmaWriteMiddle, 3, 4096, UdpDatapath::kStagePayload},
  };
  for (const Packet& p : pkts) queue(*a, p, data, b_ip);
  a->flush(Instant{});
  EXPECT_EQ(a->counters().tx_errors, 1u);
  EXPECT_EQ(a->counters().tx_packets, 2u);
  expect_packets(receive_all(*b, 2), {pkts[0], pkts[2]}, data);
}

// Under backpressure the staging ring wraps: packets queued behind ones the socket has not taken
// yet go to the ring's start, never over bytes still waiting. Each flush here sends one datagram
// and finds the socket full; the receiver gets every packet once, each with its own bytes.
TEST(UdpDatapath, StagingRingWrapsWithoutOverwritingWaitingPackets) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool gso : {false, true}) {
    SCOPED_TRACE(gso ? "gso" : "no gso");
    bool partial = true;  // one datagram per flush, then EAGAIN
    bool took_one = false;
    std::vector<const std::byte*> bases;  // each datagram's first iovec
    std::size_t most_iovecs = 0;
    auto a = open_dp(a_ip, gso, false, 8, [&](int fd, mmsghdr* m, unsigned n) -> int {
      if (partial) {
        if (took_one) {
          took_one = false;
          errno = EAGAIN;
          return -1;
        }
        took_one = true;
        n = 1;
      }
      for (unsigned i = 0; i < n; ++i) {
        bases.push_back(static_cast<const std::byte*>(m[i].msg_hdr.msg_iov[0].iov_base));
        most_iovecs = std::max(most_iovecs, m[i].msg_hdr.msg_iovlen);
      }
      return ::sendmmsg(fd, m, n, 0);
    });
    auto b = open_dp(b_ip, false, false);
    ASSERT_TRUE(a && b);
    Bytes data = data_of(64 * 1024);
    const Bytes original = data;
    // Runs of three (two full packets and a shorter one), 40 packets of up to kStagePayload.
    std::vector<Packet> pkts;
    for (std::uint32_t i = 0; i < 40; ++i) {
      const std::size_t bytes = UdpDatapath::kStagePayload - (i % 3 == 2 ? 96 : 0);
      pkts.push_back(Packet{wire::Opcode::kRcRdmaWriteMiddle, i, (i % 15) * 4096u, bytes});
    }
    for (const Packet& p : pkts) {
      queue(*a, p, data, b_ip);
      took_one = false;  // the next flush takes one datagram again
    }
    // The application reuses its buffer: what waits was copied when it was queued.
    for (auto& x : data) x = std::byte{0xee};
    partial = false;
    a->flush(Instant{});
    EXPECT_EQ(a->queued(), 0u);
    EXPECT_EQ(a->counters().tx_packets, pkts.size());
    EXPECT_GE(a->counters().tx_blocked, 5u);
    // The ring wrapped: some datagram starts below the one before it.
    bool wrapped = false;
    for (std::size_t i = 1; i < bases.size(); ++i) wrapped = wrapped || bases[i] < bases[i - 1];
    EXPECT_TRUE(wrapped);
    // A GSO datagram is one iovec, two where the ring wrapped inside it.
    EXPECT_LE(most_iovecs, gso ? 2u : 1u);
    expect_packets(receive_all(*b, pkts.size()), pkts, original);
    EXPECT_EQ(b->counters().rx_packets, pkts.size());
    EXPECT_EQ(b->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  }
}

// The capture shows each frame with the bytes it was queued with (those its ICRC covers and that
// go on the wire), even when the buffer is rewritten between send() and the flush; GSO segments
// carry the identification and ICRC they left with.
TEST(UdpDatapath, TapCapturesTheBytesAsQueuedWithAValidIcrc) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool gso : {false, true}) {
    SCOPED_TRACE(gso ? "gso" : "no gso");
    auto a = open_dp(a_ip, gso, false);
    auto b = open_dp(b_ip, false, false);
    ASSERT_TRUE(a && b);
    std::vector<Bytes> sent;
    a->set_tap([&](ConstBytes f, bool) { sent.emplace_back(f.begin(), f.end()); });
    Bytes data = data_of(12 * 1024);
    const Bytes original = data;
    auto pkts = write_message(8, 1024, 333);
    pkts.push_back(Packet{wire::Opcode::kRcRdmaReadResponseOnly, 200, 9000, 64});
    for (const Packet& p : pkts) queue(*a, p, data, b_ip);
    for (auto& x : data) x = std::byte{0xa5};
    a->flush(Instant{});
    ASSERT_EQ(sent.size(), pkts.size());
    for (std::size_t i = 0; i < pkts.size(); ++i) {
      SCOPED_TRACE(i);
      EXPECT_EQ(captured_payload(sent[i]), slice_of(original, pkts[i]));
    }
    // The wire carried the same bytes.
    expect_packets(receive_all(*b, pkts.size()), pkts, original);
  }
}

// Under backpressure (EAGAIN, then partial sends) a packet is captured once it has really been
// handed to the kernel: never before, never twice, in the order sent, with the bytes queued.
TEST(UdpDatapath, TapRecordsOnlyWhatWasSentInOrderUnderBackpressure) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  for (const bool gso : {false, true}) {
    SCOPED_TRACE(gso ? "gso" : "no gso");
    int mode = 0;  // 0: EAGAIN; 1: at most 2 messages per call
    auto hook = [&](int fd, mmsghdr* v, unsigned n) -> int {
      if (mode == 0) {
        errno = EAGAIN;
        return -1;
      }
      return ::sendmmsg(fd, v, std::min(n, 2u), 0);
    };
    auto a = open_dp(a_ip, gso, false, 8, hook);
    auto b = open_dp(b_ip, false, false);
    ASSERT_TRUE(a && b);
    std::vector<Bytes> sent;
    a->set_tap([&](ConstBytes f, bool) { sent.emplace_back(f.begin(), f.end()); });
    Bytes data = data_of(12 * 1024);
    const Bytes original = data;
    std::vector<Packet> pkts;
    for (std::uint32_t i = 0; i < 8; ++i) {
      pkts.push_back(
          Packet{wire::Opcode::kRcRdmaWriteMiddle, 40 + i, i * 1024u, 256u + (i / 2) * 64u});
    }
    for (const Packet& p : pkts) queue(*a, p, data, b_ip);
    a->flush(Instant{});
    EXPECT_EQ(a->queued(), 8u);
    EXPECT_TRUE(sent.empty());  // nothing left yet: nothing captured
    for (auto& x : data) x = std::byte{0x3c};
    mode = 1;
    a->flush(Instant{});
    EXPECT_EQ(a->queued(), 0u);
    ASSERT_EQ(sent.size(), pkts.size());
    for (std::size_t i = 0; i < pkts.size(); ++i) {
      SCOPED_TRACE(i);
      auto fr = wire::parse_frame(wire::LinkType::kEthernet, sent[i]);
      ASSERT_TRUE(fr.ok()) << wire::drop_reason_name(fr.error());
      EXPECT_EQ(fr->roce.bth().psn(), pkts[i].psn);
      EXPECT_EQ(captured_payload(sent[i]), slice_of(original, pkts[i]));
    }
    const auto got = receive_all(*b, pkts.size());
    expect_packets(got, pkts, original);
    EXPECT_EQ(b->counters().rx_packets, pkts.size());
  }
}

// The tap shows what was sent even when the application changes the payload's memory as soon
// as the send returns (the drop-in's progress thread sends while the application runs).
TEST(UdpDatapath, TapShowsWhatWasSentWhenTheBufferChangesRightAfter) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  Bytes data = data_of(4096);
  const Bytes original = data;
  auto hook = [&](int fd, mmsghdr* v, unsigned n) -> int {
    const int r = ::sendmmsg(fd, v, n, 0);
    for (auto& x : data) x = std::byte{0xee};  // the application reuses its buffer at once
    return r;
  };
  auto a = open_dp(a_ip, false, false, 64, hook);
  auto b = open_dp(b_ip, false, false);
  ASSERT_TRUE(a && b);
  std::vector<Bytes> sent;
  a->set_tap([&](ConstBytes f, bool) { sent.emplace_back(f.begin(), f.end()); });
  const auto pkts = write_message(4, 1024, 1024);
  for (const Packet& p : pkts) queue(*a, p, data, b_ip);
  a->flush(Instant{});
  expect_packets(receive_all(*b, pkts.size()), pkts, original);
  ASSERT_EQ(sent.size(), pkts.size());
  for (std::size_t i = 0; i < pkts.size(); ++i) {
    auto fr = wire::parse_frame(wire::LinkType::kEthernet, sent[i]);
    ASSERT_TRUE(fr.ok()) << "packet " << i << ": " << wire::drop_reason_name(fr.error());
    EXPECT_EQ(Bytes(fr->roce.payload.begin(), fr->roce.payload.end()),
              Bytes(original.begin() + static_cast<long>(pkts[i].offset),
                    original.begin() + static_cast<long>(pkts[i].offset + pkts[i].bytes)))
        << "packet " << i;
  }
}

// The switches the edge reads from UROCE_UDP_GSO/GRO/BATCH (tests/edge) arrive as UdpOptions.
TEST(UdpDatapath, SwitchesAndTheirErrors) {
  const char* const a_ip = test::unique_ip();
  {
    UdpOptions o{v4(a_ip), 4791};
    o.gso = false;
    o.gro = false;
    o.tx_batch = 1;
    auto a = UdpDatapath::open(o);
    ASSERT_TRUE(a.ok()) << a.error();
    EXPECT_FALSE(a.value()->gso());
    EXPECT_EQ(a.value()->gso_note(), "off");
    EXPECT_FALSE(a.value()->gro());
    EXPECT_EQ(a.value()->tx_batch(), 1u);
  }
  UdpOptions o{v4(a_ip), 4791};
  o.tx_batch = 0;
  auto c = UdpDatapath::open(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, EINVAL);
  EXPECT_NE(c.error().text.find("tx_batch and rx_batch must be from 1 to"), std::string::npos)
      << c.error();
}

TEST(UdpDatapath, Ipv4LoopbackWithAVerifiedIcrc) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  auto a = UdpDatapath::open({v4(a_ip), 4791});
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  for (std::size_t len : {0u, 1u, 3u, 1000u, 4096u}) {
    const Bytes data = data_of(len);
    send_gathered(*a.value(), v4(b_ip), 4791, data);
    const auto got = receive_all(*b.value(), 1);
    ASSERT_EQ(got.size(), 1u) << len;
    EXPECT_EQ(got[0].payload, data);
    EXPECT_EQ(got[0].h.bth.psn, 0x123456u);
    EXPECT_EQ(got[0].h.bth.dest_qpn, 0x11u);
    // Identification 0 (unconnected socket, IP_PMTUDISC_DO): the ICRC verifies.
    EXPECT_TRUE(got[0].meta.icrc_verified) << len;
    EXPECT_EQ(got[0].meta.src, v4(a_ip));
    EXPECT_EQ(got[0].meta.src_port, 4791);
    ASSERT_EQ(got[0].ip_header.size(), 20u);
    EXPECT_EQ(static_cast<int>(got[0].ip_header[0]), 0x45);
    EXPECT_EQ(std::memcmp(got[0].ip_header.data() + 12, v4(a_ip).bytes.data(), 4), 0);
  }
  EXPECT_EQ(b.value()->counters().rx_icrc_id_recovered, 0u);
  EXPECT_EQ(a.value()->counters().tx_packets, 5u);
}

// With set_ip_header_for_ud_only (the engine's mode) an RC packet is verified without its IP
// header being shown; a UD datagram still shows the header (its GRH area), TOS and source as
// received, with the checksum a real header has.
TEST(UdpDatapath, IpHeaderOnlyForUdWhenAsked) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  auto a = UdpDatapath::open({v4(a_ip), 4791});
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  b.value()->set_ip_header_for_ud_only(true);
  const Bytes data = data_of(100);
  send_gathered(*a.value(), v4(b_ip), 4791, data, 0x68);
  auto got = receive_all(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].meta.icrc_verified);
  EXPECT_EQ(got[0].payload, data);
  EXPECT_TRUE(got[0].ip_header.empty());

  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(wire::Opcode::kUdSendOnly);
  h.bth.dest_qpn = 0x22;
  h.deth.qkey = 0x11111111;
  h.deth.src_qpn = 0x33;
  std::array<std::byte, 64> hdr{};
  const std::size_t n = wire::write_headers(hdr, h, data.size());
  wire::OuterHeaders o;
  o.dst = v4(b_ip);
  o.dst_port = 4791;
  o.traffic_class = 0x68;
  const std::array<ConstBytes, 1> pieces = {ConstBytes(data)};
  ASSERT_TRUE(a.value()->send(Instant{}, o, ConstBytes(hdr).first(n), pieces));
  a.value()->flush(Instant{});
  got = receive_all(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].meta.icrc_verified);
  EXPECT_EQ(got[0].payload, data);
  ASSERT_EQ(got[0].ip_header.size(), 20u);
  EXPECT_EQ(static_cast<int>(got[0].ip_header[0]), 0x45);
  EXPECT_EQ(static_cast<int>(got[0].ip_header[1]), 0x68);
  EXPECT_EQ(std::memcmp(got[0].ip_header.data() + 12, v4(a_ip).bytes.data(), 4), 0);
  EXPECT_EQ(wire::ipv4_header_checksum(got[0].ip_header), load_be16(got[0].ip_header, 10));
}

TEST(UdpDatapath, Ipv6LoopbackWithAVerifiedIcrc) {
  // ::1 is one address: ports of this test's own.
  const std::uint16_t a_port = test::unique_port();
  const std::uint16_t b_port = test::unique_port();
  auto a = UdpDatapath::open({loopback6(), a_port});
  auto b = UdpDatapath::open({loopback6(), b_port});
  if (!a.ok() && a.error().code == EADDRNOTAVAIL) {
    GTEST_SKIP() << "no IPv6 loopback on this machine: " << a.error();
  }
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  const Bytes data = data_of(777);
  send_gathered(*a.value(), loopback6(), b_port, data);
  const auto got = receive_all(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, data);
  EXPECT_TRUE(got[0].meta.icrc_verified);
  EXPECT_EQ(got[0].ip_header.size(), 40u);
}

// IPv6 has no identification: GSO segments' ICRCs are the plain ones, and an IPv6 receiver
// drops any packet whose ICRC does not match, so every packet arriving proves its ICRC.
TEST(UdpDatapath, Ipv6GsoAndGroWithVerifiedIcrcs) {
  const std::uint16_t a_port = test::unique_port();
  const std::uint16_t b_port = test::unique_port();
  for (const bool gro : {false, true}) {
    UdpOptions oa(loopback6(), a_port), ob(loopback6(), b_port);
    oa.gso = true;
    ob.gro = gro;
    auto a = UdpDatapath::open(oa);
    if (!a.ok() && a.error().code == EADDRNOTAVAIL) {
      GTEST_SKIP() << "no IPv6 loopback on this machine: " << a.error();
    }
    ASSERT_TRUE(a.ok()) << a.error();
    auto b = UdpDatapath::open(ob);
    ASSERT_TRUE(b.ok()) << b.error();
    const Bytes data = data_of(32 * 1024);
    const auto pkts = write_message(25, 1024, 10);
    for (const Packet& p : pkts) {
      wire::TransportHeaders h;
      h.bth.opcode = static_cast<std::uint8_t>(p.op);
      h.bth.psn = p.psn;
      h.bth.pad_count = wire::pad_for(p.bytes);
      std::array<std::byte, 64> hdr{};
      const std::size_t n = wire::write_headers(hdr, h, p.bytes);
      const std::array<ConstBytes, 1> piece = {ConstBytes(data).subspan(p.offset, p.bytes)};
      wire::OuterHeaders o;
      o.dst = loopback6();
      o.dst_port = b_port;
      ASSERT_TRUE(a.value()->send(Instant{}, o, ConstBytes(hdr).first(n), piece));
    }
    a.value()->flush(Instant{});
    EXPECT_GE(a.value()->counters().tx_gso_datagrams, 1u);
    expect_packets(receive_all(*b.value(), pkts.size()), pkts, data);
    EXPECT_EQ(b.value()->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)],
              0u);
  }
}

// A datagram sent by a plain UDP socket, bypassing the datapath.
void raw_send(const wire::IpAddress& to, std::uint16_t port, const Bytes& payload) {
  const int fd = ::socket(to.v6 ? AF_INET6 : AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (to.v6) {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(port);
    std::memcpy(&sa->sin6_addr, to.bytes.data(), 16);
    len = sizeof(sockaddr_in6);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    std::memcpy(&sa->sin_addr, to.bytes.data(), 4);
    len = sizeof(sockaddr_in);
  }
  ASSERT_EQ(::sendto(fd, payload.data(), payload.size(), 0, reinterpret_cast<sockaddr*>(&ss), len),
            static_cast<ssize_t>(payload.size()));
  ::close(fd);
}

// rxe sends RoCEv2 over IPv6 with UDP checksum 0 (the ICRC protects the packet); Linux hands
// such IPv6 datagrams (RFC 6936) only to sockets that allow it (UDP_NO_CHECK6_RX). Found by
// tests/interop against kernel 6.1's rxe: before the fix, every packet from rxe was dropped.
TEST(UdpDatapath, Ipv6DatagramWithZeroUdpChecksumIsReceived) {
  // A valid packet from the datapath, caught by a plain socket on the port the datapath will
  // use next, so that the ICRC (which covers the UDP ports) stays valid when it is replayed.
  const std::uint16_t a_port = test::unique_port();
  const std::uint16_t b_port = test::unique_port();
  const int plain = ::socket(AF_INET6, SOCK_DGRAM, 0);
  ASSERT_GE(plain, 0);
  sockaddr_in6 at{};
  at.sin6_family = AF_INET6;
  at.sin6_port = htons(b_port);
  at.sin6_addr = in6addr_loopback;
  if (::bind(plain, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
    ::close(plain);
    GTEST_SKIP() << "no IPv6 loopback on this machine";
  }
  auto a = UdpDatapath::open({loopback6(), a_port});
  ASSERT_TRUE(a.ok()) << a.error();
  const Bytes data = data_of(300);
  send_gathered(*a.value(), loopback6(), b_port, data);
  ASSERT_TRUE(readable(plain));
  Bytes datagram(2048);
  sockaddr_in6 from{};
  socklen_t from_len = sizeof from;
  const ssize_t n = ::recvfrom(plain, datagram.data(), datagram.size(), 0,
                               reinterpret_cast<sockaddr*>(&from), &from_len);
  ::close(plain);
  ASSERT_GT(n, 0);
  datagram.resize(static_cast<std::size_t>(n));

  // The same datagram again, now with UDP checksum 0, from a raw socket (which does not fill
  // in an IPv6 UDP checksum), to the datapath.
  auto b = UdpDatapath::open({loopback6(), b_port});
  ASSERT_TRUE(b.ok()) << b.error();
  const int raw = ::socket(AF_INET6, SOCK_RAW, IPPROTO_UDP);
  if (raw < 0) GTEST_SKIP() << "raw sockets need CAP_NET_RAW: " << std::strerror(errno);
  Bytes udp(8 + datagram.size());
  const std::uint16_t sport = ntohs(from.sin6_port), dport = b_port;
  const std::uint16_t len = static_cast<std::uint16_t>(udp.size());
  udp[0] = static_cast<std::byte>(sport >> 8);
  udp[1] = static_cast<std::byte>(sport);
  udp[2] = static_cast<std::byte>(dport >> 8);
  udp[3] = static_cast<std::byte>(dport);
  udp[4] = static_cast<std::byte>(len >> 8);
  udp[5] = static_cast<std::byte>(len);
  // bytes 6, 7: checksum 0
  std::memcpy(udp.data() + 8, datagram.data(), datagram.size());
  sockaddr_in6 to{};
  to.sin6_family = AF_INET6;
  to.sin6_addr = in6addr_loopback;
  ASSERT_EQ(::sendto(raw, udp.data(), udp.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
            static_cast<ssize_t>(udp.size()));
  ::close(raw);
  const auto got = receive_all(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, data);
  EXPECT_TRUE(got[0].meta.icrc_verified);
}

// A plain UDP socket at `from_ip` port 4791, into `fd`; `to`: `to_ip` port 4791. With
// `df_clear` it sends with DF clear (IP_PMTUDISC_DONT), as a sender other than uroce may.
void open_sender(const char* from_ip, const char* to_ip, int& fd, sockaddr_in& to,
                 bool df_clear = false) {
  fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  const int dont = IP_PMTUDISC_DONT;
  if (df_clear) {
    ASSERT_EQ(::setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &dont, sizeof dont), 0);
  }
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_port = htons(4791);
  ::inet_pton(AF_INET, from_ip, &from.sin_addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
  to = from;
  ::inet_pton(AF_INET, to_ip, &to.sin_addr);
}

TEST(UdpDatapath, Ipv4IdentificationIsRecoveredFromTheIcrc) {
  const char* const b_ip = test::unique_ip();
  const char* const from_ip = test::unique_ip();
  // A sender with nonzero identifications (as rxe): its ICRC is valid for identification
  // 0x1234, which the receiver finds and shows in the packet's IP header.
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(b.ok()) << b.error();
  int fd = -1;
  sockaddr_in to{};
  ASSERT_NO_FATAL_FAILURE(open_sender(from_ip, b_ip, fd, to));
  wire::OuterHeaders o;
  o.src = v4(from_ip);
  o.dst = v4(b_ip);
  o.src_port = 4791;
  o.ipv4_id = 0x1234;
  o.ethernet = false;
  const Bytes data = data_of(100);
  Bytes frame(512);
  frame.resize(wire::build_frame(frame, o, send_only(data.size()), data));
  const Bytes udp_payload(frame.begin() + 28, frame.end());
  ASSERT_EQ(::sendto(fd, udp_payload.data(), udp_payload.size(), 0,
                     reinterpret_cast<sockaddr*>(&to), sizeof to),
            static_cast<ssize_t>(udp_payload.size()));
  ::close(fd);
  const auto got = receive_all(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].meta.icrc_verified);
  EXPECT_EQ(got[0].payload, data);
  EXPECT_EQ(b.value()->counters().rx_icrc_id_recovered, 1u);
  ASSERT_EQ(got[0].ip_header.size(), 20u);
  EXPECT_EQ(got[0].ip_header[4], std::byte{0x12});
  EXPECT_EQ(got[0].ip_header[5], std::byte{0x34});
}

// Transport headers of `op` (RC FLUSH of a range, RC ATOMIC WRITE or RC RDMA READ Request) to
// QP 0x11, with a RETH.
wire::TransportHeaders request_of(wire::Opcode op) {
  wire::TransportHeaders h;
  h.bth.opcode = static_cast<std::uint8_t>(op);
  h.bth.dest_qpn = 0x11;
  h.bth.psn = 0x2345;
  h.bth.ack_req = true;
  h.feth = wire::Feth{wire::kFlushGlobal, wire::kFlushRange};
  h.reth = wire::Reth{0x7f0000001000, 0x1234, 8};
  return h;
}

// The UDP payload (BTH to ICRC) of a packet from `from_ip` to `to_ip` with IPv4 identification
// `id`: the IBTA's ICRC, or with `rxe` the ICRC as the kernel's Soft-RoCE computes it for a
// FLUSH (wire::icrc_rxe_compute; for another opcode, the same rule applied to it).
Bytes udp_payload_of(const char* from_ip, const char* to_ip, const wire::TransportHeaders& h,
                     ConstBytes payload, std::uint16_t id, bool rxe) {
  wire::OuterHeaders o;
  o.src = v4(from_ip);
  o.dst = v4(to_ip);
  o.src_port = 4791;
  o.ipv4_id = id;
  o.ethernet = false;
  Bytes frame(512);
  frame.resize(wire::build_frame(frame, o, h, payload));
  const MutBytes roce = MutBytes(frame).subspan(28);
  const std::size_t n = roce.size() - wire::kIcrcBytes;
  if (rxe) store_le32(roce, n, wire::icrc_rxe_compute(ConstBytes(frame).first(28), roce.first(n)));
  return Bytes(roce.begin(), roce.end());
}

// FLUSH as the kernel's Soft-RoCE sends it, with its own form of ICRC (docs/INTEROP.md, "FLUSH
// and rxe") and a nonzero IPv4 identification: accepted and counted (rx_rxe_flush_icrc), the
// identification recovered for rxe's form. Refused as bad ICRCs: the same packet corrupted, and
// rxe's form of ICRC on an ATOMIC WRITE and on a READ Request (the allowance is FLUSH's only).
// A FLUSH with the IBTA's ICRC passes, not counted as rxe's.
TEST(UdpDatapath, RxesFlushIcrcIsAcceptedForFlushAndNoOtherOpcode) {
  const char* const b_ip = test::unique_ip();
  const char* const from_ip = test::unique_ip();
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(b.ok()) << b.error();
  const wire::TransportHeaders flush = request_of(wire::Opcode::kRcFlush);
  Bytes corrupted = udp_payload_of(from_ip, b_ip, flush, {}, 0x1234, true);
  corrupted[20] ^= std::byte{0x04};  // the RETH's address
  const Bytes eight(8, std::byte{0x5a});
  const std::vector<Bytes> datagrams = {
      udp_payload_of(from_ip, b_ip, flush, {}, 0x1234, true),   // accepted, rxe's
      udp_payload_of(from_ip, b_ip, flush, {}, 0, true),        // accepted, rxe's
      udp_payload_of(from_ip, b_ip, flush, {}, 0x0042, false),  // accepted, the IBTA's
      corrupted,
      udp_payload_of(from_ip, b_ip, request_of(wire::Opcode::kRcAtomicWrite), eight, 0, true),
      udp_payload_of(from_ip, b_ip, request_of(wire::Opcode::kRcRdmaReadRequest), {}, 7, true),
  };
  int fd = -1;
  sockaddr_in to{};
  ASSERT_NO_FATAL_FAILURE(open_sender(from_ip, b_ip, fd, to));
  for (const Bytes& d : datagrams) {
    ASSERT_EQ(::sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(d.size()));
  }
  ::close(fd);
  std::vector<Received> got;
  for (int i = 0; i < 10 && b.value()->counters().rx_packets < datagrams.size(); ++i) {
    if (!readable(b.value()->fd())) break;
    b.value()->receive(64, [&](const wire::RocePacket& p, const RxMeta& m) {
      got.push_back(
          Received{wire::decode_headers(p), {}, m, Bytes(m.ip_header.begin(), m.ip_header.end())});
    });
  }
  ASSERT_EQ(b.value()->counters().rx_packets, datagrams.size());
  ASSERT_EQ(got.size(), 3u);
  for (const Received& r : got) {
    EXPECT_EQ(r.h, flush);
    EXPECT_TRUE(r.meta.icrc_verified);
  }
  const UdpCounters& k = b.value()->counters();
  EXPECT_EQ(k.rx_rxe_flush_icrc, 2u);
  EXPECT_EQ(k.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 3u);
  // The identifications that explain the ICRCs: 0x1234 (rxe's form), 0x0042 (the IBTA's).
  EXPECT_EQ(k.rx_icrc_id_recovered, 2u);
  ASSERT_EQ(got[0].ip_header.size(), 20u);
  EXPECT_EQ(got[0].ip_header[4], std::byte{0x12});
  EXPECT_EQ(got[0].ip_header[5], std::byte{0x34});
}

// UdpOptions::rxe_icrc_peers: FLUSH packets to a listed peer leave with rxe's ICRC, in a GSO run
// too (identifications 1, 2, ... for rxe's longer CRC input), and arrive verified; a FLUSH to
// another peer and a READ Request to the listed one keep the IBTA's.
TEST(UdpDatapath, FlushToAnRxePeerLeavesWithRxesIcrc) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const c_ip = test::unique_ip();
  UdpOptions oa;
  oa.local = v4(a_ip);
  oa.rxe_icrc_peers = {v4(b_ip)};
  auto a = UdpDatapath::open(oa);
  ASSERT_TRUE(a.ok()) << a.error();
  auto b = open_dp(b_ip, true, true);
  auto c = open_dp(c_ip, true, true);
  ASSERT_TRUE(b && c);
  std::vector<Bytes> sent;
  a.value()->set_tap([&](ConstBytes frame, bool was_sent) {
    if (was_sent) sent.emplace_back(frame.begin(), frame.end());
  });
  const auto send = [&](const char* to, wire::Opcode op) {
    std::array<std::byte, 64> hdr{};
    const std::size_t n = wire::write_headers(hdr, request_of(op), 0);
    wire::OuterHeaders o;
    o.dst = v4(to);
    ASSERT_TRUE(a.value()->send(Instant{}, o, ConstBytes(hdr).first(n), {}));
  };
  for (int i = 0; i < 3; ++i) send(b_ip, wire::Opcode::kRcFlush);  // one GSO run
  send(c_ip, wire::Opcode::kRcFlush);
  send(b_ip, wire::Opcode::kRcRdmaReadRequest);
  a.value()->flush(Instant{});
  EXPECT_EQ(a.value()->counters().tx_rxe_flush_icrc, 3u);
  EXPECT_EQ(a.value()->counters().tx_gso_packets, 3u);  // the FLUSHes to B: one GSO run
  const auto at_b = receive_all(*b, 4);
  const auto at_c = receive_all(*c, 1);
  ASSERT_EQ(at_b.size(), 4u);
  ASSERT_EQ(at_c.size(), 1u);
  EXPECT_EQ(b->counters().rx_rxe_flush_icrc, 3u);
  EXPECT_EQ(c->counters().rx_rxe_flush_icrc, 0u);
  EXPECT_EQ(b->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 0u);
  // The capture shows what left: rxe's form on the three FLUSHes to B only.
  ASSERT_EQ(sent.size(), 5u);
  std::size_t rxe_form = 0;
  for (const Bytes& f : sent) {
    auto frame = wire::parse_frame(wire::LinkType::kEthernet, f);
    ASSERT_TRUE(frame.ok()) << wire::drop_reason_name(frame.error());
    if (frame->icrc_form == wire::IcrcForm::kRxe) {
      ++rxe_form;
      EXPECT_EQ(frame->roce.op->opcode(), wire::Opcode::kRcFlush);
      EXPECT_EQ(frame->ipv4.dst, v4(b_ip));
    }
  }
  EXPECT_EQ(rxe_form, 3u);
}

// A sender whose socket does not set DF (IP_PMTUDISC_DONT): its kernel sends DF=0 and picks the
// identification. The ICRC covers both; a receiver that rebuilt the header with DF=1 would drop
// every such packet. Here the ICRCs are computed for DF=0 and identifications 0 and 0x2345:
// each is recognised (rx_icrc_df_clear) and its GRH area shows that header; a corrupted one is
// still dropped.
TEST(UdpDatapath, Ipv4PacketsSentWithDfClearAreVerified) {
  const char* const b_ip = test::unique_ip();
  const char* const from_ip = test::unique_ip();
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(b.ok()) << b.error();
  int fd = -1;
  sockaddr_in to{};
  ASSERT_NO_FATAL_FAILURE(open_sender(from_ip, b_ip, fd, to, true));
  struct Case {
    std::size_t len;
    std::uint16_t id;  // the identification the ICRC is computed for
    bool corrupt;
  };
  const Case cases[] = {{0, 0, false},    {1, 0, false},     {100, 0x2345, false},
                        {1000, 0, false}, {4000, 0, false},  {300, 0x2345, false},
                        {64, 0, true},    {64, 0x2345, true}};
  std::size_t good = 0;
  for (const Case& c : cases) {
    wire::OuterHeaders o;
    o.src = v4(from_ip);
    o.dst = v4(b_ip);
    o.src_port = 4791;
    o.ipv4_df = false;
    o.ipv4_id = c.id;
    o.ethernet = false;
    const Bytes data = data_of(c.len);
    Bytes frame(8192);
    frame.resize(wire::build_frame(frame, o, send_only(data.size()), data));
    Bytes udp_payload(frame.begin() + 28, frame.end());
    if (c.corrupt) udp_payload[12 + c.len / 2] ^= std::byte{0x10};  // a payload bit
    good += c.corrupt ? 0 : 1;
    ASSERT_EQ(::sendto(fd, udp_payload.data(), udp_payload.size(), 0,
                       reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(udp_payload.size()));
  }
  ::close(fd);
  const auto got = receive_all(*b.value(), good);
  ASSERT_EQ(got.size(), good);
  std::size_t i = 0;
  for (const Case& c : cases) {
    if (c.corrupt) continue;
    const Received& r = got[i++];
    EXPECT_TRUE(r.meta.icrc_verified);
    EXPECT_EQ(r.payload, data_of(c.len)) << c.len;
    ASSERT_EQ(r.ip_header.size(), 20u);
    EXPECT_EQ(r.ip_header[6] & std::byte{0x40}, std::byte{0}) << "DF shown clear";
    EXPECT_EQ(r.ip_header[4], static_cast<std::byte>(c.id >> 8));
    EXPECT_EQ(r.ip_header[5], static_cast<std::byte>(c.id & 0xff));
  }
  for (int tries = 0; tries < 10 && b.value()->counters().rx_packets < std::size(cases); ++tries) {
    if (!readable(b.value()->fd())) break;
    b.value()->receive(64, [&](const wire::RocePacket&, const RxMeta&) { ADD_FAILURE(); });
  }
  const UdpCounters& k = b.value()->counters();
  EXPECT_EQ(k.rx_packets, std::size(cases));
  EXPECT_EQ(k.rx_icrc_df_clear, good);
  EXPECT_EQ(k.rx_icrc_id_recovered, 0u);
  EXPECT_EQ(k.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)], 2u);
}

// With deferred checks (issue 14, the engine's mode): a message continuation reaches the
// handler unverified, with RxMeta::pending, whose check recovers the identification and DF as
// the datapath's own does (counted the same); every other packet is verified first, as before.
TEST(UdpDatapath, DeferredChecksRecoverIdentificationAndDfAndRejectCorruption) {
  const char* const b_ip = test::unique_ip();
  const char* const from_ip = test::unique_ip();
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(b.ok()) << b.error();
  b.value()->set_deferred_icrc(true);
  int fd = -1;
  sockaddr_in to{};
  ASSERT_NO_FATAL_FAILURE(open_sender(from_ip, b_ip, fd, to, true));
  struct Case {
    wire::Opcode op;
    bool df;
    std::uint16_t id;
    bool corrupt;
  };
  const Case cases[] = {
      {wire::Opcode::kRcRdmaWriteMiddle, false, 0, false},
      {wire::Opcode::kRcRdmaWriteLast, false, 0x2345, false},  // DF clear, some id
      {wire::Opcode::kRcSendMiddle, false, 0x0102, true},
      {wire::Opcode::kRcRdmaReadResponseMiddle, false, 0, true},
      {wire::Opcode::kRcSendOnly, false, 0x0a0b, false},  // not deferred: verified first
      {wire::Opcode::kRcSendOnly, false, 0, true},
  };
  for (const Case& c : cases) {
    wire::OuterHeaders o;
    o.src = v4(from_ip);
    o.dst = v4(b_ip);
    o.src_port = 4791;
    o.ipv4_df = c.df;
    o.ipv4_id = c.id;
    o.ethernet = false;
    const Bytes data = data_of(256);
    wire::TransportHeaders h = send_only(data.size());
    h.bth.opcode = static_cast<std::uint8_t>(c.op);
    Bytes frame(8192);
    frame.resize(wire::build_frame(frame, o, h, data));
    Bytes udp_payload(frame.begin() + 28, frame.end());
    if (c.corrupt) udp_payload[12 + 100] ^= std::byte{0x04};  // a payload bit
    ASSERT_EQ(::sendto(fd, udp_payload.data(), udp_payload.size(), 0,
                       reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(udp_payload.size()));
  }
  ::close(fd);
  struct Seen {
    wire::Opcode op;
    bool pending;
    bool verified;
  };
  std::vector<Seen> seen;
  for (int tries = 0; tries < 20 && b.value()->counters().rx_packets < std::size(cases); ++tries) {
    if (!readable(b.value()->fd())) break;
    b.value()->receive(64, [&](const wire::RocePacket& pkt, const RxMeta& meta) {
      if (meta.pending != nullptr) {
        EXPECT_FALSE(meta.icrc_verified);
        EXPECT_EQ(meta.pending->payload_bytes(), 256u);
        Bytes out(256);
        meta.pending->copy_payload(out);
        const bool ok = meta.pending->finish();
        if (ok) {
          EXPECT_EQ(out, data_of(256));
        }
        seen.push_back({pkt.op->opcode(), true, ok});
      } else {
        seen.push_back({pkt.op->opcode(), false, meta.icrc_verified});
      }
    });
  }
  // A corrupted packet that is not deferred (the SEND Middle, the SEND Only) is dropped by the
  // datapath and never reaches the handler.
  const auto deferred = [](const Case& c) {
    return wire::icrc_deferrable(wire::opcode_info(c.op));
  };
  const auto reaches = [&](const Case& c) { return deferred(c) || !c.corrupt; };
  ASSERT_EQ(seen.size(),
            static_cast<std::size_t>(std::count_if(std::begin(cases), std::end(cases), reaches)));
  std::size_t i = 0;
  for (const Case& c : cases) {
    if (!reaches(c)) continue;
    EXPECT_EQ(seen[i].op, c.op) << i;
    EXPECT_EQ(seen[i].pending, wire::icrc_deferrable(wire::opcode_info(c.op))) << i;
    EXPECT_EQ(seen[i].verified, !c.corrupt) << i;
    ++i;
  }
  const UdpCounters& k = b.value()->counters();
  EXPECT_EQ(k.rx_packets, std::size(cases));
  EXPECT_EQ(k.rx_icrc_df_clear, 3u);  // the intact ones, deferred or not
  // The datapath counts only the ones it verified itself; the handler (the engine) counts the
  // deferred ones it rejects.
  EXPECT_EQ(k.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)],
            static_cast<std::uint64_t>(std::count_if(std::begin(cases), std::end(cases),
                                                     [&](const Case& c) { return !reaches(c); })));
  EXPECT_EQ(std::count_if(std::begin(cases), std::end(cases), reaches), 4);
}

TEST(UdpDatapath, GarbageAndBadIcrcAreCountedDrops) {
  const char* const b_ip = test::unique_ip();
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(b.ok()) << b.error();
  raw_send(v4(b_ip), 4791, Bytes(7, std::byte{0x55}));  // shorter than BTH + ICRC
  Bytes bad(12 + 8 + 4);
  wire::write_roce(bad, send_only(8), Bytes(8));
  bad[bad.size() - 1] ^= std::byte{1};
  raw_send(v4(b_ip), 4791, bad);  // from an ephemeral port, ICRC wrong
  for (int i = 0; i < 10 && b.value()->counters().rx_packets < 2; ++i) {
    if (!readable(b.value()->fd())) break;
    b.value()->receive(64, [&](const wire::RocePacket&, const RxMeta&) { ADD_FAILURE(); });
  }
  EXPECT_EQ(b.value()->counters().rx_packets, 2u);
  // IPv4 from another socket: no identification makes its ICRC valid.
  EXPECT_EQ(b.value()->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)],
            1u);
  EXPECT_EQ(b.value()->counters().rx_icrc_id_recovered, 0u);
  EXPECT_EQ(
      b.value()->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kTruncatedBth)],
      1u);

  const std::uint16_t v6_port = test::unique_port();
  auto v6 = UdpDatapath::open({loopback6(), v6_port});
  if (!v6.ok()) GTEST_SKIP() << v6.error();
  raw_send(loopback6(), v6_port, bad);
  Bytes good(12 + 8 + 4);
  wire::write_roce(good, send_only(8), Bytes(8));
  raw_send(loopback6(), v6_port, good);  // also unverifiable by its ICRC: zero, so dropped too
  ASSERT_TRUE(readable(v6.value()->fd()));
  std::size_t handled = 0;
  for (int i = 0; i < 10 && v6.value()->counters().rx_packets < 2; ++i) {
    if (!readable(v6.value()->fd())) break;
    v6.value()->receive(64, [&](const wire::RocePacket&, const RxMeta&) { ++handled; });
  }
  // IPv6: the headers are exactly known, so a wrong ICRC is always dropped.
  EXPECT_EQ(handled, 0u);
  EXPECT_EQ(v6.value()->counters().rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)],
            2u);
}

// Datagrams that are no RoCE packet at all, on a GRO socket too, and a GSO datagram of garbage
// segments: each is a counted drop, and a real packet after them still arrives.
TEST(UdpDatapath, GarbageDatagramsAreCountedDropsNeverACrash) {
  const char* const b_ip = test::unique_ip();
  const char* const a_ip = test::unique_ip();
  for (const bool gro : {false, true}) {
    auto b = open_dp(b_ip, false, gro);
    ASSERT_TRUE(b);
    std::uint64_t sent = 0;
    raw_send(v4(b_ip), 4791, Bytes());  // empty
    raw_send(v4(b_ip), 4791, Bytes(15, std::byte{0xff}));
    raw_send(v4(b_ip), 4791, Bytes(65507, std::byte{0x01}));  // the largest datagram
    Bytes noise(3000);
    for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = static_cast<std::byte>(i * 131);
    raw_send(v4(b_ip), 4791, noise);
    sent += 4;
    {
      // A GSO datagram of 5 noise segments of 600 bytes from another socket.
      const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
      ASSERT_GE(fd, 0);
      sockaddr_in to{};
      to.sin_family = AF_INET;
      to.sin_port = htons(4791);
      std::memcpy(&to.sin_addr, v4(b_ip).bytes.data(), 4);
      const int seg = 600;
      if (::setsockopt(fd, SOL_UDP, UDP_SEGMENT, &seg, sizeof seg) == 0) {
        ASSERT_EQ(::sendto(fd, noise.data(), 3000, 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
                  3000);
        sent += 5;
      }
      ::close(fd);
    }
    std::size_t handled = 0;
    for (int i = 0; i < 20 && b->counters().rx_packets < sent; ++i) {
      if (!readable(b->fd())) break;
      b->receive(64, [&](const wire::RocePacket&, const RxMeta&) { ++handled; });
    }
    std::uint64_t drops = 0;
    for (auto d : b->counters().rx_drops) drops += d;
    EXPECT_EQ(b->counters().rx_packets, sent);
    // Noise may parse as a packet now and then (a UD opcode, say); its ICRC then fits some
    // IPv4 identification only by a 2^-16 chance. Everything else is a drop.
    EXPECT_EQ(drops + handled, sent);
    EXPECT_EQ(handled, b->counters().rx_icrc_id_recovered);
    // The datapath still works.
    auto a = open_dp(a_ip, true, false);
    ASSERT_TRUE(a);
    const Bytes data = data_of(4096);
    const auto pkts = write_message(3, 1024, 1024);
    for (const Packet& p : pkts) queue(*a, p, data, b_ip);
    a->flush(Instant{});
    expect_packets(receive_all(*b, pkts.size()), pkts, data);
  }
}

TEST(UdpDatapath, TrafficClassBecomesTheTosByte) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  auto a = UdpDatapath::open({v4(a_ip), 4791});
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  // DSCP 26 (AF31) with ECT(0), as a RoCE traffic class would carry.
  send_gathered(*a.value(), v4(b_ip), 4791, data_of(64), (26 << 2) | 2);
  const auto got = receive_all(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].meta.tos, (26 << 2) | 2);
  EXPECT_TRUE(got[0].meta.icrc_verified);  // TOS is masked in the ICRC
  ASSERT_EQ(got[0].ip_header.size(), 20u);
  EXPECT_EQ(static_cast<int>(got[0].ip_header[1]), (26 << 2) | 2);
}

// A socket whose own TOS is ECT(0) (a device whose congestion control sends every packet
// ECN-capable): packets with that TOS leave without a control message and still carry it, and
// packets with another TOS, 0 included, carry their own.
TEST(UdpDatapath, ThePacketsTosWinsOverTheSocketsOwn) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  UdpOptions ao{v4(a_ip), 4791};
  ao.default_tos = 2;
  auto a = UdpDatapath::open(ao);
  auto b = UdpDatapath::open({v4(b_ip), 4791});
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  const int tos_of_socket = [&] {
    int tos = -1;
    socklen_t len = sizeof tos;
    EXPECT_EQ(::getsockopt(a.value()->fd(), IPPROTO_IP, IP_TOS, &tos, &len), 0);
    return tos;
  }();
  EXPECT_EQ(tos_of_socket, 2);
  for (const std::uint8_t tos : {std::uint8_t{2}, std::uint8_t{0}, std::uint8_t{(26 << 2) | 1}}) {
    send_gathered(*a.value(), v4(b_ip), 4791, data_of(64), tos);
    const auto got = receive_all(*b.value(), 1);
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].meta.tos, tos);
    EXPECT_TRUE(got[0].meta.icrc_verified);
  }
}

TEST(UdpDatapath, InterfaceMtuOfLoopback) {
  // lo has a 64 KiB MTU (65536 on Linux); every 127/8 address is on it.
  auto a = interface_mtu(v4("127.0.0.1"));
  ASSERT_TRUE(a.ok()) << a.error();
  EXPECT_GE(a.value(), 16384u);
  auto b = interface_mtu(v4("127.0.0.99"));
  ASSERT_TRUE(b.ok()) << b.error();
  EXPECT_EQ(b.value(), a.value());
  EXPECT_FALSE(interface_mtu(v4("192.0.2.1")).ok());  // on no interface here
}

TEST(UdpDatapath, HardwareSegmentationKeepsIpv4GsoOff) {
  const char* const a_ip = test::unique_ip();
  auto lo = interface_name(v4("127.0.0.5"));
  ASSERT_TRUE(lo.ok()) << lo.error();
  EXPECT_EQ(lo.value(), "lo");
  // Virtual devices segment in software (or not at all): GSO stays on over them.
  EXPECT_FALSE(hardware_udp_segmentation("lo"));
  // lo has the feature (it passes GSO datagrams on whole), but it is no hardware.
  EXPECT_EQ(udp_segmentation_feature("lo"), std::optional<bool>(true));
  EXPECT_FALSE(udp_segmentation_feature("no-such-if0").has_value());
  EXPECT_FALSE(hardware_udp_segmentation("no-such-if0"));
  EXPECT_FALSE(hardware_udp_segmentation("../../etc"));
  EXPECT_FALSE(interface_name(v4("192.0.2.1")).ok());
  auto a = open_dp(a_ip, true, false);
  ASSERT_TRUE(a);
  if (a->gso()) {
    EXPECT_EQ(a->gso_note(), "on");
  }
  // Every device-backed interface here: the answer agrees with what ethtool reports.
  std::size_t compared = 0;
  for (const auto& e : std::filesystem::directory_iterator("/sys/class/net")) {
    const std::string name = e.path().filename().string();
    if (!std::filesystem::exists(e.path() / "device")) {
      EXPECT_FALSE(hardware_udp_segmentation(name)) << name;
      continue;
    }
    FILE* p = ::popen(("ethtool -k " + name + " 2>/dev/null").c_str(), "r");
    if (p == nullptr) continue;
    std::string out;
    char line[256];
    while (std::fgets(line, sizeof line, p) != nullptr) out += line;
    ::pclose(p);
    const auto at = out.find("tx-udp-segmentation: ");
    if (at == std::string::npos) continue;  // no ethtool here
    const bool on = out.compare(at + 21, 2, "on") == 0;
    EXPECT_EQ(udp_segmentation_feature(name), std::optional<bool>(on)) << name;
    EXPECT_EQ(hardware_udp_segmentation(name), on) << name;
    ++compared;
  }
  std::printf("compared with ethtool on %zu device-backed interfaces\n", compared);
}

TEST(UdpDatapath, ReceiveBufferIsLargerThanTheKernelDefault) {
  const char* const a_ip = test::unique_ip();
  auto a = open_dp(a_ip, false, false);
  ASSERT_TRUE(a);
  int bytes = 0;
  socklen_t len = sizeof bytes;
  ASSERT_EQ(::getsockopt(a->fd(), SOL_SOCKET, SO_RCVBUF, &bytes, &len), 0);
  // 16 MiB asked for: root gets it (doubled by the kernel for its bookkeeping, as every
  // request); others at most net.core.rmem_max, doubled.
  int rmem_max = 0;
  if (FILE* f = std::fopen("/proc/sys/net/core/rmem_max", "r")) {
    if (std::fscanf(f, "%d", &rmem_max) != 1) rmem_max = 0;
    std::fclose(f);
  }
  const int want = ::geteuid() == 0 ? 16 << 20 : std::min(16 << 20, rmem_max);
  EXPECT_GE(bytes, 2 * want) << "rmem_max " << rmem_max;
}

TEST(UdpDatapath, PortInUseIsAClearError) {
  const char* const a_ip = test::unique_ip();
  auto a = UdpDatapath::open({v4(a_ip), 4791});
  ASSERT_TRUE(a.ok()) << a.error();
  auto b = UdpDatapath::open({v4(a_ip), 4791});
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, EADDRINUSE);
  EXPECT_NE(b.error().text.find(std::string("cannot bind ") + a_ip + " port 4791"),
            std::string::npos)
      << b.error();
  // An address that is not local.
  auto c = UdpDatapath::open({v4("192.0.2.1"), 4791});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, EADDRNOTAVAIL);
  EXPECT_NE(c.error().text.find("cannot bind"), std::string::npos);
}

// UdpOptions::recv_errors: a datagram to an address and port where nothing is bound draws an
// ICMP port unreachable, read from the error queue with the datagram's destination. The error
// the kernel also leaves pending on the socket fails its next send once: that packet goes again,
// not lost. Port 0 binds one the kernel picks, which the ICRC covers.
TEST(UdpDatapath, APortUnreachableIsReadFromTheErrorQueueAndCostsNoPacket) {
  const char* const a_ip = test::unique_ip();
  const char* const b_ip = test::unique_ip();
  const char* const closed_ip = test::unique_ip();  // nothing binds it
  UdpOptions o(v4(a_ip), 0);
  o.gso = false;
  o.gro = false;
  o.recv_errors = true;
  auto opened = UdpDatapath::open(o);
  ASSERT_TRUE(opened.ok()) << opened.error();
  UdpDatapath& a = *opened.value();
  EXPECT_NE(a.port(), 0u);
  auto b = open_dp(b_ip, false, false);
  ASSERT_TRUE(b);
  const Bytes data = data_of(300);
  send_gathered(a, v4(closed_ip), wire::kRoceV2Port, data);
  pollfd p{a.fd(), 0, 0};
  ASSERT_EQ(::poll(&p, 1, 5000), 1);  // bounded wait for the error: POLLERR
  EXPECT_NE(p.revents & POLLERR, 0);
  send_gathered(a, v4(b_ip), wire::kRoceV2Port, data);
  EXPECT_EQ(a.counters().tx_error_retries, 1u);
  EXPECT_EQ(a.counters().tx_errors, 0u);
  const auto got = receive_all(*b, 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(got[0].meta.icrc_verified);
  EXPECT_EQ(got[0].meta.src_port, a.port());
  std::vector<SendError> errors;
  const auto keep = [&](const SendError& e) { errors.push_back(e); };
  EXPECT_EQ(a.receive_errors(8, keep), 1u);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_TRUE(errors[0].port_unreachable);
  EXPECT_TRUE(errors[0].dst == v4(closed_ip));
  EXPECT_EQ(errors[0].dst_port, wire::kRoceV2Port);
  EXPECT_EQ(a.counters().rx_port_unreachable, 1u);
  EXPECT_EQ(a.receive_errors(8, keep), 0u);  // read: none left, and no POLLERR
  EXPECT_EQ(::poll(&p, 1, 0), 0);
}

}  // namespace
}  // namespace uroce::datapath
