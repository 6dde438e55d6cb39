// One process of bench/many_procs.py (issue 43: many processes on one shared device, some of them
// SIGKILLed mid-run). It opens the shared device at --ip as the drop-in and `uroce perf` do (the
// environment's device options, the coordinator uroce-devd), creates --qps RC QPs, connects each
// to the same-numbered QP of a partner process, and runs --iters iterations of verified traffic
// on every QP; then it destroys everything and exits.
//
//   many_procs --ip IP [--qps 16] [--iters 200] [--size 4096] [--ack-timeout 18]
//   many_procs --ip IP --hold 1 [--qps 1]
//
// --hold 1: only opens the device and creates its QPs (holding a QPN block), prints "ready ...",
// and tears down at the line "end": the driver's context that keeps the coordinator up across the
// run, so that its state after the run can be compared with its state before.
//
// Lines on stdout and stdin, relayed by the driver to and from the partner (no timing: each step
// waits for the line it needs):
//   out "ready ADDR RKEY QPN..."   its receive buffer and QP numbers
//   in  "ready ADDR RKEY QPN..."   the partner's
//   out "rts"                      every QP is in RTS, receives posted
//   in  "rts"                      the partner's are too: traffic may start
//   out "half"                     every QP has done half of its iterations
//   in  "go"                       go on (the driver SIGKILLs its victims instead)
//   out "done ..." / "peer-gone ..." / "error ..."
// While it waits for a line it keeps the device progressing (ACKs, `uroce stats`).
//
// Traffic, per QP and iteration i, in both directions at once: an RDMA WRITE of --size bytes
// (a pattern of the sender, QP, iteration) into the partner's slot i % 2 for this QP, then a SEND
// of 16 bytes naming the iteration and the WRITE's checksum. The receiver of SEND i checks the
// SEND and every byte of slot i % 2 (RC executes the WRITE before the SEND). A side posts
// iteration i only once it has received the partner's iteration i - 1, which the partner posted
// only after it had checked this side's iteration i - 2: slot i % 2 is free again.
//
// A partner that was killed: a QP that waits for the partner's next SEND with nothing of its own
// outstanding has nothing that could fail, so after kProbeAfter without a completion it posts an
// 8-byte RDMA READ of the partner's memory (a liveness probe, as an application's keepalive). A
// dead partner's QP numbers are no longer steered to any context, the READ's retries run out,
// and the completion's kRetryExcErr ends the process: "peer-gone", exit 3.
//
// Exit codes: 0 every iteration of every QP done with every byte checked; 3 the partner went
// away (retry exceeded); 1 anything else (a data mismatch, a setup error).
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "device/udp_device.h"
#include "edge/environment.h"
#include "verbs/connect.h"

namespace {

using namespace uroce;
using namespace uroce::engine;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kRecvDepth = 4;  // receives posted per QP (at most 2 SENDs in flight)
constexpr std::size_t kMsg = 16;         // a SEND: iteration, checksum
constexpr auto kProbeAfter = std::chrono::milliseconds(50);

// wr_id: kind in the top byte, QP index and iteration below.
enum Kind : std::uint64_t { kWrite = 1, kSend = 2, kRecv = 3, kProbe = 4 };
std::uint64_t wr_id(Kind k, std::uint32_t qp, std::uint32_t slot) {
  return (std::uint64_t{k} << 56) | (std::uint64_t{qp} << 24) | slot;
}

std::byte pattern(std::uint32_t seed, std::uint32_t qp, std::uint32_t iter, std::size_t k) {
  return static_cast<std::byte>((seed * 151u + qp * 131u + iter * 29u + k * 7u + (k >> 8)) & 0xff);
}

std::uint64_t checksum(const std::byte* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i)
    h = (h ^ std::to_integer<std::uint64_t>(p[i])) * 1099511628211ull;
  return h;
}

