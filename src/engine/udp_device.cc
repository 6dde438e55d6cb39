#include "engine/udp_device.h"

#include <poll.h>

#include <algorithm>
#include <chrono>

namespace uroce::engine {

Instant UdpDevice::now() {
  return Instant::from_ns(std::chrono::duration_cast<std::chrono::nanoseconds>(
                              std::chrono::steady_clock::now().time_since_epoch())
                              .count());
}

Result<std::unique_ptr<UdpDevice>, std::string> UdpDevice::open(const DeviceConfig& config,
                                                                std::uint16_t port) {
  auto dev = Device::create(config);
  if (!dev.ok()) return Err{std::string("invalid device configuration: ") + errc_name(dev.error())};
  auto dp = datapath::UdpDatapath::open(datapath::UdpOptions{config.ip, port});
  if (!dp.ok()) return Err{dp.error()};
  std::unique_ptr<UdpDevice> d(new UdpDevice());
  d->device_ = std::move(dev.value());
  d->dp_ = std::move(dp.value());
  d->engine_ = std::make_unique<Engine>(*d, *d->dp_, config.ip);
  d->device_->set_doorbell_handler(d.get());
  return d;
}

UdpDevice::~UdpDevice() {
  if (device_) device_->set_doorbell_handler(nullptr);
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
