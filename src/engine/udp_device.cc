#include "engine/udp_device.h"

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

namespace uroce::engine {

Instant UdpDevice::now() {
  return Instant::from_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count());
}

Result<std::unique_ptr<UdpDevice>, std::string> UdpDevice::open(const DeviceConfig& config,
                                                                std::uint16_t port,
                                                                const std::string& capture_path) {
  DeviceConfig cfg = config;
  if (cfg.netdev_mtu == 0) {
    auto mtu = datapath::interface_mtu(cfg.ip);
    if (!mtu.ok()) return Err{"cannot find the interface MTU: " + mtu.error()};
    cfg.netdev_mtu = mtu.value();
  }
  auto dev = Device::create(cfg);
  if (!dev.ok()) return Err{std::string("invalid device configuration: ") + errc_name(dev.error())};
  auto dp = datapath::UdpDatapath::open(datapath::UdpOptions{config.ip, port});
  if (!dp.ok()) return Err{dp.error()};
  std::unique_ptr<UdpDevice> d(new UdpDevice());
  d->device_ = std::move(dev.value());
  d->dp_ = std::move(dp.value());
  d->engine_ = std::make_unique<Engine>(*d, *d->dp_, config.ip);
  d->device_->set_doorbell_handler(d.get());
  std::string path = capture_path;
  if (path.empty()) {
    if (const char* env = std::getenv("UROCE_PCAP")) path = env;
  }
  if (!path.empty()) {
    auto w = capture::PcapWriter::open(path);
    if (!w.ok()) return Err{"capture: " + w.error()};
    d->capture_ = std::make_unique<capture::PcapWriter>(std::move(w.value()));
    capture::PcapWriter* writer = d->capture_.get();
    d->dp_->set_tap([writer](ConstBytes frame, bool) {
      // Wall-clock timestamps, so that captures of two processes line up.
      const auto t = std::chrono::system_clock::now().time_since_epoch();
      writer->write(frame, std::chrono::duration_cast<std::chrono::nanoseconds>(t).count());
    });
  }
  return d;
}

UdpDevice::~UdpDevice() {
  if (device_) device_->set_doorbell_handler(nullptr);
  if (dp_) dp_->set_tap(nullptr);
  if (capture_) capture_->flush();
}

bool UdpDevice::progress() {
  const Instant t = now();
  const std::size_t received =
      dp_->receive(64, [&](const wire::RocePacket& pkt, const datapath::RxMeta& meta) {
        transport::PacketInfo info;
        info.src = meta.src;
        info.src_port = meta.src_port;
        info.ecn = static_cast<std::uint8_t>(meta.tos & 3u);
        info.ip_header = meta.ip_header;
        engine_->handle_rx(t, pkt, info);
      });
  engine_->handle_timers(t);
  const std::size_t sent = engine_->flush_tx(t);
  return received > 0 || sent > 0;
}

void UdpDevice::wait(Duration max_wait) {
  Duration wait = max_wait;
  const Instant next = engine_->next_timeout();
  if (!next.is_never()) wait = std::min(wait, std::max(next - now(), Duration::zero()));
  if (engine_->has_tx_work()) wait = Duration::zero();
  pollfd p{dp_->fd(), POLLIN, 0};
  const auto ms = static_cast<int>((wait.count_ns() + 999'999) / 1'000'000);
  ::poll(&p, 1, ms);
  progress();
}

}  // namespace uroce::engine
