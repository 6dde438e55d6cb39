#include "tools/perf_cmd.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "base/entropy.h"
#include "device/device_config.h"
#include "device/udp_device.h"
#include "edge/environment.h"
#include "verbs/address.h"

namespace uroce::tools {
namespace {

// Internal failure: a one-line message; caught in perf_run, never escapes it.
struct PerfError {
  std::string msg;
};
[[noreturn]] void fail(std::string msg) { throw PerfError{std::move(msg)}; }

enum class Verb { kSend, kWrite, kRead, kAtomic };

struct TestKind {
  const char* name;
  Verb verb;
  bool bw;
};
constexpr TestKind kTests[] = {
    {"write_bw", Verb::kWrite, true},   {"write_lat", Verb::kWrite, false},
    {"read_bw", Verb::kRead, true},     {"read_lat", Verb::kRead, false},
    {"send_bw", Verb::kSend, true},     {"send_lat", Verb::kSend, false},
    {"atomic_bw", Verb::kAtomic, true}, {"atomic_lat", Verb::kAtomic, false},
};

// perftest's defaults (perftest_parameters.h).
constexpr std::uint64_t kDefSizeBw = 65536, kDefSizeLat = 2, kDefSizeAtomic = 8;
constexpr std::uint64_t kDefItersBw = 5000, kDefItersLat = 1000, kMinIters = 5;
constexpr std::uint32_t kDefTxBw = 128, kDefTxLat = 1, kDefCqMod = 100;
constexpr std::uint32_t kRxDepthSend = 512;   // DEF_RX_SEND
constexpr std::uint64_t kMaxSize = 8388608;   // MAX_SIZE: -a runs 2..2^23
constexpr std::uint32_t kInlineWanted = 220;  // DEF_INLINE_WRITE
constexpr std::uint8_t kMaxRdAtomic = 16;     // perftest's outstanding reads for current HCAs

double now_s() { return static_cast<double>(engine::UdpDevice::now().ns()) * 1e-9; }
std::int64_t now_ns() { return engine::UdpDevice::now().ns(); }

double cpu_seconds() {
  rusage ru{};
  ::getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}

// The pattern each side writes into its send half: depends on the side, the QP and the offset,
// so that data from the wrong side, QP or offset is caught.
std::byte pattern_byte(std::uint8_t salt, std::uint32_t qp, std::uint64_t i) {
  return static_cast<std::byte>((i * 131u + qp * 17u + salt + (i >> 8)) & 0xffu);
}
constexpr std::uint8_t kServerSalt = 0x5a, kClientSalt = 0xa5;

std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
  return b;
}
std::uint64_t parse_hex(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 16); }

std::string gid_hex(const Gid& g) {
  std::string s;
  for (auto b : g.raw) {
    char x[3];
    std::snprintf(x, sizeof x, "%02x", b);
    s += x;
  }
  return s;
}
Gid parse_gid(const std::string& s) {
  Gid g;
  if (s.size() != 32) fail("malformed GID from the peer");
  for (std::size_t i = 0; i < 16; ++i)
    g.raw[i] = static_cast<std::uint8_t>(std::strtoul(s.substr(2 * i, 2).c_str(), nullptr, 16));
  return g;
}

