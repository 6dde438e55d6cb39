#include "tools/ping_cmd.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include "base/entropy.h"
#include "device/device_config.h"
#include "device/udp_device.h"
#include "edge/environment.h"
#include "verbs/address.h"

namespace uroce::tools {
namespace {

// rc_pingpong's work request ids: the pending mask is built from them.
constexpr std::uint64_t kRecvWrid = 1;
constexpr std::uint64_t kSendWrid = 2;
constexpr std::uint8_t kFillByte = 0x7b;  // rc_pingpong's memset of the buffer

using Clock = std::chrono::steady_clock;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(Fd&& o) noexcept : fd_(o.fd_) { o.fd_ = -1; }
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = o.fd_;
      o.fd_ = -1;
    }
    return *this;
  }
  int get() const { return fd_; }
  bool ok() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

struct Deadline {
  Clock::time_point at;
  static Deadline in(double seconds) {
    return {Clock::now() +
            std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds))};
  }
  int poll_ms() const {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(at - Clock::now());
    return left.count() <= 0 ? 0 : static_cast<int>(std::min<long long>(left.count(), 1000));
  }
  bool passed() const { return Clock::now() >= at; }
};

// Waits until `fd` is ready for `events` or the deadline passes. False on timeout.
bool wait_fd(int fd, short events, const Deadline& d) {
  while (true) {
    pollfd p{fd, events, 0};
    const int n = ::poll(&p, 1, d.poll_ms());
    if (n > 0) return true;
    if (n < 0 && errno != EINTR) return true;  // let the following call report the error
    if (d.passed()) return false;
  }
}

// Reads exactly `n` bytes, or fewer when the peer closes; -1 with `why` on error or timeout.
long read_full(int fd, char* buf, std::size_t n, const Deadline& d, std::string* why) {
  std::size_t got = 0;
  while (got < n) {
    if (!wait_fd(fd, POLLIN, d)) {
      *why = "timed out";
      return -1;
    }
    const ssize_t r = ::recv(fd, buf + got, n - got, 0);
    if (r == 0) break;
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      *why = std::strerror(errno);
      return -1;
    }
    got += static_cast<std::size_t>(r);
  }
  return static_cast<long>(got);
}

bool write_full(int fd, const char* buf, std::size_t n, const Deadline& d, std::string* why) {
  std::size_t put = 0;
  while (put < n) {
    if (!wait_fd(fd, POLLOUT, d)) {
      *why = "timed out";
      return false;
    }
    const ssize_t w = ::send(fd, buf + put, n - put, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      *why = std::strerror(errno);
      return false;
    }
    put += static_cast<std::size_t>(w);
  }
  return true;
}

void set_nonblocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

// rc_pingpong's server socket: getaddrinfo(NULL, port, AI_PASSIVE), SO_REUSEADDR, the first
// address that binds.
Fd listen_on(std::uint32_t port, std::string* why) {
  addrinfo hints{};
  hints.ai_flags = AI_PASSIVE;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int e = ::getaddrinfo(nullptr, service.c_str(), &hints, &res); e != 0) {
    *why = ::gai_strerror(e);
    return Fd();
  }
  Fd sock;
  *why = "no usable address";
  for (addrinfo* t = res; t != nullptr; t = t->ai_next) {
    Fd s(::socket(t->ai_family, t->ai_socktype, t->ai_protocol));
    if (!s.ok()) continue;
    int one = 1;
    ::setsockopt(s.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(s.get(), t->ai_addr, t->ai_addrlen) == 0 && ::listen(s.get(), 1) == 0) {
      sock = std::move(s);
      break;
    }
    *why = std::strerror(errno);
  }
  ::freeaddrinfo(res);
  if (sock.ok()) set_nonblocking(sock.get());
  return sock;
}

