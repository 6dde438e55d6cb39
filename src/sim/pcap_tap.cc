#include "sim/pcap_tap.h"

#include "wire/packet.h"

namespace uroce::sim {

Result<std::unique_ptr<PcapTap>, std::string> PcapTap::open(const std::string& path,
                                                            const PcapTapOptions& options) {
  auto w = capture::PcapWriter::open(path, static_cast<int>(wire::LinkType::kEthernet));
  if (!w.ok()) return Err{w.error()};
  return std::make_unique<PcapTap>(std::move(w).value(), options);
}

void PcapTap::on_frame(const TapEvent& e) {
  const bool wanted = (e.point == TapPoint::kDeliver && options_.deliveries) ||
                      (e.point == TapPoint::kSend && options_.sends) ||
                      (e.point == TapPoint::kDrop && options_.drops);
  if (!wanted) return;
  writer_.write(e.frame, e.time.ns() + options_.epoch_ns);
  ++frames_written_;
}

}  // namespace uroce::sim
