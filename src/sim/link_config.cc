#include "sim/link_config.h"

namespace uroce::sim {

std::string to_string(Ratio r) {
  if (r.is_zero()) return "0";
  std::string s = std::to_string(r.num);
  s += '/';
  s += std::to_string(r.den);
  return s;
}

std::optional<std::string_view> LinkConfig::invalid_reason() const {
  if (delay_ns < 0 || delay_ns > kMaxLinkDelayNs) return "delay_ns out of [0, 1 h]";
  if (jitter_ns < 0 || jitter_ns > kMaxLinkDelayNs) return "jitter_ns out of [0, 1 h]";
  if (reorder_delay_ns < 0 || reorder_delay_ns > kMaxLinkDelayNs) {
    return "reorder_delay_ns out of [0, 1 h]";
  }
  if (!loss.valid()) return "loss is not a ratio num/den with num <= den, den > 0";
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
  c.duplication = {};
  c.reordering = {};
  c.corruption = {};
  c.ecn_mark = {};
  return c;
}

namespace {

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
  return s;
}

}  // namespace uroce::sim
