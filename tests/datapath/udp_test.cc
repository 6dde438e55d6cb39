// datapath/udp on loopback: real sockets, real kernel headers, the ICRC computed for the headers
// the kernel writes. Traffic stays on 127.0.0.0/8 and ::1.
#include "datapath/udp.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "wire/builder.h"

namespace uroce::datapath {
namespace {

using Bytes = std::vector<std::byte>;

wire::IpAddress v4(const char* s) {
  wire::IpAddress a;
  ::inet_pton(AF_INET, s, a.bytes.data());
  return a;
}
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
}

Bytes data_of(std::size_t n) {
  Bytes b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = static_cast<std::byte>(i * 31 + 7);
  return b;
}

TEST(UdpDatapath, Ipv4LoopbackWithAVerifiedIcrc) {
  auto a = UdpDatapath::open({v4("127.0.0.61"), 4791});
  auto b = UdpDatapath::open({v4("127.0.0.62"), 4791});
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  for (std::size_t len : {0u, 1u, 3u, 1000u, 4096u}) {
    const Bytes data = data_of(len);
    send_gathered(*a.value(), v4("127.0.0.62"), 4791, data);
    const auto got = receive_all(*b.value(), 1);
    ASSERT_EQ(got.size(), 1u) << len;
    EXPECT_EQ(got[0].payload, data);
    EXPECT_EQ(got[0].h.bth.psn, 0x123456u);
    EXPECT_EQ(got[0].h.bth.dest_qpn, 0x11u);
    // Identification 0 (unconnected socket, IP_PMTUDISC_DO): the ICRC verifies.
    EXPECT_TRUE(got[0].meta.icrc_verified) << len;
    EXPECT_EQ(got[0].meta.src, v4("127.0.0.61"));
    EXPECT_EQ(got[0].meta.src_port, 4791);
    ASSERT_EQ(got[0].ip_header.size(), 20u);
    EXPECT_EQ(static_cast<int>(got[0].ip_header[0]), 0x45);
    EXPECT_EQ(std::memcmp(got[0].ip_header.data() + 12, v4("127.0.0.61").bytes.data(), 4), 0);
  }
  EXPECT_EQ(b.value()->counters().rx_icrc_id_recovered, 0u);
  EXPECT_EQ(a.value()->counters().tx_packets, 5u);
}

TEST(UdpDatapath, Ipv6LoopbackWithAVerifiedIcrc) {
  auto a = UdpDatapath::open({loopback6(), 4791});
  auto b = UdpDatapath::open({loopback6(), 4792});
  if (!a.ok() && a.error().find("Cannot assign") != std::string::npos) {
    GTEST_SKIP() << "no IPv6 loopback on this machine: " << a.error();
  }
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  const Bytes data = data_of(777);
  send_gathered(*a.value(), loopback6(), 4792, data);
  const auto got = receive_all(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].payload, data);
  EXPECT_TRUE(got[0].meta.icrc_verified);
  EXPECT_EQ(got[0].ip_header.size(), 40u);
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
  const int plain = ::socket(AF_INET6, SOCK_DGRAM, 0);
  ASSERT_GE(plain, 0);
  sockaddr_in6 at{};
  at.sin6_family = AF_INET6;
  at.sin6_port = htons(4797);
  at.sin6_addr = in6addr_loopback;
  if (::bind(plain, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0) {
    ::close(plain);
    GTEST_SKIP() << "no IPv6 loopback on this machine";
  }
  auto a = UdpDatapath::open({loopback6(), 4796});
  ASSERT_TRUE(a.ok()) << a.error();
  const Bytes data = data_of(300);
  send_gathered(*a.value(), loopback6(), 4797, data);
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
  auto b = UdpDatapath::open({loopback6(), 4797});
  ASSERT_TRUE(b.ok()) << b.error();
  const int raw = ::socket(AF_INET6, SOCK_RAW, IPPROTO_UDP);
  if (raw < 0) GTEST_SKIP() << "raw sockets need CAP_NET_RAW: " << std::strerror(errno);
  Bytes udp(8 + datagram.size());
  const std::uint16_t sport = ntohs(from.sin6_port), dport = 4797;
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

TEST(UdpDatapath, Ipv4IdentificationIsRecoveredFromTheIcrc) {
  // A sender with nonzero identifications (as rxe): its ICRC is valid for identification
  // 0x1234, which the receiver finds and shows in the packet's IP header.
  auto b = UdpDatapath::open({v4("127.0.0.65"), 4791});
  ASSERT_TRUE(b.ok()) << b.error();
  const int fd = ::socket(AF_INET, SOCK_DGRAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_port = htons(4791);
  ::inet_pton(AF_INET, "127.0.0.66", &from.sin_addr);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof from), 0);
  wire::OuterHeaders o;
  o.src = v4("127.0.0.66");
  o.dst = v4("127.0.0.65");
  o.src_port = 4791;
  o.ipv4_id = 0x1234;
  o.ethernet = false;
  const Bytes data = data_of(100);
  Bytes frame(512);
  frame.resize(wire::build_frame(frame, o, send_only(data.size()), data));
  sockaddr_in to = from;
  ::inet_pton(AF_INET, "127.0.0.65", &to.sin_addr);
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

TEST(UdpDatapath, GarbageAndBadIcrcAreCountedDrops) {
  auto b = UdpDatapath::open({v4("127.0.0.63"), 4791});
  ASSERT_TRUE(b.ok()) << b.error();
  raw_send(v4("127.0.0.63"), 4791, Bytes(7, std::byte{0x55}));  // shorter than BTH + ICRC
  Bytes bad(12 + 8 + 4);
  wire::write_roce(bad, send_only(8), Bytes(8));
  bad[bad.size() - 1] ^= std::byte{1};
  raw_send(v4("127.0.0.63"), 4791, bad);  // from an ephemeral port, ICRC wrong
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

  auto v6 = UdpDatapath::open({loopback6(), 4793});
  if (!v6.ok()) GTEST_SKIP() << v6.error();
  raw_send(loopback6(), 4793, bad);
  Bytes good(12 + 8 + 4);
  wire::write_roce(good, send_only(8), Bytes(8));
  raw_send(loopback6(), 4793, good);  // also unverifiable by its ICRC: zero, so dropped too
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

TEST(UdpDatapath, TrafficClassBecomesTheTosByte) {
  auto a = UdpDatapath::open({v4("127.0.0.65"), 4791});
  auto b = UdpDatapath::open({v4("127.0.0.66"), 4791});
  ASSERT_TRUE(a.ok()) << a.error();
  ASSERT_TRUE(b.ok()) << b.error();
  // DSCP 26 (AF31) with ECT(0), as a RoCE traffic class would carry.
  send_gathered(*a.value(), v4("127.0.0.66"), 4791, data_of(64), (26 << 2) | 2);
  const auto got = receive_all(*b.value(), 1);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].meta.tos, (26 << 2) | 2);
  EXPECT_TRUE(got[0].meta.icrc_verified);  // TOS is masked in the ICRC
  ASSERT_EQ(got[0].ip_header.size(), 20u);
  EXPECT_EQ(static_cast<int>(got[0].ip_header[1]), (26 << 2) | 2);
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

TEST(UdpDatapath, PortInUseIsAClearError) {
  auto a = UdpDatapath::open({v4("127.0.0.64"), 4791});
  ASSERT_TRUE(a.ok()) << a.error();
  auto b = UdpDatapath::open({v4("127.0.0.64"), 4791});
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().find("cannot bind 127.0.0.64 port 4791"), std::string::npos) << b.error();
  // An address that is not local.
  auto c = UdpDatapath::open({v4("192.0.2.1"), 4791});
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().find("cannot bind"), std::string::npos);
}

}  // namespace
}  // namespace uroce::datapath
