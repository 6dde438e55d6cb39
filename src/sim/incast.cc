#include "sim/incast.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>

#include "base/assert.h"
#include "datapath/datapath.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "sim/failure.h"
#include "sim/network.h"
#include "sim/sim_socket.h"
#include "transport/qp.h"
#include "uroce/verbs.h"
#include "verbs/connect.h"
#include "verbs/device_state.h"
#include "wire/builder.h"
#include "wire/icrc.h"
#include "wire/packet.h"

namespace uroce::sim {

namespace {

constexpr std::int64_t kDrainLimitNs = 2'000'000'000;  // after the posting ends: liveness bound

struct Run;

// One host: a device and the application that polls it, over its share of the network (frames
// delivered to it wait in `inbox` until a round receives them), as sim/cluster.cc's hosts.
struct Nic final : engine::QpDirectory, datapath::Datapath, DoorbellHandler {
  Run* run = nullptr;
  HostId id = 0;
  wire::IpAddress ip;
  std::unique_ptr<Device> dev;
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<engine::Scheduler> sched;
  std::deque<std::vector<std::byte>> inbox;
  std::vector<std::byte> frame;
  // The NIC's transmitter: one frame at a time at the link's rate. A packet the engine offers
  // while the one before is still on the wire is refused (backpressure: the engine keeps it and
  // offers it again), so the network sees every host's frames in the order they reach the
  // switch, and a paced QP's rate is the rate its packets leave at.
  Instant wire_free = Instant::from_ns(0);
  bool refused = false;             // since the wire was last free
  Instant wake = Instant::never();  // the Scheduler's app_wait_until after the last round
  std::vector<std::byte> mem;
  PdHandle pd;
  MrInfo mr;
  CqHandle cq;
  std::vector<QpHandle> qps;
  std::vector<std::uint32_t> qpns;
  // A sender's stream: WRITEs posted and completed, in order.
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
  bool doorbell_rang = false;

  transport::Qp* find_qp(std::uint32_t qpn) override { return dev->find_qp(qpn); }
  std::size_t receive(Instant now, std::size_t max, const RxHandler& handler) override;
  bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
            std::span<const ConstBytes> payload) override;
  void doorbell(std::uint32_t qpn) override {
    engine->doorbell(qpn);
    doorbell_rang = true;
  }
  void qp_changing(std::uint32_t) override;
  void round(Instant now, engine::Engine::RoundKind kind);
  Instant next_deadline() const override { return refused ? wire_free : Instant::never(); }
  std::uint64_t va(std::size_t off) const {
    return reinterpret_cast<std::uint64_t>(mem.data()) + off;
  }
};

struct Snapshot {
  Instant at = Instant::never();
  std::uint64_t forwarded = 0;
  std::uint64_t drops = 0;
  PortStats port;
};

struct Run {
  explicit Run(const IncastOptions& o) : opt(o), net(o.seed) {}
  IncastOptions opt;
  Network net;
  Instant now = Instant::from_ns(1'000'000);
  Instant start = now;
  std::vector<std::unique_ptr<Nic>> nics;  // [0] the receiver
  IncastResult result;
  Snapshot converged, ended;
  Instant next_sample = Instant::never();

  void fail(const std::string& what) {
    if (!result.ok) return;
    result.ok = false;
    result.failure = failure_text(opt.seed, now - start, what);
  }
};

std::size_t Nic::receive(Instant, std::size_t max, const RxHandler& handler) {
  return receive_frames(inbox, max, handler, [this] {
    run->fail("host " + std::to_string(id) + " received an invalid frame");
  });
}

bool Nic::send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
               std::span<const ConstBytes> payload) {
  if (wire_free > now) {
    refused = true;
    return false;
  }
  refused = false;
  send_frame(run->net, id, now, o, transport_headers, payload, frame);
  const unsigned __int128 bits_ns =
      static_cast<unsigned __int128>(frame.size()) * 8 * 1'000'000'000u;
  const std::uint64_t bps = run->opt.link_bps;
  wire_free = now + Duration::ns(static_cast<std::int64_t>((bits_ns + bps - 1) / bps));
  return true;
}

void Nic::qp_changing(std::uint32_t) { engine->flush_held_acks(run->now, *sched); }

