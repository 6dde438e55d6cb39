#include "datapath/udp.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "wire/icrc.h"

namespace uroce::datapath {

namespace {

std::string errno_text(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

void to_sockaddr(const wire::IpAddress& ip, std::uint16_t port, sockaddr_storage& ss,
                 socklen_t& len) {
  std::memset(&ss, 0, sizeof ss);
  if (ip.v6) {
    auto* sa = reinterpret_cast<sockaddr_in6*>(&ss);
    sa->sin6_family = AF_INET6;
    sa->sin6_port = htons(port);
    std::memcpy(&sa->sin6_addr, ip.bytes.data(), 16);
    len = sizeof(sockaddr_in6);
  } else {
    auto* sa = reinterpret_cast<sockaddr_in*>(&ss);
    sa->sin_family = AF_INET;
    sa->sin_port = htons(port);
    std::memcpy(&sa->sin_addr, ip.bytes.data(), 4);
    len = sizeof(sockaddr_in);
  }
}

std::array<std::uint8_t, 6> mac_of(const wire::IpAddress& ip) {
  const std::size_t at = ip.v6 ? 12 : 0;
  return {0x02, 0x00, ip.bytes[at], ip.bytes[at + 1], ip.bytes[at + 2], ip.bytes[at + 3]};
}

}  // namespace

Result<std::uint32_t, std::string> interface_mtu(const wire::IpAddress& local) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return Err{errno_text("getifaddrs")};
  std::string name;
  for (ifaddrs* i = list; i != nullptr && name.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    if (!local.v6 && i->ifa_addr->sa_family == AF_INET) {
      const auto* sa = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      if (std::memcmp(&sa->sin_addr, local.bytes.data(), 4) == 0) name = i->ifa_name;
    } else if (local.v6 && i->ifa_addr->sa_family == AF_INET6) {
      const auto* sa = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (std::memcmp(&sa->sin6_addr, local.bytes.data(), 16) == 0) name = i->ifa_name;
    }
  }
  ::freeifaddrs(list);
  // 127.0.0.0/8 is all loopback, though only 127.0.0.1 is listed as an address of lo.
  if (name.empty() && !local.v6 && local.bytes[0] == 127) name = "lo";
  if (name.empty()) return Err{std::string("no network interface has this address")};
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err{errno_text("socket")};
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  const int rc = ::ioctl(fd, SIOCGIFMTU, &req);
  ::close(fd);
  if (rc != 0) return Err{errno_text("SIOCGIFMTU")};
  return static_cast<std::uint32_t>(req.ifr_mtu);
}

Result<std::unique_ptr<UdpDatapath>, std::string> UdpDatapath::open(const UdpOptions& options) {
  const bool v6 = options.local.v6;
  const int fd = ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err{errno_text("socket")};
  auto fail = [fd](const char* what) {
    std::string msg = errno_text(what);
    ::close(fd);
    return msg;
  };
  int on = 1;
  if (v6) {
    // DF on every datagram; no fragmentation (roce-facts.md).
    int pmtu = IPV6_PMTUDISC_DO;
    if (::setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu) != 0 ||
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) != 0 ||
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &on, sizeof on) != 0 ||
        ::setsockopt(fd, IPPROTO_IPV6, IPV6_RECVHOPLIMIT, &on, sizeof on) != 0 ||
        // rxe sends RoCEv2 over IPv6 with UDP checksum 0 too (its tunnel socket is set up
        // without IPv6 UDP checksums; the ICRC protects the packet). Linux drops such IPv6
        // datagrams unless the socket accepts a zero checksum (RFC 6936); seen in
        // tests/interop against kernel 6.1's rxe.
        ::setsockopt(fd, IPPROTO_UDP, UDP_NO_CHECK6_RX, &on, sizeof on) != 0) {
      return Err{fail("setsockopt")};
    }
  } else {
    // Unconnected, IP_PMTUDISC_DO: the kernel sends DF=1 and identification 0.
    int pmtu = IP_PMTUDISC_DO;
    if (::setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu) != 0 ||
        ::setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on) != 0 ||
        ::setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &on, sizeof on) != 0) {
      return Err{fail("setsockopt")};
    }
  }
  sockaddr_storage ss;
  socklen_t len = 0;
  to_sockaddr(options.local, options.port, ss, len);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    char addr[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(v6 ? AF_INET6 : AF_INET, options.local.bytes.data(), addr, sizeof addr);
    const std::string msg = "cannot bind " + std::string(addr) + " port " +
                            std::to_string(options.port) + ": " + std::strerror(errno);
    ::close(fd);
    return Err{msg};
  }
  return std::unique_ptr<UdpDatapath>(new UdpDatapath(fd, options.local, options.port));
}

