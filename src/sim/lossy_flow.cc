#include "sim/lossy_flow.h"

#include <cstring>

#include "sim/failure.h"
#include "sim/scenario_host.h"
#include "transport/qp.h"
#include "verbs/connect.h"

namespace uroce::sim {

namespace {

constexpr std::int64_t kFinishLimitNs = 5'000'000'000;  // after posting ends: liveness bound
constexpr std::size_t kSender = 0;
constexpr std::size_t kReceiver = 1;

struct Flow final : ScenarioApp {
  explicit Flow(const LossyFlowOptions& o) : opt(o), sc(o.seed, Instant::from_ns(1'000'000)) {}
  LossyFlowOptions opt;
  Scenario sc;
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
  std::uint64_t measured_bytes = 0;
  LossyFlowResult result;

  ScenarioHost& host(std::size_t i) { return sc.host(i); }
  Instant now() const { return sc.now(); }
  Instant warm() const { return sc.start() + Duration::ns(opt.warmup_ns); }
  Instant stop() const { return sc.start() + Duration::ns(opt.duration_ns); }
  void fail(const std::string& what) {
    if (!result.ok) return;
    result.ok = false;
    result.failure = failure_text(opt.seed, now() - sc.start(), what);
  }
  void step() override;
  Instant next_time() const override { return now() < stop() ? stop() : Instant::never(); }
};

bool add_host(Flow& f, std::size_t index) {
  DeviceConfig cfg;
  cfg.name = "lossy" + std::to_string(index);
  cfg.ip = wire::IpAddress::v4(0x0a660001u + static_cast<std::uint32_t>(index));
  cfg.netdev_mtu = 9000;
  cfg.seed = f.opt.seed * 7 + index;
  cfg.link_speed_mbps = static_cast<std::uint32_t>(f.opt.link_bps / 1'000'000);
  cfg.adaptive_recovery = f.opt.adaptive_recovery;
  cfg.congestion_control = f.opt.congestion_control;
  ScenarioHost* h =
      f.sc.add_host(cfg, MacAddress{0x02, 0, 0, 0, 3, static_cast<std::uint8_t>(index)}, {},
                    [&f](const std::string& what) { f.fail(what); });
  return h != nullptr && h->open_memory(std::size_t{f.opt.message_bytes} * f.opt.window) &&
         h->create_rc_qp(QpCap{f.opt.window, 1, 1, 1, 0});
}

bool setup(Flow& f) {
  if (!add_host(f, kSender) || !add_host(f, kReceiver)) return false;
  LinkConfig link;
  link.delay_ns = f.opt.link_delay_ns;
  link.bandwidth_bps = f.opt.link_bps;
  link.queue_limit_packets = 0;  // the loss is the only fault
  link.loss = f.opt.loss;
  if (!f.sc.net().configure_default(f.now(), link).ok()) return false;
  for (std::size_t i : {kSender, kReceiver}) {
    ScenarioHost& self = f.host(i);
    const ScenarioHost& peer = f.host(1 - i);
    verbs::RcConnection c;
    c.path_mtu = mtu_from_bytes(f.opt.mtu);
    c.timeout = f.opt.ack_timeout;
    c.retry_cnt = f.opt.retry_cnt;
    c.access = kAccessLocalWrite | kAccessRemoteWrite;
    c.peer_ip = peer.ip();
    c.peer_qpn = peer.qpns()[0];
    c.sq_psn = i == kSender ? 0xfff000 : 0x3000;  // the sender's PSNs wrap round 0
    c.rq_psn = i == kSender ? 0x3000 : 0xfff000;
    if (verbs::connect_rc_qp(self.dev(), self.qps()[0], c) != Errc::kOk) return false;
  }
  return true;
}

// What WRITE `m` carries: its number, then a byte pattern of it.
void fill(std::span<std::byte> b, std::uint64_t m) {
  std::memset(b.data(), static_cast<int>((m * 13 + 5) & 0xff), b.size());
  std::memcpy(b.data(), &m, std::min<std::size_t>(8, b.size()));
}

void post(Flow& f) {
  ScenarioHost& tx = f.host(kSender);
  const ScenarioHost& rx = f.host(kReceiver);
  const std::size_t len = f.opt.message_bytes;
  while (f.now() < f.stop() && f.posted - f.completed < f.opt.window) {
    const std::size_t off = (f.posted % f.opt.window) * len;
    fill(tx.mem().subspan(off, len), f.posted);
    if (tx.post_one(0, WrOpcode::kRdmaWrite, f.posted, off, static_cast<std::uint32_t>(len), rx,
                    off) != Errc::kOk) {
      f.fail("post_send failed");
      return;
    }
    ++f.posted;
  }
}

// Completions in order, each once, successful, with its data in the receiver's memory (the slot
// is written again only by a WRITE posted after this completion).
void reap(Flow& f) {
  ScenarioHost& tx = f.host(kSender);
  const ScenarioHost& rx = f.host(kReceiver);
  const std::size_t len = f.opt.message_bytes;
  std::vector<std::byte> want(len);
  Wc wcs[16];
  for (;;) {
    auto n = tx.dev().poll_cq(tx.cq(), wcs);
    if (!n.ok() || n.value() == 0) return;
    for (std::size_t i = 0; i < n.value(); ++i) {
      const Wc& wc = wcs[i];
      if (wc.status != WcStatus::kSuccess || wc.wr_id != f.completed) {
        f.fail("completion of WRITE " + std::to_string(wc.wr_id) + " status " +
               wc_status_name(wc.status) + ", expected WRITE " + std::to_string(f.completed));
        return;
      }
      const std::size_t off = (f.completed % f.opt.window) * len;
      fill(want, f.completed);
      if (std::memcmp(rx.mem().data() + off, want.data(), len) != 0) {
        f.fail("WRITE " + std::to_string(f.completed) + " completed, its data not in place");
        return;
      }
      ++f.completed;
      if (f.now() >= f.warm() && f.now() < f.stop()) f.measured_bytes += len;
    }
  }
}

void Flow::step() {
  if (result.ok) reap(*this);
  if (result.ok) post(*this);
}

void run(Flow& f) {
  post(f);
  f.sc.transmit_rounds();
  const Instant give_up = f.stop() + Duration::ns(kFinishLimitNs);
  const auto done = [&f] {
    return !f.result.ok || (f.now() >= f.stop() && f.completed == f.posted);
  };
  const Scenario::End end = f.sc.run_until(done, give_up, f);
  if (end == Scenario::End::kStalled) f.fail("stalled: WRITEs outstanding, nothing scheduled");
  if (end == Scenario::End::kDeadline)
    f.fail("liveness: WRITEs unfinished 5 s after posting ended");
}

void measure(Flow& f) {
  LossyFlowResult& r = f.result;
  r.completed = f.completed;
  const double seconds = static_cast<double>(f.opt.duration_ns - f.opt.warmup_ns) / 1e9;
  r.goodput_bps = static_cast<double>(f.measured_bytes) * 8 / seconds;
  r.frames_lost = f.sc.net().total_stats().dropped_total();
  const transport::Qp* qp = f.host(kSender).dev().find_qp(f.host(kSender).qpns()[0]);
  if (qp == nullptr) return;
  const transport::QpCounters& c = qp->counters();
  r.packets_sent = c.packets_sent;
  r.retransmitted_packets = c.retransmitted_packets;
  r.retransmitted_share =
      c.packets_sent == 0 ? 0 : static_cast<double>(c.retransmitted_packets) / c.packets_sent;
  r.timeouts = c.timeouts;
  r.adaptive_timeouts = c.adaptive_timeouts;
  r.tail_probes = c.tail_probes;
  r.seq_naks = c.seq_naks_received;
  r.srtt_ns = qp->srtt().count_ns();
  r.rto_ns = qp->rto().is_infinite() ? -1 : qp->rto().count_ns();
  r.send_window = qp->send_window();
}

}  // namespace

LossyFlowResult run_lossy_flow(const LossyFlowOptions& opt) {
  Flow f(opt);
  if (opt.window == 0 || opt.message_bytes == 0 || opt.warmup_ns < 0 ||
      opt.warmup_ns >= opt.duration_ns || opt.loss.num > opt.loss.den) {
    f.fail("invalid options");
    return f.result;
  }
  if (!setup(f)) {
    f.fail("setup failed");
    return f.result;
  }
  run(f);
  measure(f);
  return f.result;
}

}  // namespace uroce::sim
