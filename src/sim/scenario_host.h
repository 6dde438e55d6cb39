// The hosts of a scenario on the simulated network and the one event loop that runs them
// (sim/lossy_flow.cc, sim/incast.cc and tests/sim/selective_repeat_test.cc run on it).
//
// A ScenarioHost is the real verbs device, engine and Scheduler (a device's defaults), its socket
// a queue of the frames the Network delivered to it, and an application that calls progress as a
// polling one does: a receiving round when a frame is waiting or the Scheduler's wake-up is due, a
// transmitting round after a doorbell. Optionally its NIC sends one frame at a time at the link's
// rate (ScenarioHostOptions::wire_bps), and its process is a slow or descheduled one: a finite
// socket buffer, a CPU cost per frame received, periods in which it runs no round at all.
//
// A Scenario owns the network, the clock and the hosts. Scenario::run_until moves the clock from
// event to event (the network's next frame, the hosts' wake-ups, the application's own times) and
// at each does one step: frames due to their hosts, receiving rounds, the application's step
// (poll completions, post work), transmitting rounds where a doorbell rang.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "datapath/datapath.h"
#include "engine/engine.h"
#include "engine/scheduler.h"
#include "sim/network.h"
#include "uroce/verbs.h"

namespace uroce::sim {

struct ScenarioHostOptions {
  engine::AckPolicyConfig acks;  // a device's defaults: ACKs held and deferred
  // > 0: the NIC's transmitter, one frame at a time at this rate. A packet the engine offers
  // while the one before is still on the wire is refused (backpressure: the engine keeps it and
  // offers it again once the wire is free), so the network sees the host's frames in the order
  // they reach the switch, and a paced QP's rate is the rate its packets leave at. 0: no limit.
  std::uint64_t wire_bps = 0;
  // > 0: the socket's receive buffer, in bytes of frames. A frame that arrives when it would not
  // fit beside those waiting is dropped, as the kernel drops a datagram for a full SO_RCVBUF
  // (counted: ScenarioHost::socket_drops). 0: no limit.
  std::uint64_t socket_buffer_bytes = 0;
  // > 0: each frame a receiving round takes from the socket keeps the process busy this long (the
  // CPU a slow host spends on a packet): it runs no round until then, one round at a time.
  std::int64_t frame_cost_ns = 0;
  // > 0 both: the process is descheduled for the first `off_ns` of every `period_ns` of the
  // clock (from time 0): it runs no round, its timers wait, frames pile up in its socket.
  std::int64_t deschedule_period_ns = 0;
  std::int64_t deschedule_off_ns = 0;
};

class ScenarioHost final : public engine::QpDirectory,
                           public datapath::Datapath,
                           public DoorbellHandler {
 public:
  // A host with `cfg`'s device (cfg.ip its address) added to `net` with `mac`, its rounds at
  // `clock`'s time; `fail` hears of a frame that did not parse (these networks corrupt nothing).
  // Null when anything failed.
  static std::unique_ptr<ScenarioHost> create(Network& net, const Instant& clock,
                                              const DeviceConfig& cfg, MacAddress mac,
                                              const ScenarioHostOptions& opt,
                                              std::function<void(const std::string&)> fail);

  HostId id() const { return id_; }
  const wire::IpAddress& ip() const { return ip_; }
  Device& dev() { return *dev_; }
  const Device& dev() const { return *dev_; }
  // When the host next has something to do: the Scheduler's wake-up, and for a slow or
  // descheduled one (ScenarioHostOptions) frames waiting or a doorbell, once it runs again.
  Instant wake() const;
  // Frames the socket's buffer had no room for (ScenarioHostOptions::socket_buffer_bytes).
  std::uint64_t socket_drops() const { return socket_drops_; }

  // The application's memory: `bytes` in a PD, registered for local and remote writes, and one
  // CQ of 4096 entries for every QP. False when the device refused.
  bool open_memory(std::size_t bytes);
  std::span<std::byte> mem() { return mem_; }
  std::span<const std::byte> mem() const { return mem_; }
  std::uint64_t va(std::size_t off) const {
    return reinterpret_cast<std::uint64_t>(mem_.data()) + off;
  }
  const MrInfo& mr() const { return mr_; }
  CqHandle cq() const { return cq_; }
  // An RC QP in the memory's PD on its CQ; false when the device refused. Its handle and number
  // are appended to qps() and qpns().
  bool create_rc_qp(const QpCap& cap);
  const std::vector<QpHandle>& qps() const { return qps_; }
  // Posts a signaled `op` (an RDMA WRITE or a SEND) with id `wr_id` on qps()[qp] of `len` bytes
  // of the memory at `off`; a WRITE's target is `peer`'s memory at `peer_off`.
  Errc post_one(std::size_t qp, WrOpcode op, std::uint64_t wr_id, std::size_t off,
                std::uint32_t len, const ScenarioHost& peer, std::size_t peer_off);
  const std::vector<std::uint32_t>& qpns() const { return qpns_; }

  // A frame the network delivered, for the next receiving round (dropped when the socket's
  // buffer is full).
  void deliver(std::vector<std::byte> frame);
  // Receiving rounds at `now` until no frame waits, if one waits or the wake-up is due.
  void receive_rounds(Instant now);
  // A transmitting round at `now` if a doorbell rang since the last one, or a packet the wire
  // refused can go now.
  void transmit_round_if_rang(Instant now);
  void round(Instant now, engine::Engine::RoundKind kind);

  transport::Qp* find_qp(std::uint32_t qpn) override { return dev_->find_qp(qpn); }
  std::size_t receive(Instant now, std::size_t max, const RxHandler& handler) override;
  bool send(Instant now, const wire::OuterHeaders& o, ConstBytes transport_headers,
            std::span<const ConstBytes> payload) override;
  Instant next_deadline() const override { return refused_ ? wire_free_ : Instant::never(); }
  void doorbell(std::uint32_t qpn) override;
  void qp_changing(std::uint32_t qpn) override;

 private:
  ScenarioHost(Network& net, const Instant& clock, const ScenarioHostOptions& opt,
               std::function<void(const std::string&)> fail)
      : net_(net), clock_(clock), opt_(opt), fail_(std::move(fail)) {}
  bool throttled() const {
    return opt_.frame_cost_ns > 0 || (opt_.deschedule_period_ns > 0 && opt_.deschedule_off_ns > 0);
  }
  // The earliest time at or after `t` at which the process runs (not busy, not descheduled).
  Instant runnable_at(Instant t) const;
  Network& net_;
  const Instant& clock_;
  ScenarioHostOptions opt_;
  std::function<void(const std::string&)> fail_;
  HostId id_ = 0;
  wire::IpAddress ip_;
  std::unique_ptr<Device> dev_;
  std::unique_ptr<engine::Engine> engine_;
  std::unique_ptr<engine::Scheduler> sched_;
  std::deque<std::vector<std::byte>> inbox_;
  std::uint64_t inbox_bytes_ = 0;
  std::uint64_t socket_drops_ = 0;
  std::uint64_t frames_taken_ = 0;
  Instant busy_until_ = Instant::from_ns(0);  // with frame_cost_ns
  std::vector<std::byte> frame_;
  Instant wake_ = Instant::never();  // the Scheduler's app_wait_until after the last round
  bool rang_ = false;
  Instant wire_free_ = Instant::from_ns(0);  // with wire_bps: when the last frame is out
  bool refused_ = false;                     // since the wire was last free
  std::vector<std::byte> mem_;
  PdHandle pd_;
  MrInfo mr_;
  CqHandle cq_;
  std::vector<QpHandle> qps_;
  std::vector<std::uint32_t> qpns_;
};

// What an application does in a Scenario's run_until.
class ScenarioApp {
 public:
  virtual ~ScenarioApp() = default;
  // Between the receiving and the transmitting rounds of a step: poll completions, post work.
  virtual void step() = 0;
  // A time of the application's the loop stops at besides the network's and the hosts' (the
  // start of a measurement, a sample); never for none.
  virtual Instant next_time() const { return Instant::never(); }
  // Once the clock has moved, before the step's frames are delivered (snapshots).
  virtual void clock_moved() {}
};

class Scenario {
 public:
  // A network seeded with `seed`, the clock at `start`.
  Scenario(std::uint64_t seed, Instant start) : net_(seed), start_(start), now_(start) {}

