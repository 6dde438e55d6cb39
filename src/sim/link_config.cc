#include "sim/link_config.h"

namespace uroce::sim {

std::optional<std::string_view> LinkConfig::invalid_reason() const {
  if (delay_ns < 0 || delay_ns > kMaxLinkDelayNs) return "delay_ns out of [0, 1 h]";
  if (jitter_ns < 0 || jitter_ns > kMaxLinkDelayNs) return "jitter_ns out of [0, 1 h]";
  if (reorder_delay_ns < 0 || reorder_delay_ns > kMaxLinkDelayNs) {
    return "reorder_delay_ns out of [0, 1 h]";
  }
  if (!loss.valid()) return "loss is not a ratio num/den with num <= den, den > 0";
  if (burst && !(burst->p.valid() && burst->r.valid() && burst->loss_bad.valid() &&
                 burst->loss_good.valid())) {
    return "burst has a ratio that is not num/den with num <= den, den > 0";
  }
  if (!duplication.valid()) return "duplication is not a ratio num/den with num <= den, den > 0";
  if (!reordering.valid()) return "reordering is not a ratio num/den with num <= den, den > 0";
  if (!corruption.valid()) return "corruption is not a ratio num/den with num <= den, den > 0";
  if (!ecn_mark.valid()) return "ecn_mark is not a ratio num/den with num <= den, den > 0";
  if (corrupt_bits < 1 || corrupt_bits > kMaxCorruptBits) return "corrupt_bits out of [1, 64]";
  return std::nullopt;
}

LinkConfig LinkConfig::without_faults() const {
  LinkConfig c = *this;
  c.jitter_ns = 0;
  c.loss = {};
  c.burst.reset();
  c.duplication = {};
  c.reordering = {};
  c.corruption = {};
  c.ecn_mark = {};
  return c;
}

namespace {

// What a queue without a packet limit holds at most: NetworkOptions::max_in_flight_frames'
// default.
constexpr std::uint32_t kNoQueueLimitPackets = 1u << 16;

// Appends " name=value" (without the space for the first field). Built by appending, not with
// operator+ chains, which g++ 12 -O3 flags with a false -Wrestrict.
void field(std::string& s, std::string_view name, const std::string& value) {
  if (!s.empty()) s += ' ';
  s.append(name);
  s += '=';
  s += value;
}

}  // namespace

std::string to_string(const LinkConfig& c) {
  std::string s;
  field(s, "delay_ns", std::to_string(c.delay_ns));
  field(s, "jitter_ns", std::to_string(c.jitter_ns));
  field(s, "bandwidth_bps", std::to_string(c.bandwidth_bps));
  field(s, "queue_limit_packets", std::to_string(c.queue_limit_packets));
  field(s, "queue_limit_bytes", std::to_string(c.queue_limit_bytes));
  field(s, "ecn_mark_queue_packets", std::to_string(c.ecn_mark_queue_packets));
  field(s, "loss", to_string(c.loss));
  field(s, "duplication", to_string(c.duplication));
  field(s, "reordering", to_string(c.reordering));
  field(s, "reorder_delay_ns", std::to_string(c.reorder_delay_ns));
  field(s, "corruption", to_string(c.corruption));
  field(s, "corrupt_bits", std::to_string(c.corrupt_bits));
  field(s, "ecn_mark", to_string(c.ecn_mark));
  if (c.burst) {
    field(s, "burst",
          to_string(c.burst->p) + ":" + to_string(c.burst->r) + ":" + to_string(c.burst->loss_bad) +
              ":" + to_string(c.burst->loss_good));
  }
  return s;
}

fault::Faults LinkConfig::faults() const {
  fault::Faults f;
  f.loss = loss;
  f.burst = burst;
  f.duplication = duplication;
  if (reorder_delay_ns > 0) {
    f.reordering = reordering;
    if (!reordering.is_zero()) f.reorder_delay_ns = reorder_delay_ns;
  }
  f.delay_ns = delay_ns;
  f.jitter_ns = jitter_ns;
  f.corruption = corruption;
  if (!corruption.is_zero()) f.corrupt_bits = corrupt_bits;
  f.rate_bps = bandwidth_bps;
  if (bandwidth_bps != 0) {
    f.queue_packets = queue_limit_packets != 0 ? queue_limit_packets : kNoQueueLimitPackets;
  }
  return f;
}

Result<LinkConfig, std::string> LinkConfig::from_faults(const fault::Faults& f,
                                                        const LinkConfig& shape) {
  if (!f.reordering.is_zero() && f.reorder_delay_ns <= 0) {
    return Err{std::string(
        "the simulator reorders by time only: give reorder_by=TIME, not a number of packets")};
  }
  LinkConfig c = shape;
  c.delay_ns = f.delay_ns;
  c.jitter_ns = f.jitter_ns;
  c.bandwidth_bps = f.rate_bps;
  if (f.rate_bps != 0) c.queue_limit_packets = f.queue_packets;
  c.loss = f.burst ? Ratio{} : f.loss;
  c.burst = f.burst;
  c.duplication = f.duplication;
  c.reordering = f.reordering;
  if (!f.reordering.is_zero()) c.reorder_delay_ns = f.reorder_delay_ns;
  c.corruption = f.corruption;
  if (!f.corruption.is_zero()) c.corrupt_bits = f.corrupt_bits;
  if (auto why = c.invalid_reason()) return Err{std::string(*why)};
  return c;
}

Result<LinkConfig, std::string> LinkConfig::from_faults(const fault::Faults& f) {
  return from_faults(f, LinkConfig{});
}

}  // namespace uroce::sim