// "KEY k=v k=v ...": the keys and values of one protocol line.
std::map<std::string, std::string> fields(const std::string& line) {
  std::map<std::string, std::string> m;
  std::istringstream in(line);
  std::string tok;
  in >> tok;
  m["_"] = tok;
  while (in >> tok) {
    auto eq = tok.find('=');
    if (eq == std::string::npos) continue;
    if (tok.compare(0, eq, "why") == 0) {  // the rest of the line
      std::string rest;
      std::getline(in, rest);
      m["why"] = tok.substr(eq + 1) + rest;
      break;
    }
    m[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return m;
}
std::string need(const std::map<std::string, std::string>& m, const char* key) {
  auto it = m.find(key);
  if (it == m.end()) fail(std::string("malformed message from the peer (no ") + key + ")");
  return it->second;
}
double num(const std::map<std::string, std::string>& m, const char* key) {
  return std::strtod(need(m, key).c_str(), nullptr);
}

// ---- the TCP side channel ----

class Channel {
 public:
  explicit Channel(int fd) : fd_(fd) {}
  ~Channel() {
    if (fd_ >= 0) ::close(fd_);
  }
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  int fd() const { return fd_; }

  void send_line(const std::string& line) {
    std::string s = line + "\n";
    std::size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        pollfd p{fd_, POLLOUT, 0};
        ::poll(&p, 1, 100);
        continue;
      }
      if (n <= 0) fail(std::string("lost the TCP connection to the peer: ") + std::strerror(errno));
      off += static_cast<std::size_t>(n);
    }
  }
  // Reads what has arrived, without blocking.
  void pump() {
    if (eof_) return;
    char b[4096];
    for (;;) {
      const ssize_t n = ::recv(fd_, b, sizeof b, MSG_DONTWAIT);
      if (n > 0) {
        buf_.append(b, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0) {
        eof_ = true;
        return;
      }
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      if (errno == ECONNRESET) {  // the peer exited with our data unread: a close too
        eof_ = true;
        return;
      }
      fail(std::string("lost the TCP connection to the peer: ") + std::strerror(errno));
    }
  }
  bool has_line() const { return buf_.find('\n') != std::string::npos; }
  // After the lines that arrived before it, the peer closing the connection is an error: it
  // only closes after the last message, which nobody waits for.
  void fail_if_closed() const {
    if (eof_ && !has_line()) fail("the peer closed the TCP connection (did it exit?)");
  }
  std::string peek_line() const { return buf_.substr(0, buf_.find('\n')); }
  std::string take_line() {
    const auto nl = buf_.find('\n');
    std::string line = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    return line;
  }

 private:
  int fd_;
  bool eof_ = false;
  std::string buf_;
};

// ---- one side of a test ----

struct QpSide {
  QpHandle qp;
  std::uint32_t qpn = 0;
  std::uint32_t psn = 0;
  std::byte* buf = nullptr;  // [0, half): what this side sends/serves; [half, 2 half): receives
  // The peer's QP.
  std::uint32_t rqpn = 0, rpsn = 0, rrkey = 0;
  Gid rgid;
  std::uint64_t raddr = 0, rhalf = 0;
  // Per run.
  std::uint64_t posted = 0, completed = 0, target = 0;
  std::vector<std::int64_t> tpost, tcomp;
};

struct Side {
  PerfOptions opt;
  TestKind kind{};
  bool server = false;
  bool fetch_add = true;
  std::uint64_t max_size = 0, iters = 0;
  std::vector<std::uint64_t> sizes;
  std::uint32_t tx_depth = 0, cq_mod = 0, rx_depth = 0, inline_max = 0;
  Mtu path_mtu = Mtu::k1024;

  // The registered memory outlives the device: the device's close() (its destructor's too) still
  // drains posted work and serves the peer's requests from it.
  std::vector<std::byte> mem;
  std::unique_ptr<engine::UdpDevice> dev;
  PdHandle pd;
  MrInfo mr;
  CqHandle scq, rcq;
  // Where completions are polled into: built once, not per poll (64 Wc are 3 KiB to initialise,
  // on every turn of a latency test's loop).
  std::vector<Wc> wcs = std::vector<Wc>(64);
  std::uint64_t half = 0;
  std::vector<QpSide> qps;
  std::unique_ptr<Channel> ch;
  std::int64_t spin_until_ns = 0;  // idle_round: polls without blocking until then

  Device& d() { return dev->device(); }
  std::uint64_t va(const std::byte* p) const { return reinterpret_cast<std::uint64_t>(p); }
  std::uint8_t my_salt() const { return server ? kServerSalt : kClientSalt; }
  std::uint8_t peer_salt() const { return server ? kClientSalt : kServerSalt; }
  Duration timeout() const { return Duration::s(opt.timeout_s); }
};

// One round of progress. A side whose rounds found nothing to do for kIdleSpinNs since the last
// one that did blocks up to 1 ms on the device (the TCP connection is checked by the caller
// after it), so that an idle side does not spin, while one receiving a stream (a passive WRITE or
// READ target) does not fall asleep between bursts and make its peer pay a wake-up for each, as
// the library's progress thread spins after work for a passive target
// (engine::SchedulerConfig::blocked_app_spin, the same 500 us).
constexpr std::int64_t kIdleSpinNs = 500'000;
void idle_round(Side& s, bool may_block) {
  if (s.dev->progress()) {
    s.spin_until_ns = now_ns() + kIdleSpinNs;
    return;
  }
  // UdpDevice::wait() also wakes for the engine's next timer (a coalesced ACK, a retry).
  if (may_block && now_ns() >= s.spin_until_ns) s.dev->wait(Duration::ms(1));
}

std::string wait_line(Side& s, const std::string& what) {
  const Instant give_up = engine::UdpDevice::now() + s.timeout();
  for (;;) {
    s.ch->pump();
    s.ch->fail_if_closed();
    if (s.ch->has_line()) {
      std::string line = s.ch->take_line();
      auto f = fields(line);
      if (f["_"] == "ERR") fail("the peer reported: " + f["why"]);
      return line;
    }
    if (engine::UdpDevice::now() > give_up)
      fail("no " + what + " from the peer within " + std::to_string(s.opt.timeout_s) + " s");
    idle_round(s, true);
  }
}

std::string expect_line(Side& s, const std::string& key, const std::string& what) {
  std::string line = wait_line(s, what);
  if (fields(line)["_"] != key) fail("unexpected message from the peer: '" + line + "'");
  return line;
}

// Checks the peer's side channel during a run (every few ms): EOF or an ERR line fails.
struct PeerWatch {
  std::int64_t next = 0;
  void check(Side& s, std::int64_t t) {
    if (t < next) return;
    next = t + 5'000'000;
    s.ch->pump();
    s.ch->fail_if_closed();
    // Other lines (the peer's DONE may overtake our last ACK) wait for their turn.
    if (s.ch->has_line() && s.ch->peek_line().rfind("ERR", 0) == 0)
      fail("the peer reported: " + fields(s.ch->take_line())["why"]);
  }
};

[[noreturn]] void fail_wc(const Side& s, const Wc& wc) {
  char b[200];
  std::snprintf(b, sizeof b, "completion with error on QP 0x%x: %s (status %d, wr_id %llu)%s",
                wc.qp_num, wc_status_name(wc.status), static_cast<int>(wc.status),
                static_cast<unsigned long long>(wc.wr_id & 0xffffffffffull),
                wc.status == WcStatus::kRetryExcErr || wc.status == WcStatus::kRnrRetryExcErr
                    ? ": the peer does not answer (unreachable, stopped or exited)"
                    : "");
  (void)s;
  fail(b);
}

// ---- setup ----

void open_side(Side& s) {
  engine::DeviceSelection sel;
  sel.name = s.opt.device;
  sel.ip = s.opt.ip;
  auto options = edge::device_options();  // the environment, read here once
  if (!options.ok()) fail("cannot open the device: " + options.error());
  auto dev = engine::open_device(sel, options.value());
  if (!dev.ok()) {
    std::string msg = "cannot open the device: " + dev.error().text;
    if (dev.error().code == EADDRINUSE && s.opt.ip.empty())
      msg += " (two processes on one host need two addresses, e.g. --ip 127.0.0.2)";
    fail(msg);
  }
  s.dev = std::move(dev.value());
  // A bw run keeps tx_depth messages (8 MiB at the defaults) in flight with no congestion
  // control yet. The datapath already sizes the receive buffer for that (UdpOptions::
  // rcvbuf_bytes, 16 MiB); the send buffer is the tool's choice. Root may exceed
  // net.core.wmem_max (the FORCE option, as bench/udp_baseline does); others get the limit.
  const int want = 16 << 20;
  if (::setsockopt(s.dev->fd(), SOL_SOCKET, SO_SNDBUFFORCE, &want, sizeof want) != 0)
    ::setsockopt(s.dev->fd(), SOL_SOCKET, SO_SNDBUF, &want, sizeof want);
  Device& d = s.d();
  s.pd = d.alloc_pd().value();
  const std::uint32_t max_cqe = d.query_device().max_cqe;
  const std::uint64_t scqe = std::uint64_t{s.opt.qps} * (s.tx_depth + 1);
  const std::uint64_t rcqe = std::uint64_t{s.opt.qps} * (s.rx_depth + 1);
  if (scqe > max_cqe || rcqe > max_cqe)
    fail("too many QPs for this depth: the completion queues would need more than " +
         std::to_string(max_cqe) + " entries");
  auto scq = d.create_cq(CqInitAttr{static_cast<std::uint32_t>(scqe), 0, 0});
  auto rcq = d.create_cq(CqInitAttr{static_cast<std::uint32_t>(rcqe), 0, 0});
  if (!scq.ok() || !rcq.ok()) fail("create_cq failed");
  s.scq = scq->handle;
  s.rcq = rcq->handle;
  s.qps.resize(s.opt.qps);
  for (std::uint32_t i = 0; i < s.opt.qps; ++i) {
    QpSide& q = s.qps[i];
    QpInitAttr init;
    init.send_cq = s.scq;
    init.recv_cq = s.rcq;
    init.cap = QpCap{s.tx_depth + 1, s.rx_depth, 1, 1, kInlineWanted};
    auto qp = d.create_qp(s.pd, init);
    if (!qp.ok()) fail(std::string("create_qp: ") + errc_name(qp.error()));
    q.qp = qp->handle;
    q.qpn = qp->qp_num;
    s.inline_max = qp->cap.max_inline_data;
    q.psn = static_cast<std::uint32_t>(kernel_random_u64()) & 0xffffffu;  // issue 44
  }
}

// The buffers, once the sizes are known (the server learns them from the client): per QP a
// send half and a receive half of the largest message (64 KiB at least), in one MR.
void alloc_buffers(Side& s) {
  s.max_size = *std::max_element(s.sizes.begin(), s.sizes.end());
  s.half = std::max<std::uint64_t>((s.max_size + 63) & ~std::uint64_t{63}, 65536);
  const std::uint64_t total = s.half * 2 * s.opt.qps;
  if (total > (std::uint64_t{4} << 30))
    fail("the buffers would need " + std::to_string(total >> 20) +
         " MiB (2 x message size x QPs); use fewer QPs or a smaller size");
  s.mem.assign(s.half * 2 * s.opt.qps + 4096, std::byte{0});
  std::byte* base = s.mem.data();
  base += (4096 - reinterpret_cast<std::uintptr_t>(base) % 4096) % 4096;
  auto mr = s.d().reg_mr(
      s.pd, base, s.half * 2 * s.opt.qps,
      kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic);
  if (!mr.ok()) fail(std::string("reg_mr: ") + errc_name(mr.error()));
  s.mr = mr.value();
  for (std::uint32_t i = 0; i < s.opt.qps; ++i) s.qps[i].buf = base + std::uint64_t{i} * 2 * s.half;
}

std::string qp_line(Side& s, std::uint32_t i) {
  const QpSide& q = s.qps[i];
  return "QP idx=" + std::to_string(i) + " qpn=" + hex(q.qpn) + " psn=" + hex(q.psn) +
         " gid=" + gid_hex(verbs::gid_from_ip(s.d().local_ip())) + " rkey=" + hex(s.mr.rkey) +
         " addr=" + hex(s.va(q.buf)) + " half=" + hex(s.half);
}

void read_peer_qps(Side& s) {
  for (std::uint32_t i = 0; i < s.opt.qps; ++i) {
    auto f = fields(expect_line(s, "QP", "QP data"));
    QpSide& q = s.qps[i];
    q.rqpn = static_cast<std::uint32_t>(parse_hex(need(f, "qpn")));
    q.rpsn = static_cast<std::uint32_t>(parse_hex(need(f, "psn")));
    q.rgid = parse_gid(need(f, "gid"));
    q.rrkey = static_cast<std::uint32_t>(parse_hex(need(f, "rkey")));
    q.raddr = parse_hex(need(f, "addr"));
    q.rhalf = parse_hex(need(f, "half"));
    if (q.rhalf < s.max_size) fail("the peer's buffer is smaller than the message size");
  }
}

void connect_qps(Side& s) {
  Device& d = s.d();
  for (QpSide& q : s.qps) {
    QpAttr a;
    a.qp_state = QpState::kInit;
    a.port_num = 1;
    a.qp_access_flags =
        kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead | kAccessRemoteAtomic;
    Errc e = d.modify_qp(q.qp, a, kQpState | kQpPkeyIndex | kQpPort | kQpAccessFlags);
    if (e != Errc::kOk) fail(std::string("modify_qp to INIT: ") + errc_name(e));
    a.qp_state = QpState::kRtr;
    a.ah_attr.dgid = q.rgid;
    a.ah_attr.is_global = true;
    a.ah_attr.hop_limit = 64;
    a.path_mtu = s.path_mtu;
    a.dest_qp_num = q.rqpn;
    a.rq_psn = q.rpsn;
    a.max_dest_rd_atomic = kMaxRdAtomic;
    a.min_rnr_timer = 12;  // 0.64 ms, as perftest
    e = d.modify_qp(q.qp, a,
                    kQpState | kQpAv | kQpPathMtu | kQpDestQpn | kQpRqPsn | kQpMaxDestRdAtomic |
                        kQpMinRnrTimer);
    if (e != Errc::kOk) fail(std::string("modify_qp to RTR: ") + errc_name(e));
    a.qp_state = QpState::kRts;
    a.sq_psn = q.psn;
    a.timeout = static_cast<std::uint8_t>(s.opt.qp_timeout);
    a.retry_cnt = static_cast<std::uint8_t>(s.opt.retry_count);
    a.rnr_retry = 7;  // infinite, as perftest: a receiver that falls behind only slows a run
    a.max_rd_atomic = kMaxRdAtomic;
    e = d.modify_qp(
        q.qp, a, kQpState | kQpSqPsn | kQpTimeout | kQpRetryCnt | kQpRnrRetry | kQpMaxQpRdAtomic);
    if (e != Errc::kOk) fail(std::string("modify_qp to RTS: ") + errc_name(e));
  }
}

// ---- work requests ----

std::uint64_t atomic_slots(const Side& s) { return s.half / 8; }

void post_one(Side& s, std::uint32_t qi, std::uint64_t seq, std::uint64_t size, bool signaled) {
  QpSide& q = s.qps[qi];
  Sge sge{s.va(q.buf), static_cast<std::uint32_t>(size), s.mr.lkey};
  SendWr wr;
  wr.wr_id = (std::uint64_t{qi} << 40) | seq;
  wr.send_flags = signaled ? std::uint32_t{kSendSignaled} : 0u;
  switch (s.kind.verb) {
    case Verb::kWrite:
      wr.opcode = WrOpcode::kRdmaWrite;
      wr.rdma = {q.raddr + q.rhalf, q.rrkey};
      if (size <= s.inline_max) wr.send_flags |= kSendInline;
      break;
    case Verb::kSend:
      wr.opcode = WrOpcode::kSend;
      if (size <= s.inline_max) wr.send_flags |= kSendInline;
      break;
    case Verb::kRead:
      wr.opcode = WrOpcode::kRdmaRead;
      sge.addr = s.va(q.buf + s.half);  // the read lands in this side's receive half
      wr.rdma = {q.raddr, q.rrkey};     // from the peer's pattern
      break;
    case Verb::kAtomic:
      wr.opcode = s.fetch_add ? WrOpcode::kAtomicFetchAndAdd : WrOpcode::kAtomicCmpAndSwp;
      sge.addr = s.va(q.buf + s.half + (seq % atomic_slots(s)) * 8);
      sge.length = 8;
      wr.atomic.remote_addr = q.raddr + q.rhalf;  // the peer's counter
      wr.atomic.rkey = q.rrkey;
      // FETCH_AND_ADD adds 1; CMP_AND_SWAP swaps seq for seq + 1, which only succeeds when
      // every earlier operation ran exactly once and in order.
      wr.atomic.compare_add = s.fetch_add ? 1 : seq;
      wr.atomic.swap = seq + 1;
      break;
  }
  wr.sg_list = std::span(&sge, 1);
  const Errc e = s.d().post_send(q.qp, std::span(&wr, 1), nullptr);
  if (e != Errc::kOk) fail(std::string("post_send: ") + errc_name(e));
  ++q.posted;
}

void post_recvs(Side& s, std::uint32_t qi, std::uint32_t n) {
  QpSide& q = s.qps[qi];
  const Sge sge{s.va(q.buf + s.half), static_cast<std::uint32_t>(s.half), s.mr.lkey};
  for (std::uint32_t k = 0; k < n; ++k) {
    RecvWr wr{qi, std::span(&sge, 1)};
    const Errc e = s.d().post_recv(q.qp, std::span(&wr, 1), nullptr);
    if (e != Errc::kOk) fail(std::string("post_recv: ") + errc_name(e));
  }
}

// Polls the send CQ: each signaled completion completes its QP's operations up to it.
std::size_t reap_send(Side& s, std::int64_t t, bool record) {
  std::span<Wc> wcs(s.wcs);
  auto n = s.d().poll_cq(s.scq, wcs);
  if (!n.ok()) fail("the send completion queue overflowed");
  for (std::size_t k = 0; k < n.value(); ++k) {
    const Wc& wc = wcs[k];
    if (wc.status != WcStatus::kSuccess) fail_wc(s, wc);
    QpSide& q = s.qps[wc.wr_id >> 40];
    const std::uint64_t seq = wc.wr_id & 0xffffffffffull;
    if (record)
      for (std::uint64_t i = q.completed; i <= seq && i < q.tcomp.size(); ++i) q.tcomp[i] = t;
    q.completed = seq + 1;
  }
  return n.value();
}

// ---- reports ----

void fill_patterns(Side& s) {
  for (std::uint32_t qi = 0; qi < s.qps.size(); ++qi) {
    std::byte* b = s.qps[qi].buf;
    for (std::uint64_t i = 0; i < s.half; ++i) b[i] = pattern_byte(s.my_salt(), qi, i);
    std::memset(b + s.half, 0, s.half);
  }
}

// Whether `p[0, n)` holds the given side's pattern for QP qi.
bool has_pattern(const std::byte* p, std::uint64_t n, std::uint8_t salt, std::uint32_t qi) {
  for (std::uint64_t i = 0; i < n; ++i)
    if (p[i] != pattern_byte(salt, qi, i)) return false;
  return true;
}

void bw_stats(PerfResult& r, Side& s, std::uint64_t size, bool peak) {
  std::vector<std::pair<std::int64_t, std::int64_t>> ops;
  std::int64_t first = INT64_MAX, last = 0;
  std::uint64_t total = 0;
  for (QpSide& q : s.qps) {
    total += q.posted;
    if (!q.tpost.empty()) first = std::min(first, q.tpost[0]);
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(q.posted, q.tcomp.size()); ++i) {
      last = std::max(last, q.tcomp[i]);
      if (peak) ops.emplace_back(q.tpost[i], q.tcomp[i]);
    }
  }
  r.iterations = total;
  const double secs = std::max<double>(static_cast<double>(last - first), 1.0) * 1e-9;
  r.bw_avg_mbs = static_cast<double>(size) * static_cast<double>(total) / secs / 1048576.0;
  r.msg_rate_mpps = static_cast<double>(total) / secs / 1e6;
  if (!peak || ops.empty()) return;
  // perftest's peak: the least time per message over any run of consecutive operations,
  // (tcompleted[j] - tposted[i]) / (j - i + 1); sampled when there are many operations.
  std::sort(ops.begin(), ops.end());
  const std::size_t n = ops.size();
  const std::size_t stride = std::max<std::size_t>(1, n / 4000);
  double best = static_cast<double>(last - first) / static_cast<double>(n);
  for (std::size_t i = 0; i < n; i += stride)
    for (std::size_t j = i; j < n; j += stride) {
      const double t =
          static_cast<double>(ops[j].second - ops[i].first) / static_cast<double>(j - i + 1);
      if (t > 0 && t < best) best = t;
    }
  r.bw_peak_mbs = static_cast<double>(size) / (best * 1e-9) / 1048576.0;
}

