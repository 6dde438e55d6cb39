// Raw UDP on loopback: what the kernel's UDP path does with no RoCE on top. These are the
// baselines uroce's RDMA WRITE bandwidth, latency and message rate are compared against
// (docs/PERFORMANCE.md). Sender and receiver are two processes it forks (127.0.0.1 -> 127.0.0.2),
// each pinned to its own CPU where there are two. Each command prints one JSON object.
//
//   udp_baseline bw --mode gso|mmsg [--seconds S] [--size 65536] [--segment 4096] [--window B]
//     Bytes received per second at the receiver over S seconds, and each side's CPU time.
//     --window: the sender's credit window in bytes (CreditWindow; 0: none, the sender sends
//     as fast as the kernel takes its datagrams and the receiving socket drops what it cannot
//     hold, counted in receiver_socket_drops).
//     gso: one sendmsg per `size` bytes (at most the largest datagram, 65507 bytes, rounded
//     down to whole segments) with UDP_SEGMENT = `segment`. mmsg: one sendmmsg of size/segment
//     datagrams of `segment` bytes. The receiver reads with recvmmsg (16 buffers of 64 KiB)
//     and UDP_GRO.
//   udp_baseline pingpong [--iters N] [--size 8] [--datagrams 1] [--gso]
//     Two busy-polling processes (non-blocking recv in a spin); one-way latency = round trip / 2
//     (median; mean and percentiles too). --datagrams D > 1: each hop is D datagrams, the first
//     of `size` bytes, the others of 20 (an RC ACK: BTH, AETH, ICRC), sent in one sendmmsg and
//     read with recvmmsg until all D have come; with --gso in one send call with UDP_SEGMENT
//     (the others min(20, size) bytes) and received with UDP_GRO, as uroce sends a request with
//     the ACK it held for it. `--size 40 --datagrams 2 --gso` is what an RC ping-pong of 8-byte
//     WRITEs asks of the kernel per hop.
//     --receive uring|uring-defer: both sides receive through io_uring instead (built with
//     liburing): a multishot receive into a ring of provided buffers, whose completions each
//     side polls in user space, so that a poll that finds nothing is no system call. uring:
//     the kernel runs the receive as task work it signals to the polling thread (an
//     inter-processor interrupt when the packet comes from the other CPU); uring-defer
//     (IORING_SETUP_DEFER_TASKRUN): each poll asks for it with io_uring_enter. Sends stay
//     system calls. The answer to "would io_uring poll cheaper than recvmmsg?".
//     --calls uroce: the system calls and socket options uroce's UDP datapath uses, instead of
//     the plainest ones: every send a sendmmsg (of one message, with UDP_SEGMENT under --gso),
//     every receive a non-blocking recvmmsg of up to 8 messages with control buffers, on sockets
//     that ask for IP_RECVTOS and IP_RECVTTL (and UDP_GRO). With `--size 40 --datagrams 2 --gso`
//     it is the kernel's share of an 8-byte RC WRITE hop: the floor under uroce's write_lat.
//   udp_baseline pps [--size 64] [--batch 32] [--seconds S]
//     Datagrams of `size` bytes sent with sendmmsg in batches of `batch`, received with recvmmsg
//     in batches of `batch`: packets received per second.
//
// Sockets are unconnected with addresses per message, as uroce's datapath uses them.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/udp.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <vector>

#include "two_process.h"

#if UROCE_BENCH_HAVE_URING
#include <liburing.h>
#include <sys/mman.h>
#endif

