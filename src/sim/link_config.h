// How one directional link of the simulated network behaves: delay, jitter, bandwidth and its
// transmit queue, and the probabilistic faults (loss, duplication, reordering, corruption, ECN
// marking). Every probability is an integer ratio, so that a printed configuration reproduces
// exactly (TigerBeetle's convention).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace uroce::sim {

// A probability num/den with 0 <= num <= den and den > 0. The default is zero ("off").
struct Ratio {
  std::uint32_t num = 0;
  std::uint32_t den = 1;

  constexpr bool is_zero() const { return num == 0; }
  constexpr bool valid() const { return den > 0 && num <= den; }
  bool operator==(const Ratio&) const = default;
};

std::string to_string(Ratio r);  // "3/100", or "0" when off

// Upper bounds that keep every computed time far from int64 overflow and every loop short.
inline constexpr std::int64_t kMaxLinkDelayNs = 3'600'000'000'000;  // one hour
inline constexpr std::uint32_t kMaxCorruptBits = 64;

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

  // The same link with every fault off: no jitter, loss, duplication, reordering, corruption or
  // probabilistic ECN marking. Delay, bandwidth, queue limits and queue-based ECN marking are
  // the network's shape, not faults, and are kept. The liveness phase runs on these.
  LinkConfig without_faults() const;
};

// One line, every field, exact values: "delay_ns=10000 jitter_ns=0 bandwidth_bps=10000000000
// queue_limit_packets=64 ... ecn_mark=1/50".
std::string to_string(const LinkConfig& c);

}  // namespace uroce::sim