void say(const std::string& line) {
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

[[noreturn]] void die(int code, const std::string& why) {
  say((code == 3 ? "peer-gone " : "error ") + why);
  std::_Exit(code);
}

// The next line on stdin. While it waits, `dev` (when open) keeps progressing: a process blocked
// on its driver must still acknowledge its partner's messages and answer `uroce stats`, or the
// partner's retries run out and it sees a dead peer that is only a busy driver.
std::string read_line(const char* want, UdpDevice* dev) {
  static std::string pending;
  for (;;) {
    if (const std::size_t nl = pending.find('\n'); nl != std::string::npos) {
      std::string line = pending.substr(0, nl);
      pending.erase(0, nl + 1);
      if (!line.starts_with(want)) die(1, "expected \"" + std::string(want) + "\", got: " + line);
      return line;
    }
    pollfd p{STDIN_FILENO, POLLIN, 0};
    if (dev != nullptr) dev->wait(Duration::ms(5));
    if (::poll(&p, 1, dev != nullptr ? 0 : -1) <= 0) continue;
    char buf[4096];
    const ssize_t n = ::read(STDIN_FILENO, buf, sizeof buf);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      die(1, std::string("stdin closed before \"") + want + "\"");
    }
    pending.append(buf, static_cast<std::size_t>(n));
  }
}

struct QpState {
  QpHandle qp;
  std::uint32_t qpn = 0;
  std::uint32_t peer_qpn = 0;
  std::uint32_t next_send = 0;    // the next iteration to post
  std::uint32_t received = 0;     // the partner's iterations received and checked
  std::uint32_t outstanding = 0;  // send WRs (WRITE, SEND, probe) not completed
  Clock::time_point last_progress;
};

struct Options {
  std::string ip;
  std::uint32_t qps = 16;
  std::uint32_t iters = 200;
  std::size_t size = 4096;
  // The QPs' ACK timeout exponent (4.096 us * 2^n), rdma_cm's by default: retries run out after
  // 8 x 1.07 s, so that 64 busy-polling processes on two cores (a process may wait seconds for
  // a CPU) do not take a starved partner for a dead one.
  std::uint8_t ack_timeout = 18;
  bool hold = false;
};

class Worker {
 public:
  explicit Worker(const Options& o) : o_(o), seed_(static_cast<std::uint32_t>(::getpid())) {}

  void open() {
    DeviceSelection sel;
    sel.ip = o_.ip;
    auto options = edge::device_options();
    if (!options.ok()) die(1, "device options: " + options.error());
    auto dev = open_device(sel, options.value());
    if (!dev.ok()) die(1, "cannot open the device: " + dev.error().text);
    dev_ = std::move(dev.value());
    Device& d = dev_->device();
    pd_ = d.alloc_pd().value();
    // Layout: the partner's WRITE slots (2 per QP), my outgoing data (1 per QP), receive buffers
    // (kRecvDepth per QP), my SEND buffers (2 per QP), the probe's landing place (8 per QP).
    inbox_ = 0;
    outbox_ = inbox_ + 2 * o_.qps * o_.size;
    recvs_ = outbox_ + o_.qps * o_.size;
    sends_ = recvs_ + std::size_t{o_.qps} * kRecvDepth * kMsg;
    probes_ = sends_ + std::size_t{o_.qps} * 2 * kMsg;
    buf_.assign(probes_ + std::size_t{o_.qps} * 8, std::byte{0});
    // The access the QPs get (RcConnection's default: every remote operation).
    auto mr = d.reg_mr(pd_, buf_.data(), buf_.size(), verbs::RcConnection{}.access);
    if (!mr.ok()) die(1, "reg_mr failed");
    mr_ = mr.value();
    auto cq = d.create_cq(CqInitAttr{o_.qps * (kRecvDepth + 4) + 16, 0, 0});
    if (!cq.ok()) die(1, "create_cq failed");
    cq_ = cq->handle;
    for (std::uint32_t i = 0; i < o_.qps; ++i) {
      QpInitAttr init;
      init.send_cq = cq_;
      init.recv_cq = cq_;
      init.cap = QpCap{4, kRecvDepth, 1, 1, 0};
      auto qp = d.create_qp(pd_, init);
      if (!qp.ok()) die(1, "create_qp " + std::to_string(i) + " failed");
      QpState s;
      s.qp = qp->handle;
      s.qpn = qp->qp_num;
      qps_.push_back(s);
    }
  }