void lat_stats(PerfResult& r, std::vector<double> us) {
  r.iterations = us.size() + 1;
  if (us.empty()) return;
  std::sort(us.begin(), us.end());
  const std::size_t n = us.size();
  double sum = 0, sq = 0;
  for (double v : us) sum += v;
  r.t_avg = sum / static_cast<double>(n);
  for (double v : us) sq += (v - r.t_avg) * (v - r.t_avg);
  r.t_stdev = std::sqrt(sq / static_cast<double>(n));
  r.t_min = us.front();
  r.t_max = us.back();
  r.t_typical = us[n / 2];
  r.t_p99 = us[std::min(n - 1, static_cast<std::size_t>(std::ceil(0.99 * n)) - 1)];
  r.t_p999 = us[std::min(n - 1, static_cast<std::size_t>(std::ceil(0.999 * n)) - 1)];
}

const char* rule() {
  return "---------------------------------------------------------------------------------------"
         "\n";
}

std::string title(const Side& s) {
  std::string t;
  switch (s.kind.verb) {
    case Verb::kWrite:
      t = "RDMA_Write";
      break;
    case Verb::kRead:
      t = "RDMA_Read";
      break;
    case Verb::kSend:
      t = "Send";
      break;
    case Verb::kAtomic:
      t = std::string("Atomic ") + (s.fetch_add ? "FETCH_AND_ADD" : "CMP_AND_SWAP");
  }
  return t + (s.kind.bw ? " BW Test" : " Latency Test");
}

