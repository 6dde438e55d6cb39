#include "datapath/udp.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <linux/errqueue.h>
#include <linux/ethtool.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>

#include "wire/icrc.h"
#include "wire/opcode.h"

namespace uroce::datapath {

namespace {

#if defined(__SANITIZE_THREAD__)
extern "C" void AnnotateIgnoreReadsBegin(const char* file, int line);
extern "C" void AnnotateIgnoreReadsEnd(const char* file, int line);
#endif

// Whether a rule of the stage takes the packet: those that none takes do not enter it, so that
// its packet numbers (in the fault log) count only the packets its rules aim at.
bool matches_a_rule(const fault::FaultStage& s, const fault::PacketInfo& info) {
  for (const fault::Rule& r : s.spec().rules) {
    if (r.match.matches(info)) return true;
  }
  return false;
}

// Copies `payload` (registered memory) into `out`, as a NIC's DMA engine reads it: the
// application may be rewriting those bytes in another thread at this very moment, which RDMA
// allows (the responder sends whatever it read, with an ICRC over the same bytes). Under
// ThreadSanitizer these reads are therefore not race-checked; everything else is.
// With `acc`, the copied bytes are fed to it in the same pass.
void snapshot_registered_memory(std::span<const ConstBytes> payload, MutBytes out,
                                wire::IcrcAccumulator* acc = nullptr) {
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreReadsBegin(__FILE__, __LINE__);
#endif
  std::size_t off = 0;
  for (ConstBytes p : payload) {
    if (acc != nullptr)
      acc->copy_and_update(out.subspan(off), p);
    else
      std::copy(p.begin(), p.end(), out.begin() + static_cast<long>(off));
    off += p.size();
  }
#if defined(__SANITIZE_THREAD__)
  AnnotateIgnoreReadsEnd(__FILE__, __LINE__);
#endif
}

Error errno_error(const char* what) { return Error::system(errno, what); }

// A socket address's IP address and port.
void from_sockaddr(const sockaddr_storage& ss, wire::IpAddress& ip, std::uint16_t& port) {
  if (ss.ss_family == AF_INET6) {
    const auto* sa = reinterpret_cast<const sockaddr_in6*>(&ss);
    ip.v6 = true;
    std::memcpy(ip.bytes.data(), &sa->sin6_addr, 16);
    port = ntohs(sa->sin6_port);
  } else {
    const auto* sa = reinterpret_cast<const sockaddr_in*>(&ss);
    std::memcpy(ip.bytes.data(), &sa->sin_addr, 4);
    port = ntohs(sa->sin_port);
  }
}

}  // namespace

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

namespace {

// Control-message room for IP_TOS/IPV6_TCLASS and UDP_SEGMENT (send) or TOS, TTL and UDP_GRO
// (receive), aligned for cmsghdr.
struct alignas(cmsghdr) Control {
  std::array<std::byte, 128> bytes;
};

// A datagram's largest UDP payload on IPv4 (65535 - 20 - 8); used for IPv6 too, conservatively.
constexpr std::size_t kMaxUdpPayload = 65507;
// Receive buffers: a datagram, or a GRO batch, which the kernel keeps under 64 KiB.
constexpr std::size_t kRxBufferBytes = 65536;

// RC RDMA READ Response First/Middle/Last/Only: payload from the responder's memory.
bool is_read_response(std::uint8_t opcode) {
  const wire::OpcodeInfo* info = wire::opcode_info(opcode);
  return info != nullptr && info->is(wire::kFlagRead) && info->is(wire::kFlagResponse);
}

std::array<std::uint8_t, 6> mac_of(const wire::IpAddress& ip) {
  const std::size_t at = ip.v6 ? 12 : 0;
  return {0x02, 0x00, ip.bytes[at], ip.bytes[at + 1], ip.bytes[at + 2], ip.bytes[at + 3]};
}

}  // namespace

Result<std::string, Error> interface_name(const wire::IpAddress& local) {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return Err{errno_error("getifaddrs")};
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
  if (name.empty()) {
    return Err{Error(EADDRNOTAVAIL, "no network interface has this address")};
  }
  return name;
}

std::optional<bool> udp_segmentation_feature(const std::string& ifname) {
  if (ifname.empty() || ifname.size() >= IFNAMSIZ) return std::nullopt;
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  auto ethtool = [&](void* data) {
    ifreq req{};
    std::strncpy(req.ifr_name, ifname.c_str(), IFNAMSIZ - 1);
    req.ifr_data = static_cast<char*>(data);
    return ::ioctl(fd, SIOCETHTOOL, &req) == 0;
  };
  std::optional<bool> on;
  // The feature names (ETH_SS_FEATURES), to find tx-udp-segmentation's bit, then the bits.
  // ethtool_sset_info ends in a flexible array: one 32-bit count follows it here.
  std::array<std::uint64_t, (sizeof(ethtool_sset_info) + sizeof(std::uint32_t) + 7) / 8> sset{};
  auto* info = reinterpret_cast<ethtool_sset_info*>(sset.data());
  info->cmd = ETHTOOL_GSSET_INFO;
  info->sset_mask = 1ull << ETH_SS_FEATURES;
  std::uint32_t count = 0;
  if (ethtool(info) && info->sset_mask != 0) {
    std::memcpy(&count, reinterpret_cast<const std::byte*>(info) + sizeof(ethtool_sset_info),
                sizeof count);
  }
  if (count > 0 && count < 4096) {
    const std::uint32_t n = count;
    std::vector<std::uint64_t> names((sizeof(ethtool_gstrings) + n * ETH_GSTRING_LEN + 7) / 8);
    auto* gs = reinterpret_cast<ethtool_gstrings*>(names.data());
    gs->cmd = ETHTOOL_GSTRINGS;
    gs->string_set = ETH_SS_FEATURES;
    gs->len = n;
    const std::uint32_t blocks = (n + 31) / 32;
    std::vector<std::uint64_t> bits(
        (sizeof(ethtool_gfeatures) + blocks * sizeof(ethtool_get_features_block) + 7) / 8);
    auto* gf = reinterpret_cast<ethtool_gfeatures*>(bits.data());
    gf->cmd = ETHTOOL_GFEATURES;
    gf->size = blocks;
    if (ethtool(gs) && ethtool(gf)) {
      for (std::uint32_t i = 0; i < n; ++i) {
        const char* name = reinterpret_cast<const char*>(gs->data) + i * ETH_GSTRING_LEN;
        if (std::strncmp(name, "tx-udp-segmentation", ETH_GSTRING_LEN) == 0) {
          on = (gf->features[i / 32].active >> (i % 32) & 1u) != 0;
          break;
        }
      }
    }
  }
  ::close(fd);
  return on;
}

bool hardware_udp_segmentation(const std::string& ifname) {
  // Virtual devices (lo, veth, bridges, tunnels) have no backing device: the kernel segments
  // their GSO datagrams in software, or hands them on whole.
  if (ifname.empty() || ifname.size() >= IFNAMSIZ || ifname.find('/') != std::string::npos ||
      ::access(("/sys/class/net/" + ifname + "/device").c_str(), F_OK) != 0) {
    return false;
  }
  return udp_segmentation_feature(ifname).value_or(true);  // cannot tell: assume the worst
}

Result<std::uint32_t, Error> interface_mtu(const wire::IpAddress& local) {
  auto found = interface_name(local);
  if (!found.ok()) return Err{found.error()};
  const std::string name = found.value();
  const int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err{errno_error("socket")};
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  const int rc = ::ioctl(fd, SIOCGIFMTU, &req);
  ::close(fd);
  if (rc != 0) return Err{errno_error("SIOCGIFMTU")};
  return static_cast<std::uint32_t>(req.ifr_mtu);
}

std::uint32_t interface_speed_mbps(const wire::IpAddress& local) {
  constexpr std::uint32_t kLoopbackMbps = 25000;
  auto found = interface_name(local);
  if (!found.ok() || found.value().size() >= IFNAMSIZ) return 0;
  const std::string& name = found.value();
  const std::string path = "/sys/class/net/" + name + "/speed";
  if (const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC); fd >= 0) {
    std::array<char, 32> text{};
    const ssize_t n = ::read(fd, text.data(), text.size() - 1);
    ::close(fd);
    // Reading fails (EINVAL) for an interface without link settings; -1 is SPEED_UNKNOWN.
    if (n > 0) {
      const long mbps = std::strtol(text.data(), nullptr, 10);
      if (mbps > 0 && mbps <= INT_MAX) return static_cast<std::uint32_t>(mbps);
    }
  }
  const int sock = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (sock < 0) return 0;
  ifreq req{};
  std::strncpy(req.ifr_name, name.c_str(), IFNAMSIZ - 1);
  const bool loopback = ::ioctl(sock, SIOCGIFFLAGS, &req) == 0 && (req.ifr_flags & IFF_LOOPBACK);
  ::close(sock);
  return loopback ? kLoopbackMbps : 0;
}