  std::string ready_line() const {
    std::ostringstream os;
    os << "ready " << reinterpret_cast<std::uint64_t>(buf_.data()) << ' ' << mr_.rkey;
    for (const QpState& s : qps_) os << ' ' << s.qpn;
    return os.str();
  }

  void connect(const std::string& partner) {
    std::istringstream is(partner.substr(6));
    is >> peer_addr_ >> peer_rkey_;
    for (QpState& s : qps_) {
      if (!(is >> s.peer_qpn)) die(1, "the partner's line names too few QPs: " + partner);
    }
    Device& d = dev_->device();
    verbs::RcConnection c;
    c.peer_ip = parse_ip(o_.ip).value();
    c.sq_psn = 0x100;
    c.rq_psn = 0x100;
    c.timeout = o_.ack_timeout;
    for (std::uint32_t i = 0; i < o_.qps; ++i) {
      c.peer_qpn = qps_[i].peer_qpn;
      if (verbs::connect_rc_qp(d, qps_[i].qp, c) != Errc::kOk) die(1, "connecting QP failed");
      // Before "rts": the partner sends nothing until it has that line.
      for (std::uint32_t k = 0; k < kRecvDepth; ++k) post_recv(i, k);
    }
  }

  // Runs every QP's iterations; returns once all are done (or exits on an error).
  void traffic() {
    const auto t0 = Clock::now();
    for (QpState& s : qps_) s.last_progress = t0;
    bool half_said = false;
    std::uint64_t done_qps = 0;
    while (done_qps < o_.qps) {
      for (std::uint32_t i = 0; i < o_.qps; ++i) try_post(i);
      Wc wcs[64];
      auto n = dev_->device().poll_cq(cq_, wcs);
      if (!n.ok()) die(1, "poll_cq failed");
      for (std::size_t k = 0; k < n.value(); ++k) on_completion(wcs[k]);
      if (n.value() == 0) {
        probe_idle_qps();
        dev_->wait(Duration::ms(5));
      }
      done_qps = 0;
      std::uint32_t min_received = o_.iters;
      for (const QpState& s : qps_) {
        if (s.received == o_.iters && s.next_send == o_.iters && s.outstanding == 0) ++done_qps;
        if (s.received < min_received) min_received = s.received;
      }
      if (!half_said && min_received >= o_.iters / 2) {
        half_said = true;
        say("half");
        read_line("go", dev_.get());
      }
    }
    seconds_ = std::chrono::duration<double>(Clock::now() - t0).count();
  }

  void teardown() {
    Device& d = dev_->device();
    for (const QpState& s : qps_) {
      if (d.destroy_qp(s.qp) != Errc::kOk) die(1, "destroy_qp failed");
    }
    if (d.destroy_cq(cq_) != Errc::kOk) die(1, "destroy_cq failed");
    if (d.dereg_mr(mr_.handle) != Errc::kOk) die(1, "dereg_mr failed");
    if (d.dealloc_pd(pd_) != Errc::kOk) die(1, "dealloc_pd failed");
    dev_->close();
  }

  std::uint64_t bytes_checked() const { return bytes_checked_; }
  double seconds() const { return seconds_; }
  std::uint32_t probes() const { return probes_sent_; }
  UdpDevice* dev() { return dev_.get(); }