void print_header(Side& s, std::FILE* out) {
  if (s.opt.json || s.opt.quiet) return;
  std::fprintf(out, "%s                    %s\n", rule(), title(s).c_str());
  std::fprintf(out, " Dual-port       : OFF\t\tDevice         : %s\n", s.d().name().c_str());
  std::fprintf(out, " Number of qps   : %u\t\tTransport type : IB\n", s.opt.qps);
  std::fprintf(out, " Connection type : RC\t\tUsing SRQ      : OFF\n");
  std::fprintf(out, " TX depth        : %u\n", s.tx_depth);
  if (s.kind.bw) std::fprintf(out, " CQ Moderation   : %u\n", s.cq_mod);
  std::fprintf(out, " Mtu             : %u[B]\n", mtu_bytes(s.path_mtu));
  std::fprintf(out, " Link type       : Ethernet\n GID index       : 0\n");
  const bool inl = s.kind.verb == Verb::kWrite || s.kind.verb == Verb::kSend;
  std::fprintf(out, " Max inline data : %u[B]\n", inl ? s.inline_max : 0);
  std::fprintf(out, " rdma_cm QPs\t : OFF\n Data ex. method : Ethernet (TCP port %u)\n%s",
               s.opt.port, rule());
  for (const QpSide& q : s.qps) {
    auto line = [&](const char* who, std::uint32_t qpn, std::uint32_t psn, std::uint32_t rkey,
                    std::uint64_t addr, const Gid& g) {
      std::fprintf(out, " %s address: LID 0000 QPN 0x%04x PSN 0x%06x RKey 0x%08x VAddr 0x%016llx\n",
                   who, qpn, psn, rkey, static_cast<unsigned long long>(addr));
      std::fprintf(out, " GID: ");
      for (std::size_t i = 0; i < 16; ++i)
        std::fprintf(out, "%02u%s", g.raw[i], i < 15 ? ":" : "\n");
    };
    line("local", q.qpn, q.psn, s.mr.rkey, s.va(q.buf), verbs::gid_from_ip(s.d().local_ip()));
    line("remote", q.rqpn, q.rpsn, q.rrkey, q.raddr, q.rgid);
  }
  std::fprintf(out, "%s", rule());
  if (s.kind.bw) {
    std::fprintf(out, "%s",
                 s.opt.report_gbits
                     ? " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   "
                       "MsgRate[Mpps]"
                     : " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   "
                       "MsgRate[Mpps]");
  } else {
    std::fprintf(out,
                 " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    "
                 "t_avg[usec]    t_stdev[usec]   99%% percentile[usec]   99.9%% "
                 "percentile[usec] ");
  }
  std::fprintf(out, "%s", s.opt.cpu_util ? "    CPU_Util[%]\n" : "\n");
  std::fflush(out);
}

double per_gb(double cpu, double bytes) { return bytes > 0 ? cpu / (bytes / 1e9) : 0; }

void print_result(Side& s, const PerfResult& r, std::FILE* out) {
  const double data = static_cast<double>(r.bytes) * static_cast<double>(r.iterations);
  const double util = r.wall_s > 0 ? 100.0 * r.cpu_s / r.wall_s : 0;
  const double putil = r.peer_wall_s > 0 ? 100.0 * r.peer_cpu_s / r.peer_wall_s : 0;
  if (s.opt.json) {
    std::fprintf(out, "{\"test\":\"%s\",\"side\":\"%s\",\"bytes\":%llu,\"iterations\":%llu,",
                 r.test.c_str(), r.side.c_str(), static_cast<unsigned long long>(r.bytes),
                 static_cast<unsigned long long>(r.iterations));
    if (r.bw) {
      std::fprintf(out,
                   "\"bw_peak_mb_s\":%.2f,\"bw_avg_mb_s\":%.2f,\"bw_avg_gbit_s\":%.4f,"
                   "\"msg_rate_mpps\":%.6f,",
                   r.bw_peak_mbs, r.bw_avg_mbs, r.bw_avg_mbs * 1048576.0 * 8 / 1e9,
                   r.msg_rate_mpps);
    } else {
      std::fprintf(out,
                   "\"t_min_us\":%.2f,\"t_max_us\":%.2f,\"t_typical_us\":%.2f,\"t_avg_us\":%.2f,"
                   "\"t_stdev_us\":%.2f,\"t_p99_us\":%.2f,\"t_p999_us\":%.2f,",
                   r.t_min, r.t_max, r.t_typical, r.t_avg, r.t_stdev, r.t_p99, r.t_p999);
    }
    std::fprintf(out,
                 "\"mtu\":%u,\"qps\":%u,\"cpu_s\":%.4f,\"wall_s\":%.4f,\"cpu_util_pct\":%.1f,"
                 "\"cpu_s_per_gb\":%.4f,\"peer_cpu_s\":%.4f,\"peer_wall_s\":%.4f,"
                 "\"peer_cpu_util_pct\":%.1f,\"peer_cpu_s_per_gb\":%.4f,\"verified\":%s}\n",
                 mtu_bytes(s.path_mtu), s.opt.qps, r.cpu_s, r.wall_s, util, per_gb(r.cpu_s, data),
                 r.peer_cpu_s, r.peer_wall_s, putil, per_gb(r.peer_cpu_s, data),
                 r.verified ? "true" : "false");
    std::fflush(out);
    return;
  }
  if (s.opt.quiet) return;
  if (r.bw) {
    const double f = s.opt.report_gbits ? 1048576.0 * 8 / 1e9 : 1.0;
    std::fprintf(out, " %-7llu    %-10llu       %-7.2f            %-7.2f\t\t   %-7.6f",
                 static_cast<unsigned long long>(r.bytes),
                 static_cast<unsigned long long>(r.iterations), r.bw_peak_mbs * f, r.bw_avg_mbs * f,
                 r.msg_rate_mpps);
  } else {
    std::fprintf(out,
                 " %-7llu %-10llu %-7.2f        %-7.2f      %-7.2f  \t       %-7.2f     \t%-7.2f"
                 "\t\t%-7.2f \t\t%-7.2f",
                 static_cast<unsigned long long>(r.bytes),
                 static_cast<unsigned long long>(r.iterations), r.t_min, r.t_max, r.t_typical,
                 r.t_avg, r.t_stdev, r.t_p99, r.t_p999);
  }
  if (s.opt.cpu_util) {
    std::fprintf(out, "\t    %-3.2f\n", util);
    std::fprintf(out, " CPU: local %.1f%% (%.3f s per GB), remote %.1f%% (%.3f s per GB)\n", util,
                 per_gb(r.cpu_s, data), putil, per_gb(r.peer_cpu_s, data));
  } else {
    std::fprintf(out, "\n");
  }
  std::fflush(out);
}

// ---- the runs ----

struct RunOut {
  PerfResult r;
  std::string why;  // empty: data verified
  std::vector<std::uint64_t> per_qp;
};

void reset_run(Side& s, bool record) {
  for (QpSide& q : s.qps) {
    q.posted = q.completed = 0;
    q.tpost.clear();
    q.tcomp.clear();
    if (record) {
      q.tpost.resize(s.iters);
      q.tcomp.resize(s.iters);
    }
  }
}

