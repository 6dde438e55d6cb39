// Test support: two UdpDevices on loopback addresses with one RC QP each, connected, and a
// bounded loop that drives both.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "device/udp_device.h"
#include "support/ip_text.h"
#include "support/test_net.h"
#include "verbs/address.h"

namespace uroce::engine::test {

using ::uroce::test::unique_ip;  // support/test_net.h
using ::uroce::test::unique_port;
using ::uroce::test::unique_v4;
using ::uroce::test::v4;  // support/ip_text.h

inline constexpr std::uint32_t kAllAccess =
    kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;

struct Side {
  // Declared first so that it is destroyed last: the device drains (reads and writes registered
  // memory) when it closes.
  std::vector<std::byte> buf;
  std::unique_ptr<UdpDevice> dev;
  std::string ip;
  PdHandle pd;
  MrInfo mr;
  CqHandle cq;
  QpHandle qp;
  std::uint32_t qpn = 0;
  std::uint64_t va(std::size_t off) const {
    return reinterpret_cast<std::uint64_t>(buf.data()) + off;
  }
};

struct SideOptions {
  std::string name = "uroce0";
  std::uint32_t cqe = 256;
  std::uint32_t max_send_wr = 16;
  bool make_channel = false;  // the CQ reports to a new completion channel
  std::string capture;
  std::size_t buf_bytes = 1 << 20;
  UdpDevice::Sharing sharing = UdpDevice::Sharing::kDefault;
  DeviceOptions device;  // what the edge would read from UROCE_* (device/device_options.h)
  std::uint32_t netdev_mtu = 1500;  // the port MTU's source (0: the interface's MTU)
};

// Opens the device (polling mode) and creates PD, an MR over `buf`, a CQ and an RC QP.
inline void make_side(Side& s, const char* ip, const SideOptions& o = {}) {
  DeviceConfig cfg;
  cfg.name = o.name;
  cfg.ip = v4(ip);
  cfg.netdev_mtu = o.netdev_mtu;
  s.ip = ip;
  s.buf.assign(o.buf_bytes, std::byte{0});
  auto d = UdpDevice::open(cfg, wire::kRoceV2Port, o.capture, o.sharing, o.device);
  ASSERT_TRUE(d.ok()) << d.error();
  s.dev = std::move(d.value());
  Device& dev = s.dev->device();
  s.pd = dev.alloc_pd().value();
  s.mr = dev.reg_mr(s.pd, s.buf.data(), s.buf.size(), kAllAccess).value();
  std::uint64_t channel = 0;
  if (o.make_channel) channel = s.dev->create_comp_channel().value();
  auto cq = dev.create_cq(CqInitAttr{o.cqe, channel, 0});
  ASSERT_TRUE(cq.ok());
  s.cq = cq->handle;
  QpInitAttr init;
  init.send_cq = s.cq;
  init.recv_cq = s.cq;
  init.cap = QpCap{o.max_send_wr, 16, 1, 1, 64};
  auto qp = dev.create_qp(s.pd, init);
  ASSERT_TRUE(qp.ok());
  s.qp = qp->handle;
  s.qpn = qp->qp_num;
}

inline void make_side(Side& s, const char* ip, const std::string& capture) {
  SideOptions o;
  o.capture = capture;
  make_side(s, ip, o);
}

// RESET -> INIT -> RTR -> RTS towards `peer` at `peer_ip`; ACK timeout 4.096 us * 2^timeout.
inline void connect(Side& s, const Side& peer, const char* peer_ip, std::uint8_t timeout = 14,
                    std::uint8_t retry_cnt = 7, Mtu path_mtu = Mtu::k1024,
                    std::uint32_t qp_access = kAllAccess) {
  Device& dev = s.dev->device();
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.port_num = 1;
  a.qp_access_flags = qp_access;
  ASSERT_EQ(dev.modify_qp(s.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags), Errc::kOk);
  a.qp_state = QpState::kRtr;
  a.ah_attr.dgid = verbs::gid_from_ip(v4(peer_ip));
  a.ah_attr.is_global = true;
  a.path_mtu = path_mtu;
  a.dest_qp_num = peer.qpn;
  a.rq_psn = 0x100;
  a.max_dest_rd_atomic = 4;
  a.min_rnr_timer = 12;
  ASSERT_EQ(dev.modify_qp(s.qp, a,
                          kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                              kQpMaxDestRdAtomic | kQpMinRnrTimer),
            Errc::kOk);
  a.qp_state = QpState::kRts;
  a.sq_psn = 0x100;
  a.timeout = timeout;
  a.retry_cnt = retry_cnt;
  a.rnr_retry = 7;
  a.max_rd_atomic = 4;
  ASSERT_EQ(
      dev.modify_qp(
          s.qp, a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic),
      Errc::kOk);
}

// A signaled RDMA WRITE of `sge` to `peer`'s buffer at `off`.
inline SendWr write_wr(std::uint64_t id, const Sge& sge, const Side& peer, std::size_t off) {
  SendWr w;
  w.wr_id = id;
  w.opcode = WrOpcode::kRdmaWrite;
  w.sg_list = std::span(&sge, 1);
  w.rdma = {peer.va(off), peer.mr.rkey};
  w.send_flags = kSendSignaled;
  return w;
}

inline void pair_up(Side& a, Side& b, std::uint8_t timeout = 14) {
  connect(a, b, b.ip.c_str(), timeout);
  connect(b, a, a.ip.c_str(), timeout);
}

// Drives `a` (and `b`, when it is open) until `a` has `n` completions; gives up after 20 s so
// that a hang fails the test instead of stalling it.
inline std::vector<Wc> run_until(Side& a, Side& b, std::size_t n) {
  std::vector<Wc> got;
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (got.size() < n && UdpDevice::now() < give_up) {
    a.dev->wait(Duration::ms(1));
    if (b.dev) b.dev->progress();
    Wc wcs[16];
    auto k = a.dev->device().poll_cq(a.cq, wcs);
    if (k.ok()) got.insert(got.end(), wcs, wcs + k.value());
  }
  return got;
}

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
  // The port it is bound to (the kernel's choice when it was given 0).
  std::uint16_t port() const {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    return ntohs(a.sin_port);
  }
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

// Drives `s` alone until its socket has received `n` more datagrams (gives up after 20 s).
inline void receive(Side& s, std::uint64_t n) {
  const std::uint64_t want = s.dev->datapath().counters().rx_packets + n;
  const Instant give_up = UdpDevice::now() + Duration::s(20);
  while (s.dev->datapath().counters().rx_packets < want && UdpDevice::now() < give_up) {
    s.dev->progress();
  }
  EXPECT_EQ(s.dev->datapath().counters().rx_packets, want);
}

// A device counter by its `uroce stats` name (DeviceStats::device_counters); a name that is not
// there fails the test.
inline std::uint64_t named_counter(const NamedCounters& counters, std::string_view name) {
  for (const auto& [n, v] : counters) {
    if (n == name) return v;
  }
  ADD_FAILURE() << "no counter " << name;
  return 0;
}

}  // namespace uroce::engine::test
