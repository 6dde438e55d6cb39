// How one directional link of the simulated network behaves: delay, jitter, bandwidth and its
// transmit queue, and the probabilistic faults (loss, duplication, reordering, corruption, ECN
// marking). Every probability is an integer ratio, so that a printed configuration reproduces
// exactly (TigerBeetle's convention).
//
// The per-frame faults are those of the real datapath's fault stage (fault/fault.h): the same
// Ratio, and the same fault::decide() and fault::flip_bits() decide each frame's fate
// (network.cc). faults() and from_faults() convert between a link and the fault grammar's
// Faults, so that a simulated link's faults can be replayed against real processes.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "fault/fault.h"

namespace uroce::sim {

// A probability num/den with 0 <= num <= den and den > 0. The default is zero ("off").
// to_string(Ratio): "3/100", or "0" when off.
using Ratio = fault::Ratio;
using fault::to_string;

// Upper bounds that keep every computed time far from int64 overflow and every loop short.
inline constexpr std::int64_t kMaxLinkDelayNs = 3'600'000'000'000;  // one hour
inline constexpr std::uint32_t kMaxCorruptBits = fault::kMaxCorruptBits;

struct LinkConfig {
  // Propagation delay, added to every frame once it has been serialized.
  std::int64_t delay_ns = 0;
  // Extra delay drawn uniformly from [0, jitter_ns] for each frame (each copy of a duplicated
  // frame draws its own). Jitter may reorder frames, as netem's does.
  std::int64_t jitter_ns = 0;
  // Serialization rate in bits per second; 0 means infinite (no serialization delay and no
  // transmit queue). A frame of B bytes occupies the transmitter for ceil(8 * B * 1e9 / rate)
  // ns, after the frames queued before it (FIFO).
  std::uint64_t bandwidth_bps = 0;
  // Tail drop: a frame is dropped (queue_full) when the transmit queue, which counts every frame
  // not yet completely serialized including the one on the wire, already holds this many
  // frames, or when adding it would exceed queue_limit_bytes. 0 means no limit of that kind (the
  // network's in-flight bound still applies). Without bandwidth the queue is always empty.
  std::uint32_t queue_limit_packets = 1024;
  std::uint64_t queue_limit_bytes = 0;
  // Step ECN marking at the queue (DCTCP's K): mark CE when at least this many frames are queued
  // ahead of the new one. 0 is off. Applies, like ecn_mark, to ECN-capable frames only.
  std::uint32_t ecn_mark_queue_packets = 0;

  // Loss on the wire: the frame has used the transmitter, then vanishes.
  Ratio loss;
  // Gilbert-Elliott loss instead of `loss` when set (fault::GilbertElliott; drawn from the loss
  // stream). No fault plan sets it: `uroce sim --faults burst=...` does.
  std::optional<fault::GilbertElliott> burst;
  // One extra copy of the frame is delivered.
  Ratio duplication;
  // The frame (copy) is held back reorder_delay_ns more, so that frames sent after it within
  // that time overtake it.
  Ratio reordering;
  std::int64_t reorder_delay_ns = 100'000;
  // corrupt_bits distinct bits, anywhere in the frame, are flipped.
  Ratio corruption;
  std::uint32_t corrupt_bits = 1;
  // The IP ECN field of an ECN-capable frame (ECN != 00) is set to CE (11).
  Ratio ecn_mark;

  bool operator==(const LinkConfig&) const = default;

  // Why the configuration is unusable, or nullopt when it is valid.
  std::optional<std::string_view> invalid_reason() const;

  // The same link with every fault off: no jitter, loss, burst, duplication, reordering,
  // corruption or probabilistic ECN marking. Delay, bandwidth, queue limits and queue-based ECN
  // marking are the network's shape, not faults, and are kept. The liveness phase runs on these.
  LinkConfig without_faults() const;

  // The link in the fault grammar's terms: delay, jitter, loss or burst, duplication,
  // reordering by time, corruption, and the bandwidth as a rate with queue_limit_packets as its
  // queue (no limit: NetworkOptions' default in-flight bound). Not expressible there, and left
  // out: queue_limit_bytes, ECN marking (probabilistic or by queue depth), and a reordering with
  // reorder_delay_ns 0 (the stage's reorder by packets is another fault: it is left out).
  fault::Faults faults() const;
  // `shape` with the faults of `f`: every field that Faults has (delay, jitter, bandwidth and
  // queue limit in packets included; a rate of 0 is no bandwidth limit), the others from
  // `shape`. Fails, saying why, for what the simulator cannot do: reordering by packets (the
  // network reorders by time), or a result that invalid_reason() refuses.
  static Result<LinkConfig, std::string> from_faults(const fault::Faults& f,
                                                     const LinkConfig& shape);
  static Result<LinkConfig, std::string> from_faults(const fault::Faults& f);  // on LinkConfig{}
};

// One line, every field, exact values: "delay_ns=10000 jitter_ns=0 bandwidth_bps=10000000000
// queue_limit_packets=64 ... ecn_mark=1/50" (then " burst=P:R:H:K" when a burst is set).
std::string to_string(const LinkConfig& c);

}  // namespace uroce::sim