void Nic::round(Instant now, engine::Engine::RoundKind kind) {
  const engine::RoundReport rep = engine::run_app_round(*engine, *sched, now, kind).report;
  wake = sched->app_wait_until(now, Instant::never(), rep);
  // Work left to transmit while the wire is busy waits for the wire (the scheduler would have
  // it go again at once).
  if (refused && wake < wire_free) wake = wire_free;
}

// ---- setup -----------------------------------------------------------------------------------

bool make_nic(Run& r, std::uint32_t index, std::size_t mem_bytes) {
  auto n = std::make_unique<Nic>();
  n->run = &r;
  n->ip = wire::IpAddress::v4(0x0a650000u + 1 + index);
  auto id = r.net.add_host(n->ip, MacAddress{0x02, 0, 0, 0, 2, static_cast<std::uint8_t>(index)});
  if (!id.ok()) return false;
  n->id = id.value();
  DeviceConfig cfg;
  cfg.name = "incast" + std::to_string(index);
  cfg.ip = n->ip;
  cfg.netdev_mtu = 9000;
  cfg.seed = r.opt.seed * 1000 + index;
  cfg.link_speed_mbps = static_cast<std::uint32_t>(r.opt.link_bps / 1'000'000);
  cfg.dcqcn = r.opt.dcqcn_params;
  cfg.aimd = r.opt.aimd_params;
  cfg.congestion_control = r.opt.cc;
  cfg.adaptive_recovery = r.opt.adaptive_recovery;
  auto dev = Device::create(cfg);
  if (!dev.ok()) return false;
  n->dev = std::move(dev.value());
  n->engine = std::make_unique<engine::Engine>(*n, *n, n->ip);
  n->sched = std::make_unique<engine::Scheduler>(engine::SchedulerConfig{});
  n->engine->set_defer_acks(true);
  n->dev->set_doorbell_handler(n.get());
  n->mem.assign(mem_bytes, std::byte{0});
  auto pd = n->dev->alloc_pd();
  if (!pd.ok()) return false;
  n->pd = pd.value();
  auto mr =
      n->dev->reg_mr(n->pd, n->mem.data(), n->mem.size(), kAccessLocalWrite | kAccessRemoteWrite);
  if (!mr.ok()) return false;
  n->mr = mr.value();
  auto cq = n->dev->create_cq(CqInitAttr{4096, 0, 0});
  if (!cq.ok()) return false;
  n->cq = cq->handle;
  r.nics.push_back(std::move(n));
  return true;
}

bool make_qp(Nic& n, std::uint32_t depth) {
  QpInitAttr init;
  init.qp_type = QpType::kRc;
  init.send_cq = n.cq;
  init.recv_cq = n.cq;
  init.cap = QpCap{depth, 1, 1, 1, 0};
  auto qp = n.dev->create_qp(n.pd, init);
  if (!qp.ok()) return false;
  if (n.run->opt.adaptive_recovery && !n.run->opt.bdp_window) {
    transport::RecoveryParams p;
    p.bdp_window = false;
    n.dev->find_qp(qp->qp_num)->set_recovery(p);
  }
  n.qps.push_back(qp->handle);
  n.qpns.push_back(qp->qp_num);
  return true;
}

bool setup(Run& r) {
  const IncastOptions& o = r.opt;
  const std::size_t msg = o.message_bytes;
  if (!make_nic(r, 0, msg * o.senders)) return false;
  for (std::uint32_t i = 1; i <= o.senders; ++i) {
    if (!make_nic(r, i, msg * o.window)) return false;
  }
  LinkConfig link;
  link.delay_ns = o.link_delay_ns;
  link.bandwidth_bps = o.link_bps;
  link.queue_limit_packets = 0;  // a host's own link never drops: the port is the bottleneck
  if (!r.net.configure_default(r.now, link).ok()) return false;
  PortConfig port;
  port.bandwidth_bps = o.link_bps;
  port.queue_limit_bytes = o.port_buffer_bytes;
  port.ecn_kmin_bytes = o.ecn_kmin_bytes;
  port.ecn_kmax_bytes = o.ecn_kmax_bytes;
  port.ecn_pmax = fault::Ratio{o.ecn_pmax_percent, 100};
  port.ecn_mark_on_dequeue = o.ecn_mark_on_dequeue;
  if (!r.net.configure_port(r.now, r.nics[0]->id, port).ok()) return false;
  Nic& rx = *r.nics[0];
  for (std::uint32_t i = 1; i <= o.senders; ++i) {
    Nic& tx = *r.nics[i];
    if (!make_qp(tx, o.window) || !make_qp(rx, 1)) return false;
    verbs::RcConnection c;
    c.path_mtu = mtu_from_bytes(o.mtu);
    c.timeout = o.ack_timeout;
    c.access = kAccessLocalWrite | kAccessRemoteWrite;
    c.peer_ip = rx.ip;
    c.peer_qpn = rx.qpns.back();
    c.sq_psn = 0x1000 * i;
    c.rq_psn = 0x2000 * i;
    if (verbs::connect_rc_qp(*tx.dev, tx.qps.back(), c) != Errc::kOk) return false;
    c.peer_ip = tx.ip;
    c.peer_qpn = tx.qpns.back();
    std::swap(c.sq_psn, c.rq_psn);
    if (verbs::connect_rc_qp(*rx.dev, rx.qps.back(), c) != Errc::kOk) return false;
    if (o.selective_repeat) {
      tx.dev->find_qp(tx.qpns.back())->set_selective_repeat(true);
      rx.dev->find_qp(rx.qpns.back())->set_selective_repeat(true);
    }
  }
  return true;
}