 private:
  void post_recv(std::uint32_t qp, std::uint32_t k) {
    const Sge sge{addr(recvs_ + (std::size_t{qp} * kRecvDepth + k) * kMsg), kMsg, mr_.lkey};
    RecvWr w;
    w.wr_id = wr_id(kRecv, qp, k);
    w.sg_list = std::span(&sge, 1);
    if (dev_->device().post_recv(qps_[qp].qp, std::span(&w, 1), nullptr) != Errc::kOk) {
      die(1, "post_recv failed");
    }
  }

  std::uint64_t addr(std::size_t offset) const {
    return reinterpret_cast<std::uint64_t>(buf_.data()) + offset;
  }

  void post(std::uint32_t qp, SendWr& w) {
    if (dev_->device().post_send(qps_[qp].qp, std::span(&w, 1), nullptr) != Errc::kOk) {
      die(1, "post_send failed");
    }
    ++qps_[qp].outstanding;
  }

  // Iteration next_send once the partner's previous one is in (see the header).
  void try_post(std::uint32_t qp) {
    QpState& s = qps_[qp];
    if (s.next_send >= o_.iters || s.next_send > s.received || s.outstanding != 0) return;
    const std::uint32_t it = s.next_send;
    std::byte* out = buf_.data() + outbox_ + std::size_t{qp} * o_.size;
    for (std::size_t k = 0; k < o_.size; ++k) out[k] = pattern(seed_, qp, it, k);
    const Sge data{addr(outbox_ + std::size_t{qp} * o_.size), static_cast<std::uint32_t>(o_.size),
                   mr_.lkey};
    SendWr w;
    w.wr_id = wr_id(kWrite, qp, it);
    w.opcode = WrOpcode::kRdmaWrite;
    w.sg_list = std::span(&data, 1);
    w.rdma = {peer_addr_ + inbox_ + (std::size_t{qp} * 2 + it % 2) * o_.size, peer_rkey_};
    w.send_flags = kSendSignaled;
    post(qp, w);
    const std::size_t msg_off = sends_ + (std::size_t{qp} * 2 + it % 2) * kMsg;
    const std::uint64_t words[2] = {it, checksum(out, o_.size)};
    std::memcpy(buf_.data() + msg_off, words, sizeof words);
    const Sge msg{addr(msg_off), kMsg, mr_.lkey};
    SendWr m;
    m.wr_id = wr_id(kSend, qp, it);
    m.opcode = WrOpcode::kSend;
    m.sg_list = std::span(&msg, 1);
    m.send_flags = kSendSignaled;
    post(qp, m);
    ++s.next_send;
  }

  void probe_idle_qps() {
    const auto now = Clock::now();
    for (std::uint32_t qp = 0; qp < o_.qps; ++qp) {
      QpState& s = qps_[qp];
      if (s.outstanding != 0 || s.received >= o_.iters || now - s.last_progress < kProbeAfter) {
        continue;
      }
      const Sge sge{addr(probes_ + std::size_t{qp} * 8), 8, mr_.lkey};
      SendWr w;
      w.wr_id = wr_id(kProbe, qp, 0);
      w.opcode = WrOpcode::kRdmaRead;
      w.sg_list = std::span(&sge, 1);
      w.rdma = {peer_addr_ + inbox_, peer_rkey_};
      w.send_flags = kSendSignaled;
      post(qp, w);
      ++probes_sent_;
      s.last_progress = now;
    }
  }