namespace {

using namespace uroce::bench;

constexpr std::size_t kMaxDatagram = 65507;
constexpr std::size_t kRxBuffers = 16;
constexpr std::size_t kRxBufferBytes = 65536;

sockaddr_in addr(const char* ip, std::uint16_t port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  ::inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

// Every message of a send batch: one datagram of `iov` to `to`.
void address_all(std::vector<mmsghdr>& msgs, sockaddr_in& to, iovec& iov) {
  for (auto& m : msgs) {
    m.msg_hdr = msghdr{};
    m.msg_hdr.msg_name = &to;
    m.msg_hdr.msg_namelen = sizeof to;
    m.msg_hdr.msg_iov = &iov;
    m.msg_hdr.msg_iovlen = 1;
  }
}

// A UDP socket bound to `ip` (port 0: any), with large buffers; -1 after fail().
int open_socket(Shared& s, const char* ip, bool nonblocking) {
  const int fd = ::socket(AF_INET, SOCK_DGRAM | (nonblocking ? SOCK_NONBLOCK : 0), 0);
  if (fd < 0) {
    fail(s, std::string("socket: ") + std::strerror(errno));
    return -1;
  }
  const int big = 64 << 20;
  // Root may exceed net.core.rmem_max/wmem_max; others get what the limits allow.
  if (::setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
  }
  if (::setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big) != 0) {
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &big, sizeof big);
  }
  const int pmtu = IP_PMTUDISC_DO;
  ::setsockopt(fd, IPPROTO_IP, IP_MTU_DISCOVER, &pmtu, sizeof pmtu);
  sockaddr_in a = addr(ip, 0);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    fail(s, std::string("bind ") + ip + ": " + std::strerror(errno));
    return -1;
  }
  return fd;
}

std::uint16_t port_of(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

// The receiver of bw and pps: recvmmsg batches until the window closes. `gro`: ask for UDP_GRO
// and count the packets each buffer holds.
void receive_loop(Shared& s, double seconds, std::size_t batch, bool gro, bool progress_in_bytes) {
  const int fd = open_socket(s, "127.0.0.2", false);
  if (fd < 0) return;
  const int on = 1;
  if (gro) ::setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on);
  ::setsockopt(fd, SOL_SOCKET, SO_RXQ_OVFL, &on, sizeof on);  // the socket's drop count
  timeval tv{0, 100'000};                                     // wake up to look at the clock
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  batch = std::min(batch, kRxBuffers * 4);
  std::vector<std::byte> buffers(batch * kRxBufferBytes);
  std::vector<iovec> iov(batch);
  std::vector<mmsghdr> msgs(batch);
  struct alignas(cmsghdr) Control {
    std::array<std::byte, 64> b;
  };
  std::vector<Control> control(batch);
  for (std::size_t i = 0; i < batch; ++i)
    iov[i] = {buffers.data() + i * kRxBufferBytes, kRxBufferBytes};
  s.rx_port = port_of(fd);
  s.phase.store(kReceiverReady);
  ReceiverWindow window(s, seconds);
  while (!window.done()) {
    if (s.phase.load(std::memory_order_relaxed) == kWindowClosed) return;  // the sender failed
    for (std::size_t i = 0; i < batch; ++i) {
      msgs[i].msg_hdr = msghdr{};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = control[i].b.data();
      msgs[i].msg_hdr.msg_controllen = control[i].b.size();
    }
    const int n =
        ::recvmmsg(fd, msgs.data(), static_cast<unsigned>(batch), MSG_WAITFORONE, nullptr);
    if (n <= 0) continue;
    window.start();
    ++s.rx_calls;
    std::uint64_t got_bytes = 0, got_packets = 0;
    for (int i = 0; i < n; ++i) {
      const std::size_t len = msgs[static_cast<std::size_t>(i)].msg_len;
      got_bytes += len;
      std::size_t segment = 0;
      msghdr& h = msgs[static_cast<std::size_t>(i)].msg_hdr;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
          std::uint32_t d = 0;
          std::memcpy(&d, CMSG_DATA(c), sizeof d);
          s.extra[8] = d;
        }
        if (c->cmsg_level == SOL_UDP && c->cmsg_type == UDP_GRO) {
          int v = 0;
          std::memcpy(&v, CMSG_DATA(c), sizeof v);
          segment = static_cast<std::size_t>(v);
        }
      }
      got_packets += segment != 0 && len > segment ? (len + segment - 1) / segment : 1;
    }
    s.rx_bytes += got_bytes;
    s.rx_packets += got_packets;
    s.rx_progress.fetch_add(progress_in_bytes ? got_bytes : got_packets, std::memory_order_release);
  }
}

// Credit windows (see CreditWindow): below the loopback backlog of 1000 packets
// (net.core.netdev_max_backlog) and far below the socket buffers.
constexpr std::uint64_t kWindowBytes = 2u << 20;
constexpr std::uint64_t kWindowPackets = 512;