  Network& net() { return net_; }
  const Network& net() const { return net_; }
  Instant start() const { return start_; }
  Instant now() const { return now_; }

  // Adds a host (ScenarioHost::create at this scenario's clock); null when that failed. Hosts
  // are numbered in the order they were added, which is their network HostId.
  ScenarioHost* add_host(const DeviceConfig& cfg, MacAddress mac, const ScenarioHostOptions& opt,
                         std::function<void(const std::string&)> fail);
  std::size_t host_count() const { return hosts_.size(); }
  ScenarioHost& host(std::size_t i) { return *hosts_[i]; }
  const ScenarioHost& host(std::size_t i) const { return *hosts_[i]; }

  // A transmitting round on every host at now: the first, after the application's first posts.
  void transmit_rounds();

  enum class End {
    kDone,      // `done` held
    kStalled,   // nothing left scheduled
    kDeadline,  // the next event was after the deadline
  };
  // Steps (see the top of this file) from event to event until `done()` holds, checked before
  // every step. The clock never moves back and never past `deadline`.
  End run_until(const std::function<bool()>& done, Instant deadline, ScenarioApp& app);

 private:
  void step(ScenarioApp& app);
  Network net_;
  Instant start_;
  Instant now_;
  std::vector<std::unique_ptr<ScenarioHost>> hosts_;
};

}  // namespace uroce::sim
