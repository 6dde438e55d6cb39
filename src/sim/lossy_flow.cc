#include "sim/lossy_flow.h"

#include <cstring>
#include <string>
#include <vector>

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
  std::vector<std::uint64_t> posted = std::vector<std::uint64_t>(opt.qps);  // per QP
  std::vector<std::uint64_t> completed = std::vector<std::uint64_t>(opt.qps);
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

// A WRITE's slot in either host's memory: QP q's `window` slots, then the next QP's.
std::size_t slot(const Flow& f, std::uint32_t q, std::uint64_t m) {
  return (std::size_t{q} * f.opt.window + m % f.opt.window) * f.opt.message_bytes;
}

// A WRITE's wr_id: its QP above, its number on that QP below.
constexpr int kQpShift = 48;

bool add_host(Flow& f, std::size_t index) {
  DeviceConfig cfg;
  cfg.name = "lossy" + std::to_string(index);
  cfg.ip = wire::IpAddress::v4(0x0a660001u + static_cast<std::uint32_t>(index));
  cfg.netdev_mtu = 9000;
  cfg.seed = f.opt.seed * 7 + index;
  cfg.link_speed_mbps = static_cast<std::uint32_t>(f.opt.link_bps / 1'000'000);
  cfg.adaptive_recovery = f.opt.adaptive_recovery;
  cfg.congestion_control = f.opt.congestion_control;
  ScenarioHostOptions ho;
  if (index == kReceiver) {
    ho.socket_buffer_bytes = f.opt.receiver_socket_bytes;
    ho.frame_cost_ns = f.opt.receiver_frame_cost_ns;
    ho.deschedule_period_ns = f.opt.receiver_deschedule_period_ns;
    ho.deschedule_off_ns = f.opt.receiver_deschedule_off_ns;
  }
  ScenarioHost* h =
      f.sc.add_host(cfg, MacAddress{0x02, 0, 0, 0, 3, static_cast<std::uint8_t>(index)}, ho,
                    [&f](const std::string& what) { f.fail(what); });
  if (h == nullptr || !h->open_memory(slot(f, f.opt.qps, 0))) return false;
  for (std::uint32_t q = 0; q < f.opt.qps; ++q) {
    if (!h->create_rc_qp(QpCap{f.opt.window, 1, 1, 1, 0})) return false;
  }
  return true;
}

bool setup(Flow& f) {
  if (!add_host(f, kSender) || !add_host(f, kReceiver)) return false;
  LinkConfig link;
  link.delay_ns = f.opt.link_delay_ns;
  link.bandwidth_bps = f.opt.link_bps;
  link.queue_limit_packets = 0;  // the loss is the only fault
  link.loss = f.opt.loss;
  if (!f.sc.net().configure_default(f.now(), link).ok()) return false;
  for (std::uint32_t q = 0; q < f.opt.qps; ++q) {
    for (std::size_t i : {kSender, kReceiver}) {
      ScenarioHost& self = f.host(i);
      const ScenarioHost& peer = f.host(1 - i);
      verbs::RcConnection c;
      c.path_mtu = mtu_from_bytes(f.opt.mtu);
      c.timeout = f.opt.ack_timeout;
      c.retry_cnt = f.opt.retry_cnt;
      c.access = kAccessLocalWrite | kAccessRemoteWrite;
      c.peer_ip = peer.ip();
      c.peer_qpn = peer.qpns()[q];
      c.sq_psn = i == kSender ? 0xfff000 : 0x3000;  // the sender's PSNs wrap round 0
      c.rq_psn = i == kSender ? 0x3000 : 0xfff000;
      if (verbs::connect_rc_qp(self.dev(), self.qps()[q], c) != Errc::kOk) return false;
    }
  }
  return true;
}

// What WRITE `m` (its wr_id) carries: its number, then a byte pattern of it.
void fill(std::span<std::byte> b, std::uint64_t m) {
  std::memset(b.data(), static_cast<int>((m * 13 + 5) & 0xff), b.size());
  std::memcpy(b.data(), &m, std::min<std::size_t>(8, b.size()));
}

void post(Flow& f) {
  ScenarioHost& tx = f.host(kSender);
  const ScenarioHost& rx = f.host(kReceiver);
  const std::size_t len = f.opt.message_bytes;
  for (std::uint32_t q = 0; q < f.opt.qps; ++q) {
    while (f.now() < f.stop() && f.posted[q] - f.completed[q] < f.opt.window) {
      const std::size_t off = slot(f, q, f.posted[q]);
      const std::uint64_t id = (std::uint64_t{q} << kQpShift) | f.posted[q];
      fill(tx.mem().subspan(off, len), id);
      if (tx.post_one(q, WrOpcode::kRdmaWrite, id, off, static_cast<std::uint32_t>(len), rx, off) !=
          Errc::kOk) {
        f.fail("post_send failed");
        return;
      }
      ++f.posted[q];
    }
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
      const auto q = static_cast<std::uint32_t>(wc.wr_id >> kQpShift);
      const std::uint64_t m = wc.wr_id & ((std::uint64_t{1} << kQpShift) - 1);
      const std::string name = "WRITE " + std::to_string(m) + " of QP " + std::to_string(q);
      if (wc.status != WcStatus::kSuccess || q >= f.opt.qps || m != f.completed[q]) {
        f.fail("completion of " + name + " status " + wc_status_name(wc.status) +
               (q < f.opt.qps ? ", expected WRITE " + std::to_string(f.completed[q]) : ""));
        return;
      }
      const std::size_t off = slot(f, q, m);
      fill(want, wc.wr_id);
      if (std::memcmp(rx.mem().data() + off, want.data(), len) != 0) {
        f.fail(name + " completed, its data not in place");
        return;
      }
      ++f.completed[q];
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
  for (const std::uint64_t c : f.completed) r.completed += c;
  const double seconds = static_cast<double>(f.opt.duration_ns - f.opt.warmup_ns) / 1e9;
  r.goodput_bps = static_cast<double>(f.measured_bytes) * 8 / seconds;
  r.frames_lost = f.sc.net().total_stats().dropped_total();
  r.socket_drops = f.host(kReceiver).socket_drops();
  ScenarioHost& tx = f.host(kSender);
  for (const std::uint32_t qpn : tx.qpns()) {
    const transport::Qp* qp = tx.dev().find_qp(qpn);
    if (qp == nullptr) continue;
    const transport::QpCounters& c = qp->counters();
    r.packets_sent += c.packets_sent;
    r.retransmitted_packets += c.retransmitted_packets;
    r.timeouts += c.timeouts;
    r.adaptive_timeouts += c.adaptive_timeouts;
    r.tail_probes += c.tail_probes;
    r.seq_naks += c.seq_naks_received;
    r.retry_exceeded += c.retry_exceeded;
  }
  r.retransmitted_share = r.packets_sent == 0 ? 0
                                              : static_cast<double>(r.retransmitted_packets) /
                                                    static_cast<double>(r.packets_sent);
  const transport::Qp* qp = tx.dev().find_qp(tx.qpns()[0]);
  if (qp == nullptr) return;
  r.srtt_ns = qp->srtt().count_ns();
  r.rto_ns = qp->rto().is_infinite() ? -1 : qp->rto().count_ns();
  r.send_window = qp->send_window();
}

}  // namespace

LossyFlowResult run_lossy_flow(const LossyFlowOptions& opt) {
  Flow f(opt);
  if (opt.window == 0 || opt.qps == 0 || opt.qps > 64 || opt.message_bytes == 0 ||
      opt.warmup_ns < 0 || opt.warmup_ns >= opt.duration_ns || opt.loss.num > opt.loss.den) {
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