// ---- the stream ------------------------------------------------------------------------------

// What WRITE `m` of sender `s` carries: its number, then a byte pattern of both.
void fill_message(std::span<std::byte> b, std::uint32_t s, std::uint64_t m) {
  std::memset(b.data(), static_cast<int>((s * 31 + m * 7) & 0xff), b.size());
  std::memcpy(b.data(), &m, std::min<std::size_t>(8, b.size()));
}

void post_writes(Run& r, std::uint32_t s) {
  Nic& tx = *r.nics[s];
  const Nic& rx = *r.nics[0];
  const std::size_t msg = r.opt.message_bytes;
  const Instant stop = r.start + Duration::ns(r.opt.duration_ns);
  while (r.now < stop && tx.posted - tx.completed < r.opt.window) {
    const std::size_t slot = (tx.posted % r.opt.window) * msg;
    fill_message(std::span(tx.mem).subspan(slot, msg), s, tx.posted);
    const Sge sge{tx.va(slot), static_cast<std::uint32_t>(msg), tx.mr.lkey};
    SendWr wr;
    wr.wr_id = tx.posted;
    wr.opcode = WrOpcode::kRdmaWrite;
    wr.send_flags = kSendSignaled;
    wr.sg_list = std::span(&sge, 1);
    wr.rdma.remote_addr = rx.va((s - 1) * msg);
    wr.rdma.rkey = rx.mr.rkey;
    if (tx.dev->post_send(tx.qps[0], std::span(&wr, 1), nullptr) != Errc::kOk) {
      r.fail("sender " + std::to_string(s) + ": post_send failed");
      return;
    }
    ++tx.posted;
  }
}

void poll_completions(Run& r, std::uint32_t s) {
  Nic& tx = *r.nics[s];
  IncastFlow& f = r.result.flows[s - 1];
  Wc wcs[32];
  for (;;) {
    auto n = tx.dev->poll_cq(tx.cq, wcs);
    if (!n.ok() || n.value() == 0) break;
    for (std::size_t i = 0; i < n.value(); ++i) {
      if (wcs[i].status != WcStatus::kSuccess || wcs[i].wr_id != tx.completed) {
        r.fail("sender " + std::to_string(s) + ": completion of WRITE " +
               std::to_string(wcs[i].wr_id) + " status " + wc_status_name(wcs[i].status) +
               ", expected WRITE " + std::to_string(tx.completed));
        return;
      }
      ++tx.completed;
      ++f.completed;
      if (!r.converged.at.is_never() && r.ended.at.is_never()) {
        f.goodput_bytes += r.opt.message_bytes;
      }
    }
  }
}

Snapshot snapshot(const Run& r) {
  Snapshot s;
  s.at = r.now;
  s.port = r.net.port_stats(r.nics[0]->id);
  for (std::uint64_t b : s.port.forwarded_bytes_by_source) s.forwarded += b;
  // Bytes the port has taken but not yet sent on have not used its capacity yet.
  s.forwarded -= r.net.port_queue_bytes(r.nics[0]->id, r.now);
  s.drops = s.port.dropped_frames;
  return s;
}