Fd connect_to(const std::string& host, std::uint32_t port, const Deadline& d, std::string* why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int e = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &res); e != 0) {
    *why = ::gai_strerror(e);
    return Fd();
  }
  Fd sock;
  *why = "no usable address";
  for (addrinfo* t = res; t != nullptr && !sock.ok(); t = t->ai_next) {
    Fd s(::socket(t->ai_family, t->ai_socktype, t->ai_protocol));
    if (!s.ok()) continue;
    set_nonblocking(s.get());
    if (::connect(s.get(), t->ai_addr, t->ai_addrlen) == 0) {
      sock = std::move(s);
      break;
    }
    if (errno != EINPROGRESS) {
      *why = std::strerror(errno);
      continue;
    }
    if (!wait_fd(s.get(), POLLOUT, d)) {
      *why = "timed out";
      continue;
    }
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) {
      *why = std::strerror(err);
      continue;
    }
    sock = std::move(s);
  }
  ::freeaddrinfo(res);
  return sock;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool parse_hex_field(std::string_view s, std::uint32_t* v) {
  if (s.empty()) return false;
  std::uint32_t x = 0;
  for (char c : s) {
    const int h = hex_value(c);
    if (h < 0) return false;
    x = (x << 4) | static_cast<std::uint32_t>(h);
  }
  *v = x;
  return true;
}

std::optional<Mtu> mtu_from_option(std::uint32_t bytes) {
  switch (bytes) {
    case 256:
      return Mtu::k256;
    case 512:
      return Mtu::k512;
    case 1024:
      return Mtu::k1024;
    case 2048:
      return Mtu::k2048;
    case 4096:
      return Mtu::k4096;
    default:
      return std::nullopt;
  }
}

// The rc_pingpong buffer after the client's --chk fill: 0x7b, 0 at each page start.
std::uint8_t expected_byte(std::size_t i, std::size_t page) {
  return i % page == 0 ? 0 : kFillByte;
}

class PingRun {
 public:
  PingRun(const PingOptions& opt, std::FILE* out, std::FILE* err)
      : opt_(opt), out_(out), err_(err) {}
  ~PingRun() {
    if (udp_) {
      Device& dev = udp_->device();
      if (!qp_.is_null()) dev.destroy_qp(qp_);
      if (!cq_.is_null()) dev.destroy_cq(cq_);
      if (!mr_.handle.is_null()) dev.dereg_mr(mr_.handle);
      if (!pd_.is_null()) dev.dealloc_pd(pd_);
    }
    std::free(buf_);
  }
  PingRun(const PingRun&) = delete;
  PingRun& operator=(const PingRun&) = delete;
  int run();

 private:
  int fail(const std::string& msg) {
    std::fprintf(err_, "uroce ping: %s\n", msg.c_str());
    print_stats();
    return 1;
  }
  static bool fail_with(std::string* why, std::string msg) {
    *why = std::move(msg);
    return false;
  }
  void print_stats();
  // The options rc_pingpong refuses, with its message; sets mtu_.
  std::optional<std::string> refused_options();
  bool setup(std::string* why);
  // Prints the local address, trades addresses with the peer, prints the remote one and (as the
  // client) connects the QP.
  bool trade_addresses(std::string* why);
  // The ping-pong until opt_.iters sends and receives completed; false with `why` on failure.
  bool ping_pong(std::string* why);
  bool take_completion(const Wc& wc, std::string* why);
  // The throughput and latency lines, the data check; the exit status.
  int report(Clock::duration elapsed);
  bool connect_qp(const PingDest& rem, std::string* why);
  std::optional<PingDest> exchange_as_server(const PingDest& my, std::string* why);
  std::optional<PingDest> exchange_as_client(const PingDest& my, std::string* why);
  std::uint32_t post_recvs(std::uint32_t n);
  bool post_send();
  bool check_received(const Wc& wc);
  void drain_tx();

  const PingOptions& opt_;
  std::FILE* out_;
  std::FILE* err_;
  Mtu mtu_ = Mtu::k1024;
  std::size_t page_ = 4096;
  std::unique_ptr<engine::UdpDevice> udp_;
  std::uint8_t* buf_ = nullptr;
  PdHandle pd_;
  MrInfo mr_;
  CqHandle cq_;
  QpHandle qp_;
  std::uint32_t qpn_ = 0;
  std::uint32_t send_flags_ = kSendSignaled;
  Fd listener_;
  std::uint64_t bad_messages_ = 0;
  std::uint32_t my_psn_ = 0;
  std::uint32_t routs_ = 0;  // receive WQEs posted
  std::uint32_t rcnt_ = 0;   // receives and sends completed
  std::uint32_t scnt_ = 0;
};

