#include "sim/lossy_flow.h"

#include <array>
#include <cstring>
#include <deque>
#include <memory>

#include "sim/failure.h"
#include "sim/network.h"
#include "sim/scenario_host.h"
#include "transport/qp.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"

namespace uroce::sim {

namespace {

constexpr std::int64_t kFinishLimitNs = 5'000'000'000;  // after posting ends: liveness bound
constexpr std::size_t kSender = 0;
constexpr std::size_t kReceiver = 1;

// A host of the flow (sim/scenario_host.h) and its application's buffer, MR, CQ and QP.
struct Host {
  std::unique_ptr<ScenarioHost> sim;
  std::vector<std::byte> buf;
  MrInfo mr;
  CqHandle cq;
  QpHandle qp;
  std::uint32_t qpn = 0;
  Device& dev() { return sim->dev(); }
  std::uint64_t addr(std::size_t off) const {
    return reinterpret_cast<std::uint64_t>(buf.data()) + off;
  }
};

struct Flow {
  explicit Flow(const LossyFlowOptions& o) : opt(o), net(o.seed) {}
  LossyFlowOptions opt;
  Network net;
  Instant start = Instant::from_ns(1'000'000);
  Instant now = start;
  std::array<Host, 2> hosts;
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
  std::uint64_t measured_bytes = 0;
  LossyFlowResult result;