// DCQCN's reaction point of sender `s`'s QP, or nullptr without DCQCN.
const cc::Dcqcn* dcqcn_of(Run& r, std::uint32_t s) {
  Nic& tx = *r.nics[s];
  const verbs::detail::QpObj* q = DeviceTestAccess::state(*tx.dev).qp_for_qpn(tx.qpns[0]);
  return q == nullptr ? nullptr : dynamic_cast<const cc::Dcqcn*>(q->cc.get());
}

void sample(Run& r) {
  IncastSample x;
  x.at_ns = (r.now - r.start).count_ns();
  const HostId port = r.nics[0]->id;
  x.queue_bytes = r.net.port_queue_bytes(port, r.now);
  const PortStats& ps = r.net.port_stats(port);
  x.drops = ps.dropped_frames;
  x.ecn_marked = ps.ecn_marked;
  for (std::uint32_t s = 1; s < r.nics.size(); ++s) {
    const cc::Dcqcn* d = dcqcn_of(r, s);
    x.rate_mbps.push_back(d == nullptr ? 0 : d->reaction_point().current_mbps());
    std::uint64_t cnps = 0, retransmitted = 0;
    for (transport::Qp* qp : r.nics[s]->dev->live_qps()) {
      cnps += qp->counters().rp_cnp_handled;
      retransmitted += qp->counters().retransmitted_packets;
    }
    x.cnps.push_back(cnps);
    x.retransmitted.push_back(retransmitted);
    const HostId id = r.nics[s]->id;
    x.forwarded_bytes.push_back(
        id < ps.forwarded_bytes_by_source.size() ? ps.forwarded_bytes_by_source[id] : 0);
  }
  r.result.trace.push_back(std::move(x));
}

bool all_done(const Run& r) {
  for (std::size_t s = 1; s < r.nics.size(); ++s) {
    if (r.nics[s]->completed != r.nics[s]->posted) return false;
  }
  return true;
}

// One step at r.now: frames due to their hosts, receiving rounds where there is something to
// receive or a wake-up is due, completions polled and WRITEs posted, transmit rounds for hosts
// that posted.
void step(Run& r) {
  Delivery d;
  while (r.net.poll_delivery(r.now, d)) r.nics[d.to]->inbox.push_back(std::move(d.frame));
  for (auto& n : r.nics) {
    if (!n->inbox.empty() || n->wake <= r.now) {
      do {
        n->round(r.now, engine::Engine::RoundKind::kReceive);
      } while (!n->inbox.empty());
    }
  }
  for (std::uint32_t s = 1; s < r.nics.size() && r.result.ok; ++s) {
    poll_completions(r, s);
    post_writes(r, s);
  }
  for (auto& n : r.nics) {
    // A packet refused while the wire was busy goes in a transmit round once it is free.
    if (n->refused && n->wire_free <= r.now) n->doorbell_rang = true;
    if (!n->doorbell_rang) continue;
    n->doorbell_rang = false;
    n->round(r.now, engine::Engine::RoundKind::kTransmit);
  }
}

void run_loop(Run& r) {
  const Instant converge = r.start + Duration::ns(r.opt.converge_ns);
  const Instant stop = r.start + Duration::ns(r.opt.duration_ns);
  const Instant give_up = stop + Duration::ns(kDrainLimitNs);
  for (std::uint32_t s = 1; s < r.nics.size(); ++s) post_writes(r, s);
  for (auto& n : r.nics) n->round(r.now, engine::Engine::RoundKind::kTransmit);
  if (r.opt.trace_interval_ns > 0) r.next_sample = r.now;
  while (r.result.ok) {
    if (r.now >= stop && all_done(r)) break;
    Instant t = r.net.next_event_time();
    for (const auto& n : r.nics) t = earliest(t, n->wake);
    if (r.converged.at.is_never()) t = earliest(t, converge);
    if (r.ended.at.is_never()) t = earliest(t, stop);
    if (!t.is_never() && r.now < stop) t = earliest(t, r.next_sample);
    if (t.is_never()) {
      r.fail("stalled: WRITEs outstanding but nothing scheduled");
      break;
    }
    if (t > give_up) {
      r.fail("liveness: WRITEs unfinished 2 s after the senders stopped posting");
      break;
    }
    if (t > r.now) r.now = t;
    if (r.converged.at.is_never() && r.now >= converge) r.converged = snapshot(r);
    if (r.ended.at.is_never() && r.now >= stop) r.ended = snapshot(r);
    if (r.next_sample <= r.now) {
      sample(r);
      r.next_sample = r.now + Duration::ns(r.opt.trace_interval_ns);
    }
    step(r);
  }
}