int bw(const std::string& mode, double seconds, std::size_t size, std::size_t segment,
       std::uint64_t window_bytes) {
  if (segment == 0 || segment > kMaxDatagram) {
    std::fprintf(stderr, "--segment must be from 1 to %zu\n", kMaxDatagram);
    return 2;
  }
  const bool gso = mode == "gso";
  // gso: bytes per sendmsg; mmsg: datagrams per sendmmsg.
  const std::size_t per_call =
      gso ? std::max(segment, std::min(size, kMaxDatagram / segment * segment))
          : std::max<std::size_t>(1, size / segment);
  Shared* s = run_pair([&](Shared& sh) { receive_loop(sh, seconds, kRxBuffers, true, true); },
                       [&](Shared& sh) {
                         const int fd = open_socket(sh, "127.0.0.1", false);
                         if (fd < 0) return;
                         sockaddr_in to = addr("127.0.0.2", sh.rx_port);
                         std::vector<std::byte> data(gso ? per_call : segment, std::byte{0x5a});
                         std::vector<mmsghdr> msgs(gso ? 1 : per_call);
                         iovec iov{data.data(), data.size()};
                         struct alignas(cmsghdr) Control {
                           std::array<std::byte, CMSG_SPACE(sizeof(std::uint16_t))> b;
                         } control{};
                         address_all(msgs, to, iov);
                         if (gso && per_call > segment) {
                           msghdr& h = msgs[0].msg_hdr;
                           h.msg_control = control.b.data();
                           h.msg_controllen = control.b.size();
                           cmsghdr* c = CMSG_FIRSTHDR(&h);
                           c->cmsg_level = SOL_UDP;
                           c->cmsg_type = UDP_SEGMENT;
                           c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
                           const auto seg = static_cast<std::uint16_t>(segment);
                           std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
                         }
                         SenderWindow window(sh);
                         CreditWindow credit(sh, window_bytes);
                         std::uint64_t sent_total = 0;
                         while (window.tick()) {
                           if (window_bytes != 0) credit.wait(sent_total);
                           const int n =
                               ::sendmmsg(fd, msgs.data(), static_cast<unsigned>(msgs.size()), 0);
                           if (n < 0) {
                             if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) continue;
                             fail(sh, std::string("sendmmsg: ") + std::strerror(errno));
                             return;
                           }
                           sent_total += static_cast<std::uint64_t>(n) * data.size();
                           if (window.open()) {
                             ++sh.tx_calls;
                             sh.tx_bytes += static_cast<std::uint64_t>(n) * data.size();
                           }
                         }
                       },
                       seconds + 20);
  if (s == nullptr) return 1;
  std::printf(
      "{\"mode\":\"%s\",\"bytes\":%llu,\"seconds\":%.3f,\"gbit_per_s\":%.3f,"
      "\"sender_cpu_s\":%.3f,\"receiver_cpu_s\":%.3f,\"size\":%zu,\"segment\":%zu,"
      "\"bytes_per_send_call\":%zu,\"rx_packets\":%llu,\"rx_calls\":%llu,\"sent_bytes\":%llu,"
      "\"send_calls\":%llu,\"sender_stalls\":%llu,\"receiver_socket_drops\":%.0f,"
      "\"window_bytes\":%llu}\n",
      mode.c_str(), static_cast<unsigned long long>(s->rx_bytes), s->rx_seconds,
      static_cast<double>(s->rx_bytes) * 8 / s->rx_seconds / 1e9, s->tx_cpu_s, s->rx_cpu_s, size,
      segment, gso ? per_call : per_call * segment, static_cast<unsigned long long>(s->rx_packets),
      static_cast<unsigned long long>(s->rx_calls), static_cast<unsigned long long>(s->tx_bytes),
      static_cast<unsigned long long>(s->tx_calls), static_cast<unsigned long long>(s->tx_stalls),
      s->extra[8], static_cast<unsigned long long>(window_bytes));
  return 0;
}