// Client side of every bw test: tx_depth operations in flight per QP, a signaled one every
// cq_mod (and the last one), as perftest's run_iter_bw.
void client_bw(Side& s, std::uint64_t size, RunOut& o) {
  const bool by_time = s.opt.duration > 0;
  reset_run(s, !by_time);
  const std::int64_t start = now_ns();
  const std::int64_t stop = start + std::int64_t{s.opt.duration} * 1'000'000'000;
  std::int64_t last_progress = start;
  PeerWatch watch;
  bool stopping = false;
  for (QpSide& q : s.qps) q.target = by_time ? UINT64_MAX : s.iters;
  for (;;) {
    std::int64_t t = now_ns();
    if (by_time && !stopping && t >= stop) {
      stopping = true;
      // Finish on a signaled operation: the last one posted may have been unsignaled.
      for (QpSide& q : s.qps) q.target = q.posted + ((q.posted % s.cq_mod) != 0 ? 1 : 0);
    }
    bool done = true;
    for (std::uint32_t qi = 0; qi < s.qps.size(); ++qi) {
      QpSide& q = s.qps[qi];
      while (q.posted < q.target && q.posted - q.completed < s.tx_depth) {
        const std::uint64_t seq = q.posted;
        const bool last = seq + 1 == q.target;
        if (!by_time) q.tpost[seq] = now_ns();
        post_one(s, qi, seq, size, (seq + 1) % s.cq_mod == 0 || last);
      }
      if (q.completed < q.target) done = false;
    }
    if (done) break;
    s.dev->progress();
    t = now_ns();
    if (reap_send(s, t, !by_time) > 0) last_progress = t;
    if (t - last_progress > s.timeout().count_ns())
      fail("no completion for " + std::to_string(s.opt.timeout_s) + " s");
    watch.check(s, t);
  }
  if (by_time) {
    // No per-operation stamps: average over the run, no peak (as perftest's -D).
    std::uint64_t total = 0;
    for (QpSide& q : s.qps) total += q.posted;
    const double secs = static_cast<double>(now_ns() - start) * 1e-9;
    o.r.iterations = total;
    o.r.bw_avg_mbs = static_cast<double>(size) * static_cast<double>(total) / secs / 1048576.0;
    o.r.msg_rate_mpps = static_cast<double>(total) / secs / 1e6;
  } else {
    bw_stats(o.r, s, size, true);
  }
  for (QpSide& q : s.qps) o.per_qp.push_back(q.posted);
  // Data checks on this side: READ brought the server's pattern; atomics returned the values
  // that a single, in-order execution of each operation gives.
  for (std::uint32_t qi = 0; qi < s.qps.size() && o.why.empty(); ++qi) {
    QpSide& q = s.qps[qi];
    if (s.kind.verb == Verb::kRead && !has_pattern(q.buf + s.half, size, kServerSalt, qi))
      o.why = "RDMA READ data differs from the server's pattern on QP " + std::to_string(qi);
    if (s.kind.verb == Verb::kAtomic) {
      const std::uint64_t n = q.posted, slots = atomic_slots(s);
      for (std::uint64_t k = n > slots ? n - slots : 0; k < n; ++k) {
        std::uint64_t v = 0;
        std::memcpy(&v, q.buf + s.half + (k % slots) * 8, 8);
        if (v != k) {
          o.why = "atomic operation " + std::to_string(k) + " on QP " + std::to_string(qi) +
                  " returned " + std::to_string(v);
          break;
        }
      }
    }
  }
}

