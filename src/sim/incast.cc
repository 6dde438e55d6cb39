#include "sim/incast.h"

#include <algorithm>
#include <cstring>

#include "sim/failure.h"
#include "sim/scenario_host.h"
#include "transport/qp.h"
#include "verbs/connect.h"
#include "verbs/device_state.h"

namespace uroce::sim {

namespace {

constexpr std::int64_t kDrainLimitNs = 2'000'000'000;  // after the posting ends: liveness bound

struct Snapshot {
  Instant at = Instant::never();
  std::uint64_t forwarded = 0;
  std::uint64_t drops = 0;
  PortStats port;
};

// A sender's stream: WRITEs posted and completed, in order.
struct Stream {
  std::uint64_t posted = 0;
  std::uint64_t completed = 0;
};

struct Run final : ScenarioApp {
  explicit Run(const IncastOptions& o) : opt(o), sc(o.seed, Instant::from_ns(1'000'000)) {}
  IncastOptions opt;
  Scenario sc;                  // host 0 the receiver, host s sender s
  std::vector<Stream> streams;  // [s - 1] sender s's
  IncastResult result;
  Snapshot converged, ended;
  Instant next_sample = Instant::never();

  Instant now() const { return sc.now(); }
  Instant converge() const { return sc.start() + Duration::ns(opt.converge_ns); }
  Instant stop() const { return sc.start() + Duration::ns(opt.duration_ns); }
  ScenarioHost& nic(std::size_t i) { return sc.host(i); }
  const ScenarioHost& nic(std::size_t i) const { return sc.host(i); }
  std::uint32_t senders() const { return static_cast<std::uint32_t>(sc.host_count() - 1); }
  void fail(const std::string& what) {
    if (!result.ok) return;
    result.ok = false;
    result.failure = failure_text(opt.seed, now() - sc.start(), what);
  }
  void step() override;
  Instant next_time() const override;
  void clock_moved() override;
};

// ---- setup -----------------------------------------------------------------------------------

bool make_nic(Run& r, std::uint32_t index, std::size_t mem_bytes) {
  DeviceConfig cfg;
  cfg.name = "incast" + std::to_string(index);
  cfg.ip = wire::IpAddress::v4(0x0a650000u + 1 + index);
  cfg.netdev_mtu = 9000;
  cfg.seed = r.opt.seed * 1000 + index;
  cfg.link_speed_mbps = static_cast<std::uint32_t>(r.opt.link_bps / 1'000'000);
  cfg.dcqcn = r.opt.dcqcn_params;
  cfg.aimd = r.opt.aimd_params;
  cfg.congestion_control = r.opt.cc;
  cfg.adaptive_recovery = r.opt.adaptive_recovery;
  ScenarioHostOptions host;
  host.wire_bps = r.opt.link_bps;
  ScenarioHost* n =
      r.sc.add_host(cfg, MacAddress{0x02, 0, 0, 0, 2, static_cast<std::uint8_t>(index)}, host,
                    [&r](const std::string& what) { r.fail(what); });
  return n != nullptr && n->open_memory(mem_bytes);
}

bool make_qp(Run& r, ScenarioHost& n, std::uint32_t depth) {
  if (!n.create_rc_qp(QpCap{depth, 1, 1, 1, 0})) return false;
  if (r.opt.adaptive_recovery && !r.opt.bdp_window) {
    transport::RecoveryParams p;
    p.bdp_window = false;
    p.ack_req_until_sampled = true;  // as the device sets it (verbs/qp.cc)
    n.dev().find_qp(n.qpns().back())->set_recovery(p);
  }
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
  if (!r.sc.net().configure_default(r.now(), link).ok()) return false;
  PortConfig port;
  port.bandwidth_bps = o.link_bps;
  port.queue_limit_bytes = o.port_buffer_bytes;
  port.ecn_kmin_bytes = o.ecn_kmin_bytes;
  port.ecn_kmax_bytes = o.ecn_kmax_bytes;
  port.ecn_pmax = fault::Ratio{o.ecn_pmax_percent, 100};
  port.ecn_mark_on_dequeue = o.ecn_mark_on_dequeue;
  if (!r.sc.net().configure_port(r.now(), r.nic(0).id(), port).ok()) return false;
  ScenarioHost& rx = r.nic(0);
  for (std::uint32_t i = 1; i <= o.senders; ++i) {
    ScenarioHost& tx = r.nic(i);
    if (!make_qp(r, tx, o.window) || !make_qp(r, rx, 1)) return false;
    verbs::RcConnection c;
    c.path_mtu = mtu_from_bytes(o.mtu);
    c.timeout = o.ack_timeout;
    c.access = kAccessLocalWrite | kAccessRemoteWrite;
    c.peer_ip = rx.ip();
    c.peer_qpn = rx.qpns().back();
    c.sq_psn = 0x1000 * i;
    c.rq_psn = 0x2000 * i;
    if (verbs::connect_rc_qp(tx.dev(), tx.qps().back(), c) != Errc::kOk) return false;
    c.peer_ip = tx.ip();
    c.peer_qpn = tx.qpns().back();
    std::swap(c.sq_psn, c.rq_psn);
    if (verbs::connect_rc_qp(rx.dev(), rx.qps().back(), c) != Errc::kOk) return false;
    if (o.selective_repeat) {
      tx.dev().find_qp(tx.qpns().back())->set_selective_repeat(true);
      rx.dev().find_qp(rx.qpns().back())->set_selective_repeat(true);
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
  ScenarioHost& tx = r.nic(s);
  const ScenarioHost& rx = r.nic(0);
  Stream& st = r.streams[s - 1];
  const std::size_t msg = r.opt.message_bytes;
  while (r.now() < r.stop() && st.posted - st.completed < r.opt.window) {
    const std::size_t slot = (st.posted % r.opt.window) * msg;
    fill_message(tx.mem().subspan(slot, msg), s, st.posted);
    if (tx.post_one(0, WrOpcode::kRdmaWrite, st.posted, slot, static_cast<std::uint32_t>(msg), rx,
                    (s - 1) * msg) != Errc::kOk) {
      r.fail("sender " + std::to_string(s) + ": post_send failed");
      return;
    }
    ++st.posted;
  }
}

void poll_completions(Run& r, std::uint32_t s) {
  ScenarioHost& tx = r.nic(s);
  Stream& st = r.streams[s - 1];
  IncastFlow& f = r.result.flows[s - 1];
  Wc wcs[32];
  for (;;) {
    auto n = tx.dev().poll_cq(tx.cq(), wcs);
    if (!n.ok() || n.value() == 0) break;
    for (std::size_t i = 0; i < n.value(); ++i) {
      if (wcs[i].status != WcStatus::kSuccess || wcs[i].wr_id != st.completed) {
        r.fail("sender " + std::to_string(s) + ": completion of WRITE " +
               std::to_string(wcs[i].wr_id) + " status " + wc_status_name(wcs[i].status) +
               ", expected WRITE " + std::to_string(st.completed));
        return;
      }
      ++st.completed;
      ++f.completed;
      if (!r.converged.at.is_never() && r.ended.at.is_never()) {
        f.goodput_bytes += r.opt.message_bytes;
      }
    }
  }
}

Snapshot snapshot(const Run& r) {
  Snapshot s;
  s.at = r.now();
  s.port = r.sc.net().port_stats(r.nic(0).id());
  for (std::uint64_t b : s.port.forwarded_bytes_by_source) s.forwarded += b;
  // Bytes the port has taken but not yet sent on have not used its capacity yet.
  s.forwarded -= r.sc.net().port_queue_bytes(r.nic(0).id(), r.now());
  s.drops = s.port.dropped_frames;
  return s;
}

// Sender `s`'s QP's congestion control.
const cc::CongestionControl* cc_of(Run& r, std::uint32_t s) {
  ScenarioHost& tx = r.nic(s);
  const verbs::detail::QpObj* q = DeviceTestAccess::state(tx.dev()).qp_for_qpn(tx.qpns()[0]);
  return q == nullptr ? nullptr : q->cc.get();
}

void sample(Run& r) {
  IncastSample x;
  x.at_ns = (r.now() - r.sc.start()).count_ns();
  const HostId port = r.nic(0).id();
  x.queue_bytes = r.sc.net().port_queue_bytes(port, r.now());
  const PortStats& ps = r.sc.net().port_stats(port);
  x.drops = ps.dropped_frames;
  x.ecn_marked = ps.ecn_marked;
  for (std::uint32_t s = 1; s <= r.senders(); ++s) {
    const cc::CongestionControl* c = cc_of(r, s);
    const cc::CcState state = c == nullptr ? cc::CcState{} : c->state();
    x.rate_mbps.push_back(state.rate_mbps);
    x.window.push_back(state.window_packets);
    std::uint64_t cnps = 0, retransmitted = 0;
    for (transport::Qp* qp : r.nic(s).dev().live_qps()) {
      cnps += qp->counters().rp_cnp_handled;
      retransmitted += qp->counters().retransmitted_packets;
    }
    x.cnps.push_back(cnps);
    x.retransmitted.push_back(retransmitted);
    const HostId id = r.nic(s).id();
    x.forwarded_bytes.push_back(
        id < ps.forwarded_bytes_by_source.size() ? ps.forwarded_bytes_by_source[id] : 0);
  }
  r.result.trace.push_back(std::move(x));
}

bool all_done(const Run& r) {
  for (const Stream& st : r.streams) {
    if (st.completed != st.posted) return false;
  }
  return true;
}

// The application's part of a step: completions polled and WRITEs posted.
void Run::step() {
  for (std::uint32_t s = 1; s <= senders() && result.ok; ++s) {
    poll_completions(*this, s);
    post_writes(*this, s);
  }
}

// The start and end of the measurement, and the next sample while the senders post.
Instant Run::next_time() const {
  Instant t = Instant::never();
  if (converged.at.is_never()) t = earliest(t, converge());
  if (ended.at.is_never()) t = earliest(t, stop());
  if (now() < stop()) t = earliest(t, next_sample);
  return t;
}

void Run::clock_moved() {
  if (converged.at.is_never() && now() >= converge()) converged = snapshot(*this);
  if (ended.at.is_never() && now() >= stop()) ended = snapshot(*this);
  if (next_sample <= now()) {
    sample(*this);
    next_sample = now() + Duration::ns(opt.trace_interval_ns);
  }
}

void run_loop(Run& r) {
  for (std::uint32_t s = 1; s <= r.senders(); ++s) post_writes(r, s);
  r.sc.transmit_rounds();
  if (r.opt.trace_interval_ns > 0) r.next_sample = r.now();
  const Instant give_up = r.stop() + Duration::ns(kDrainLimitNs);
  const auto done = [&r] { return !r.result.ok || (r.now() >= r.stop() && all_done(r)); };
  const Scenario::End end = r.sc.run_until(done, give_up, r);
  if (end == Scenario::End::kStalled) r.fail("stalled: WRITEs outstanding but nothing scheduled");
  if (end == Scenario::End::kDeadline) {
    r.fail("liveness: WRITEs unfinished 2 s after the senders stopped posting");
  }
}

void check_memory(Run& r) {
  const std::size_t msg = r.opt.message_bytes;
  std::vector<std::byte> want(msg);
  for (std::uint32_t s = 1; s <= r.senders(); ++s) {
    const Stream& st = r.streams[s - 1];
    if (st.posted == 0) continue;
    fill_message(want, s, st.posted - 1);
    if (std::memcmp(r.nic(0).mem().data() + (s - 1) * msg, want.data(), msg) != 0) {
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
  ScenarioHost& rx = r.nic(0);
  const PortStats& port = r.sc.net().port_stats(rx.id());
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
  for (transport::Qp* qp : rx.dev().live_qps()) res.cnps_sent += qp->counters().np_cnp_sent;
  for (std::uint32_t s = 1; s <= r.senders(); ++s) {
    IncastFlow& f = res.flows[s - 1];
    for (transport::Qp* qp : r.nic(s).dev().live_qps()) {
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
  r.streams.resize(opt.senders);
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