UdpDatapath::UdpDatapath(int fd, const wire::IpAddress& local, std::uint16_t port)
    : fd_(fd), local_(local), port_(port) {}

UdpDatapath::~UdpDatapath() { ::close(fd_); }

wire::OuterHeaders UdpDatapath::outer(const wire::IpAddress& src, const wire::IpAddress& dst,
                                      std::uint16_t sport, std::uint16_t dport, std::uint8_t tos,
                                      std::uint8_t ttl) {
  // What the kernel writes for an unconnected socket with IP_PMTUDISC_DO: DF, identification 0.
  wire::OuterHeaders h;
  h.src = src;
  h.dst = dst;
  h.src_port = sport;
  h.dst_port = dport;
  h.traffic_class = tos;
  h.ttl = ttl;
  h.ipv4_id = 0;
  h.ethernet = false;
  h.src_mac = mac_of(src);
  h.dst_mac = mac_of(dst);
  return h;
}

bool UdpDatapath::send(Instant, const wire::OuterHeaders& o, ConstBytes transport_headers,
                       std::span<const ConstBytes> payload) {
  std::size_t payload_bytes = 0;
  for (ConstBytes p : payload) payload_bytes += p.size();
  const std::size_t pad = wire::pad_for(payload_bytes);
  const std::size_t roce = transport_headers.size() + payload_bytes + pad + wire::kIcrcBytes;
  wire::OuterHeaders h = outer(local_, o.dst, port_, o.dst_port, o.traffic_class, o.ttl);
  std::array<std::byte, 48> ip_udp;
  const std::size_t n = wire::write_outer(ip_udp, h, roce);
  wire::IcrcAccumulator acc(ConstBytes(ip_udp).first(n), transport_headers);
  for (ConstBytes p : payload) acc.update(p);
  std::array<std::byte, 8> tail{};  // pad, then the ICRC, least significant byte first
  acc.update(ConstBytes(tail).first(pad));
  store_le32(tail, pad, acc.value());

  std::array<iovec, 2 + kMaxPieces> iov;
  std::size_t k = 0;
  iov[k++] = iovec{const_cast<std::byte*>(transport_headers.data()), transport_headers.size()};
  for (ConstBytes p : payload) {
    if (p.empty()) continue;
    if (k + 1 >= iov.size()) return false;  // more pieces than an SGE list can have
    iov[k++] = iovec{const_cast<std::byte*>(p.data()), p.size()};
  }
  iov[k++] = iovec{tail.data(), pad + wire::kIcrcBytes};
  sockaddr_storage ss;
  socklen_t len = 0;
  to_sockaddr(o.dst, o.dst_port, ss, len);
  msghdr msg{};
  msg.msg_name = &ss;
  msg.msg_namelen = len;
  msg.msg_iov = iov.data();
  msg.msg_iovlen = k;
  // DSCP and ECN from the QP's traffic class, per packet (rxe: the address vector's
  // traffic_class becomes the IPv4 TOS byte / IPv6 traffic class).
  alignas(cmsghdr) std::array<std::byte, CMSG_SPACE(sizeof(int))> control{};
  if (o.traffic_class != 0) {
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = o.dst.v6 ? IPPROTO_IPV6 : IPPROTO_IP;
    c->cmsg_type = o.dst.v6 ? IPV6_TCLASS : IP_TOS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    const int tos = o.traffic_class;
    std::memcpy(CMSG_DATA(c), &tos, sizeof tos);
  }
  const ssize_t sent = ::sendmsg(fd_, &msg, 0);
  if (sent < 0) {
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) return false;
    ++counters_.tx_errors;  // unreachable peer, ...: the packet is lost, as on a wire
    return true;
  }
  ++counters_.tx_packets;
  counters_.tx_bytes += static_cast<std::uint64_t>(sent);
  if (tap_) {
    h.ethernet = true;
    tap_buf_.resize(roce + 128);
    tap_buf_.resize(wire::build_frame_gather(tap_buf_, h, transport_headers, payload));
    tap_(tap_buf_, true);
  }
  return true;
}

