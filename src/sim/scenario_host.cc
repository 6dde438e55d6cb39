#include "sim/scenario_host.h"

#include "sim/sim_socket.h"

namespace uroce::sim {

std::unique_ptr<ScenarioHost> ScenarioHost::create(Network& net, const DeviceConfig& cfg,
                                                   MacAddress mac,
                                                   std::function<void(const std::string&)> fail) {
  std::unique_ptr<ScenarioHost> h(new ScenarioHost(net, std::move(fail)));
  auto id = net.add_host(cfg.ip, mac);
  if (!id.ok()) return nullptr;
  h->id_ = id.value();
  h->ip_ = cfg.ip;
  auto dev = Device::create(cfg);
  if (!dev.ok()) return nullptr;
  h->dev_ = std::move(dev.value());
  h->engine_ = std::make_unique<engine::Engine>(*h, *h, h->ip_);
  h->sched_ = std::make_unique<engine::Scheduler>(engine::SchedulerConfig{});
  h->engine_->set_defer_acks(true);
  h->dev_->set_doorbell_handler(h.get());
  return h;
}

void ScenarioHost::receive_rounds(Instant now) {
  if (inbox_.empty() && wake_ > now) return;
  do {
    round(now, engine::Engine::RoundKind::kReceive);
  } while (!inbox_.empty());
}

void ScenarioHost::transmit_round_if_rang(Instant now) {
  if (!rang_) return;
  rang_ = false;
  round(now, engine::Engine::RoundKind::kTransmit);
}

void ScenarioHost::round(Instant now, engine::Engine::RoundKind kind) {
  now_ = now;
  const engine::RoundReport rep = engine::run_app_round(*engine_, *sched_, now, kind).report;
  wake_ = sched_->app_wait_until(now, Instant::never(), rep);
}

std::size_t ScenarioHost::receive(Instant, std::size_t max, const RxHandler& handler) {
  return receive_frames(inbox_, max, handler, [this] {
    fail_("host " + std::to_string(id_) + " received a frame that did not parse");
  });
}

bool ScenarioHost::send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
                        std::span<const ConstBytes> payload) {
  send_frame(net_, id_, now, o, transport_headers, payload, frame_);
  return true;
}

void ScenarioHost::doorbell(std::uint32_t qpn) {
  engine_->doorbell(qpn);
  rang_ = true;
}

void ScenarioHost::qp_changing(std::uint32_t) { engine_->flush_held_acks(now_, *sched_); }

}  // namespace uroce::sim
