// Capture of the simulated network's traffic through capture::PcapWriter: every frame as it
// arrives (as the receiver sees it: corrupted, ECN-marked), and optionally as it was sent and as
// it was dropped, each with its simulated timestamp. Attach with Network::set_tap().
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "base/result.h"
#include "capture/pcap_file.h"
#include "sim/network.h"

namespace uroce::sim {

struct PcapTapOptions {
  bool deliveries = true;
  bool sends = false;
  bool drops = false;
  // Added to the simulated time (ns) to make the pcap timestamp; 0 shows the run as starting in
  // 1970, which Wireshark displays fine.
  std::int64_t epoch_ns = 0;
};

class PcapTap final : public FrameTap {
 public:
  // An Ethernet (LINKTYPE_ETHERNET) capture with nanosecond timestamps.
  static Result<std::unique_ptr<PcapTap>, std::string> open(const std::string& path,
                                                            const PcapTapOptions& options = {});
  PcapTap(capture::PcapWriter writer, const PcapTapOptions& options)
      : writer_(std::move(writer)), options_(options) {}

  void on_frame(const TapEvent& e) override;
  void flush() { writer_.flush(); }
  std::uint64_t frames_written() const { return frames_written_; }

 private:
  capture::PcapWriter writer_;
  PcapTapOptions options_;
  std::uint64_t frames_written_ = 0;
};

}  // namespace uroce::sim