// Long: device, PD, CQs, QP and buffers set up in order, each failing with its why.
bool PingRun::setup(std::string* why) {
  engine::DeviceSelection sel;
  sel.name = opt_.ib_dev;
  sel.ip = opt_.address;
  auto options = edge::device_options();  // the environment, read here once
  if (!options.ok()) {
    *why = options.error();
    return false;
  }
  auto dev = engine::open_device(sel, options.value());
  if (!dev.ok()) {
    *why = dev.error().text;
    return false;
  }
  udp_ = std::move(dev.value());
  Device& d = udp_->device();
  if (auto port = d.query_port(static_cast<std::uint8_t>(opt_.ib_port)); !port.ok()) {
    *why = "Couldn't get port info: " + d.name() + " has only port 1";
    return false;
  }
  const DeviceAttr& attr = d.query_device();
  if (opt_.rx_depth > attr.max_qp_wr || opt_.rx_depth + 1 > attr.max_cqe) {
    *why = "rx depth " + std::to_string(opt_.rx_depth) + " is beyond " + d.name() +
           "'s limits (max_qp_wr " + std::to_string(attr.max_qp_wr) + ", max_cqe " +
           std::to_string(attr.max_cqe) + ")";
    return false;
  }
  const long ps = ::sysconf(_SC_PAGESIZE);
  page_ = ps > 0 ? static_cast<std::size_t>(ps) : 4096;
  if (::posix_memalign(reinterpret_cast<void**>(&buf_), page_, opt_.size) != 0) {
    *why = "Couldn't allocate work buf.";
    return false;
  }
  std::memset(buf_, kFillByte, opt_.size);
  auto pd = d.alloc_pd();
  if (!pd.ok()) {
    *why = std::string("Couldn't allocate PD: ") + errc_name(pd.error());
    return false;
  }
  pd_ = pd.value();
  auto mr = d.reg_mr(pd_, buf_, opt_.size, kAccessLocalWrite);
  if (!mr.ok()) {
    *why = std::string("Couldn't register MR: ") + errc_name(mr.error());
    return false;
  }
  mr_ = mr.value();
  auto cq = d.create_cq(CqInitAttr{opt_.rx_depth + 1, 0, 0});
  if (!cq.ok()) {
    *why = std::string("Couldn't create CQ: ") + errc_name(cq.error());
    return false;
  }
  cq_ = cq->handle;
  QpInitAttr init;
  init.qp_type = QpType::kRc;
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.cap = QpCap{1, opt_.rx_depth, 1, 1, 0};
  auto qp = d.create_qp(pd_, init);
  if (!qp.ok()) {
    *why = std::string("Couldn't create QP: ") + errc_name(qp.error());
    return false;
  }
  qp_ = qp->handle;
  qpn_ = qp->qp_num;
  // As rc_pingpong: send inline when the QP's inline limit covers the message.
  if (auto q = d.query_qp(qp_); q.ok() && q->init_attr.cap.max_inline_data >= opt_.size) {
    send_flags_ |= kSendInline;
  }
  QpAttr a;
  a.qp_state = QpState::kInit;
  a.pkey_index = 0;
  a.port_num = static_cast<std::uint8_t>(opt_.ib_port);
  a.qp_access_flags = 0;
  if (Errc e = d.modify_qp(qp_, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
      e != Errc::kOk) {
    *why = std::string("Failed to modify QP to INIT: ") + errc_name(e);
    return false;
  }
  return true;
}

std::uint32_t PingRun::post_recvs(std::uint32_t n) {
  const Sge sge{reinterpret_cast<std::uint64_t>(buf_), opt_.size, mr_.lkey};
  const RecvWr wr{kRecvWrid, std::span(&sge, 1)};
  std::uint32_t i = 0;
  for (; i < n; ++i) {
    if (udp_->device().post_recv(qp_, std::span(&wr, 1), nullptr) != Errc::kOk) break;
  }
  return i;
}

bool PingRun::post_send() {
  const Sge sge{reinterpret_cast<std::uint64_t>(buf_), opt_.size, mr_.lkey};
  SendWr wr;
  wr.wr_id = kSendWrid;
  wr.sg_list = std::span(&sge, 1);
  wr.opcode = WrOpcode::kSend;
  wr.send_flags = send_flags_;
  return udp_->device().post_send(qp_, std::span(&wr, 1), nullptr) == Errc::kOk;
}

bool PingRun::connect_qp(const PingDest& rem, std::string* why) {
  Device& d = udp_->device();
  // rc_pingpong sets a GRH only when the peer's GID has a nonzero interface id (its low 8
  // bytes); RoCE cannot address a peer without one.
  bool iface_id = false;
  for (int i = 8; i < 16; ++i) iface_id |= rem.gid.raw[i] != 0;
  if (!iface_id) {
    *why = "the peer sent GID " + gid_to_text(rem.gid) +
           ": RoCE needs the peer's GID (run ibv_rc_pingpong with -g, e.g. -g 1 on rxe for "
           "its IPv4 address)";
    return false;
  }
  const auto peer_ip = verbs::ip_from_gid(rem.gid);
  if (!peer_ip || peer_ip->v6 != d.local_ip().v6) {
    *why =
        "the peer's GID " + gid_to_text(rem.gid) + " is not an address of the same family as " +
        engine::ip_to_string(d.local_ip()) +
        (verbs::gid_is_ipv4_mapped(rem.gid) ? "" : " (an IPv4 peer uses its ::ffff:a.b.c.d GID)");
    return false;
  }
  QpAttr a;
  a.qp_state = QpState::kRtr;
  a.path_mtu = mtu_;
  a.dest_qp_num = rem.qpn;
  a.rq_psn = rem.psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.is_global = true;
  a.ah_attr.hop_limit = 1;
  a.ah_attr.dgid = rem.gid;
  a.ah_attr.sgid_index = static_cast<std::uint8_t>(opt_.gid_idx < 0 ? 0 : opt_.gid_idx);
  a.ah_attr.sl = static_cast<std::uint8_t>(opt_.sl);
  a.ah_attr.port_num = static_cast<std::uint8_t>(opt_.ib_port);
  if (Errc e = d.modify_qp(qp_, a,
                           kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn |
                               kQpMaxDestRdAtomic | kQpMinRnrTimer);
      e != Errc::kOk) {
    *why = std::string("Failed to modify QP to RTR: ") + errc_name(e);
    return false;
  }
  a.qp_state = QpState::kRts;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = my_psn_;
  a.max_rd_atomic = 1;
  if (Errc e = d.modify_qp(
          qp_, a, kQpState | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpSqPsn | kQpMaxQpRdAtomic);
      e != Errc::kOk) {
    *why = std::string("Failed to modify QP to RTS: ") + errc_name(e);
    return false;
  }
  return true;
}

std::optional<PingDest> PingRun::exchange_as_server(const PingDest& my, std::string* why) {
  const Deadline d = Deadline::in(opt_.timeout_s);
  if (!wait_fd(listener_.get(), POLLIN, d)) {
    *why = "no client connected to port " + std::to_string(opt_.port) + " within " +
           std::to_string(static_cast<int>(opt_.timeout_s)) + " s";
    return std::nullopt;
  }
  Fd conn(::accept(listener_.get(), nullptr, nullptr));
  listener_ = Fd();
  if (!conn.ok()) {
    *why = std::string("accept() failed: ") + std::strerror(errno);
    return std::nullopt;
  }
  set_nonblocking(conn.get());
  char msg[kPingMsgBytes];
  std::string err;
  const long n = read_full(conn.get(), msg, sizeof msg, d, &err);
  if (n != static_cast<long>(sizeof msg)) {
    *why = n < 0 ? "Couldn't read remote address: " + err
                 : std::to_string(n) + "/" + std::to_string(sizeof msg) +
                       ": Couldn't read remote address (the client closed the connection)";
    return std::nullopt;
  }
  auto rem = parse_ping_dest(std::string_view(msg, sizeof msg), &err);
  if (!rem) {
    *why = "the client sent an invalid address: " + err;
    return std::nullopt;
  }
  if (!connect_qp(*rem, why)) return std::nullopt;
  const std::string mine = format_ping_dest(my);
  if (!write_full(conn.get(), mine.data(), mine.size(), d, &err)) {
    *why = "Couldn't send local address: " + err;
    return std::nullopt;
  }
  // The client answers "done\0" once it has our address.
  char done[sizeof "done"];
  const long m = read_full(conn.get(), done, sizeof done, d, &err);
  if (m != static_cast<long>(sizeof done) || std::memcmp(done, "done", sizeof done) != 0) {
    *why = m < 0 ? "Couldn't read the client's \"done\": " + err
                 : "the client did not send \"done\" after the address exchange";
    return std::nullopt;
  }
  return rem;
}

std::optional<PingDest> PingRun::exchange_as_client(const PingDest& my, std::string* why) {
  const Deadline d = Deadline::in(opt_.timeout_s);
  std::string err;
  Fd sock = connect_to(opt_.server, opt_.port, d, &err);
  if (!sock.ok()) {
    *why = "Couldn't connect to " + opt_.server + ":" + std::to_string(opt_.port) + ": " + err;
    return std::nullopt;
  }
  const std::string mine = format_ping_dest(my);
  if (!write_full(sock.get(), mine.data(), mine.size(), d, &err)) {
    *why = "Couldn't send local address: " + err;
    return std::nullopt;
  }
  char msg[kPingMsgBytes];
  const long n = read_full(sock.get(), msg, sizeof msg, d, &err);
  if (n != static_cast<long>(sizeof msg)) {
    *why = n < 0 ? "Couldn't read remote address: " + err
                 : "Couldn't read remote address: the server closed the connection after " +
                       std::to_string(n) + " bytes (it could not connect its QP?)";
    return std::nullopt;
  }
  if (!write_full(sock.get(), "done", sizeof "done", d, &err)) {
    *why = "Couldn't write \"done\": " + err;
    return std::nullopt;
  }
  auto rem = parse_ping_dest(std::string_view(msg, sizeof msg), &err);
  if (!rem) {
    *why = "the server sent an invalid address: " + err;
    return std::nullopt;
  }
  return rem;
}

bool PingRun::check_received(const Wc& wc) {
  if (!opt_.chk) return true;
  bool good = wc.byte_len == opt_.size;
  for (std::size_t i = 0; good && i < opt_.size; ++i) good = buf_[i] == expected_byte(i, page_);
  if (!good && bad_messages_++ < 3) {
    std::size_t first = 0;
    while (first < opt_.size && buf_[first] == expected_byte(first, page_)) ++first;
    std::fprintf(err_,
                 "uroce ping: received message with %u bytes (expected %u), first bad byte %zu\n",
                 wc.byte_len, opt_.size, first);
  }
  return good;
}

// The last ACKs: our final RECV completed, but the peer's SEND completes only when our ACK
// reaches it. Bounded: the engine's queue empties within a few rounds.
void PingRun::drain_tx() {
  const Deadline d = Deadline::in(1.0);
  while (udp_->engine().has_tx_work() && !d.passed()) udp_->progress();
}

// rc_pingpong's flow: check the options, set up, trade addresses, connect, ping-pong, report.
int PingRun::run() {
  if (auto bad = refused_options()) return fail(*bad);
  std::string why;
  if (opt_.server.empty()) {
    // Listen before anything is printed, so that "local address" means the server is ready.
    listener_ = listen_on(opt_.port, &why);
    if (!listener_.ok()) {
      return fail("Couldn't listen to port " + std::to_string(opt_.port) + ": " + why);
    }
  }
  if (!setup(&why)) return fail(why);
  routs_ = post_recvs(opt_.rx_depth);
  if (routs_ < opt_.rx_depth) return fail("Couldn't post receive (" + std::to_string(routs_) + ")");
  if (!trade_addresses(&why)) return fail(why);

  const auto start = Clock::now();
  if (!ping_pong(&why)) return fail(why);
  const auto end = Clock::now();
  drain_tx();
  return report(end - start);
}

std::optional<std::string> PingRun::refused_options() {
  const auto mtu = mtu_from_option(opt_.mtu);
  if (!mtu) return "invalid MTU " + std::to_string(opt_.mtu) + " (256, 512, 1024, 2048, 4096)";
  mtu_ = *mtu;
  if (opt_.size == 0) return "the message size (-s) must be at least 1";
  if (opt_.rx_depth == 0) return "the receive depth (-r) must be at least 1";
  if (opt_.iters == 0) return "the iteration count (-n) must be at least 1";
  if (opt_.timeout_s <= 0) return "--timeout must be positive";
  // The same refusals rc_pingpong prints for a device without these features.
  if (opt_.odp) {
    return "The device isn't ODP capable or does not support RC send and receive with ODP";
  }
  if (opt_.ts) return "The device isn't completion timestamp capable";
  if (opt_.dm) return "Device doesn't support dm allocation";
  if (!opt_.server.empty() && opt_.port > 65535) return "invalid port";
  return std::nullopt;
}

bool PingRun::trade_addresses(std::string* why) {
  Device& dev = udp_->device();
  PingDest my;
  my.lid = dev.query_port(static_cast<std::uint8_t>(opt_.ib_port))->lid;
  if (opt_.gid_idx >= 0) {
    // rc_pingpong's ibv_query_gid reads an empty entry as the zero GID and goes on, to fail
    // later at the peer; an empty entry is refused here.
    auto g = dev.query_gid_entry(static_cast<std::uint8_t>(opt_.ib_port),
                                 static_cast<std::uint32_t>(opt_.gid_idx));
    if (!g.ok()) {
      *why = "can't read sgid of index " + std::to_string(opt_.gid_idx) + ": " +
             (g.error() == Errc::kNoEntry
                  ? "the entry is empty (" + dev.name() + " has its address at index 0)"
                  : std::string("beyond the GID table"));
      return false;
    }
    my.gid = g->gid;
  }
  my.qpn = qpn_;
  // An initial PSN an off-path attacker cannot guess (issue 44).
  my.psn = static_cast<std::uint32_t>(kernel_random_u64()) & 0xffffff;
  my_psn_ = my.psn;
  std::fprintf(out_, "  local address:  LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", my.lid,
               my.qpn, my.psn, gid_to_text(my.gid).c_str());
  std::fflush(out_);

  const bool client = !opt_.server.empty();
  auto rem = client ? exchange_as_client(my, why) : exchange_as_server(my, why);
  if (!rem) return false;
  std::fprintf(out_, "  remote address: LID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", rem->lid,
               rem->qpn, rem->psn, gid_to_text(rem->gid).c_str());
  std::fflush(out_);
  return !client || connect_qp(*rem, why);
}

bool PingRun::ping_pong(std::string* why) {
  Device& dev = udp_->device();
  const bool client = !opt_.server.empty();
  std::uint64_t pending = kRecvWrid;
  if (client) {
    if (opt_.chk) {
      for (std::size_t i = 0; i < opt_.size; i += page_) buf_[i] = 0;
    }
    if (!post_send()) return fail_with(why, "Couldn't post send");
    pending |= kSendWrid;
  }
  auto last_completion = Clock::now();
  const auto idle_limit = std::chrono::duration<double>(opt_.timeout_s);
  while (rcnt_ < opt_.iters || scnt_ < opt_.iters) {
    const bool busy = udp_->progress();
    Wc wcs[16];
    auto n = dev.poll_cq(cq_, wcs);
    if (!n.ok()) return fail_with(why, std::string("poll CQ failed: ") + errc_name(n.error()));
    for (std::size_t i = 0; i < n.value(); ++i) {
      if (!take_completion(wcs[i], why)) return false;
      pending &= ~wcs[i].wr_id;
      if (scnt_ < opt_.iters && pending == 0) {
        if (!post_send()) return fail_with(why, "Couldn't post send");
        pending = kRecvWrid | kSendWrid;
      }
    }
    const auto now = Clock::now();
    if (n.value() > 0) {
      last_completion = now;
    } else if (now - last_completion > idle_limit) {
      return fail_with(
          why, "no completion for " + std::to_string(static_cast<int>(opt_.timeout_s)) +
                   " s after " + std::to_string(scnt_) + " of " + std::to_string(opt_.iters) +
                   " sends and " + std::to_string(rcnt_) + " receives: the peer stopped answering");
    }
    // Nothing happened this round: block until a packet arrives or a timer is due (bounded),
    // rather than spinning a core that the peer may need.
    if (!busy && n.value() == 0) udp_->wait(Duration::ms(opt_.events ? 10 : 1));
  }
  return true;
}

bool PingRun::take_completion(const Wc& wc, std::string* why) {
  if (wc.status != WcStatus::kSuccess) {
    return fail_with(
        why, std::string("Failed status ") + wc_status_name(wc.status) + " (" +
                 std::to_string(static_cast<int>(wc.status)) + ") for wr_id " +
                 std::to_string(wc.wr_id) + " after " + std::to_string(scnt_) + " sends and " +
                 std::to_string(rcnt_) + " receives" +
                 (wc.status == WcStatus::kRetryExcErr || wc.status == WcStatus::kRnrRetryExcErr
                      ? " (is the peer still running?)"
                      : ""));
  }
  if (wc.wr_id == kSendWrid) {
    ++scnt_;
    return true;
  }
  if (wc.wr_id != kRecvWrid) {
    return fail_with(why, "Completion for unknown wr_id " + std::to_string(wc.wr_id));
  }
  // A bad message does not stop the run (the peer completes too); it fails at the end.
  check_received(wc);
  if (--routs_ <= 1) {
    routs_ += post_recvs(opt_.rx_depth - routs_);
    if (routs_ < opt_.rx_depth) {
      return fail_with(why, "Couldn't post receive (" + std::to_string(routs_) + ")");
    }
  }
  ++rcnt_;
  return true;
}

int PingRun::report(Clock::duration elapsed) {
  const float usec =
      static_cast<float>(std::chrono::duration_cast<std::chrono::microseconds>(elapsed).count());
  const long long bytes = static_cast<long long>(opt_.size) * opt_.iters * 2;
  std::fprintf(out_, "%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1000000.,
               static_cast<double>(bytes) * 8. / usec);
  std::fprintf(out_, "%u iters in %.2f seconds = %.2f usec/iter\n", opt_.iters, usec / 1000000.,
               usec / opt_.iters);
  bool ok = bad_messages_ == 0;
  if (opt_.server.empty() && opt_.chk) {
    // rc_pingpong's own end check, with its message.
    for (std::size_t i = 0; i < opt_.size; i += page_) {
      if (buf_[i] != 0) {
        std::fprintf(out_, "invalid data in page %zu\n", i / page_);
        ok = false;
      }
    }
  }
  std::fflush(out_);
  print_stats();
  if (!ok) {
    return fail(std::to_string(bad_messages_) + " of " + std::to_string(rcnt_) +
                " received messages had wrong data");
  }
  return 0;
}

void PingRun::print_stats() {
  if (!opt_.stats || !udp_) return;
  const auto& c = udp_->datapath().counters();
  std::uint64_t drops = 0;
  for (auto d : c.rx_drops) drops += d;
  std::fprintf(err_,
               "uroce: tx_packets=%llu rx_packets=%llu rx_icrc_id_recovered=%llu rx_drops=%llu "
               "timer_fires=%llu\n",
               static_cast<unsigned long long>(c.tx_packets),
               static_cast<unsigned long long>(c.rx_packets),
               static_cast<unsigned long long>(c.rx_icrc_id_recovered),
               static_cast<unsigned long long>(drops),
               static_cast<unsigned long long>(udp_->engine().counters().timer_fires));
}

}  // namespace

