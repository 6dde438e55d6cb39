#include "sim/scenario_host.h"

#include "base/assert.h"
#include "sim/sim_socket.h"

namespace uroce::sim {

std::unique_ptr<ScenarioHost> ScenarioHost::create(Network& net, const Instant& clock,
                                                   const DeviceConfig& cfg, MacAddress mac,
                                                   const ScenarioHostOptions& opt,
                                                   std::function<void(const std::string&)> fail) {
  std::unique_ptr<ScenarioHost> h(new ScenarioHost(net, clock, opt, std::move(fail)));
  auto id = net.add_host(cfg.ip, mac);
  if (!id.ok()) return nullptr;
  h->id_ = id.value();
  h->ip_ = cfg.ip;
  auto dev = Device::create(cfg);
  if (!dev.ok()) return nullptr;
  h->dev_ = std::move(dev.value());
  h->engine_ = std::make_unique<engine::Engine>(*h, *h, h->ip_);
  engine::SchedulerConfig sc;
  sc.acks = opt.acks;
  h->sched_ = std::make_unique<engine::Scheduler>(sc);
  h->dev_->set_doorbell_handler(h.get());
  return h;
}

bool ScenarioHost::open_memory(std::size_t bytes) {
  mem_.assign(bytes, std::byte{0});
  auto pd = dev_->alloc_pd();
  if (!pd.ok()) return false;
  pd_ = pd.value();
  auto mr = dev_->reg_mr(pd_, mem_.data(), mem_.size(), kAccessLocalWrite | kAccessRemoteWrite);
  if (!mr.ok()) return false;
  mr_ = mr.value();
  auto cq = dev_->create_cq(CqInitAttr{4096, 0, 0});
  if (!cq.ok()) return false;
  cq_ = cq->handle;
  return true;
}

bool ScenarioHost::create_rc_qp(const QpCap& cap) {
  QpInitAttr init;
  init.qp_type = QpType::kRc;
  init.send_cq = cq_;
  init.recv_cq = cq_;
  init.cap = cap;
  auto qp = dev_->create_qp(pd_, init);
  if (!qp.ok()) return false;
  qps_.push_back(qp->handle);
  qpns_.push_back(qp->qp_num);
  return true;
}

Errc ScenarioHost::post_one(std::size_t qp, WrOpcode op, std::uint64_t wr_id, std::size_t off,
                            std::uint32_t len, const ScenarioHost& peer, std::size_t peer_off) {
  const Sge sge{va(off), len, mr_.lkey};
  SendWr wr;
  wr.wr_id = wr_id;
  wr.opcode = op;
  wr.send_flags = kSendSignaled;
  wr.sg_list = std::span(&sge, 1);
  wr.rdma.remote_addr = peer.va(peer_off);
  wr.rdma.rkey = peer.mr().rkey;
  return dev_->post_send(qps_[qp], std::span(&wr, 1), nullptr);
}

Instant ScenarioHost::runnable_at(Instant t) const {
  if (busy_until_ > t) t = busy_until_;
  if (opt_.deschedule_period_ns > 0 && opt_.deschedule_off_ns > 0) {
    const std::int64_t phase = t.ns() % opt_.deschedule_period_ns;
    if (phase < opt_.deschedule_off_ns) t = t + Duration::ns(opt_.deschedule_off_ns - phase);
  }
  return t;
}

Instant ScenarioHost::wake() const {
  if (!throttled()) return wake_;
  // Frames and doorbells wait for the process to run again (an unthrottled host takes them in the
  // step that brought them).
  Instant t = wake_;
  if (!inbox_.empty() || rang_) t = earliest(t, clock_);
  return t.is_never() ? t : runnable_at(t);
}

void ScenarioHost::deliver(std::vector<std::byte> frame) {
  if (opt_.socket_buffer_bytes > 0 && inbox_bytes_ + frame.size() > opt_.socket_buffer_bytes) {
    ++socket_drops_;
    return;
  }
  inbox_bytes_ += frame.size();
  inbox_.push_back(std::move(frame));
}

void ScenarioHost::receive_rounds(Instant now) {
  if (inbox_.empty() && wake_ > now) return;
  if (throttled()) {
    if (runnable_at(now) > now) return;
    // One round, then the CPU its frames cost.
    const std::uint64_t taken = frames_taken_;
    round(now, engine::Engine::RoundKind::kReceive);
    busy_until_ =
        now + Duration::ns(opt_.frame_cost_ns * static_cast<std::int64_t>(frames_taken_ - taken));
    return;
  }
  do {
    round(now, engine::Engine::RoundKind::kReceive);
  } while (!inbox_.empty());
}

void ScenarioHost::transmit_round_if_rang(Instant now) {
  if (refused_ && wire_free_ <= now) rang_ = true;
  if (!rang_ || (throttled() && runnable_at(now) > now)) return;
  rang_ = false;
  round(now, engine::Engine::RoundKind::kTransmit);
}

void ScenarioHost::round(Instant now, engine::Engine::RoundKind kind) {
  const engine::RoundReport rep = engine::run_app_round(*engine_, *sched_, now, kind).report;
  wake_ = sched_->app_wait_until(now, Instant::never(), rep);
  // Work left to transmit while the wire is busy waits for the wire (the Scheduler would have it
  // go again at once).
  if (refused_ && wake_ < wire_free_) wake_ = wire_free_;
}

std::size_t ScenarioHost::receive(Instant, std::size_t max, const RxHandler& handler) {
  for (std::size_t i = 0; i < max && i < inbox_.size(); ++i) inbox_bytes_ -= inbox_[i].size();
  const std::size_t n = receive_frames(inbox_, max, handler, [this] {
    fail_("host " + std::to_string(id_) + " received a frame that did not parse");
  });
  frames_taken_ += n;
  return n;
}

bool ScenarioHost::send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
                        std::span<const ConstBytes> payload) {
  if (opt_.wire_bps > 0 && wire_free_ > now) {
    refused_ = true;
    return false;
  }
  refused_ = false;
  send_frame(net_, id_, now, o, transport_headers, payload, frame_);
  if (opt_.wire_bps > 0) {
    const unsigned __int128 bits_ns =
        static_cast<unsigned __int128>(frame_.size()) * 8 * 1'000'000'000u;
    const std::uint64_t bps = opt_.wire_bps;
    wire_free_ = now + Duration::ns(static_cast<std::int64_t>((bits_ns + bps - 1) / bps));
  }
  return true;
}