int pps(std::size_t size, std::size_t batch, double seconds) {
  const std::uint64_t window_packets = std::max<std::uint64_t>(kWindowPackets, 2 * batch);
  if (size > kMaxDatagram || batch == 0 || batch > 1024) {
    std::fprintf(stderr, "--size must be at most %zu and --batch from 1 to 1024\n", kMaxDatagram);
    return 2;
  }
  Shared* s =
      run_pair([&](Shared& sh) { receive_loop(sh, seconds, batch, false, false); },
               [&](Shared& sh) {
                 const int fd = open_socket(sh, "127.0.0.1", false);
                 if (fd < 0) return;
                 sockaddr_in to = addr("127.0.0.2", sh.rx_port);
                 std::vector<std::byte> data(std::max<std::size_t>(size, 1), std::byte{0x5a});
                 iovec iov{data.data(), size};
                 std::vector<mmsghdr> msgs(batch);
                 address_all(msgs, to, iov);
                 SenderWindow window(sh);
                 CreditWindow credit(sh, window_packets);
                 std::uint64_t sent_total = 0;
                 while (window.tick()) {
                   credit.wait(sent_total);
                   const int n = ::sendmmsg(fd, msgs.data(), static_cast<unsigned>(batch), 0);
                   if (n < 0) {
                     if (errno == EAGAIN || errno == ENOBUFS || errno == EINTR) continue;
                     fail(sh, std::string("sendmmsg: ") + std::strerror(errno));
                     return;
                   }
                   sent_total += static_cast<std::uint64_t>(n);
                   if (window.open()) {
                     ++sh.tx_calls;
                     sh.tx_packets += static_cast<std::uint64_t>(n);
                   }
                 }
               },
               seconds + 20);
  if (s == nullptr) return 1;
  std::printf(
      "{\"pps\":%.0f,\"packets\":%llu,\"seconds\":%.3f,\"size\":%zu,\"batch\":%zu,"
      "\"sent_pps\":%.0f,\"sender_cpu_s\":%.3f,\"receiver_cpu_s\":%.3f,\"rx_calls\":%llu,"
      "\"sender_stalls\":%llu}\n",
      static_cast<double>(s->rx_packets) / s->rx_seconds,
      static_cast<unsigned long long>(s->rx_packets), s->rx_seconds, size, batch,
      static_cast<double>(s->tx_packets) / s->rx_seconds, s->tx_cpu_s, s->rx_cpu_s,
      static_cast<unsigned long long>(s->rx_calls), static_cast<unsigned long long>(s->tx_stalls));
  return 0;
}

// One hop of pingpong: D datagrams in one sendmmsg (one sendto for D = 1), the first of `size`
// bytes, the others of kAckBytes; or, with `gso`, one send of all D. With `mmsg` (--calls
// uroce) every send is a sendmmsg. `out` holds at least D * max(size, kAckBytes) bytes.
constexpr std::size_t kAckBytes = 20;  // BTH 12 + AETH 4 + ICRC 4
void send_hop(int fd, const sockaddr_in& to, std::vector<std::byte>& out, std::size_t size,
              std::size_t datagrams, bool gso, bool mmsg) {
  const bool cut = gso && datagrams > 1;
  if (cut || (mmsg && datagrams == 1)) {
    // One message: the hop in one socket buffer that the kernel cuts into `size`-byte
    // datagrams, the last shorter (kAckBytes, at most `size`); or the one datagram.
    iovec iov{out.data(), cut ? size * (datagrams - 1) + std::min(kAckBytes, size) : size};
    alignas(cmsghdr) std::array<char, CMSG_SPACE(sizeof(std::uint16_t))> ctl{};
    mmsghdr m{};
    m.msg_hdr.msg_name = const_cast<sockaddr_in*>(&to);
    m.msg_hdr.msg_namelen = sizeof to;
    m.msg_hdr.msg_iov = &iov;
    m.msg_hdr.msg_iovlen = 1;
    if (cut) {
      m.msg_hdr.msg_control = ctl.data();
      m.msg_hdr.msg_controllen = ctl.size();
      cmsghdr* c = CMSG_FIRSTHDR(&m.msg_hdr);
      c->cmsg_level = SOL_UDP;
      c->cmsg_type = UDP_SEGMENT;
      c->cmsg_len = CMSG_LEN(sizeof(std::uint16_t));
      const auto seg = static_cast<std::uint16_t>(size);
      std::memcpy(CMSG_DATA(c), &seg, sizeof seg);
    }
    if (mmsg) {
      ::sendmmsg(fd, &m, 1, 0);
    } else {
      ::sendmsg(fd, &m.msg_hdr, 0);
    }
    return;
  }
  if (datagrams == 1) {
    ::sendto(fd, out.data(), size, 0, reinterpret_cast<const sockaddr*>(&to), sizeof to);
    return;
  }
  std::array<iovec, 8> iov{};
  std::array<mmsghdr, 8> m{};
  for (std::size_t i = 0; i < datagrams; ++i) {
    iov[i] = {out.data(), i == 0 ? size : kAckBytes};
    m[i].msg_hdr.msg_name = const_cast<sockaddr_in*>(&to);
    m[i].msg_hdr.msg_namelen = sizeof to;
    m[i].msg_hdr.msg_iov = &iov[i];
    m[i].msg_hdr.msg_iovlen = 1;
  }
  ::sendmmsg(fd, m.data(), static_cast<unsigned>(datagrams), 0);
}