  Instant warm() const { return start + Duration::ns(opt.warmup_ns); }
  Instant stop() const { return start + Duration::ns(opt.duration_ns); }
  void fail(const std::string& what) {
    if (!result.ok) return;
    result.ok = false;
    result.failure = failure_text(opt.seed, now - start, what);
  }
};

bool add_host(Flow& f, std::size_t index) {
  Host& h = f.hosts[index];
  DeviceConfig cfg;
  cfg.name = "lossy" + std::to_string(index);
  cfg.ip = wire::IpAddress::v4(0x0a660001u + static_cast<std::uint32_t>(index));
  cfg.netdev_mtu = 9000;
  cfg.seed = f.opt.seed * 7 + index;
  cfg.link_speed_mbps = static_cast<std::uint32_t>(f.opt.link_bps / 1'000'000);
  cfg.adaptive_recovery = f.opt.adaptive_recovery;
  cfg.congestion_control = f.opt.congestion_control;
  h.sim = ScenarioHost::create(f.net, cfg,
                               MacAddress{0x02, 0, 0, 0, 3, static_cast<std::uint8_t>(index)},
                               [&f](const std::string& what) { f.fail(what); });
  if (h.sim == nullptr) return false;
  h.buf.assign(std::size_t{f.opt.message_bytes} * f.opt.window, std::byte{0});
  auto pd = h.dev().alloc_pd();
  if (!pd.ok()) return false;
  auto mr = h.dev().reg_mr(pd.value(), h.buf.data(), h.buf.size(),
                           kAccessLocalWrite | kAccessRemoteWrite);
  auto cq = h.dev().create_cq(CqInitAttr{4096, 0, 0});
  if (!mr.ok() || !cq.ok()) return false;
  h.mr = mr.value();
  h.cq = cq->handle;
  QpInitAttr init;
  init.qp_type = QpType::kRc;
  init.send_cq = h.cq;
  init.recv_cq = h.cq;
  init.cap = QpCap{f.opt.window, 1, 1, 1, 0};
  auto qp = h.dev().create_qp(pd.value(), init);
  if (!qp.ok()) return false;
  h.qp = qp->handle;
  h.qpn = qp->qp_num;
  return true;
}

bool setup(Flow& f) {
  if (!add_host(f, kSender) || !add_host(f, kReceiver)) return false;
  LinkConfig link;
  link.delay_ns = f.opt.link_delay_ns;
  link.bandwidth_bps = f.opt.link_bps;
  link.queue_limit_packets = 0;  // the loss is the only fault
  link.loss = f.opt.loss;
  if (!f.net.configure_default(f.now, link).ok()) return false;
  for (std::size_t i : {kSender, kReceiver}) {
    Host& self = f.hosts[i];
    const Host& peer = f.hosts[1 - i];
    verbs::RcConnection c;
    c.path_mtu = mtu_from_bytes(f.opt.mtu);
    c.timeout = f.opt.ack_timeout;
    c.retry_cnt = f.opt.retry_cnt;
    c.access = kAccessLocalWrite | kAccessRemoteWrite;
    c.peer_ip = peer.sim->ip();
    c.peer_qpn = peer.qpn;
    c.sq_psn = i == kSender ? 0xfff000 : 0x3000;  // the sender's PSNs wrap round 0
    c.rq_psn = i == kSender ? 0x3000 : 0xfff000;
    if (verbs::connect_rc_qp(self.dev(), self.qp, c) != Errc::kOk) return false;
  }
  return true;
}

// What WRITE `m` carries: its number, then a byte pattern of it.
void fill(std::span<std::byte> b, std::uint64_t m) {
  std::memset(b.data(), static_cast<int>((m * 13 + 5) & 0xff), b.size());
  std::memcpy(b.data(), &m, std::min<std::size_t>(8, b.size()));
}

void post(Flow& f) {
  Host& tx = f.hosts[kSender];
  const Host& rx = f.hosts[kReceiver];
  const std::size_t len = f.opt.message_bytes;
  while (f.now < f.stop() && f.posted - f.completed < f.opt.window) {
    const std::size_t off = (f.posted % f.opt.window) * len;
    fill(std::span(tx.buf).subspan(off, len), f.posted);
    const Sge sge{tx.addr(off), static_cast<std::uint32_t>(len), tx.mr.lkey};
    SendWr wr;
    wr.wr_id = f.posted;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = kSendSignaled;
    wr.sg_list = std::span(&sge, 1);
    wr.rdma.remote_addr = rx.addr(off);
    wr.rdma.rkey = rx.mr.rkey;
    if (tx.dev().post_send(tx.qp, std::span(&wr, 1), nullptr) != Errc::kOk) {
      f.fail("post_send failed");
      return;
    }
    ++f.posted;
  }
}

// Completions in order, each once, successful, with its data in the receiver's memory (the slot
// is written again only by a WRITE posted after this completion).
void reap(Flow& f) {
  Host& tx = f.hosts[kSender];
  const Host& rx = f.hosts[kReceiver];
  const std::size_t len = f.opt.message_bytes;
  std::vector<std::byte> want(len);
  Wc wcs[16];
  for (;;) {
    auto n = tx.dev().poll_cq(tx.cq, wcs);
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
      if (std::memcmp(rx.buf.data() + off, want.data(), len) != 0) {
        f.fail("WRITE " + std::to_string(f.completed) + " completed, its data not in place");
        return;
      }
      ++f.completed;
      if (f.now >= f.warm() && f.now < f.stop()) f.measured_bytes += len;
    }
  }
}

void step(Flow& f) {
  Delivery d;
  while (f.net.poll_delivery(f.now, d)) f.hosts[d.to].sim->deliver(std::move(d.frame));
  for (Host& h : f.hosts) h.sim->receive_rounds(f.now);
  if (f.result.ok) reap(f);
  if (f.result.ok) post(f);
  for (Host& h : f.hosts) h.sim->transmit_round_if_rang(f.now);
}

void run(Flow& f) {
  const Instant give_up = f.stop() + Duration::ns(kFinishLimitNs);
  post(f);
  for (Host& h : f.hosts) h.sim->round(f.now, engine::Engine::RoundKind::kTransmit);
  while (f.result.ok && !(f.now >= f.stop() && f.completed == f.posted)) {
    Instant t = f.net.next_event_time();
    for (const Host& h : f.hosts) t = earliest(t, h.sim->wake());
    if (f.now < f.stop()) t = earliest(t, f.stop());
    if (t.is_never()) {
      f.fail("stalled: WRITEs outstanding, nothing scheduled");
      return;
    }
    if (t > give_up) {
      f.fail("liveness: WRITEs unfinished 5 s after posting ended");
      return;
    }
    if (t > f.now) f.now = t;
    step(f);
  }
}

void measure(Flow& f) {
  LossyFlowResult& r = f.result;
  r.completed = f.completed;
  const double seconds = static_cast<double>(f.opt.duration_ns - f.opt.warmup_ns) / 1e9;
  r.goodput_bps = static_cast<double>(f.measured_bytes) * 8 / seconds;
  r.frames_lost = f.net.total_stats().dropped_total();
  const transport::Qp* qp = f.hosts[kSender].dev().find_qp(f.hosts[kSender].qpn);
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