// A queued packet, whole in one buffer: the staging ring, or for the fault stage's output
// (`raw`) its own. Its bytes are copied when it is queued; the ICRC behind them is stored when it
// is sent (for the identification its place in a GSO datagram gives it).
struct UdpDatapath::TxSlot {
  std::uint8_t tos = 0;
  std::uint8_t ttl = 0;
  bool raw = false;  // built whole by the fault stage: `owned` is BTH to ICRC, sent alone as is
  // Where its bytes (BTH to ICRC) start in the staging ring; for a raw packet, the ring's write
  // position when it was queued, so that the head slot's stage_off always starts the ring's live
  // bytes.
  std::uint32_t stage_off = 0;
  std::uint16_t dst_port = 0;
  std::uint32_t roce_bytes = 0;  // BTH through ICRC: the UDP payload
  std::uint32_t icrc0 = 0;       // ICRC with identification 0
  // The length whose wire::Ipv4IdIcrcDelta gives the identification's part in the ICRC:
  // roce_bytes, or more for rxe's ICRC of a FLUSH (wire::icrc_rxe_delta_bytes).
  std::uint32_t icrc_len = 0;
  wire::IpAddress dst;
  std::vector<std::byte> owned;  // a raw packet
};

struct UdpDatapath::TxScratch {
  std::vector<mmsghdr> msgs;
  std::vector<std::size_t> run;  // packets per message
  std::vector<iovec> iov;
  std::vector<sockaddr_storage> addr;
  std::vector<Control> control;
};

struct UdpDatapath::RxRing {
  std::vector<std::byte> buffers;  // rx_batch buffers of kRxBufferBytes
  std::vector<mmsghdr> msgs;
  std::vector<iovec> iov;
  std::vector<sockaddr_storage> from;
  std::vector<Control> control;
  // msgs[0, dirty) may have been written by the kernel since they were last set (it writes the
  // name and control lengths, the flags and msg_len of each datagram it returns); the others
  // are as receive() sets them. All of them at first.
  std::size_t dirty = 0;
};

Result<std::unique_ptr<UdpDatapath>, Error> UdpDatapath::open(const UdpOptions& options) {
  auto r = open_socket(options);
  // open_socket() closes a socket it made itself on failure; a given one is closed here.
  if (!r.ok() && options.bound_fd >= 0) ::close(options.bound_fd);
  return r;
}

// Long: one socket's options, one setsockopt after another, each with its fallback.
Result<std::unique_ptr<UdpDatapath>, Error> UdpDatapath::open_socket(const UdpOptions& options) {
  UdpOptions opt = options;
  if (opt.tx_batch < 1 || opt.tx_batch > kMaxBatch || opt.rx_batch < 1 ||
      opt.rx_batch > kMaxBatch) {
    return Err{
        Error(EINVAL, "tx_batch and rx_batch must be from 1 to " + std::to_string(kMaxBatch))};
  }
  const bool v6 = opt.local.v6;
  const bool bound = opt.bound_fd >= 0;
  const int fd =
      bound ? opt.bound_fd
            : ::socket(v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Err{errno_error("socket")};
  auto fail = [fd, bound](const char* what) {
    Error e = errno_error(what);
    if (!bound) ::close(fd);
    return e;
  };
  int on = 1;
  if (v6) {
    // DF on every datagram; no fragmentation (roce-facts.md).
    int pmtu = IPV6_PMTUDISC_DO;
    if (::setsockopt(fd, IPPROTO_IPV6, IPV6_MTU_DISCOVER, &pmtu, sizeof pmtu) != 0 ||
        (!bound && ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) != 0) ||
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
  if (opt.recv_errors && ::setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP,
                                      v6 ? IPV6_RECVERR : IP_RECVERR, &on, sizeof on) != 0) {
    return Err{fail("setsockopt(IP_RECVERR)")};
  }
  // A group socket may have served another context before (the coordinator hands a freed slot's
  // socket to the next one: devd/coordinator.h), so its options are set both ways.
  if (opt.default_tos != 0 || bound) {
    const int tos = opt.default_tos;
    if (::setsockopt(fd, v6 ? IPPROTO_IPV6 : IPPROTO_IP, v6 ? IPV6_TCLASS : IP_TOS, &tos,
                     sizeof tos) != 0) {
      return Err{fail(v6 ? "setsockopt(IPV6_TCLASS)" : "setsockopt(IP_TOS)")};
    }
  }
  std::string gso_note;
  if (opt.gso) {
    // UDP_SEGMENT is given per send; a kernel that knows the option answers this query.
    int size = 0;
    socklen_t len = sizeof size;
    opt.gso = ::getsockopt(fd, SOL_UDP, UDP_SEGMENT, &size, &len) == 0;
    if (!opt.gso) gso_note = "off: the kernel has no UDP_SEGMENT";
  }
  if (opt.gso && !v6 && !opt.gso_on_hardware) {
    // A NIC that segments UDP itself numbers the segments' IPv4 identifications as it likes
    // (most count up from the first, as the kernel does, but none could be checked here); a
    // wrong guess would break every segment's ICRC at a receiver that checks it.
    auto name = interface_name(opt.local);
    if (name.ok() && hardware_udp_segmentation(name.value())) {
      opt.gso = false;
      gso_note = "off: " + name.value() +
                 " segments UDP in hardware (tx-udp-segmentation), whose IPv4 identifications "
                 "are unverified; UROCE_UDP_GSO=1 uses GSO anyway";
    }
  }
  if (opt.gro) {
    opt.gro = ::setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on) == 0;
  } else if (bound) {
    const int off = 0;
    ::setsockopt(fd, SOL_UDP, UDP_GRO, &off, sizeof off);  // a kernel without it never set it
  }
  if (opt.rcvbuf_bytes != 0) {
    const int bytes = static_cast<int>(std::min<std::size_t>(opt.rcvbuf_bytes, INT_MAX / 2));
    if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0) {
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);  // capped by rmem_max
    }
  }
  // Bound to the device's own address (UdpDevice's, which Device::create never lets be
  // unspecified): the kernel delivers only datagrams sent to it, and handle_packet() verifies
  // each ICRC with that address as the IP destination. That is the destination half of rxe's
  // check_addr(); the source half is the QP's (transport/qp.cc: RC/UC packets from anyone but
  // the path's address are dropped).
  sockaddr_storage ss;
  socklen_t len = 0;
  to_sockaddr(opt.local, opt.port, ss, len);
  if (!bound && ::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    char addr[INET6_ADDRSTRLEN] = {};
    ::inet_ntop(v6 ? AF_INET6 : AF_INET, opt.local.bytes.data(), addr, sizeof addr);
    const Error e = Error::system(
        errno, "cannot bind " + std::string(addr) + " port " + std::to_string(opt.port));
    ::close(fd);
    return Err{e};
  }
  if (!bound && opt.port == 0) {
    // The port the kernel chose: the ICRC covers the UDP source port.
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      return Err{fail("getsockname")};
    }
    wire::IpAddress ignored;
    from_sockaddr(ss, ignored, opt.port);
  }
  std::unique_ptr<UdpDatapath> dp(new UdpDatapath(fd, opt));
  dp->gso_note_ = opt.gso ? "on" : gso_note.empty() ? "off" : gso_note;
  return dp;
}