  void on_completion(const Wc& wc) {
    const auto kind = static_cast<Kind>(wc.wr_id >> 56);
    const auto qp = static_cast<std::uint32_t>((wc.wr_id >> 24) & 0xffffffff);
    const auto slot = static_cast<std::uint32_t>(wc.wr_id & 0xffffff);
    if (qp >= o_.qps) die(1, "a completion for no QP of mine");
    QpState& s = qps_[qp];
    if (wc.status != WcStatus::kSuccess) {
      if (wc.status == WcStatus::kRetryExcErr || wc.status == WcStatus::kRnrRetryExcErr) {
        die(3, std::string(wc_status_name(wc.status)) + " on QP " + std::to_string(qp));
      }
      die(1, std::string("completion status ") + wc_status_name(wc.status) + " on QP " +
                 std::to_string(qp));
    }
    s.last_progress = Clock::now();
    if (kind != kRecv) {
      if (s.outstanding == 0) die(1, "a send completion with nothing outstanding");
      --s.outstanding;
      return;
    }
    // The partner's iteration s.received: its SEND, then the slot its WRITE filled.
    std::uint64_t words[2];
    std::memcpy(words, buf_.data() + recvs_ + (std::size_t{qp} * kRecvDepth + slot) * kMsg,
                sizeof words);
    const std::uint32_t it = s.received;
    if (wc.byte_len != kMsg || words[0] != it) {
      die(1, "QP " + std::to_string(qp) + ": SEND for iteration " + std::to_string(words[0]) +
                 " (" + std::to_string(wc.byte_len) + " bytes), expected " + std::to_string(it));
    }
    const std::byte* in = buf_.data() + inbox_ + (std::size_t{qp} * 2 + it % 2) * o_.size;
    if (checksum(in, o_.size) != words[1]) {
      die(1, "QP " + std::to_string(qp) + " iteration " + std::to_string(it) +
                 ": the WRITE's bytes differ from the sender's checksum");
    }
    bytes_checked_ += o_.size + kMsg;
    ++s.received;
    if (s.received + kRecvDepth <= o_.iters) post_recv(qp, slot);
  }

  Options o_;
  std::uint32_t seed_;
  std::unique_ptr<UdpDevice> dev_;
  PdHandle pd_;
  MrInfo mr_;
  CqHandle cq_;
  std::vector<std::byte> buf_;
  std::size_t inbox_ = 0, outbox_ = 0, recvs_ = 0, sends_ = 0, probes_ = 0;
  std::vector<QpState> qps_;
  std::uint64_t peer_addr_ = 0;
  std::uint32_t peer_rkey_ = 0;
  std::uint64_t bytes_checked_ = 0;
  std::uint32_t probes_sent_ = 0;
  double seconds_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--ip") {
      o.ip = v;
    } else if (k == "--qps") {
      o.qps = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (k == "--iters") {
      o.iters = static_cast<std::uint32_t>(std::strtoul(v, nullptr, 10));
    } else if (k == "--size") {
      o.size = std::strtoul(v, nullptr, 10);
    } else if (k == "--ack-timeout") {
      o.ack_timeout = static_cast<std::uint8_t>(std::strtoul(v, nullptr, 10) & 31);
    } else if (k == "--hold") {
      o.hold = std::strcmp(v, "0") != 0;
    } else {
      o.ip.clear();
      break;
    }
  }
  if (o.ip.empty() || argc % 2 == 0 || o.qps == 0 || o.qps > 4096 || o.iters < 2 ||
      o.iters > 0xffffff || o.size == 0 || o.size > (1u << 20)) {
    std::fprintf(stderr,
                 "usage: many_procs --ip IP [--qps 16 (1-4096)] [--iters 200 (2-16777215)] "
                 "[--size 4096 (1-1048576)] [--ack-timeout 18 (exponent)] [--hold 1]\n");
    return 2;
  }
  Worker w(o);
  w.open();
  say(w.ready_line());
  if (o.hold) {
    read_line("end", w.dev());
    w.teardown();
    say("done hold");
    return 0;
  }
  w.connect(read_line("ready ", w.dev()));
  say("rts");
  read_line("rts", w.dev());
  w.traffic();
  w.teardown();
  char line[160];
  std::snprintf(line, sizeof line, "done qps %u iters %u bytes_checked %llu probes %u seconds %.3f",
                o.qps, o.iters, static_cast<unsigned long long>(w.bytes_checked()), w.probes(),
                w.seconds());
  say(line);
  return 0;
}