// Datagrams of the hop that a received message of `bytes` holds: with UDP_GRO on, the hop's
// datagrams come as one buffer (or one by one where the kernel did not keep them together), so
// they are counted by length; otherwise one.
std::size_t datagrams_in(std::size_t bytes, bool gso, std::size_t datagrams, std::size_t size) {
  return gso && datagrams > 1 ? (bytes + size - 1) / size : 1;
}

// Datagrams read by one non-blocking try: recvfrom for D = 1 or under GRO, recvmmsg of up to
// `want` otherwise; with `mmsg` (--calls uroce) always recvmmsg, of 8 messages each with room
// for the TOS, TTL and GRO control messages the socket asked for, as uroce's datapath reads.
// The sender's address in `from` where asked for.
std::size_t receive_some(int fd, std::vector<std::byte>& in, std::size_t datagrams,
                         std::size_t want, sockaddr_in* from, bool gso, std::size_t size,
                         bool mmsg) {
  if (!mmsg && (datagrams == 1 || gso)) {
    socklen_t len = sizeof(sockaddr_in);
    const ssize_t n = ::recvfrom(fd, in.data(), in.size(), 0, reinterpret_cast<sockaddr*>(from),
                                 from != nullptr ? &len : nullptr);
    return n > 0 ? datagrams_in(static_cast<std::size_t>(n), gso, datagrams, size) : 0;
  }
  constexpr std::size_t kSlots = 8;
  const std::size_t slots = mmsg ? kSlots : want;
  std::array<iovec, kSlots> iov{};
  std::array<mmsghdr, kSlots> m{};
  alignas(cmsghdr) std::array<std::array<char, 64>, kSlots> ctl;  // the kernel writes them
  const std::size_t slot = in.size() / kSlots;
  for (std::size_t i = 0; i < slots; ++i) {
    iov[i] = {in.data() + i * slot, slot};
    m[i].msg_hdr.msg_iov = &iov[i];
    m[i].msg_hdr.msg_iovlen = 1;
    if (mmsg) {
      m[i].msg_hdr.msg_control = ctl[i].data();
      m[i].msg_hdr.msg_controllen = ctl[i].size();
    }
  }
  if (from != nullptr) {
    m[0].msg_hdr.msg_name = from;
    m[0].msg_hdr.msg_namelen = sizeof(sockaddr_in);
  }
  const int got = ::recvmmsg(fd, m.data(), static_cast<unsigned>(slots), MSG_DONTWAIT, nullptr);
  std::size_t n = 0;
  for (int i = 0; i < got; ++i) {
    n += datagrams_in(m[static_cast<std::size_t>(i)].msg_len, gso, datagrams, size);
  }
  return n;
}

enum class RxVia { kRecv, kUring, kUringDefer };