UdpDatapath::UdpDatapath(int fd, const UdpOptions& options)
    : fd_(fd),
      socket_tos_(options.default_tos),
      local_(options.local),
      port_(options.port),
      gso_(options.gso),
      gro_(options.gro),
      tx_batch_(options.tx_batch),
      rx_batch_(options.rx_batch),
      sendmmsg_hook_(options.sendmmsg_hook),
      recv_errors_(options.recv_errors),
      slots_(options.tx_batch),
      tx_scratch_(std::make_unique<TxScratch>()),
      stage_((options.tx_batch + 1) * kStagePacket),
      rx_(std::make_unique<RxRing>()),
      rxe_icrc_all_peers_(options.rxe_icrc_all_peers),
      rxe_icrc_peers_(options.rxe_icrc_peers) {
  TxScratch& t = *tx_scratch_;
  t.msgs.resize(tx_batch_);
  t.run.resize(tx_batch_);
  t.iov.resize(tx_batch_);  // at most one per packet
  t.addr.resize(tx_batch_);
  t.control.resize(tx_batch_);
  RxRing& r = *rx_;
  r.buffers.resize(rx_batch_ * kRxBufferBytes);
  r.msgs.resize(rx_batch_);
  r.iov.resize(rx_batch_);
  r.from.resize(rx_batch_);
  r.control.resize(rx_batch_);
  for (std::size_t i = 0; i < rx_batch_; ++i) {
    r.iov[i] = iovec{r.buffers.data() + i * kRxBufferBytes, kRxBufferBytes};
  }
  r.dirty = rx_batch_;
}

UdpDatapath::~UdpDatapath() { ::close(fd_); }