std::string format_ping_dest(const PingDest& d) {
  char msg[kPingMsgBytes + 1];
  char gid[33];
  for (int i = 0; i < 16; ++i) std::snprintf(gid + 2 * i, 3, "%02x", d.gid.raw[i]);
  std::snprintf(msg, sizeof msg, "%04x:%06x:%06x:%s", d.lid & 0xffff, d.qpn & 0xffffff,
                d.psn & 0xffffff, gid);
  return std::string(msg, kPingMsgBytes);  // with the terminating NUL, as rc_pingpong sends
}

std::optional<PingDest> parse_ping_dest(std::string_view msg, std::string* why) {
  // rc_pingpong reads it with sscanf("%x:%x:%x:%s"); we are stricter: the exact layout.
  if (msg.size() != kPingMsgBytes || msg.back() != '\0') {
    *why = "not 52 bytes ending in NUL";
    return std::nullopt;
  }
  const std::string_view text = msg.substr(0, kPingMsgBytes - 1);
  if (text[4] != ':' || text[11] != ':' || text[18] != ':') {
    *why = "'" + std::string(text) + "' is not LID:QPN:PSN:GID";
    return std::nullopt;
  }
  PingDest d;
  if (!parse_hex_field(text.substr(0, 4), &d.lid) || !parse_hex_field(text.substr(5, 6), &d.qpn) ||
      !parse_hex_field(text.substr(12, 6), &d.psn)) {
    *why = "'" + std::string(text) + "': LID, QPN or PSN is not hexadecimal";
    return std::nullopt;
  }
  const std::string_view g = text.substr(19, 32);
  for (int i = 0; i < 16; ++i) {
    const int hi = hex_value(g[2 * i]), lo = hex_value(g[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      *why = "'" + std::string(text) + "': the GID is not 32 hexadecimal digits";
      return std::nullopt;
    }
    d.gid.raw[i] = static_cast<std::uint8_t>(hi * 16 + lo);
  }
  return d;
}

std::string gid_to_text(const Gid& gid) {
  char text[INET6_ADDRSTRLEN];
  if (::inet_ntop(AF_INET6, gid.raw.data(), text, sizeof text) == nullptr) return "?";
  return text;
}

int ping_run(const PingOptions& opt, std::FILE* out, std::FILE* err) {
  PingRun run(opt, out, err);
  return run.run();
}

}  // namespace uroce::tools