// Server side of send_bw: receives until the client says how many it sent and all arrived.
void server_send_bw(Side& s, std::uint64_t size, RunOut& o,
                    std::map<std::string, std::string>& done) {
  std::uint64_t got = 0, expected = UINT64_MAX;
  std::vector<std::uint64_t> per(s.qps.size(), 0);
  const std::int64_t start = now_ns();
  std::int64_t first = 0, last = 0, deadline = 0;
  bool bad_len = false;
  while (got < expected) {
    s.dev->progress();
    std::span<Wc> wcs(s.wcs);
    auto n = s.d().poll_cq(s.rcq, wcs);
    if (!n.ok()) fail("the receive completion queue overflowed");
    const std::int64_t t = now_ns();
    for (std::size_t k = 0; k < n.value(); ++k) {
      if (wcs[k].status != WcStatus::kSuccess) fail_wc(s, wcs[k]);
      if (wcs[k].byte_len != size) bad_len = true;
      if (got == 0) first = t;
      last = t;
      ++got;
      ++per[wcs[k].wr_id];
      post_recvs(s, static_cast<std::uint32_t>(wcs[k].wr_id), 1);
    }
    if (expected == UINT64_MAX) {
      s.ch->pump();
      s.ch->fail_if_closed();
      if (s.ch->has_line()) {
        done = fields(s.ch->take_line());
        if (done["_"] == "ERR") fail("the peer reported: " + done["why"]);
        if (done["_"] != "DONE") fail("unexpected message from the peer during the run");
        expected = static_cast<std::uint64_t>(num(done, "count"));
        deadline = t + s.timeout().count_ns();
      } else if (n.value() == 0) {
        pollfd p[2] = {{s.dev->fd(), POLLIN, 0}, {s.ch->fd(), POLLIN, 0}};
        if (t - start > 2 * s.timeout().count_ns() + s.opt.duration * 1'000'000'000LL)
          fail("the client did not finish the run in time");
        if (got == 0) ::poll(p, 2, 1);
      }
    } else if (t > deadline) {
      fail("received " + std::to_string(got) + " of the " + std::to_string(expected) +
           " messages the client sent");
    }
  }
  o.r.iterations = got;
  const double secs = std::max<double>(static_cast<double>(last - first), 1.0) * 1e-9;
  o.r.bw_avg_mbs = static_cast<double>(size) * static_cast<double>(got) / secs / 1048576.0;
  o.r.msg_rate_mpps = static_cast<double>(got) / secs / 1e6;
  o.r.bw_peak_mbs = num(done, "peak");
  if (bad_len) o.why = "a received message has the wrong length";
  for (std::uint32_t qi = 0; qi < s.qps.size() && o.why.empty(); ++qi)
    if (per[qi] > 0 && !has_pattern(s.qps[qi].buf + s.half, size, kClientSalt, qi))
      o.why = "received SEND data differs from the client's pattern on QP " + std::to_string(qi);
}

// write_lat and send_lat: ping-pong on QP 0. The client starts; each side answers the other's
// message. write_lat spins on the last byte of its receive buffer (as perftest); send_lat on
// the receive completion. Samples are half round trips.
// Long: the latency loop and its lambdas share the run's state; on the measured path.
void pingpong(Side& s, std::uint64_t size, RunOut& o) {
  QpSide& q = s.qps[0];
  reset_run(s, false);
  const bool write = s.kind.verb == Verb::kWrite;
  volatile std::byte* flag = q.buf + s.half + size - 1;
  std::vector<std::int64_t> stamps;
  stamps.reserve(s.iters);
  std::uint64_t recvs = 0;
  PeerWatch watch;
  auto seq_value = [](std::uint64_t i) { return static_cast<std::byte>(i % 255 + 1); };
  auto wait_peer = [&](std::uint64_t i) {
    // The clock is read every 64 polls, not on each: the loop is on the latency's path.
    std::int64_t give_up = 0;
    for (std::uint32_t spins = 0;; ++spins) {
      s.dev->progress();
      reap_send(s, 0, false);
      if (write) {
        if (*flag == seq_value(i)) return;
      } else {
        Wc wc;
        auto n = s.d().poll_cq(s.rcq, std::span(&wc, 1));
        if (!n.ok()) fail("the receive completion queue overflowed");
        if (n.value() == 1) {
          if (wc.status != WcStatus::kSuccess) fail_wc(s, wc);
          if (wc.byte_len != size) o.why = "a received message has the wrong length";
          ++recvs;
          post_recvs(s, 0, 1);
          return;
        }
      }
      if (spins % 64 != 0) continue;
      const std::int64_t t = now_ns();
      if (give_up == 0) give_up = t + s.timeout().count_ns();
      if (t > give_up)
        fail("the peer stopped answering (" + std::to_string(s.opt.timeout_s) + " s)");
      watch.check(s, t);
    }
  };
  auto send = [&](std::uint64_t i) {
    while (q.posted - q.completed >= s.tx_depth) {
      s.dev->progress();
      reap_send(s, 0, false);
    }
    q.buf[size - 1] = seq_value(i);
    post_one(s, 0, q.posted, size, true);
  };
  for (std::uint64_t i = 0; i < s.iters; ++i) {
    if (!s.server) {
      stamps.push_back(now_ns());
      send(i);
      wait_peer(i);
    } else {
      wait_peer(i);
      stamps.push_back(now_ns());
      send(i);
    }
  }
  while (q.completed < q.posted) {  // the last answer's ACK
    s.dev->progress();
    reap_send(s, 0, false);
    watch.check(s, now_ns());
  }
  std::vector<double> us;
  for (std::size_t i = 1; i < stamps.size(); ++i)
    us.push_back(static_cast<double>(stamps[i] - stamps[i - 1]) / 2000.0);
  lat_stats(o.r, us);
  // The peer's pattern, but for the last byte (the sequence number).
  if (o.why.empty() && !has_pattern(q.buf + s.half, size - 1, s.peer_salt(), 0))
    o.why = std::string(write ? "RDMA WRITE" : "SEND") + " data differs from the peer's pattern";
  if (o.why.empty() && q.buf[s.half + size - 1] != seq_value(s.iters - 1))
    o.why = "the last message's sequence byte is wrong";
  if (!write && o.why.empty() && recvs != s.iters) o.why = "a message is missing";
}

// read_lat and atomic_lat: one operation at a time, each timed (post to next post).
void client_lat(Side& s, std::uint64_t size, RunOut& o) {
  QpSide& q = s.qps[0];
  reset_run(s, false);
  std::vector<std::int64_t> stamps;
  PeerWatch watch;
  for (std::uint64_t i = 0; i < s.iters; ++i) {
    stamps.push_back(now_ns());
    post_one(s, 0, i, size, true);
    const std::int64_t give_up = now_ns() + s.timeout().count_ns();
    while (q.completed <= i) {
      s.dev->progress();
      reap_send(s, 0, false);
      const std::int64_t t = now_ns();
      if (t > give_up) fail("no completion for " + std::to_string(s.opt.timeout_s) + " s");
      watch.check(s, t);
    }
    if (s.kind.verb == Verb::kAtomic && o.why.empty()) {
      std::uint64_t v = 0;
      std::memcpy(&v, q.buf + s.half + (i % atomic_slots(s)) * 8, 8);
      if (v != i)
        o.why = "atomic operation " + std::to_string(i) + " returned " + std::to_string(v);
    }
  }
  stamps.push_back(now_ns());
  std::vector<double> us;
  for (std::size_t i = 1; i < stamps.size(); ++i)
    us.push_back(static_cast<double>(stamps[i] - stamps[i - 1]) / 1000.0);
  lat_stats(o.r, us);
  o.r.iterations = s.iters;
  o.per_qp.push_back(q.posted);
  if (s.kind.verb == Verb::kRead && o.why.empty() &&
      !has_pattern(q.buf + s.half, size, kServerSalt, 0))
    o.why = "RDMA READ data differs from the server's pattern";
}

// The server's checks after a run in which it was passive (WRITE and atomics).
std::string server_verify(Side& s, std::uint64_t size,
                          const std::map<std::string, std::string>& done) {
  std::vector<std::uint64_t> counts;
  {
    std::istringstream in(need(done, "per_qp"));
    std::string v;
    while (std::getline(in, v, ',')) counts.push_back(std::strtoull(v.c_str(), nullptr, 10));
  }
  if (counts.size() != s.qps.size()) fail("malformed DONE message from the peer");
  for (std::uint32_t qi = 0; qi < s.qps.size(); ++qi) {
    const std::byte* r = s.qps[qi].buf + s.half;
    if (s.kind.verb == Verb::kWrite && !has_pattern(r, size, kClientSalt, qi))
      return "RDMA WRITE data differs from the client's pattern on QP " + std::to_string(qi);
    if (s.kind.verb == Verb::kAtomic) {
      std::uint64_t v = 0;
      std::memcpy(&v, r, 8);
      if (v != counts[qi])
        return "the atomic counter of QP " + std::to_string(qi) + " is " + std::to_string(v) +
               " after " + std::to_string(counts[qi]) + " operations";
    }
  }
  return "";
}

std::string encode_result(const PerfResult& r) {
  char b[512];
  std::snprintf(b, sizeof b,
                "peak=%.6f avg=%.6f rate=%.9f min=%.4f max=%.4f typ=%.4f mean=%.4f sd=%.4f "
                "p99=%.4f p999=%.4f iters=%llu",
                r.bw_peak_mbs, r.bw_avg_mbs, r.msg_rate_mpps, r.t_min, r.t_max, r.t_typical,
                r.t_avg, r.t_stdev, r.t_p99, r.t_p999,
                static_cast<unsigned long long>(r.iterations));
  return b;
}
void decode_result(PerfResult& r, const std::map<std::string, std::string>& f) {
  r.bw_peak_mbs = num(f, "peak");
  r.bw_avg_mbs = num(f, "avg");
  r.msg_rate_mpps = num(f, "rate");
  r.t_min = num(f, "min");
  r.t_max = num(f, "max");
  r.t_typical = num(f, "typ");
  r.t_avg = num(f, "mean");
  r.t_stdev = num(f, "sd");
  r.t_p99 = num(f, "p99");
  r.t_p999 = num(f, "p999");
  r.iterations = static_cast<std::uint64_t>(num(f, "iters"));
}

std::string cpu_fields(double cpu, double wall) {
  char b[96];
  std::snprintf(b, sizeof b, "cpu=%.6f wall=%.6f", cpu, wall);
  return b;
}

// One size, both sides in step: SIZE/READY, the run, DONE/RESULT.
// Long: both sides of one size in step; the protocol reads top to bottom.
PerfResult run_size(Side& s, std::uint64_t size) {
  RunOut o;
  o.r.test = s.kind.name;
  o.r.side = s.server ? "server" : "client";
  o.r.bw = s.kind.bw;
  o.r.bytes = size;
  fill_patterns(s);
  const bool sends = s.kind.verb == Verb::kSend;
  if (!s.server) {
    s.ch->send_line("SIZE n=" + std::to_string(size));
    expect_line(s, "READY", "READY");
  } else {
    auto f = fields(expect_line(s, "SIZE", "next size"));
    if (static_cast<std::uint64_t>(num(f, "n")) != size) fail("the client runs another size");
  }
  const double c0 = cpu_seconds(), w0 = now_s();
  if (s.server) {
    if (sends) {
      for (std::uint32_t qi = 0; qi < s.qps.size(); ++qi)
        if (size == s.sizes.front()) post_recvs(s, qi, s.rx_depth);
    }
    s.ch->send_line("READY");
  } else if (sends && size == s.sizes.front()) {
    for (std::uint32_t qi = 0; qi < s.qps.size(); ++qi) post_recvs(s, qi, s.rx_depth);
  }
  std::map<std::string, std::string> done;
  if (!s.kind.bw && (s.kind.verb == Verb::kWrite || sends)) {
    pingpong(s, size, o);
    if (s.server) done = fields(expect_line(s, "DONE", "end of the run"));
  } else if (!s.server) {
    if (s.kind.bw) {
      client_bw(s, size, o);
    } else {
      client_lat(s, size, o);
    }
  } else if (s.kind.bw && sends) {
    server_send_bw(s, size, o, done);
  } else {
    // Passive: WRITE, READ and atomics need nothing from the server's CPU but progress.
    const std::int64_t limit =
        2 * s.timeout().count_ns() + std::int64_t{s.opt.duration} * 1'000'000'000;
    const std::int64_t give_up = now_ns() + limit;
    for (;;) {
      s.ch->pump();
      s.ch->fail_if_closed();
      if (s.ch->has_line()) break;
      if (now_ns() > give_up) fail("the client did not finish the run in time");
      idle_round(s, true);
    }
    done = fields(wait_line(s, "end of the run"));
    if (done["_"] != "DONE") fail("unexpected message from the peer");
  }
  const double cpu = cpu_seconds() - c0, wall = now_s() - w0;
  o.r.cpu_s = cpu;
  o.r.wall_s = wall;
  if (!s.server) {
    std::string per;
    for (std::size_t i = 0; i < o.per_qp.size(); ++i)
      per += (i ? "," : "") + std::to_string(o.per_qp[i]);
    if (per.empty()) per = "0";
    s.ch->send_line("DONE count=" + std::to_string(o.r.iterations) + " per_qp=" + per + " " +
                    cpu_fields(cpu, wall) + " ok=" + (o.why.empty() ? "1" : "0") + " " +
                    encode_result(o.r) + (o.why.empty() ? "" : " why=" + o.why));
    auto f = fields(expect_line(s, "RESULT", "result"));
    o.r.peer_cpu_s = num(f, "cpu");
    o.r.peer_wall_s = num(f, "wall");
    if (o.why.empty() && need(f, "ok") != "1") o.why = "server: " + f["why"];
  } else {
    const bool server_measured = sends || (!s.kind.bw && s.kind.verb == Verb::kWrite);
    if (!server_measured) {
      decode_result(o.r, done);  // the client's numbers, so that both sides report them
      if (o.why.empty()) o.why = server_verify(s, size, done);
    }
    if (o.why.empty() && need(done, "ok") != "1") o.why = "client: " + done["why"];
    o.r.peer_cpu_s = num(done, "cpu");
    o.r.peer_wall_s = num(done, "wall");
    s.ch->send_line("RESULT " + cpu_fields(cpu, wall) + " ok=" + (o.why.empty() ? "1" : "0") +
                    (o.why.empty() ? "" : " why=" + o.why));
  }
  o.r.verified = o.why.empty();
  if (!o.r.verified) fail("data check failed: " + o.why);
  return o.r;
}

// ---- TCP connection ----

int tcp_listen(const Side& s) {
  const wire::IpAddress& ip = s.dev->device().local_ip();
  const bool v4 = !ip.v6;
  int fd = ::socket(v4 ? AF_INET : AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail(std::string("socket: ") + std::strerror(errno));
  int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (v4) {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(s.opt.port);
    std::memcpy(&a->sin_addr, ip.bytes.data(), 4);
    len = sizeof *a;
  } else {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(s.opt.port);
    std::memcpy(&a->sin6_addr, ip.bytes.data(), 16);
    len = sizeof *a;
  }
  if (::bind(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0 || ::listen(fd, 1) != 0) {
    const int e = errno;
    ::close(fd);
    fail("cannot listen on " + engine::ip_to_string(ip) + " TCP port " +
         std::to_string(s.opt.port) + ": " + std::strerror(e) +
         (e == EADDRINUSE ? " (port in use: choose another with -p)" : ""));
  }
  return fd;
}

int tcp_accept(Side& s, int lfd, std::FILE* out) {
  if (!s.opt.json && !s.opt.quiet) {
    std::fprintf(out,
                 "\n************************************\n* Waiting for client to connect... *\n"
                 "************************************\n");
    std::fflush(out);
  }
  const Instant give_up = engine::UdpDevice::now() + s.timeout();
  for (;;) {
    pollfd p[2] = {{lfd, POLLIN, 0}, {s.dev->fd(), POLLIN, 0}};
    ::poll(p, 2, 10);
    s.dev->progress();
    if (p[0].revents & POLLIN) {
      const int fd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) return fd;
    }
    if (engine::UdpDevice::now() > give_up)
      fail("no client connected within " + std::to_string(s.opt.timeout_s) + " s");
  }
}

int tcp_connect(Side& s) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  // Digits and dots (or a colon) are an address, never a host name: resolve them here, so that
  // a mistyped address (127.0.0.300) is an error at once and not a DNS query.
  if (s.opt.server.find_first_not_of("0123456789.") == std::string::npos ||
      s.opt.server.find(':') != std::string::npos)
    hints.ai_flags |= AI_NUMERICHOST;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(s.opt.port);
  const int rc = ::getaddrinfo(s.opt.server.c_str(), port.c_str(), &hints, &res);
  if (rc != 0 && (hints.ai_flags & AI_NUMERICHOST))
    fail("'" + s.opt.server + "' is not an IPv4 or IPv6 address");
  if (rc != 0)
    fail("cannot resolve the server address '" + s.opt.server + "': " + ::gai_strerror(rc));
  std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> hold(res, &::freeaddrinfo);
  const std::int64_t give_up = now_ns() + std::int64_t{s.opt.connect_timeout_s} * 1'000'000'000;
  const std::string where = s.opt.server + " TCP port " + port;
  for (;;) {
    int fd = ::socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) fail(std::string("socket: ") + std::strerror(errno));
    int err = 0;
    if (::connect(fd, res->ai_addr, res->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        const int n = ::poll(&p, 1, static_cast<int>(s.opt.timeout_s) * 1000);
        socklen_t l = sizeof err;
        if (n == 1) {
          ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &l);
        } else {
          err = ETIMEDOUT;
        }
      }
    }
    if (err == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    ::close(fd);
    if (err == ECONNREFUSED && now_ns() < give_up) {
      pollfd p{s.dev->fd(), POLLIN, 0};
      ::poll(&p, 1, 20);  // the server is not listening yet: try again shortly
      s.dev->progress();
      continue;
    }
    fail("cannot connect to " + where + ": " + std::strerror(err) +
         (err == ECONNREFUSED ? " (is `uroce perf` running there as server?)" : ""));
  }
}