wire::OuterHeaders UdpDatapath::outer(const wire::IpAddress& src, const wire::IpAddress& dst,
                                      std::uint16_t sport, std::uint16_t dport, std::uint8_t tos,
                                      std::uint8_t ttl) {
  // What the kernel writes for an unconnected socket with IP_PMTUDISC_DO: DF, identification 0
  // (GSO segments after the first: see send()).
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

bool UdpDatapath::explain_icrc(std::size_t roce_bytes, std::uint32_t delta, std::uint16_t likely_id,
                               wire::OuterHeaders* h) {
  if (local_.v6) return false;
  // DF set with some identification, then DF clear (a sender whose socket does not set it,
  // IP_PMTUDISC_DONT, whose kernel also picks the identification).
  const wire::Ipv4IdIcrcDelta& d = id_delta(roce_bytes);
  // The identification the packet's place in its GRO buffer predicts (a uroce GSO segment's),
  // checked by one table combination of its few bits before the general solve.
  if (likely_id != 0 && d(likely_id) == delta) {
    ++counters_.rx_icrc_id_recovered;
    if (h != nullptr) h->ipv4_id = likely_id;
    return true;
  }
  if (auto id = d.solve(delta)) {
    ++counters_.rx_icrc_id_recovered;
    if (h != nullptr) h->ipv4_id = *id;
    return true;
  }
  if (auto id_df0 = d.solve(delta ^ d.df_clear())) {
    ++counters_.rx_icrc_df_clear;
    if (h != nullptr) {
      h->ipv4_df = false;
      h->ipv4_id = *id_df0;
    }
    return true;
  }
  return false;
}

bool UdpDatapath::verify_icrc(ConstBytes roce, std::uint32_t outer_state, std::uint16_t likely_id,
                              wire::OuterHeaders& found) {
  const std::size_t body = roce.size() - wire::kIcrcBytes;
  const std::uint32_t stored = load_le32(roce, body);
  const std::uint32_t icrc0 = wire::icrc_continue(outer_state, roce.first(body));
  // Only on a mismatch: DF set with some identification, then DF clear, each by the same linear
  // solve, so the common path costs nothing more.
  if (icrc0 == stored || explain_icrc(roce.size(), icrc0 ^ stored, likely_id, &found)) return true;
  // A FLUSH from the kernel's Soft-RoCE carries rxe's ICRC (wire/icrc.h); its IPv4
  // identification (rxe's are not 0) is recovered the same way, for rxe's longer CRC input.
  const wire::OpcodeInfo* op = wire::icrc_rxe_opcode(roce);
  if (op == nullptr) return false;
  const std::uint32_t rxe0 = wire::icrc_rxe_continue(outer_state, roce.first(body));
  if (rxe0 != stored && !explain_icrc(wire::icrc_rxe_delta_bytes(*op, roce.size()), rxe0 ^ stored,
                                      likely_id, &found)) {
    return false;
  }
  ++counters_.rx_rxe_flush_icrc;
  return true;
}

const wire::OpcodeInfo* UdpDatapath::rxe_icrc_for(const wire::IpAddress& dst,
                                                  ConstBytes transport_headers) const {
  const wire::OpcodeInfo* op = wire::icrc_rxe_opcode(transport_headers);
  if (op == nullptr) return nullptr;
  if (rxe_icrc_all_peers_) return op;
  return std::find(rxe_icrc_peers_.begin(), rxe_icrc_peers_.end(), dst) != rxe_icrc_peers_.end()
             ? op
             : nullptr;
}

const wire::Ipv4IdIcrcDelta& UdpDatapath::id_delta(std::size_t roce_bytes) {
  for (const auto& d : deltas_) {
    if (d && d->roce_bytes() == roce_bytes) return *d;
  }
  auto& d = deltas_[next_delta_];
  next_delta_ = (next_delta_ + 1) % deltas_.size();
  d.emplace(roce_bytes);
  return *d;
}

std::uint32_t UdpDatapath::outer_icrc(bool sent, const wire::IpAddress& peer,
                                      std::uint16_t peer_port, std::size_t roce_bytes) {
  const std::uint64_t key = outer_icrc_key(sent, peer_port, roce_bytes);
  const auto matches = [&](const OuterIcrc& e) { return e.key == key && e.peer == peer; };
  // A run of packets of one kind (a stream's full-size segments) finds its entry first.
  if (matches(outer_icrc_[last_outer_icrc_])) return outer_icrc_[last_outer_icrc_].state;
  for (std::size_t i = 0; i < outer_icrc_.size(); ++i) {
    if (matches(outer_icrc_[i])) {
      last_outer_icrc_ = i;
      return outer_icrc_[i].state;
    }
  }
  last_outer_icrc_ = next_outer_icrc_;
  OuterIcrc& e = outer_icrc_[next_outer_icrc_];
  next_outer_icrc_ = (next_outer_icrc_ + 1) % outer_icrc_.size();
  // TOS and TTL are masked by the ICRC: any will do.
  const wire::OuterHeaders h = sent ? outer(local_, peer, port_, peer_port, 0, 0)
                                    : outer(peer, local_, peer_port, port_, 0, 0);
  std::array<std::byte, 48> ip_udp;
  const std::size_t n = wire::write_outer(ip_udp, h, roce_bytes);
  e.key = key;
  e.peer = peer;
  e.state = wire::icrc_outer_state(ConstBytes(ip_udp).first(n));
  return e.state;
}

// Long: the fault-stage path and the fast path of one send share its room and slot.
bool UdpDatapath::send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
                       std::span<const ConstBytes> payload) {
  if (tx_faults_ != nullptr) {
    now = fault_clock(now);
    // Held packets first (they are older); then this one, built whole, through the stage.
    if (!release_tx_faults(now)) return false;
    // Room first: a packet refused here is sent again by the caller, and must enter the stage
    // once, when it is taken (entered each time, it would be counted and drawn for again, and
    // backpressure would move the seed's faults to other packets).
    if (queued_ == tx_batch_) {
      drain();
      if (queued_ == tx_batch_) return false;
    }
    std::size_t payload_bytes = 0;
    for (ConstBytes p : payload) payload_bytes += p.size();
    const std::size_t pad = wire::pad_for(payload_bytes);
    const std::size_t total = transport_headers.size() + payload_bytes + pad + wire::kIcrcBytes;
    fault_build_.resize(total);
    std::size_t at = 0;
    std::copy(transport_headers.begin(), transport_headers.end(), fault_build_.begin());
    at += transport_headers.size();
    snapshot_registered_memory(payload, MutBytes(fault_build_).subspan(at, payload_bytes));
    at += payload_bytes;
    std::fill_n(fault_build_.begin() + static_cast<std::ptrdiff_t>(at), pad, std::byte{0});
    at += pad;
    std::array<std::byte, 48> ip_udp;
    const std::size_t n = wire::write_outer(
        ip_udp, outer(local_, o.dst, port_, o.dst_port, o.traffic_class, o.ttl), total);
    const ConstBytes built = ConstBytes(fault_build_).first(at);
    const std::uint32_t icrc = rxe_icrc_for(o.dst, transport_headers) != nullptr
                                   ? wire::icrc_rxe_compute(ConstBytes(ip_udp).first(n), built)
                                   : wire::icrc_compute(ConstBytes(ip_udp).first(n), built);
    store_le32(fault_build_, at, icrc);
    fault::PacketInfo info =
        fault::classify(ConstBytes(fault_build_), fault::Direction::kTx, o.dst);
    info.peer_port = o.dst_port;
    info.tos = o.traffic_class;
    info.ttl = o.ttl;
    const auto v = matches_a_rule(*tx_faults_, info)
                       ? tx_faults_->submit(now, info, ConstBytes(fault_build_))
                       : fault::FaultStage::Verdict::kPass;
    drain_fault_events();
    if (v == fault::FaultStage::Verdict::kTaken) {
      release_tx_faults(now);  // what is due now (a reordered packet's successors let it go)
      return true;
    }
    // Passed untouched: the usual way (its own buffer, GSO).
  }
  if (queued_ == tx_batch_) {
    drain();
    if (queued_ == tx_batch_) return false;  // the socket is full: the caller retries later
  }
  TxSlot& t = slots_[(head_ + queued_) % tx_batch_];
  UROCE_CHECK(transport_headers.size() <= kMaxHeaderBytes);
  std::size_t payload_bytes = 0;
  for (ConstBytes p : payload) payload_bytes += p.size();
  const bool sealed = wire::BthView(transport_headers).tver() != 0;
  if (payload_bytes > kStagePayload + (sealed ? wire::kSealTrailerBytes : 0)) {
    ++counters_.tx_errors;  // more than any path MTU carries (no receiver takes it): lost
    return true;
  }
  const std::size_t pad = wire::pad_for(payload_bytes);
  t.roce_bytes =
      static_cast<std::uint32_t>(transport_headers.size() + payload_bytes + pad + wire::kIcrcBytes);
  t.dst = o.dst;
  t.dst_port = o.dst_port;
  t.tos = o.traffic_class;
  t.ttl = o.ttl;
  t.raw = false;
  // The payload is read once, here, and copied: the packet leaves with exactly the bytes its
  // ICRC covers, whatever the memory holds by the time sendmmsg runs. That matters for a READ
  // response, whose payload is the responder's registered memory, which its application may
  // rewrite at any moment (legal: a NIC sends whatever it reads, with a CRC over the same bytes;
  // read twice, the kernel's copy could differ from the bytes the ICRC covers and the receiver
  // would drop the packet, rxe too, forever if the memory keeps changing), and for a capture,
  // taken from this copy after the packet is sent. It also keeps the bytes of a packet that
  // waits for room in the socket, and lays a GSO datagram's packets one after the other: the
  // kernel copies a datagram given as one iovec much faster than one given as three per packet
  // (docs/PERFORMANCE.md). The copy is fused with the CRC, which reads the bytes anyway.
  const bool read_response = !transport_headers.empty() &&
                             is_read_response(std::to_integer<std::uint8_t>(transport_headers[0]));
  if (read_response && payload_bytes > 0) ++counters_.tx_snapshots;
  // The ICRC with identification 0; a GSO segment's is derived from it when it is sent.
  const std::uint32_t outer_state = outer_icrc(true, o.dst, o.dst_port, t.roce_bytes);
  const std::size_t hdr = transport_headers.size();
  std::byte* const at = stage(t.roce_bytes, t.stage_off);
  UROCE_CHECK(at != nullptr);  // the ring holds a full queue of the largest packets
  const MutBytes out(at, t.roce_bytes - wire::kIcrcBytes);
  std::copy(transport_headers.begin(), transport_headers.end(), out.begin());
  const MutBytes pad_bytes = out.subspan(hdr + payload_bytes);
  std::fill(pad_bytes.begin(), pad_bytes.end(), std::byte{0});
  if (payload_bytes <= kInlinePayload) {
    // Small (an ACK, a short message): copied, then one CRC call over all of it.
    snapshot_registered_memory(payload, out.subspan(hdr, payload_bytes));
    t.icrc0 = wire::icrc_continue(outer_state, out);
  } else {
    // The CRC fused with the copy, then the pad's.
    wire::IcrcAccumulator acc(outer_state, transport_headers);
    snapshot_registered_memory(payload, out.subspan(hdr, payload_bytes), &acc);
    acc.update(pad_bytes);
    t.icrc0 = acc.value();
  }
  t.icrc_len = t.roce_bytes;
  if (const wire::OpcodeInfo* rxe = rxe_icrc_for(o.dst, transport_headers)) {
    t.icrc0 = wire::icrc_rxe_continue(outer_state, out);
    t.icrc_len = static_cast<std::uint32_t>(wire::icrc_rxe_delta_bytes(*rxe, t.roce_bytes));
    ++counters_.tx_rxe_flush_icrc;
  }
  ++queued_;
  if (queued_ == tx_batch_) drain();
  return true;
}

