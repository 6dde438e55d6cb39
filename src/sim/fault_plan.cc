#include "sim/fault_plan.h"

#include <algorithm>
#include <array>
#include <cstdio>

#include "base/prng.h"

namespace uroce::sim {

namespace {

Ratio maybe_ratio(Prng& r, std::uint32_t max_num, std::uint32_t den) {
  if (!r.chance(1, 2)) return {};
  return Ratio{static_cast<std::uint32_t>(r.range(1, max_num)), den};
}

LinkConfig random_link(Prng& r) {
  static constexpr std::array<std::uint64_t, 5> kRatesBps = {0, 1'000'000'000, 10'000'000'000,
                                                             25'000'000'000, 100'000'000'000};
  LinkConfig c;
  c.delay_ns = static_cast<std::int64_t>(r.range(1'000, 50'000));
  c.jitter_ns = r.chance(1, 2)
                    ? static_cast<std::int64_t>(r.range(1, static_cast<std::uint64_t>(c.delay_ns)))
                    : 0;
  c.bandwidth_bps = kRatesBps[r.below(kRatesBps.size())];
  c.queue_limit_packets = static_cast<std::uint32_t>(r.range(8, 256));
  c.queue_limit_bytes = r.chance(1, 4) ? r.range(16 * 1024, 1024 * 1024) : 0;
  c.ecn_mark_queue_packets = c.bandwidth_bps != 0 && r.chance(1, 2)
                                 ? static_cast<std::uint32_t>(r.range(1, c.queue_limit_packets))
                                 : 0;
  c.loss = maybe_ratio(r, 100, 1000);
  c.duplication = maybe_ratio(r, 50, 1000);
  c.reordering = maybe_ratio(r, 100, 1000);
  c.reorder_delay_ns = static_cast<std::int64_t>(r.range(1'000, 200'000));
  c.corruption = maybe_ratio(r, 20, 1000);
  c.corrupt_bits = static_cast<std::uint32_t>(r.range(1, 3));
  c.ecn_mark = maybe_ratio(r, 200, 1000);
  return c;
}

}  // namespace

FaultPlan FaultPlan::generate(std::uint64_t seed, const FaultPlanOptions& options) {
  UROCE_CHECK(options.host_count >= 1);
  UROCE_CHECK(options.fault_phase_ns > 0);
  FaultPlan p;
  p.seed = seed;
  p.options = options;
  Prng r(seed);
  p.default_link = random_link(r);
  for (std::uint32_t from = 0; from < options.host_count; ++from) {
    for (std::uint32_t to = 0; to < options.host_count; ++to) {
      if (from != to && r.chance(1, 4)) p.overrides.push_back({from, to, random_link(r)});
    }
  }

  const auto phase_ns = static_cast<std::uint64_t>(options.fault_phase_ns);
  const std::uint64_t episodes = r.below(std::uint64_t{options.max_partitions} + 1);
  for (std::uint64_t i = 0; i < episodes; ++i) {
    const auto start = static_cast<std::int64_t>(r.below(phase_ns));
    const auto length =
        static_cast<std::int64_t>(r.range(1, std::max<std::uint64_t>(1, phase_ns / 4)));
    const std::int64_t end = std::min(start + length, options.fault_phase_ns);
    const std::uint64_t kind = options.host_count >= 2 ? r.below(3) : 2;
    const auto a = static_cast<std::uint32_t>(r.below(options.host_count));
    auto b = a;
    if (kind != 2) {  // another host than a
      b = static_cast<std::uint32_t>(r.below(options.host_count - 1));
      if (b >= a) ++b;
    }
    switch (kind) {
      case 0:  // one direction
        p.events.push_back({start, NetEventKind::kCutLink, a, b});
        p.events.push_back({end, NetEventKind::kHealLink, a, b});
        break;
      case 1:  // both directions
        p.events.push_back({start, NetEventKind::kCutLink, a, b});
        p.events.push_back({start, NetEventKind::kCutLink, b, a});
        p.events.push_back({end, NetEventKind::kHealLink, a, b});
        p.events.push_back({end, NetEventKind::kHealLink, b, a});
        break;
      default:
        p.events.push_back({start, NetEventKind::kIsolateHost, a, 0});
        p.events.push_back({end, NetEventKind::kHealHost, a, 0});
        break;
    }
  }
  std::stable_sort(p.events.begin(), p.events.end(),
                   [](const PlannedEvent& x, const PlannedEvent& y) { return x.at_ns < y.at_ns; });
  p.events.push_back({options.fault_phase_ns, NetEventKind::kEndFaults, 0, 0});
  return p;
}

std::string FaultPlan::to_string() const {
  // Built by appending: g++ 12 -O3 flags operator+ chains with a false -Wrestrict.
  char head[160];
  std::snprintf(head, sizeof head,
                "fault plan seed=%llu (0x%016llx) hosts=%u fault_phase_ns=%lld max_partitions=%u\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed),
                options.host_count, static_cast<long long>(options.fault_phase_ns),
                options.max_partitions);
  std::string s = head;
  s += "  default: ";
  s += sim::to_string(default_link);
  s += '\n';
  for (const LinkOverride& o : overrides) {
    s += "  link ";
    s += std::to_string(o.from);
    s += "->";
    s += std::to_string(o.to);
    s += ": ";
    s += sim::to_string(o.config);
    s += '\n';
  }
  for (const PlannedEvent& e : events) {
    s += "  at_ns=";
    s += std::to_string(e.at_ns);
    s += ' ';
    s.append(net_event_kind_name(e.kind));
    switch (e.kind) {
      case NetEventKind::kCutLink:
      case NetEventKind::kHealLink:
        s += ' ';
        s += std::to_string(e.a);
        s += "->";
        s += std::to_string(e.b);
        break;
      case NetEventKind::kIsolateHost:
      case NetEventKind::kHealHost:
        s += ' ';
        s += std::to_string(e.a);
        break;
      case NetEventKind::kHealAll:
        break;
      case NetEventKind::kEndFaults:
        s += " (liveness phase: partitions healed, faults off)";
        break;
    }
    s += '\n';
  }
  return s;
}

SimStatus FaultPlan::install(Network& net, Instant start, std::span<const HostId> hosts) const {
  UROCE_CHECK(hosts.size() == options.host_count);
  if (default_link.invalid_reason()) return Err{SimError::kInvalidConfig};
  for (const LinkOverride& o : overrides) {
    if (o.config.invalid_reason()) return Err{SimError::kInvalidConfig};
  }
  // Validated above, so these cannot fail.
  UROCE_CHECK(net.configure_default(start, default_link).ok());
  for (const LinkOverride& o : overrides) {
    UROCE_CHECK(net.configure_link(start, hosts[o.from], hosts[o.to], o.config).ok());
  }
  for (const PlannedEvent& e : events) {
    UROCE_CHECK(e.a < hosts.size() && e.b < hosts.size());
    net.schedule(NetEvent{start + Duration::ns(e.at_ns), e.kind, hosts[e.a], hosts[e.b]});
  }
  return std::monostate{};
}

}  // namespace uroce::sim