// ---- options ----

std::string check_options(const PerfOptions& o, Side& s) {
  const TestKind* k = nullptr;
  for (const auto& t : kTests)
    if (o.test == t.name) k = &t;
  if (!k) {
    std::string names;
    for (const auto& t : kTests) names += std::string(names.empty() ? "" : ", ") + t.name;
    return "unknown test '" + o.test + "' (tests: " + names + ")";
  }
  s.kind = *k;
  if (o.atomic_type == "FETCH_AND_ADD") {
    s.fetch_add = true;
  } else if (o.atomic_type == "CMP_AND_SWAP") {
    s.fetch_add = false;
  } else {
    return "-A must be FETCH_AND_ADD or CMP_AND_SWAP, not '" + o.atomic_type + "'";
  }
  const bool atomic = k->verb == Verb::kAtomic;
  std::uint64_t size = o.size ? o.size : atomic ? kDefSizeAtomic : k->bw ? kDefSizeBw : kDefSizeLat;
  if (atomic && size != 8) return "atomic tests use 8-byte operands (-s 8)";
  if (atomic && o.all) return "-a does not apply to atomic tests (8 bytes only)";
  if (size < 1 || size > kMaxSize) return "-s must be between 1 and 8388608";
  if (o.qps < 1 || o.qps > 1024) return "-q must be between 1 and 1024";
  if (!k->bw && o.qps != 1) return "latency tests use one QP (-q 1)";
  if (!k->bw && o.duration) return "-D applies to bw tests only";
  if (o.duration > 3600) return "-D must be at most 3600 seconds";
  if (o.iters && (o.iters < kMinIters || o.iters > 100000000))
    return "-n must be between 5 and 100000000";
  if (o.tx_depth && (o.tx_depth < 1 || o.tx_depth > 15000)) return "-t must be between 1 and 15000";
  if (o.mtu && o.mtu != 256 && o.mtu != 512 && o.mtu != 1024 && o.mtu != 2048 && o.mtu != 4096)
    return "-m must be 256, 512, 1024, 2048 or 4096";
  if (o.port == 0) return "-p must be a TCP port (1..65535)";
  if (o.timeout_s < 1 || o.timeout_s > 86400) return "--timeout must be between 1 and 86400";
  if (o.qp_timeout > 31) return "-u must be between 0 and 31";
  if (o.retry_count > 7) return "--retry_count must be between 0 and 7";
  if (!o.device.empty() && !o.ip.empty()) return "give either -d or --ip, not both";
  s.iters = o.iters ? o.iters : k->bw ? kDefItersBw : kDefItersLat;
  s.tx_depth = o.tx_depth ? o.tx_depth : k->bw ? kDefTxBw : kDefTxLat;
  s.cq_mod = std::min(kDefCqMod, s.tx_depth);
  s.rx_depth = k->verb == Verb::kSend ? (k->bw ? kRxDepthSend : 16) : 1;
  if (o.all) {
    for (std::uint64_t z = 2; z <= kMaxSize; z *= 2) s.sizes.push_back(z);
  } else {
    s.sizes.push_back(size);
  }
  s.max_size = s.sizes.back();
  return "";
}