std::optional<bool> UdpDatapath::send_built(Instant /*now*/, const wire::OuterHeaders& o,
                                            ConstBytes transport_headers, std::size_t body_bytes,
                                            BodyWriter& writer) {
  // With faults a packet is built whole for the stage: the caller builds it and calls send().
  if (tx_faults_ != nullptr) return std::nullopt;
  if (queued_ == tx_batch_) {
    drain();
    if (queued_ == tx_batch_) return false;  // the socket is full: the caller retries later
  }
  UROCE_CHECK(transport_headers.size() <= kMaxHeaderBytes);
  UROCE_CHECK(body_bytes % 4 == 0);
  if (body_bytes > kStagePayload + wire::kSealTrailerBytes) {
    ++counters_.tx_errors;  // more than any path MTU carries: lost, as send() loses it
    return true;
  }
  TxSlot& t = slots_[(head_ + queued_) % tx_batch_];
  const std::size_t hdr = transport_headers.size();
  t.roce_bytes = static_cast<std::uint32_t>(hdr + body_bytes + wire::kIcrcBytes);
  t.dst = o.dst;
  t.dst_port = o.dst_port;
  t.tos = o.traffic_class;
  t.ttl = o.ttl;
  t.raw = false;
  const std::size_t ring_was = stage_w_;
  std::byte* const at = stage(t.roce_bytes, t.stage_off);
  UROCE_CHECK(at != nullptr);  // the ring holds a full queue of the largest packets
  const MutBytes out(at, t.roce_bytes - wire::kIcrcBytes);
  std::copy(transport_headers.begin(), transport_headers.end(), out.begin());
  // The writer reads its source once (a READ response's too) and writes the body here: the
  // ICRC covers exactly what leaves. It is computed over the bytes as written, still in cache.
  if (!writer.write(out.subspan(hdr))) {
    stage_w_ = ring_was;  // nothing queued
    return true;
  }
  const std::uint32_t outer_state = outer_icrc(true, o.dst, o.dst_port, t.roce_bytes);
  t.icrc0 = wire::icrc_continue(outer_state, out);
  t.icrc_len = t.roce_bytes;
  if (const wire::OpcodeInfo* rxe = rxe_icrc_for(o.dst, transport_headers)) {
    t.icrc0 = wire::icrc_rxe_continue(outer_state, out);
    t.icrc_len = static_cast<std::uint32_t>(wire::icrc_rxe_delta_bytes(*rxe, t.roce_bytes));
    ++counters_.tx_rxe_flush_icrc;
  }
  ++queued_;
  if (queued_ == tx_batch_) drain();
  return true;
}

Instant UdpDatapath::fault_clock(Instant now) {
  // Two threads may each read the clock before one of them takes the device's lock: the later
  // call can bring the earlier time. The stages see time that never goes back.
  fault_now_ = std::max(fault_now_, now);
  return fault_now_;
}

void UdpDatapath::flush(Instant now) {
  if (tx_faults_ != nullptr) release_tx_faults(fault_clock(now));
  if (queued_ != 0) drain();
}

void UdpDatapath::set_faults(const fault::FaultSpec& spec, Instant start) {
  if (spec.empty()) {
    // Held packets are let go at once: clearing the faults heals the network (what the socket's
    // queue has no room for is lost).
    if (tx_faults_ != nullptr) release_tx_faults(Instant::never());
    tx_faults_.reset();
    fault_out_pending_ = false;
    rx_faults_.reset();  // what it held is lost, as packets in a cut cable
    return;
  }
  fault_now_ = start;
  tx_faults_ = std::make_unique<fault::FaultStage>(spec, start);
  fault::FaultSpec rx = spec;
  rx.seed = spec.seed ^ 0x9e3779b97f4a7c15ull;
  rx_faults_ = std::make_unique<fault::FaultStage>(rx, start);
  fault_out_pending_ = false;
}

const fault::FaultSpec& UdpDatapath::fault_spec() const {
  static const fault::FaultSpec kNone;
  return tx_faults_ != nullptr ? tx_faults_->spec() : kNone;
}

fault::StageCounters UdpDatapath::fault_counters(fault::Direction d) const {
  const fault::FaultStage* s = d == fault::Direction::kTx ? tx_faults_.get() : rx_faults_.get();
  return s != nullptr ? s->counters(d) : fault::StageCounters{};
}

Instant UdpDatapath::next_deadline() const {
  if (tx_faults_ == nullptr) return Instant::never();
  Instant t = std::min(tx_faults_->next_deadline(), rx_faults_->next_deadline());
  if (fault_out_pending_) t = Instant{};  // waits for room: retried at once
  return t;
}

void UdpDatapath::drain_fault_events() {
  for (auto* s : {tx_faults_.get(), rx_faults_.get()}) {
    if (s == nullptr) continue;
    while (auto e = s->poll_event()) {
      if (fault_events_) fault_events_(*e);
    }
  }
}

bool UdpDatapath::release_tx_faults(Instant now) {
  for (;;) {
    if (!fault_out_pending_) {
      if (!tx_faults_->poll(now, fault_out_)) break;
      fault_out_pending_ = true;
    }
    if (!queue_raw(fault_out_.info, ConstBytes(fault_out_.bytes))) return false;
    fault_out_pending_ = false;
  }
  drain_fault_events();
  return true;
}

bool UdpDatapath::queue_raw(const fault::PacketInfo& info, ConstBytes roce) {
  if (roce.size() < wire::kBthBytes + wire::kIcrcBytes) return true;  // nothing to send
  if (queued_ == tx_batch_) {
    drain();
    if (queued_ == tx_batch_) return false;
  }
  TxSlot& t = slots_[(head_ + queued_) % tx_batch_];
  t.raw = true;
  t.stage_off = stage_mark();
  t.dst = info.peer;
  t.dst_port = info.peer_port;
  t.tos = info.tos;
  t.ttl = info.ttl;
  t.roce_bytes = static_cast<std::uint32_t>(roce.size());
  t.owned.assign(roce.begin(), roce.end());  // the ICRC as built, or as corrupted
  ++queued_;
  if (queued_ == tx_batch_) drain();
  return true;
}

std::uint32_t UdpDatapath::stage_mark() {
  if (queued_ == 0) stage_w_ = 0;  // nothing live: start over, where the cache is warm
  return static_cast<std::uint32_t>(stage_w_);
}

std::byte* UdpDatapath::stage(std::size_t n, std::uint32_t& off) {
  UROCE_CHECK(n <= kStagePacket);
  (void)stage_mark();  // an empty queue starts over
  const std::size_t r = queued_ == 0 ? 0 : slots_[head_].stage_off;
  std::size_t at = 0;
  if (stage_w_ >= r) {
    // Live bytes in [r, w): room behind them, or else from the start up to r (strictly below,
    // so that w == r always means the live bytes do not wrap).
    if (stage_w_ + n <= stage_.size()) {
      at = stage_w_;
    } else if (n < r) {
      at = 0;
    } else {
      return nullptr;
    }
  } else if (stage_w_ + n < r) {
    at = stage_w_;  // live bytes in [r, end) and [0, w)
  } else {
    return nullptr;
  }
  off = static_cast<std::uint32_t>(at);
  stage_w_ = at + n;
  return stage_.data() + at;
}