#if UROCE_BENCH_HAVE_URING
// A multishot receive on `fd` into kBuffers provided buffers of `bytes`: poll() reaps the
// completion ring in user space (and, deferred, asks the kernel to run the receive first).
class UringRx {
 public:
  static constexpr unsigned kBuffers = 64;
  bool open(int fd, bool defer, std::size_t bytes, std::string& why) {
    fd_ = fd;
    defer_ = defer;
    bytes_ = bytes;
    const unsigned flags = defer ? IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN : 0;
    if (const int e = io_uring_queue_init(64, &ring_, flags); e < 0) {
      why = std::string("io_uring_queue_init: ") + std::strerror(-e);
      return false;
    }
    inited_ = true;
    void* m = ::mmap(nullptr, kBuffers * sizeof(io_uring_buf), PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      why = std::string("mmap: ") + std::strerror(errno);
      return false;
    }
    br_ = static_cast<io_uring_buf_ring*>(m);
    data_.resize(kBuffers * bytes);
    io_uring_buf_reg reg{};
    reg.ring_addr = reinterpret_cast<std::uintptr_t>(br_);
    reg.ring_entries = kBuffers;
    reg.bgid = 0;
    if (const int e = io_uring_register_buf_ring(&ring_, &reg, 0); e < 0) {
      why = std::string("io_uring_register_buf_ring: ") + std::strerror(-e);
      return false;
    }
    io_uring_buf_ring_init(br_);
    for (unsigned i = 0; i < kBuffers; ++i) give_back(i, static_cast<int>(i));
    io_uring_buf_ring_advance(br_, static_cast<int>(kBuffers));
    return arm(why);
  }
  ~UringRx() {
    if (inited_) io_uring_queue_exit(&ring_);
    if (br_ != nullptr) ::munmap(br_, kBuffers * sizeof(io_uring_buf));
  }
  // Bytes of the next datagram received (its buffer goes back at once), 0 for none, -1 on an
  // error the receive reported.
  long poll() {
    if (defer_) io_uring_get_events(&ring_);
    io_uring_cqe* c = nullptr;
    if (io_uring_peek_cqe(&ring_, &c) != 0) return 0;
    const long n = c->res;
    if ((c->flags & IORING_CQE_F_BUFFER) != 0) {
      give_back(c->flags >> IORING_CQE_BUFFER_SHIFT, 0);
      io_uring_buf_ring_advance(br_, 1);
    }
    const bool more = (c->flags & IORING_CQE_F_MORE) != 0;
    io_uring_cqe_seen(&ring_, c);
    std::string why;
    if (!more && !arm(why)) return -1;  // the multishot receive ended (buffers ran out): again
    return n >= 0 ? n : (n == -ENOBUFS ? 0 : -1);
  }

 private:
  void give_back(unsigned id, int offset) {
    io_uring_buf_ring_add(br_, data_.data() + id * bytes_, static_cast<unsigned>(bytes_),
                          static_cast<unsigned short>(id), io_uring_buf_ring_mask(kBuffers),
                          offset);
  }
  bool arm(std::string& why) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    if (sqe == nullptr) {
      why = "io_uring: no submission entry";
      return false;
    }
    io_uring_prep_recv_multishot(sqe, fd_, nullptr, 0, 0);
    sqe->flags |= IOSQE_BUFFER_SELECT;
    sqe->buf_group = 0;
    if (const int e = io_uring_submit(&ring_); e < 0) {
      why = std::string("io_uring_submit: ") + std::strerror(-e);
      return false;
    }
    return true;
  }
  io_uring ring_{};
  io_uring_buf_ring* br_ = nullptr;
  std::vector<std::byte> data_;
  std::size_t bytes_ = 0;
  int fd_ = -1;
  bool defer_ = false;
  bool inited_ = false;
};
#else
class UringRx {
 public:
  bool open(int, bool, std::size_t, std::string& why) {
    why = "built without liburing (install liburing-dev and build again)";
    return false;
  }
  long poll() { return -1; }
};
#endif

// Datagrams `rx` has for the hop: as receive_some() counts them.
std::size_t receive_uring(UringRx& rx, std::size_t datagrams, bool gso, std::size_t size) {
  const long n = rx.poll();
  return n > 0 ? datagrams_in(static_cast<std::size_t>(n), gso, datagrams, size) : 0;
}

// Asks `fd` for what uroce's datapath asks of its socket: each datagram's TOS and TTL.
void ask_like_uroce(int fd) {
  const int on = 1;
  ::setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &on, sizeof on);
  ::setsockopt(fd, IPPROTO_IP, IP_RECVTTL, &on, sizeof on);
}