// The server's side of the greeting: takes the client's parameters, checks that they match its
// own, and answers with the path MTU.
void server_hello(Side& s, std::FILE* out) {
  const int lfd = tcp_listen(s);
  int fd = -1;
  try {
    fd = tcp_accept(s, lfd, out);
  } catch (...) {
    ::close(lfd);
    throw;
  }
  ::close(lfd);
  s.ch = std::make_unique<Channel>(fd);
  auto f = fields(expect_line(s, "HELLO", "greeting"));
  // The client's parameters rule, as its command line defines the run; the test must match.
  std::string mismatch;
  if (need(f, "test") != s.kind.name)
    mismatch = "the client runs " + need(f, "test") + ", this server " + s.kind.name;
  if (need(f, "atomic") != (s.fetch_add ? "FETCH_AND_ADD" : "CMP_AND_SWAP"))
    mismatch = "the client runs another atomic type (-A)";
  if (static_cast<std::uint32_t>(num(f, "qps")) != s.opt.qps)
    mismatch =
        "the client uses " + need(f, "qps") + " QPs (-q), this server " + std::to_string(s.opt.qps);
  if (!mismatch.empty()) {
    s.ch->send_line("ERR why=" + mismatch);
    fail(mismatch);
  }
  s.iters = static_cast<std::uint64_t>(num(f, "iters"));
  s.opt.duration = static_cast<std::uint32_t>(num(f, "duration"));
  s.sizes.clear();
  {
    std::istringstream in(need(f, "sizes"));
    std::string v;
    while (std::getline(in, v, ',')) s.sizes.push_back(std::strtoull(v.c_str(), nullptr, 10));
  }
  for (auto z : s.sizes) {
    if (z < 1 || z > kMaxSize || (s.kind.verb == Verb::kAtomic && z != 8)) {
      s.ch->send_line("ERR why=invalid message size");
      fail("the client asked for an invalid message size");
    }
  }
  if (s.sizes.empty()) fail("the client sent no message size");
  alloc_buffers(s);
  const std::uint32_t peer_mtu = static_cast<std::uint32_t>(num(f, "mtu"));
  std::uint32_t mtu = std::min(peer_mtu, s.d().active_mtu_bytes());
  if (s.opt.mtu) mtu = std::min(mtu, s.opt.mtu);
  s.path_mtu = mtu_from_bytes(mtu);
  s.ch->send_line("OK mtu=" + std::to_string(mtu_bytes(s.path_mtu)));
}

// The client's side of the greeting: sends its parameters and takes the path MTU.
void client_hello(Side& s) {
  alloc_buffers(s);
  const int fd = tcp_connect(s);
  s.ch = std::make_unique<Channel>(fd);
  std::string sizes;
  for (auto z : s.sizes) sizes += (sizes.empty() ? "" : ",") + std::to_string(z);
  std::uint32_t mtu = s.d().active_mtu_bytes();
  if (s.opt.mtu) mtu = std::min(mtu, s.opt.mtu);
  s.ch->send_line(std::string("HELLO uroce-perf=1 test=") + s.kind.name +
                  " atomic=" + (s.fetch_add ? "FETCH_AND_ADD" : "CMP_AND_SWAP") +
                  " qps=" + std::to_string(s.opt.qps) + " iters=" + std::to_string(s.iters) +
                  " duration=" + std::to_string(s.opt.duration) + " sizes=" + sizes +
                  " mtu=" + std::to_string(mtu));
  auto f = fields(expect_line(s, "OK", "answer to the greeting"));
  s.path_mtu = mtu_from_bytes(static_cast<std::uint32_t>(num(f, "mtu")));
}

// The engine's and datapath's counters after the run (--counters).
void print_counters(Side& s, std::FILE* out) {
  const auto& e = s.dev->engine().counters();
  const auto& u = s.dev->datapath().counters();
  std::uint64_t drops = 0;
  for (auto v : e.rx_drops) drops += v;
  for (auto v : u.rx_drops) drops += v;
  std::fprintf(
      out,
      " counters: tx_packets %llu rx_packets %llu timer_fires %llu tx_backpressure "
      "%llu tx_errors %llu rx_drops %llu tx_send_calls %llu tx_acks_held %llu\n",
      static_cast<unsigned long long>(u.tx_packets), static_cast<unsigned long long>(u.rx_packets),
      static_cast<unsigned long long>(e.timer_fires),
      static_cast<unsigned long long>(e.tx_backpressure),
      static_cast<unsigned long long>(u.tx_errors), static_cast<unsigned long long>(drops),
      static_cast<unsigned long long>(u.tx_calls), static_cast<unsigned long long>(e.tx_acks_held));
}

void session(Side& s, std::FILE* out, std::vector<PerfResult>* results) {
  open_side(s);
  if (s.server) {
    server_hello(s, out);
  } else {
    client_hello(s);
  }
  for (std::uint32_t i = 0; i < s.opt.qps; ++i) s.ch->send_line(qp_line(s, i));
  read_peer_qps(s);
  connect_qps(s);
  print_header(s, out);
  for (std::uint64_t size : s.sizes) {
    PerfResult r = run_size(s, size);
    print_result(s, r, out);
    if (results) results->push_back(r);
  }
  if (!s.opt.json && !s.opt.quiet) std::fprintf(out, "%s", rule());
  if (s.opt.counters) print_counters(s, out);
  // Last handshake: the client waits for the server's BYE so that neither side tears its QPs
  // down while the other still needs an ACK.
  if (!s.server) {
    s.ch->send_line("BYE");
    expect_line(s, "BYE", "goodbye");
  } else {
    expect_line(s, "BYE", "goodbye");
    s.ch->send_line("BYE");
  }
}

}  // namespace

void add_perf_options(CLI::App& sub, PerfOptions& o) {
  sub.add_option("test", o.test,
                 "write_bw, write_lat, read_bw, read_lat, send_bw, send_lat, atomic_bw, "
                 "atomic_lat")
      ->required();
  sub.add_option("server", o.server, "Server address (client side); none: run as the server");
  sub.add_option("-s,--size", o.size, "Message size (default 65536 bw, 2 lat, 8 atomic)")
      ->check(CLI::Range(std::uint64_t{1}, kMaxSize));
  sub.add_option("-n,--iters", o.iters, "Iterations (default 5000 bw, 1000 lat)")
      ->check(CLI::Range(kMinIters, std::uint64_t{100'000'000}));
  sub.add_option("-D,--duration", o.duration, "Run for this many seconds (bw tests)");
  sub.add_flag("-a,--all", o.all, "Every size from 2 to 2^23");
  sub.add_option("-q,--qp", o.qps, "Number of QPs")->capture_default_str();
  sub.add_option("-t,--tx-depth", o.tx_depth, "Send queue depth (default 128 bw, 1 lat)")
      ->check(CLI::Range(1u, 15000u));
  sub.add_option("-m,--mtu", o.mtu, "Path MTU (256..4096; default the port's)");
  sub.add_option("-p,--port", o.port, "TCP port of the QP exchange")->capture_default_str();
  sub.add_option("-d,--ib-dev", o.device, "Device name (UROCE_DEVICES / config)");
  sub.add_option("--ip", o.ip, "Device by local address (e.g. 127.0.0.2)");
  sub.add_option("-A,--atomic_type", o.atomic_type, "FETCH_AND_ADD or CMP_AND_SWAP")
      ->capture_default_str();
  sub.add_flag("-F,--CPU-freq", o.ignored_flag, "Ignored (perftest compatibility)");
  sub.add_flag("--report_gbits", o.report_gbits, "Report bandwidth in Gb/s");
  sub.add_flag("--cpu_util", o.cpu_util, "Report CPU use of both sides (% and s per GB)");
  sub.add_flag("--json", o.json, "One JSON object per result line instead of the table");
  sub.add_option("--timeout", o.timeout_s, "Bound in seconds on every wait for the peer")
      ->capture_default_str();
  sub.add_option("--connect_timeout", o.connect_timeout_s,
                 "Client: retry a refused connection for this many seconds")
      ->capture_default_str();
  sub.add_option("-u,--qp-timeout", o.qp_timeout, "Local ACK timeout exponent")
      ->capture_default_str();
  sub.add_option("--retry_count", o.retry_count, "Transport retries (0..7; never infinite)")
      ->capture_default_str();
  sub.add_flag("--counters", o.counters, "Print this side's engine and socket counters");
}

int perf_run(const PerfOptions& o, std::FILE* out, std::FILE* err,
             std::vector<PerfResult>* results) {
  Side s;
  s.opt = o;
  s.server = o.server.empty();
  const std::string bad = check_options(o, s);
  if (!bad.empty()) {
    std::fprintf(err, "uroce perf: %s\n", bad.c_str());
    return 2;
  }
  try {
    session(s, out, results);
  } catch (const PerfError& e) {
    // A failed run does not wait the default 2 s drain for a peer that may be gone.
    if (s.dev) s.dev->close(Duration::ms(200));
    std::fflush(out);
    std::fprintf(err, "uroce perf %s (%s): %s\n", o.test.c_str(), s.server ? "server" : "client",
                 e.msg.c_str());
    return 1;
  } catch (const std::bad_alloc&) {
    std::fprintf(err, "uroce perf %s (%s): out of memory\n", o.test.c_str(),
                 s.server ? "server" : "client");
    return 1;
  }
  return 0;
}

}  // namespace uroce::tools