std::size_t UdpDatapath::run_length(std::size_t first, std::size_t available) const {
  if (!gso_ || available < 2) return 1;
  const TxSlot& a = slots_[(head_ + first) % tx_batch_];
  if (a.raw) return 1;
  std::size_t bytes = a.roce_bytes;
  std::size_t n = 1;
  while (n < available && n < kMaxGsoSegments) {
    const TxSlot& b = slots_[(head_ + first + n) % tx_batch_];
    // Same destination and TOS (one datagram has one of each); a segment no larger than the
    // first (all but the last are exactly gso_size).
    if (b.raw || !(b.dst == a.dst) || b.dst_port != a.dst_port || b.tos != a.tos ||
        b.roce_bytes > a.roce_bytes || bytes + b.roce_bytes > kMaxUdpPayload) {
      break;
    }
    if (b.roce_bytes < a.roce_bytes && n + 1 < available) {
      // A short segment ends the datagram; but one that starts its own run of equal sizes
      // (a First packet with its RETH followed by Middle packets) is better left to that run.
      const TxSlot& c = slots_[(head_ + first + n + 1) % tx_batch_];
      if (c.dst == b.dst && c.dst_port == b.dst_port && c.tos == b.tos &&
          c.roce_bytes == b.roce_bytes) {
        break;
      }
    }
    bytes += b.roce_bytes;
    ++n;
    if (b.roce_bytes < a.roce_bytes) break;  // a short segment ends the datagram
  }
  return n;
}

// Long: builds one sendmmsg batch and accounts for what went; the hot transmit loop.
void UdpDatapath::drain() {
  TxScratch& s = *tx_scratch_;
  bool retried = false;  // recv_errors_: a send failed on an earlier datagram's error
  while (queued_ != 0) {
    // Messages from the head of the queue: one per GSO run (or per packet without GSO).
    std::size_t nmsg = 0;
    std::size_t iov_used = 0;
    for (std::size_t at = 0; at < queued_ && nmsg < s.msgs.size(); ++nmsg) {
      const std::size_t n = run_length(at, queued_ - at);
      const TxSlot& a = slots_[(head_ + at) % tx_batch_];
      iovec* const first_iov = &s.iov[iov_used];
      for (std::size_t k = 0; k < n; ++k) {
        TxSlot& t = slots_[(head_ + at + k) % tx_batch_];
        // Segment k of an IPv4 GSO datagram goes out with identification k (the kernel
        // numbers them from the first datagram's 0): its ICRC covers that id.
        std::byte* const p = tx_bytes(t);
        if (!t.raw) {  // a raw packet carries the ICRC it was built (or corrupted) with
          std::uint32_t icrc = t.icrc0;
          if (k != 0 && !local_.v6) icrc ^= id_delta(t.icrc_len)(static_cast<std::uint16_t>(k));
          store_le32(MutBytes(p, t.roce_bytes), t.roce_bytes - wire::kIcrcBytes, icrc);
        }
        // One iovec for the run's packets, which lie one after the other (unless the ring wrapped
        // in between).
        iovec* const next = &s.iov[iov_used];
        if (next != first_iov &&
            static_cast<std::byte*>(next[-1].iov_base) + next[-1].iov_len == p) {
          next[-1].iov_len += t.roce_bytes;
        } else {
          s.iov[iov_used++] = iovec{p, t.roce_bytes};
        }
      }
      mmsghdr& m = s.msgs[nmsg];
      m = mmsghdr{};
      socklen_t alen = 0;
      to_sockaddr(a.dst, a.dst_port, s.addr[nmsg], alen);
      m.msg_hdr.msg_name = &s.addr[nmsg];
      m.msg_hdr.msg_namelen = alen;
      m.msg_hdr.msg_iov = first_iov;
      m.msg_hdr.msg_iovlen = static_cast<std::size_t>(&s.iov[iov_used] - first_iov);
      // DSCP and ECN from the QP's traffic class, per packet (rxe: the address vector's
      // traffic_class becomes the IPv4 TOS byte / IPv6 traffic class) where it is not the
      // socket's own; the segment size.
      std::size_t control = 0;
      const bool own_tos = a.tos != socket_tos_;
      if (own_tos || n > 1) {
        m.msg_hdr.msg_control = s.control[nmsg].bytes.data();
        m.msg_hdr.msg_controllen = s.control[nmsg].bytes.size();
        cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr);
        if (own_tos) {
          c->cmsg_level = a.dst.v6 ? IPPROTO_IPV6 : IPPROTO_IP;
          c->cmsg_type = a.dst.v6 ? IPV6_TCLASS : IP_TOS;
          c->cmsg_len = CMSG_LEN(sizeof(int));
          const int tos = a.tos;
          std::memcpy(CMSG_DATA(c), &tos, sizeof tos);
          control += CMSG_SPACE(sizeof(int));
          c = CMSG_NXTHDR(&m.msg_hdr, c);
        }
        if (n > 1) {
          c->cmsg_level = SOL_UDP;
          c->cmsg_type = UDP_SEGMENT;
          c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
          const auto size = static_cast<std::uint16_t>(a.roce_bytes);
          std::memcpy(CMSG_DATA(c), &size, sizeof size);
          control += CMSG_SPACE(sizeof(std::uint16_t));
        }
        m.msg_hdr.msg_controllen = control;
      }
      s.run[nmsg] = n;
      at += n;
    }
    const auto count = static_cast<unsigned>(nmsg);
    const int sent = sendmmsg_hook_ ? sendmmsg_hook_(fd_, s.msgs.data(), count)
                                    : ::sendmmsg(fd_, s.msgs.data(), count, 0);
    if (sent > 0) {
      ++counters_.tx_calls;
      for (int i = 0; i < sent; ++i) {
        const std::size_t n = s.run[static_cast<std::size_t>(i)];
        ++counters_.tx_datagrams;
        if (n > 1) {
          ++counters_.tx_gso_datagrams;
          counters_.tx_gso_packets += n;
        }
        for (std::size_t k = 0; k < n; ++k) {
          TxSlot& t = slots_[head_];
          ++counters_.tx_packets;
          counters_.tx_bytes += t.roce_bytes;
          if (tap_) tap_sent(t, local_.v6 || n == 1 ? 0 : static_cast<std::uint16_t>(k));
          head_ = (head_ + 1) % tx_batch_;
          --queued_;
        }
      }
      continue;  // a partial send: the next call sends the rest or reports the error
    }
    if (sent < 0 && errno == EINTR) continue;
    if (sent == 0 || errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS) {
      ++counters_.tx_blocked;  // the queued packets keep their bytes until the next try
      return;
    }
    if (recv_errors_ && !retried) {
      // The socket's pending error (an ICMP error of an earlier datagram, IP_RECVERR) fails
      // one send and is cleared by it: this packet has not left. Once per call: a send that
      // fails again fails for itself.
      retried = true;
      ++counters_.tx_error_retries;
      continue;
    }
    if (s.run[0] > 1) {
      // The kernel or the route refused the GSO datagram (no UDP_SEGMENT support on the path,
      // segments larger than the route's MTU, ...): send packet by packet from now on.
      gso_ = false;
      gso_note_ = std::string("off: the kernel refused a GSO datagram: ") + std::strerror(errno);
      ++counters_.tx_gso_fallbacks;
      continue;
    }
    ++counters_.tx_errors;  // unreachable peer, ...: the packet is lost, as on a wire
    head_ = (head_ + 1) % tx_batch_;
    --queued_;
  }
}