void check_memory(Run& r) {
  const std::size_t msg = r.opt.message_bytes;
  std::vector<std::byte> want(msg);
  for (std::uint32_t s = 1; s < r.nics.size(); ++s) {
    const Nic& tx = *r.nics[s];
    if (tx.posted == 0) continue;
    fill_message(want, s, tx.posted - 1);
    if (std::memcmp(r.nics[0]->mem.data() + (s - 1) * msg, want.data(), msg) != 0) {
      r.fail("the receiver's region of sender " + std::to_string(s) +
             " does not hold its last WRITE");
    }
  }
}

// The payload's share of a WRITE's frames at the path MTU: each packet carries Ethernet (14),
// IPv4 (20), UDP (8), BTH (12) and ICRC (4) bytes, the first a RETH (16) too.
double payload_share(std::uint32_t message, std::uint32_t mtu) {
  const std::uint64_t packets = (std::uint64_t{message} + mtu - 1) / mtu;
  const std::uint64_t headers = packets * (14 + 20 + 8 + 12 + 4) + 16;
  return static_cast<double>(message) / static_cast<double>(message + headers);
}

void measure(Run& r) {
  IncastResult& res = r.result;
  res.goodput_ceiling = payload_share(r.opt.message_bytes, r.opt.mtu);
  const Nic& rx = *r.nics[0];
  const PortStats& port = r.net.port_stats(rx.id);
  res.drops = port.dropped_frames;
  res.ecn_marked = port.ecn_marked;
  res.queue_max_bytes = port.max_queue_bytes;
  if (!r.converged.at.is_never() && !r.ended.at.is_never() && r.ended.at > r.converged.at) {
    const double window_s = static_cast<double>((r.ended.at - r.converged.at).count_ns()) / 1e9;
    const double capacity_bytes = static_cast<double>(r.opt.link_bps) / 8 * window_s;
    res.utilisation =
        static_cast<double>(r.ended.forwarded - r.converged.forwarded) / capacity_bytes;
    res.drops_measured = r.ended.drops - r.converged.drops;
    PortStats window;
    for (std::size_t i = 0; i < window.queue_histogram.size(); ++i) {
      window.queue_histogram[i] =
          r.ended.port.queue_histogram[i] - r.converged.port.queue_histogram[i];
    }
    res.queue_p99_bytes = window.queue_percentile_bytes(990);
    std::vector<double> goodput;
    double sum = 0;
    for (const IncastFlow& f : res.flows) {
      goodput.push_back(static_cast<double>(f.goodput_bytes));
      sum += static_cast<double>(f.goodput_bytes);
    }
    res.goodput_share = sum / capacity_bytes;
    res.jain = jain_index(goodput);
  }
  for (transport::Qp* qp : rx.dev->live_qps()) res.cnps_sent += qp->counters().np_cnp_sent;
  for (std::uint32_t s = 1; s < r.nics.size(); ++s) {
    IncastFlow& f = res.flows[s - 1];
    for (transport::Qp* qp : r.nics[s]->dev->live_qps()) {
      f.retransmitted_packets += qp->counters().retransmitted_packets;
      f.timeouts += qp->counters().timeouts;
      f.cnps_received += qp->counters().rp_cnp_handled;
    }
  }
}

}  // namespace

double jain_index(const std::vector<double>& x) {
  double sum = 0, squares = 0;
  for (double v : x) {
    sum += v;
    squares += v * v;
  }
  if (x.empty() || squares == 0) return 0;
  return sum * sum / (static_cast<double>(x.size()) * squares);
}

IncastResult run_incast(const IncastOptions& opt) {
  Run r(opt);
  if (opt.senders == 0 || opt.senders > 250 || opt.window == 0 || opt.message_bytes == 0 ||
      opt.converge_ns >= opt.duration_ns) {
    r.fail("invalid incast options");
    return r.result;
  }
  r.result.flows.resize(opt.senders);
  if (!setup(r)) {
    r.fail("setup failed");
    return r.result;
  }
  run_loop(r);
  if (r.result.ok) check_memory(r);
  measure(r);
  return r.result;
}

}  // namespace uroce::sim
