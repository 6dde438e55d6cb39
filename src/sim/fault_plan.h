// A fault plan: every fault setting of a simulation run, derived from one seed (TigerBeetle's
// approach). A run has a fault phase, during which links lose, duplicate, reorder, corrupt and
// ECN-mark frames with the plan's ratios and partitions come and go, then a liveness phase, from
// `fault_phase_ns` on, where every partition is healed and every fault is off (delay, bandwidth
// and queues stay: see LinkConfig::without_faults), so that a correct transport must finish its
// work.
//
// The plan is plain data: print it with to_string() when a run fails, next to the seed that
// reproduces it. generate() is a pure function of (seed, options); changing generate() changes
// which plan a seed names, which is why failures print the plan and not only the seed.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "base/time.h"
#include "fault/fault.h"
#include "sim/link_config.h"
#include "sim/network.h"

namespace uroce::sim {

struct FaultPlanOptions {
  std::uint32_t host_count = 2;               // plan hosts are 0 .. host_count - 1
  std::int64_t fault_phase_ns = 100'000'000;  // > 0
  std::uint32_t max_partitions = 4;           // partition episodes: 0 .. max_partitions
  bool operator==(const FaultPlanOptions&) const = default;
};

// A link whose configuration differs from the plan's default (plan host indexes).
struct LinkOverride {
  std::uint32_t from = 0;
  std::uint32_t to = 0;
  LinkConfig config;
  bool operator==(const LinkOverride&) const = default;
};

// A network event `at_ns` after the plan's start, between plan hosts a and b.
struct PlannedEvent {
  std::int64_t at_ns = 0;
  NetEventKind kind = NetEventKind::kHealAll;
  std::uint32_t a = 0;
  std::uint32_t b = 0;
  bool operator==(const PlannedEvent&) const = default;
};

struct FaultPlan {
  std::uint64_t seed = 0;
  FaultPlanOptions options;
  // Fault-phase configuration of every link without an override.
  LinkConfig default_link;
  std::vector<LinkOverride> overrides;  // sorted by (from, to)
  // Partition episodes (each a cut and its heal, healed at the latest at fault_phase_ns), sorted
  // by time; the last event is kEndFaults at fault_phase_ns.
  std::vector<PlannedEvent> events;

  // Ranges, each fault on for about half the seeds (so that some runs isolate one fault):
  // delay 1..50 us; jitter 0..delay; bandwidth infinite, 1, 10, 25 or 100 Gb/s; queue limit
  // 8..256 frames (sometimes also 16 KiB..1 MiB); loss 0..10 %; duplication 0..5 %; reordering
  // 0..10 % held 1..200 us; corruption 0..2 % of 1..3 bits; ECN marking 0..20 % and, on links
  // with bandwidth, sometimes at a queue depth. About a quarter of the links get their own
  // settings. Up to max_partitions episodes: a link cut one way, both ways, or a host isolated,
  // for 1 ns .. fault_phase_ns / 4.
  static FaultPlan generate(std::uint64_t seed, const FaultPlanOptions& options);

  // Multi-line, exact (integer ratios and nanoseconds), starting with the seed; then the
  // default link's faults as a fault spec line, `replay: UROCE_FAULTS='dir=tx,...'`, to replay
  // on every host of a real run (LinkConfig::faults() says what the grammar cannot carry).
  std::string to_string() const;
  // The same, with the replay of every link: for each host, the fault spec for its device
  // (`replay host 0 (10.99.0.11): UROCE_FAULTS='...'`): a dir=tx,peer= rule for each peer whose
  // link has an override or partitions (the windows in which the link is cut or either host
  // isolated, from the plan's start), then the default's. Faults stop at fault_phase_ns in the
  // plan, not in a spec: clear the specs then (`uroce faults -d DEV clear`). host_addresses[i]
  // is plan host i's; its size must be options.host_count.
  std::string to_string(std::span<const wire::IpAddress> host_addresses) const;

  // This plan with the faults of `spec` (uroce sim --faults) instead of the seed's: the default
  // link gets the spec's faults on this plan's network shape (the spec's delay= and rate= with
  // queue=, when given, replace the seed's delay and bandwidth with its queue limit), no link has
  // an override, and the partitions are the spec's (every host isolated in each window, within
  // the fault phase). Fails, saying why, for what the simulated links cannot carry: more than
  // one rule, match keys (dir=tx alone is accepted: a link's faults are its sender's), reordering
  // by packets, or more partition windows in the fault phase than the network can schedule. The
  // spec's seed is not used: the network's draws come from the run's seed.
  Result<FaultPlan, std::string> with_faults(const fault::FaultSpec& spec) const;

  // Configures `net` (the default and the overrides, at `start`) and schedules the events at
  // start + at_ns. hosts[i] is the network's HostId of plan host i; hosts.size() must be
  // options.host_count. Fails only if the plan holds an invalid LinkConfig.
  SimStatus install(Network& net, Instant start, std::span<const HostId> hosts) const;

  Instant liveness_start(Instant start) const {
    return start + Duration::ns(options.fault_phase_ns);
  }

  bool operator==(const FaultPlan&) const = default;
};

}  // namespace uroce::sim