std::byte* UdpDatapath::tx_bytes(TxSlot& t) {
  return t.raw ? t.owned.data() : stage_.data() + t.stage_off;
}

void UdpDatapath::tap_sent(TxSlot& t, std::uint16_t ipv4_id) {
  // The frame as it left, with the ICRC bytes that were sent (not recomputed), so that a
  // capture checked by `uroce pcap check` checks what went on the wire. Called once the kernel
  // took the packet (never for one still queued or lost to a send error), in the order sent,
  // from the copy made at send(): the bytes its ICRC covers and the kernel sent, whatever the
  // application did to its memory since.
  wire::OuterHeaders h = outer(local_, t.dst, port_, t.dst_port, t.tos, t.ttl);
  h.ethernet = true;
  h.ipv4_id = ipv4_id;
  tap_buf_.resize(wire::outer_size(h) + t.roce_bytes);
  const std::size_t at = wire::write_outer(tap_buf_, h, t.roce_bytes);
  const std::byte* const p = tx_bytes(t);
  std::copy(p, p + t.roce_bytes, tap_buf_.begin() + static_cast<std::ptrdiff_t>(at));
  tap_(tap_buf_, true);
}

// Long: the recvmmsg loop with its control messages and GRO; the hot receive path.
std::size_t UdpDatapath::receive(Instant now, std::size_t max, const RxHandler& handler) {
  RxRing& r = *rx_;
  std::size_t datagrams = 0;
  std::size_t packets = 0;
  rx_now_ = rx_faults_ != nullptr ? fault_clock(now) : now;
  // Held packets that are due, then the socket.
  if (rx_faults_ != nullptr) packets += release_rx_faults(rx_now_, handler);
  while (datagrams < max) {
    const std::size_t want = std::min(rx_batch_, max - datagrams);
    // Only the headers that an earlier call may have written are set again: a round that finds
    // the socket empty (most of them, while a ping-pong waits) sets one, not rx_batch.
    const std::size_t reset = std::min(want, r.dirty);
    for (std::size_t i = 0; i < reset; ++i) {
      msghdr& h = r.msgs[i].msg_hdr;
      h = msghdr{};
      h.msg_name = &r.from[i];
      h.msg_namelen = sizeof(sockaddr_storage);
      h.msg_iov = &r.iov[i];
      h.msg_iovlen = 1;
      h.msg_control = r.control[i].bytes.data();
      h.msg_controllen = r.control[i].bytes.size();
      r.msgs[i].msg_len = 0;
    }
    const int got =
        ::recvmmsg(fd_, r.msgs.data(), static_cast<unsigned>(want), MSG_DONTWAIT, nullptr);
    // Those it returned, and (in case) the one it stopped at; beyond `want`, what was not set.
    r.dirty = std::max(r.dirty > want ? r.dirty : 0,
                       std::min(want, got > 0 ? static_cast<std::size_t>(got) + 1 : 1));
    if (got <= 0) break;  // EAGAIN: nothing more (other errors: try again next time)
    ++counters_.rx_calls;
    for (int i = 0; i < got; ++i) {
      const auto idx = static_cast<std::size_t>(i);
      msghdr& msg = r.msgs[idx].msg_hdr;
      const std::size_t len = r.msgs[idx].msg_len;
      ++counters_.rx_datagrams;
      RxMeta meta;
      std::size_t segment = 0;  // GRO: the size of each coalesced packet but the last
      for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        int v = 0;
        if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) {
          meta.tos = *reinterpret_cast<const std::uint8_t*>(CMSG_DATA(c));  // one byte
        } else if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TTL) {
          std::memcpy(&v, CMSG_DATA(c), sizeof v);
          meta.ttl = static_cast<std::uint8_t>(v);
        } else if (c->cmsg_level == IPPROTO_IPV6 &&
                   (c->cmsg_type == IPV6_TCLASS || c->cmsg_type == IPV6_HOPLIMIT)) {
          std::memcpy(&v, CMSG_DATA(c), sizeof v);
          (c->cmsg_type == IPV6_TCLASS ? meta.tos : meta.ttl) = static_cast<std::uint8_t>(v);
        } else if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
          std::memcpy(&v, CMSG_DATA(c), sizeof v);
          segment = v > 0 ? static_cast<std::size_t>(v) : 0;
        }
      }
      from_sockaddr(r.from[idx], meta.src, meta.src_port);
      const ConstBytes data(static_cast<const std::byte*>(r.iov[idx].iov_base), len);
      if ((msg.msg_flags & MSG_TRUNC) != 0) {
        // Larger than any buffer: not a RoCE packet (nor a GRO batch of them).
        ++counters_.rx_packets;
        counters_.rx_bytes += len;
        ++counters_.rx_drops[static_cast<std::size_t>(wire::DropReason::kPayloadTooLong)];
        ++packets;
        continue;
      }
      if (segment == 0 || segment >= len) {
        receive_packet(data, meta, handler);
        ++packets;
        continue;
      }
      // GRO: equal-size packets of one flow, the last possibly shorter.
      ++counters_.rx_gro_datagrams;
      meta.gro_index = 0;
      for (std::size_t off = 0; off < len; off += segment) {
        receive_packet(data.subspan(off, std::min(segment, len - off)), meta, handler);
        ++meta.gro_index;
        ++counters_.rx_gro_packets;
        ++packets;
      }
    }
    datagrams += static_cast<std::size_t>(got);
    if (static_cast<std::size_t>(got) < want) break;  // drained
  }
  return packets;
}

std::size_t UdpDatapath::release_rx_faults(Instant now, const RxHandler& handler) {
  std::size_t n = 0;
  while (rx_faults_->poll(now, fault_out_rx_)) {
    RxMeta meta;
    meta.src = fault_out_rx_.info.peer;
    meta.src_port = fault_out_rx_.info.peer_port;
    meta.tos = fault_out_rx_.info.tos;
    meta.ttl = fault_out_rx_.info.ttl;
    handle_packet(ConstBytes(fault_out_rx_.bytes), meta, handler);
    ++n;
  }
  drain_fault_events();
  return n;
}

void UdpDatapath::receive_packet(ConstBytes roce, const RxMeta& base, const RxHandler& handler) {
  if (rx_faults_ != nullptr) {
    fault::PacketInfo info = fault::classify(roce, fault::Direction::kRx, base.src);
    info.peer_port = base.src_port;
    info.tos = base.tos;
    info.ttl = base.ttl;
    const auto v = matches_a_rule(*rx_faults_, info) ? rx_faults_->submit(rx_now_, info, roce)
                                                     : fault::FaultStage::Verdict::kPass;
    drain_fault_events();
    if (v == fault::FaultStage::Verdict::kTaken) {
      // Dropped, or held: what is due at once (a copy, a corrupted packet) comes out now.
      release_rx_faults(rx_now_, handler);
      return;
    }
  }
  handle_packet(roce, base, handler);
}

