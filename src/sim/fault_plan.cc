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

namespace {

// A link's faults as the rule of a sender's fault spec (nullopt when it has none the grammar
// can carry: a rule must do something).
std::optional<fault::Rule> tx_rule(const LinkConfig& c, const wire::IpAddress* peer,
                                   std::vector<fault::Partition> windows) {
  fault::Rule r;
  r.match.dirs = static_cast<std::uint8_t>(fault::Direction::kTx);
  if (peer != nullptr) r.match.peer = *peer;
  r.faults = c.faults();
  r.partitions = std::move(windows);
  if (!r.faults.any() && r.partitions.empty()) return std::nullopt;
  return r;
}

std::string spec_line(std::vector<fault::Rule> rules) {
  if (rules.empty()) return "no faults";
  fault::FaultSpec spec;
  spec.rules = std::move(rules);
  return "UROCE_FAULTS='" + spec.to_string() + "'";
}

// The windows, from the plan's start, in which frames from plan host `from` to `to` are dropped
// by a partition: the link cut, or either host isolated.
std::vector<fault::Partition> cut_windows(const FaultPlan& p, std::uint32_t from,
                                          std::uint32_t to) {
  std::vector<fault::Partition> windows;
  const std::uint32_t n = p.options.host_count;
  std::vector<bool> cut(std::size_t{n} * n, false);
  std::vector<bool> isolated(n, false);
  bool open = false;
  std::int64_t since = 0;
  for (const PlannedEvent& e : p.events) {
    switch (e.kind) {
      case NetEventKind::kCutLink:
      case NetEventKind::kHealLink:
        cut[std::size_t{e.a} * n + e.b] = e.kind == NetEventKind::kCutLink;
        break;
      case NetEventKind::kIsolateHost:
      case NetEventKind::kHealHost:
        isolated[e.a] = e.kind == NetEventKind::kIsolateHost;
        break;
      case NetEventKind::kHealAll:
      case NetEventKind::kEndFaults:
        std::fill(cut.begin(), cut.end(), false);
        std::fill(isolated.begin(), isolated.end(), false);
        break;
    }
    const bool now_cut = cut[std::size_t{from} * n + to] || isolated[from] || isolated[to];
    if (now_cut && !open) since = e.at_ns;
    if (!now_cut && open && e.at_ns > since) windows.push_back({since, e.at_ns - since, 0});
    open = now_cut;
  }
  if (open && p.options.fault_phase_ns > since) {
    windows.push_back({since, p.options.fault_phase_ns - since, 0});
  }
  return windows;
}

}  // namespace

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
  std::vector<fault::Rule> rules;
  if (auto r = tx_rule(default_link, nullptr, {})) rules.push_back(*r);
  s += "  replay: " + spec_line(std::move(rules));
  if (!overrides.empty() || events.size() > 1) {
    s += " (the default link only: the overrides and partitions need the hosts' addresses)";
  }
  s += '\n';
  return s;
}

std::string FaultPlan::to_string(std::span<const wire::IpAddress> host_addresses) const {
  UROCE_CHECK(host_addresses.size() == options.host_count);
  std::string s = to_string();
  for (std::uint32_t h = 0; h < options.host_count; ++h) {
    std::vector<fault::Rule> rules;
    for (std::uint32_t p = 0; p < options.host_count; ++p) {
      if (p == h) continue;
      const LinkConfig* config = &default_link;
      bool own = false;
      for (const LinkOverride& o : overrides) {
        if (o.from == h && o.to == p) {
          config = &o.config;
          own = true;
        }
      }
      std::vector<fault::Partition> windows = cut_windows(*this, h, p);
      if (!own && windows.empty()) continue;
      // An override without any fault cannot be written (a rule must do something): the
      // default's rule then applies to that peer too.
      if (auto r = tx_rule(*config, &host_addresses[p], std::move(windows))) rules.push_back(*r);
    }
    if (auto r = tx_rule(default_link, nullptr, {})) rules.push_back(*r);
    s += "  replay host " + std::to_string(h) + " (" + fault::address_string(host_addresses[h]) +
         "): " + spec_line(std::move(rules)) + "\n";
  }
  return s;
}

Result<FaultPlan, std::string> FaultPlan::with_faults(const fault::FaultSpec& spec) const {
  FaultPlan p = *this;
  p.overrides.clear();
  p.events.clear();
  p.default_link = default_link.without_faults();
  if (spec.rules.size() > 1) {
    return Err{
        std::string("one rule only: the simulator's links have the same faults for every packet")};
  }
  std::vector<fault::Partition> partitions;
  if (!spec.rules.empty()) {
    const fault::Rule& rule = spec.rules.front();
    fault::Match tx_only;
    tx_only.dirs = static_cast<std::uint8_t>(fault::Direction::kTx);
    if (rule.match != fault::Match{} && rule.match != tx_only) {
      return Err{
          std::string("match keys (dir=rx, peer, qpn, class) aim faults at some packets, which the "
                      "simulator's links cannot: give the faults alone (or with dir=tx)")};
    }
    auto link = LinkConfig::from_faults(rule.faults, p.default_link);
    if (!link.ok()) return Err{link.error()};
    p.default_link = link.value();
    // Without delay= or rate=, the seed's network shape stays.
    if (rule.faults.delay_ns == 0) p.default_link.delay_ns = default_link.delay_ns;
    if (rule.faults.rate_bps == 0) {
      p.default_link.bandwidth_bps = default_link.bandwidth_bps;
      p.default_link.queue_limit_packets = default_link.queue_limit_packets;
    }
    partitions = rule.partitions;
  }
  // The partitions' windows inside the fault phase, merged where they overlap (an isolation is
  // a state: the end of one window must not heal another).
  std::vector<std::pair<std::int64_t, std::int64_t>> windows;  // [start, end)
  const std::int64_t phase_ns = options.fault_phase_ns;
  const std::size_t max_windows =
      (NetworkOptions{}.max_scheduled_events - 1) / (2 * std::size_t{options.host_count});
  for (const fault::Partition& w : partitions) {
    for (std::int64_t t = w.start_ns; t < phase_ns; t += w.period_ns) {
      windows.push_back({t, std::min(t + w.length_ns, phase_ns)});
      if (windows.size() > max_windows) {
        return Err{"more than " + std::to_string(max_windows) +
                   " partition windows in the fault phase (" + std::to_string(phase_ns) +
                   " ns): the network cannot schedule them all"};
      }
      if (w.period_ns == 0) break;
    }
  }
  std::sort(windows.begin(), windows.end());
  std::vector<std::pair<std::int64_t, std::int64_t>> merged;
  for (const auto& w : windows) {
    if (!merged.empty() && w.first <= merged.back().second) {
      merged.back().second = std::max(merged.back().second, w.second);
    } else {
      merged.push_back(w);
    }
  }
  for (const auto& [start, end] : merged) {
    for (std::uint32_t h = 0; h < options.host_count; ++h) {
      p.events.push_back({start, NetEventKind::kIsolateHost, h, 0});
    }
    for (std::uint32_t h = 0; h < options.host_count; ++h) {
      p.events.push_back({end, NetEventKind::kHealHost, h, 0});
    }
  }
  p.events.push_back({phase_ns, NetEventKind::kEndFaults, 0, 0});
  return p;
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