void ScenarioHost::doorbell(std::uint32_t qpn) {
  engine_->doorbell(qpn);
  rang_ = true;
}

void ScenarioHost::qp_changing(std::uint32_t) { engine_->flush_held_acks(clock_, sched_->acks()); }

ScenarioHost* Scenario::add_host(const DeviceConfig& cfg, MacAddress mac,
                                 const ScenarioHostOptions& opt,
                                 std::function<void(const std::string&)> fail) {
  auto h = ScenarioHost::create(net_, now_, cfg, mac, opt, std::move(fail));
  if (h == nullptr) return nullptr;
  UROCE_ASSERT(h->id() == hosts_.size());
  hosts_.push_back(std::move(h));
  return hosts_.back().get();
}

void Scenario::transmit_rounds() {
  for (auto& h : hosts_) h->round(now_, engine::Engine::RoundKind::kTransmit);
}

Scenario::End Scenario::run_until(const std::function<bool()>& done, Instant deadline,
                                  ScenarioApp& app) {
  while (!done()) {
    Instant t = earliest(net_.next_event_time(), app.next_time());
    for (const auto& h : hosts_) t = earliest(t, h->wake());
    if (t.is_never()) return End::kStalled;
    if (t > deadline) return End::kDeadline;
    if (t > now_) now_ = t;
    app.clock_moved();
    step(app);
  }
  return End::kDone;
}

void Scenario::step(ScenarioApp& app) {
  Delivery d;
  while (net_.poll_delivery(now_, d)) hosts_[d.to]->deliver(std::move(d.frame));
  for (auto& h : hosts_) h->receive_rounds(now_);
  app.step();
  for (auto& h : hosts_) h->transmit_round_if_rang(now_);
}

}  // namespace uroce::sim