int pingpong(std::size_t iters, std::size_t size, std::size_t datagrams, bool gso, RxVia via,
             bool mmsg) {
  if (size == 0 || size > kMaxDatagram || iters == 0 || datagrams == 0 || datagrams > 8) {
    std::fprintf(stderr,
                 "--size must be from 1 to %zu, --iters positive, --datagrams from 1 to 8\n",
                 kMaxDatagram);
    return 2;
  }
  if (mmsg && via != RxVia::kRecv) {
    std::fprintf(stderr, "--calls uroce receives with recvmmsg: not with --receive uring\n");
    return 2;
  }
  constexpr std::size_t kWarmup = 1000;
  Shared* s = run_pair(
      [&](Shared& sh) {
        // The echo side: spin on non-blocking receives, answer each hop with one of its own.
        const int fd = open_socket(sh, "127.0.0.2", true);
        if (fd < 0) return;
        const int on = 1;
        if (gso) ::setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on);
        if (mmsg) ask_like_uroce(fd);
        std::vector<std::byte> buf(std::max<std::size_t>(kRxBufferBytes, 8 * 65536));
        std::vector<std::byte> out(std::max(size, kAckBytes) * datagrams, std::byte{0xa5});
        UringRx uring;
        bool uring_open = false;
        sh.rx_port = port_of(fd);
        sh.phase.store(kReceiverReady);
        const double cpu0 = cpu_seconds();
        std::size_t have = 0;
        sockaddr_in from{};
        while (sh.phase.load(std::memory_order_relaxed) != kWindowClosed) {
          if (uring_open) {
            have += receive_uring(uring, datagrams, gso, size);
            if (have < datagrams) continue;
            have = 0;
            send_hop(fd, from, out, size, datagrams, gso, mmsg);
            continue;
          }
          if (via != RxVia::kRecv && from.sin_family != 0 && have == 0) {
            // The first hop came by recvfrom, which gave the client's address (the multishot
            // receive does not); io_uring from the second warm-up hop on.
            std::string why;
            if (!uring.open(fd, via == RxVia::kUringDefer, 65536, why)) {
              fail(sh, why);
              return;
            }
            uring_open = true;
            continue;
          }
          have += receive_some(fd, buf, datagrams, datagrams - have, have == 0 ? &from : nullptr,
                               gso, size, mmsg);
          if (have < datagrams) continue;
          have = 0;
          send_hop(fd, from, out, size, datagrams, gso, mmsg);
        }
        sh.rx_cpu_s = cpu_seconds() - cpu0;
      },
      [&](Shared& sh) {
        const int fd = open_socket(sh, "127.0.0.1", true);
        if (fd < 0) return;
        const int on = 1;
        if (gso) ::setsockopt(fd, SOL_UDP, UDP_GRO, &on, sizeof on);
        if (mmsg) ask_like_uroce(fd);
        sockaddr_in to = addr("127.0.0.2", sh.rx_port);
        std::vector<std::byte> out(std::max(size, kAckBytes) * datagrams, std::byte{0x5a});
        std::vector<std::byte> in(std::max<std::size_t>(kRxBufferBytes, 8 * 65536));
        UringRx uring;
        if (std::string why;
            via != RxVia::kRecv && !uring.open(fd, via == RxVia::kUringDefer, 65536, why)) {
          fail(sh, why);
          return;
        }
        std::vector<double> rtt;
        rtt.reserve(iters);
        std::uint64_t resent = 0;
        const double cpu0 = cpu_seconds();
        const double t_start = now_seconds();
        for (std::size_t i = 0; i < kWarmup + iters; ++i) {
          const auto t0 = std::chrono::steady_clock::now();
          send_hop(fd, to, out, size, datagrams, gso, mmsg);
          std::size_t have = 0;
          for (;;) {
            have += via != RxVia::kRecv ? receive_uring(uring, datagrams, gso, size)
                                        : receive_some(fd, in, datagrams, datagrams - have, nullptr,
                                                       gso, size, mmsg);
            if (have >= datagrams) break;
            if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(1)) {
              // Lost (it should not happen on loopback): the hop again. A late straggler of the
              // lost one counts for the next round trip, which then reads as a short one.
              ++resent;
              have = 0;
              send_hop(fd, to, out, size, datagrams, gso, mmsg);
            }
          }
          const auto t1 = std::chrono::steady_clock::now();
          if (i >= kWarmup)
            rtt.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
        }
        sh.tx_cpu_s = cpu_seconds() - cpu0;
        sh.rx_seconds = now_seconds() - t_start;
        std::sort(rtt.begin(), rtt.end());
        double sum = 0;
        for (double r : rtt) sum += r;
        auto pct = [&](double p) {
          return rtt[std::min(rtt.size() - 1,
                              static_cast<std::size_t>(p * static_cast<double>(rtt.size())))];
        };
        sh.extra[0] = pct(0.5);
        sh.extra[1] = sum / static_cast<double>(rtt.size());
        sh.extra[2] = pct(0.99);
        sh.extra[3] = rtt.front();
        sh.extra[4] = static_cast<double>(resent);
        sh.phase.store(kWindowClosed);
      },
      60 + static_cast<double>(iters) * 1e-3);
  if (s == nullptr) return 1;
  std::printf(
      "{\"one_way_us\":%.3f,\"one_way_us_mean\":%.3f,\"rtt_us_p50\":%.3f,\"rtt_us_p99\":%.3f,"
      "\"rtt_us_min\":%.3f,\"iters\":%zu,\"size\":%zu,\"resent\":%.0f,\"seconds\":%.3f,"
      "\"client_cpu_s\":%.3f,\"server_cpu_s\":%.3f,\"datagrams\":%zu,\"gso\":%s,"
      "\"receive\":\"%s\",\"calls\":\"%s\"}\n",
      s->extra[0] / 2, s->extra[1] / 2, s->extra[0], s->extra[2], s->extra[3], iters, size,
      s->extra[4], s->rx_seconds, s->tx_cpu_s, s->rx_cpu_s, datagrams, gso ? "true" : "false",
      via == RxVia::kRecv    ? "recv"
      : via == RxVia::kUring ? "uring"
                             : "uring-defer",
      mmsg ? "uroce" : "plain");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"udp_baseline: raw UDP over loopback, the baseline for uroce's numbers"};
  app.require_subcommand(1);
  std::string mode = "gso";
  double seconds = 3;
  std::size_t size = 65536, segment = 4096, iters = 100000, pp_size = 8, pps_size = 64, batch = 32;
  std::uint64_t window = kWindowBytes;
  CLI::App* bw_cmd = app.add_subcommand("bw", "Bandwidth: bytes received per second");
  bw_cmd->add_option("--mode", mode, "gso or mmsg")->check(CLI::IsMember({"gso", "mmsg"}));
  bw_cmd->add_option("--seconds", seconds, "measurement window")->check(CLI::Range(0.1, 600.0));
  bw_cmd->add_option("--size", size, "bytes per send call")->check(CLI::Range(1, 1 << 24));
  bw_cmd->add_option("--segment", segment, "datagram (GSO segment) size")
      ->check(CLI::Range(1, 65507));
  bw_cmd->add_option("--window", window, "sender's credit window in bytes (0: none)")
      ->check(CLI::Range(std::uint64_t{0}, std::uint64_t{1} << 30));
  CLI::App* pp_cmd = app.add_subcommand("pingpong", "Latency: round trip / 2, busy polling");
  pp_cmd->add_option("--iters", iters, "round trips")->check(CLI::Range(1, 100'000'000));
  pp_cmd->add_option("--size", pp_size, "datagram size")->check(CLI::Range(1, 65507));
  std::size_t datagrams = 1;
  pp_cmd->add_option("--datagrams", datagrams, "datagrams per hop (sendmmsg/recvmmsg when > 1)")
      ->check(CLI::Range(1, 8));
  bool pp_gso = false;
  pp_cmd->add_flag("--gso", pp_gso, "a hop of several datagrams is one send call with UDP_SEGMENT");
  std::string receive = "recv";
  pp_cmd->add_option("--receive", receive, "recv, or io_uring: uring or uring-defer")
      ->check(CLI::IsMember({"recv", "uring", "uring-defer"}));
  std::string calls = "plain";
  pp_cmd->add_option("--calls", calls, "plain, or uroce: the system calls uroce's datapath makes")
      ->check(CLI::IsMember({"plain", "uroce"}));
  CLI::App* pps_cmd = app.add_subcommand("pps", "Message rate: datagrams received per second");
  pps_cmd->add_option("--size", pps_size, "datagram size")->check(CLI::Range(0, 65507));
  pps_cmd->add_option("--batch", batch, "datagrams per sendmmsg/recvmmsg")
      ->check(CLI::Range(1, 1024));
  pps_cmd->add_option("--seconds", seconds, "measurement window")->check(CLI::Range(0.1, 600.0));
  CLI11_PARSE(app, argc, argv);
  if (bw_cmd->parsed()) return bw(mode, seconds, size, segment, window);
  if (pp_cmd->parsed()) {
    const RxVia via = receive == "uring"         ? RxVia::kUring
                      : receive == "uring-defer" ? RxVia::kUringDefer
                                                 : RxVia::kRecv;
    return pingpong(iters, pp_size, datagrams, pp_gso, via, calls == "uroce");
  }
  return pps(pps_size, batch, seconds);
}
