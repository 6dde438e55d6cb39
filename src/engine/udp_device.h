// A verbs device served over the real network: the Device, a UDP datapath bound to its IP
// address, and the progress engine, driven by the application's own polling (the
// application-driven mode; a background progress thread comes next).
//
//   auto dev = UdpDevice::open(config);          // binds config.ip, UDP port 4791
//   dev->device().post_send(...);               // rings the engine's doorbell
//   dev->progress();                            // receive, timers, transmit: never blocks
//   dev->wait(Duration::ms(1));                 // or block until a packet or a timer is due
//
// Single-threaded: the Device and progress() are used from one thread.
#pragma once

#include <memory>
#include <string>

#include "base/result.h"
#include "base/time.h"
#include "capture/pcap_file.h"
#include "datapath/udp.h"
#include "engine/engine.h"
#include "uroce/verbs.h"

namespace uroce::engine {

class UdpDevice final : public QpDirectory, public DoorbellHandler {
 public:
  // config.netdev_mtu 0 means "the MTU of the interface that holds config.ip": the port MTU
  // then follows as rxe derives it (largest power of two <= MTU - 80, at most 4096).
  // `capture_path`: write every packet sent and received to this pcap file (readable by
  // Wireshark and `uroce pcap check`); when empty, the environment variable UROCE_PCAP names
  // the file, if set.
  static Result<std::unique_ptr<UdpDevice>, std::string> open(
      const DeviceConfig& config, std::uint16_t port = wire::kRoceV2Port,
      const std::string& capture_path = "");
  ~UdpDevice() override;

  Device& device() { return *device_; }
  const Engine& engine() const { return *engine_; }
  const datapath::UdpDatapath& datapath() const { return *dp_; }
  int fd() const { return dp_->fd(); }

  // One round of progress now. Returns true if anything was received or sent.
  bool progress();
  // Waits until a packet arrives, a timer is due or `max_wait` passes, then progresses.
  void wait(Duration max_wait);
  // The monotonic clock the engine runs on.
  static Instant now();

  // QpDirectory and DoorbellHandler, for the engine and the device.
  transport::Qp* find_qp(std::uint32_t qpn) override { return device_->find_qp(qpn); }
  void doorbell(std::uint32_t qpn) override { engine_->doorbell(qpn); }

 private:
  UdpDevice() = default;

  std::unique_ptr<Device> device_;
  std::unique_ptr<datapath::UdpDatapath> dp_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<capture::PcapWriter> capture_;
};

}  // namespace uroce::engine
