// A host of a scenario on the simulated network: the real verbs device, engine and Scheduler (a
// device's defaults, deferred ACKs on), their socket a queue of the frames the Network delivered
// to it, and an application that calls progress as a polling one does: a receiving round when a
// frame is waiting or the Scheduler's wake-up is due, a transmitting round after a doorbell.
// sim/lossy_flow.cc runs its hosts on it (sim/incast.cc has its own, the same in substance).
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "datapath/datapath.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "sim/network.h"
#include "uroce/verbs.h"

namespace uroce::sim {

class ScenarioHost final : public engine::QpDirectory,
                           public datapath::Datapath,
                           public DoorbellHandler {
 public:
  // A host with `cfg`'s device (cfg.ip its address) added to `net` with `mac`; `fail` hears of a
  // frame that did not parse (these networks corrupt nothing). Null when anything failed.
  static std::unique_ptr<ScenarioHost> create(Network& net, const DeviceConfig& cfg, MacAddress mac,
                                              std::function<void(const std::string&)> fail);

  HostId id() const { return id_; }
  const wire::IpAddress& ip() const { return ip_; }
  Device& dev() { return *dev_; }
  const Device& dev() const { return *dev_; }
  Instant wake() const { return wake_; }

  // A frame the network delivered, for the next receiving round.
  void deliver(std::vector<std::byte> frame) { inbox_.push_back(std::move(frame)); }
  // Receiving rounds at `now` until no frame waits, if one waits or the wake-up is due.
  void receive_rounds(Instant now);
  // A transmitting round at `now` if a doorbell rang since the last one.
  void transmit_round_if_rang(Instant now);
  void round(Instant now, engine::Engine::RoundKind kind);

  transport::Qp* find_qp(std::uint32_t qpn) override { return dev_->find_qp(qpn); }
  std::size_t receive(Instant now, std::size_t max, const RxHandler& handler) override;
  bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
            std::span<const ConstBytes> payload) override;
  void doorbell(std::uint32_t qpn) override;
  void qp_changing(std::uint32_t qpn) override;

 private:
  ScenarioHost(Network& net, std::function<void(const std::string&)> fail)
      : net_(net), fail_(std::move(fail)) {}
  Network& net_;
  std::function<void(const std::string&)> fail_;
  HostId id_ = 0;
  wire::IpAddress ip_;
  std::unique_ptr<Device> dev_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> sched_;
  std::deque<std::vector<std::byte>> inbox_;
  std::vector<std::byte> frame_;
  Instant now_;  // of the last round
  Instant wake_ = Instant::never();
  bool rang_ = false;
};

}  // namespace uroce::sim