// Long: ICRC (deferred or now), parse, IP header: one packet's checks in order.
void UdpDatapath::handle_packet(ConstBytes roce, const RxMeta& base, const RxHandler& handler) {
  ++counters_.rx_packets;
  counters_.rx_bytes += roce.size();
  if (roce.size() < wire::kBthBytes + wire::kIcrcBytes) {
    const auto too_short = wire::parse_roce(roce, accept_sealed_);  // names what is missing
    ++counters_.rx_drops[static_cast<std::size_t>(too_short.ok() ? wire::DropReason::kBadIcrc
                                                                 : too_short.error())];
    return;
  }
  // The ICRC first, then the headers: a packet corrupted on the way is a bad ICRC whichever
  // bits were hit (its header's "errors" mean nothing), and only an intact packet's header is
  // judged. Except, with deferred checks, a continuation of a message in progress: its check is
  // the handler's, in the pass that places its payload (set_deferred_icrc).
  RxMeta meta = base;
  // What the headers as the sender's kernel wrote them owe the ICRC. A sender's IPv4
  // identification is not visible to a UDP socket: uroce's single packets carry 0; its GSO
  // segments (1, 2, ...) and rxe's packets carry others, recovered from the ICRC itself (solving
  // for the identification that explains the difference from the ICRC with 0), which leaves a
  // 16-bit check against corruption instead of 32. Nor is DF: rxe and uroce set it, a sender that
  // does not is recognised the same way (both tries together: a 15-bit check).
  const std::uint32_t outer_state = outer_icrc(false, meta.src, meta.src_port, roce.size());
  std::optional<Result<wire::RocePacket, wire::DropReason>> early;
  if ((defer_icrc_ || accept_sealed_) && !tap_) {
    early = wire::parse_roce(roce, accept_sealed_);
    // A sealed RC or UC packet's tag covers every byte its ICRC does but the outer headers'
    // (which the IP and UDP checksums cover): the sealing handler checks the ICRC only when the
    // tag fails (docs/SECURITY.md). A UD one is checked here: its receive shows the IP header
    // with the identification that the ICRC recovers.
    const bool sealed = early->ok() && early->value().sealed() &&
                        early->value().op->transport != wire::Transport::kUd;
    if (sealed || (defer_icrc_ && early->ok() && wire::icrc_deferrable(*early->value().op))) {
      deferred_check_.dp = this;
      deferred_check_.likely_id = meta.gro_index;
      wire::PendingIcrc pending(outer_state, roce, early->value().payload, &deferred_check_);
      meta.pending = &pending;
      // An RC continuation, never UD: its IP header is shown only when all are.
      std::array<std::byte, 48> ip_udp;
      if (!ip_header_ud_only_) {
        const std::size_t n = wire::write_outer(
            ip_udp, outer(meta.src, local_, meta.src_port, port_, meta.tos, meta.ttl), roce.size());
        meta.ip_header = ConstBytes(ip_udp).first(n - wire::kUdpBytes);
      }
      handler(early->value(), meta);
      // The handler decided what the packet is. The engine counts a failed check as bad_icrc;
      // the sealing datapath leaves that to the datapath.
      UROCE_CHECK(pending.finished());
      if (sealed && !pending.skipped() && !pending.verified()) {
        ++counters_.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)];
      }
      return;
    }
  }
  // The headers themselves (TOS and TTL as received, the identification and DF that explain the
  // ICRC, in `found`) are written only where they are read (set_ip_header_for_ud_only).
  wire::OuterHeaders found;
  meta.icrc_verified = verify_icrc(roce, outer_state, meta.gro_index, found);
  if (!meta.icrc_verified) {
    ++counters_.rx_drops[static_cast<std::size_t>(wire::DropReason::kBadIcrc)];
    return;
  }
  auto pkt = early ? std::move(*early) : wire::parse_roce(roce, accept_sealed_);
  if (!pkt.ok()) {
    ++counters_.rx_drops[static_cast<std::size_t>(pkt.error())];
    return;
  }
  std::array<std::byte, 48> ip_udp;
  if (tap_ || !ip_header_ud_only_ || pkt.value().op->transport == wire::Transport::kUd) {
    wire::OuterHeaders h = outer(meta.src, local_, meta.src_port, port_, meta.tos, meta.ttl);
    h.ipv4_id = found.ipv4_id;
    h.ipv4_df = found.ipv4_df;
    const std::size_t n = wire::write_outer(ip_udp, h, roce.size());
    meta.ip_header = ConstBytes(ip_udp).first(n - wire::kUdpBytes);
  }
  if (tap_) {
    const std::size_t n = meta.ip_header.size() + wire::kUdpBytes;
    tap_buf_.resize(wire::kEthernetBytes + n + roce.size());
    wire::encode_ethernet(tap_buf_,
                          wire::Ethernet{mac_of(local_), mac_of(meta.src),
                                         local_.v6 ? wire::kEtherTypeIpv6 : wire::kEtherTypeIpv4});
    std::copy(ip_udp.begin(), ip_udp.begin() + static_cast<std::ptrdiff_t>(n),
              tap_buf_.begin() + wire::kEthernetBytes);
    std::copy(roce.begin(), roce.end(),
              tap_buf_.begin() + static_cast<std::ptrdiff_t>(wire::kEthernetBytes + n));
    tap_(tap_buf_, false);
  }
  handler(pkt.value(), meta);
}

std::size_t UdpDatapath::receive_errors(std::size_t max,
                                        const std::function<void(const SendError&)>& handler) {
  std::size_t n = 0;
  for (; n < max; ++n) {
    sockaddr_storage to{};
    alignas(cmsghdr) std::array<std::byte, 256> control{};
    std::array<std::byte, 64> start{};  // the datagram's first bytes, unused
    iovec iov{start.data(), start.size()};
    msghdr msg{};
    msg.msg_name = &to;
    msg.msg_namelen = sizeof to;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    if (::recvmsg(fd_, &msg, MSG_ERRQUEUE | MSG_DONTWAIT) < 0) break;  // EAGAIN: none left
    SendError e;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (!(c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_RECVERR) &&
          !(c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_RECVERR)) {
        continue;
      }
      sock_extended_err ee{};
      std::memcpy(&ee, CMSG_DATA(c), sizeof ee);
      // icmp_err_convert / icmpv6_err_convert: port unreachable is ECONNREFUSED.
      e.port_unreachable = ee.ee_errno == ECONNREFUSED && (ee.ee_origin == SO_EE_ORIGIN_ICMP ||
                                                           ee.ee_origin == SO_EE_ORIGIN_ICMP6);
    }
    from_sockaddr(to, e.dst, e.dst_port);
    ++(e.port_unreachable ? counters_.rx_port_unreachable : counters_.rx_other_errors);
    handler(e);
  }
  return n;
}

int make_group_socket(const wire::IpAddress& ip, std::uint16_t port) {
  const int fd = ::socket(ip.v6 ? AF_INET6 : AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -errno;
  const int on = 1;
  if (::setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &on, sizeof on) != 0 ||
      (ip.v6 && ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &on, sizeof on) != 0)) {
    const int e = errno;
    ::close(fd);
    return -e;
  }
  sockaddr_storage ss{};
  socklen_t len = 0;
  datapath::to_sockaddr(ip, port, ss, len);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    const int e = errno;
    ::close(fd);
    return -e;
  }
  return fd;
}

}  // namespace uroce::datapath