std::size_t UdpDatapath::receive(std::size_t max, const RxHandler& handler) {
  std::size_t count = 0;
  for (; count < max; ++count) {
    sockaddr_storage from{};
    iovec iov{rx_buf_.data(), rx_buf_.size()};
    alignas(cmsghdr) std::array<std::byte, 256> control{};
    msghdr msg{};
    msg.msg_name = &from;
    msg.msg_namelen = sizeof from;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    const ssize_t got = ::recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (got < 0) break;  // EAGAIN: nothing more (other errors: try again next time)
    ++counters_.rx_packets;
    counters_.rx_bytes += static_cast<std::uint64_t>(got);
    RxMeta meta;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      int v = 0;
      if ((c->cmsg_level == IPPROTO_IP && (c->cmsg_type == IP_TOS || c->cmsg_type == IP_TTL))) {
        // IP_TOS arrives as one byte, IP_TTL as an int.
        if (c->cmsg_type == IP_TOS) {
          meta.tos = *reinterpret_cast<const std::uint8_t*>(CMSG_DATA(c));
        } else {
          std::memcpy(&v, CMSG_DATA(c), sizeof v);
          meta.ttl = static_cast<std::uint8_t>(v);
        }
      } else if (c->cmsg_level == IPPROTO_IPV6 &&
                 (c->cmsg_type == IPV6_TCLASS || c->cmsg_type == IPV6_HOPLIMIT)) {
        std::memcpy(&v, CMSG_DATA(c), sizeof v);
        (c->cmsg_type == IPV6_TCLASS ? meta.tos : meta.ttl) = static_cast<std::uint8_t>(v);
      }
    }
    if (from.ss_family == AF_INET6) {
      const auto* sa = reinterpret_cast<const sockaddr_in6*>(&from);
      meta.src.v6 = true;
      std::memcpy(meta.src.bytes.data(), &sa->sin6_addr, 16);
      meta.src_port = ntohs(sa->sin6_port);
    } else {
      const auto* sa = reinterpret_cast<const sockaddr_in*>(&from);
      std::memcpy(meta.src.bytes.data(), &sa->sin_addr, 4);
      meta.src_port = ntohs(sa->sin_port);
    }
    const ConstBytes roce = ConstBytes(rx_buf_).first(static_cast<std::size_t>(got));
    auto pkt = wire::parse_roce(roce);
    if (!pkt.ok()) {
      ++counters_.rx_drops[static_cast<std::size_t>(pkt.error())];
      continue;
    }
    // The headers as the sender's kernel wrote them, with TOS and TTL as received. They are the
    // ICRC's input and, for a UD receive, the GRH area. A sender's IPv4 identification is not
    // visible to a UDP socket: uroce's own senders use 0; for others (rxe uses nonzero ones) the
    // identification is recovered from the ICRC itself (wire::icrc_recover_ipv4_identification),
    // which leaves a 16-bit check against corruption instead of 32.
    wire::OuterHeaders o = outer(meta.src, local_, meta.src_port, port_, meta.tos, meta.ttl);
    std::array<std::byte, 48> ip_udp;
    std::size_t n = wire::write_outer(ip_udp, o, roce.size());
    meta.icrc_verified = wire::icrc_verify(ConstBytes(ip_udp).first(n), roce);
    if (!meta.icrc_verified && !local_.v6) {
      if (auto id = wire::icrc_recover_ipv4_identification(ConstBytes(ip_udp).first(n), roce)) {
        o.ipv4_id = *id;
        n = wire::write_outer(ip_udp, o, roce.size());
        meta.icrc_verified = true;
        ++counters_.rx_icrc_id_recovered;
      }
    }
    if (!meta.icrc_verified) {
      ++counters_.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)];
      continue;
    }
    meta.ip_header = ConstBytes(ip_udp).first(n - wire::kUdpBytes);
    if (tap_) {
      tap_buf_.resize(wire::kEthernetBytes + n + roce.size());
      wire::encode_ethernet(
          tap_buf_, wire::Ethernet{mac_of(local_), mac_of(meta.src),
                                   local_.v6 ? wire::kEtherTypeIpv6 : wire::kEtherTypeIpv4});
      std::copy(ip_udp.begin(), ip_udp.begin() + static_cast<std::ptrdiff_t>(n),
                tap_buf_.begin() + wire::kEthernetBytes);
      std::copy(roce.begin(), roce.end(),
                tap_buf_.begin() + static_cast<std::ptrdiff_t>(wire::kEthernetBytes + n));
      tap_(tap_buf_, false);
    }
    handler(pkt.value(), meta);
  }
  return count;
}

}  // namespace uroce::datapath
