#include "sim/fault_plan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim_frames.h"

namespace uroce::sim {
namespace {

using test::Bytes;
using test::must_add;
using test::roce_frame;
using test::v4;

Instant at_ns(std::int64_t ns) { return Instant::from_ns(ns); }

FaultPlanOptions four_hosts() {
  FaultPlanOptions o;
  o.host_count = 4;
  o.fault_phase_ns = 50'000'000;
  o.max_partitions = 6;
  return o;
}

TEST(FaultPlan, SameSeedSamePlanOtherSeedOtherPlan) {
  const FaultPlan a = FaultPlan::generate(1234, four_hosts());
  const FaultPlan b = FaultPlan::generate(1234, four_hosts());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.to_string(), b.to_string());
  const FaultPlan c = FaultPlan::generate(1235, four_hosts());
  EXPECT_NE(a, c);
  EXPECT_NE(a.to_string(), c.to_string());
}

TEST(FaultPlan, PrintsEverySettingExactly) {
  const FaultPlan p = FaultPlan::generate(1234, four_hosts());
  const std::string s = p.to_string();
  EXPECT_EQ(s.rfind("fault plan seed=1234 (0x00000000000004d2) hosts=4 fault_phase_ns=50000000", 0),
            0u)
      << s;
  EXPECT_NE(s.find("  default: " + to_string(p.default_link) + "\n"), std::string::npos);
  for (const LinkOverride& o : p.overrides) {
    EXPECT_NE(s.find("  link " + std::to_string(o.from) + "->" + std::to_string(o.to) + ": " +
                     to_string(o.config) + "\n"),
              std::string::npos);
  }
  // One line per event, the last one the start of the liveness phase.
  std::size_t event_lines = 0;
  for (std::size_t at = s.find("  at_ns="); at != std::string::npos;
       at = s.find("  at_ns=", at + 1)) {
    ++event_lines;
  }
  EXPECT_EQ(event_lines, p.events.size());
  EXPECT_NE(s.find("  at_ns=50000000 end_faults (liveness phase"), std::string::npos);

  // A LinkConfig prints every field, so two configs print alike only when they are equal.
  LinkConfig c;
  c.loss = {3, 100};
  c.corruption = {1, 500};
  c.corrupt_bits = 2;
  EXPECT_EQ(to_string(c),
            "delay_ns=0 jitter_ns=0 bandwidth_bps=0 queue_limit_packets=1024 queue_limit_bytes=0 "
            "ecn_mark_queue_packets=0 loss=3/100 duplication=0 reordering=0 "
            "reorder_delay_ns=100000 corruption=1/500 corrupt_bits=2 ecn_mark=0");
}

TEST(FaultPlan, SettingsStayWithinTheirRangesAndVaryAcrossSeeds) {
  std::size_t with_loss = 0, with_partitions = 0, with_overrides = 0, with_bandwidth = 0;
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    const FaultPlan p = FaultPlan::generate(seed, four_hosts());
    std::vector<LinkConfig> configs = {p.default_link};
    for (const LinkOverride& o : p.overrides) {
      EXPECT_NE(o.from, o.to);
      EXPECT_LT(o.from, 4u);
      EXPECT_LT(o.to, 4u);
      configs.push_back(o.config);
    }
    for (const LinkConfig& c : configs) {
      ASSERT_FALSE(c.invalid_reason().has_value()) << p.to_string();
      EXPECT_LE(c.loss.num * 10, c.loss.den);  // <= 10 %
      EXPECT_LE(c.duplication.num * 20, c.duplication.den);
      EXPECT_LE(c.reordering.num * 10, c.reordering.den);
      EXPECT_LE(c.corruption.num * 50, c.corruption.den);
      EXPECT_LE(c.ecn_mark.num * 5, c.ecn_mark.den);
      EXPECT_GE(c.delay_ns, 1'000);
      EXPECT_LE(c.delay_ns, 50'000);
      EXPECT_LE(c.jitter_ns, c.delay_ns);
      EXPECT_GE(c.queue_limit_packets, 8u);
      EXPECT_LE(c.corrupt_bits, 3u);
      with_bandwidth += c.bandwidth_bps != 0;
    }
    with_loss += !p.default_link.loss.is_zero();
    with_overrides += !p.overrides.empty();
    // Events are sorted, inside the fault phase, every cut is healed by its end, and the last
    // event ends the fault phase.
    ASSERT_FALSE(p.events.empty());
    EXPECT_EQ(p.events.back(), (PlannedEvent{50'000'000, NetEventKind::kEndFaults, 0, 0}));
    int open_cuts = 0;
    for (std::size_t i = 0; i + 1 < p.events.size(); ++i) {
      const PlannedEvent& e = p.events[i];
      EXPECT_GE(e.at_ns, 0);
      EXPECT_LE(e.at_ns, p.options.fault_phase_ns);
      if (i > 0) {
        EXPECT_LE(p.events[i - 1].at_ns, e.at_ns);
      }
      if (e.kind == NetEventKind::kCutLink || e.kind == NetEventKind::kIsolateHost) ++open_cuts;
      if (e.kind == NetEventKind::kHealLink || e.kind == NetEventKind::kHealHost) --open_cuts;
      if (e.kind == NetEventKind::kCutLink) {
        EXPECT_NE(e.a, e.b);
      }
    }
    EXPECT_EQ(open_cuts, 0);
    EXPECT_LE(p.events.size(), 1u + 4u * p.options.max_partitions);
    with_partitions += p.events.size() > 1;
  }
  // Each kind of setting is on for some seeds and off for others.
  EXPECT_GT(with_loss, 100u);
  EXPECT_LT(with_loss, 200u);
  EXPECT_GT(with_partitions, 200u);
  EXPECT_LT(with_partitions, 300u);
  EXPECT_GT(with_overrides, 200u);
  EXPECT_GT(with_bandwidth, 300u);
}

// Installs a plan, runs traffic through both phases, and checks that the liveness phase
// delivers every frame intact.
struct PlanRun {
  LinkStats fault_phase;
  std::vector<std::int64_t> trace;  // arrival times and PSNs, for reproducibility
  std::size_t liveness_sent = 0;
  std::size_t liveness_delivered_intact = 0;
};

PlanRun run_plan(const FaultPlan& plan, std::uint64_t net_seed) {
  Network net(net_seed);
  std::vector<HostId> hosts;
  // Added in reverse: the plan's host i is whatever id the network gave it.
  for (std::uint8_t i = 4; i >= 1; --i) hosts.insert(hosts.begin(), must_add(net, v4(i), i));
  const Instant start = at_ns(1'000);
  UROCE_CHECK(plan.install(net, start, hosts).ok());
  const Instant liveness = plan.liveness_start(start);
  PlanRun r;
  std::vector<Bytes> sent;
  Delivery d;
  Instant now = start;
  const std::int64_t step_ns = 20'000;
  std::uint32_t psn = 0;
  auto take = [&](const Delivery& x) {
    r.trace.push_back(x.time.ns());
    r.trace.push_back(x.seq);
    if (x.sent_time >= liveness) {
      r.liveness_delivered_intact += x.frame == sent[test::psn_of(x.frame)] && !x.corrupted;
    }
  };
  for (; now < liveness + Duration::ms(10); now = now + Duration::ns(step_ns)) {
    if (now >= liveness && r.fault_phase.sent_frames == 0) {
      while (net.poll_delivery(now, d)) take(d);
      r.fault_phase = net.total_stats();
    }
    while (net.poll_delivery(now, d)) take(d);
    // Every host sends to every other one.
    for (std::size_t from = 0; from < 4; ++from) {
      for (std::size_t to = 0; to < 4; ++to) {
        if (from == to) continue;
        sent.push_back(roce_frame(v4(static_cast<std::uint8_t>(from + 1)),
                                  v4(static_cast<std::uint8_t>(to + 1)), 256, psn++, 0b10));
        net.send(now, hosts[from], sent.back());
        r.liveness_sent += now >= liveness;
      }
    }
  }
  while (!net.next_event_time().is_never()) {
    while (net.poll_delivery(std::max(net.now(), net.next_event_time()), d)) take(d);
  }
  return r;
}

TEST(FaultPlan, InstalledPlanFaultsThenHeals) {
  // A seed whose plan has partitions and loss, found by looking, not assumed.
  std::uint64_t seed = 0;
  for (; seed < 1000; ++seed) {
    const FaultPlan p = FaultPlan::generate(seed, four_hosts());
    if (p.events.size() >= 5 && !p.default_link.loss.is_zero() &&
        !p.default_link.corruption.is_zero()) {
      break;
    }
  }
  ASSERT_LT(seed, 1000u);
  const FaultPlan plan = FaultPlan::generate(seed, four_hosts());
  SCOPED_TRACE(plan.to_string());
  const PlanRun r = run_plan(plan, derive_seed(seed, 1));
  EXPECT_GT(r.fault_phase.dropped(DropCause::kLoss), 0u);
  EXPECT_GT(r.fault_phase.dropped(DropCause::kPartition), 0u);
  EXPECT_GT(r.fault_phase.corrupted, 0u);
  // Light traffic (one 314-byte frame per link every 20 us) never fills a queue, so in the
  // liveness phase every frame arrives, exactly once and intact.
  EXPECT_GT(r.liveness_sent, 1000u);
  EXPECT_EQ(r.liveness_delivered_intact, r.liveness_sent);

  // The whole run reproduces from the seeds.
  EXPECT_EQ(run_plan(FaultPlan::generate(seed, four_hosts()), derive_seed(seed, 1)).trace, r.trace);
}

TEST(FaultPlan, InstallSchedulesEventsAtStartPlusOffset) {
  FaultPlan p;
  p.options.host_count = 2;
  p.options.fault_phase_ns = 1'000;
  p.events = {{100, NetEventKind::kCutLink, 1, 0},
              {200, NetEventKind::kHealLink, 1, 0},
              {1'000, NetEventKind::kEndFaults, 0, 0}};
  p.default_link.loss = {1, 2};
  Network net(1);
  const HostId x = must_add(net, v4(1), 1);
  const HostId y = must_add(net, v4(2), 2);
  const std::vector<HostId> hosts = {y, x};  // plan host 0 is y
  ASSERT_TRUE(p.install(net, at_ns(5'000), hosts).ok());
  EXPECT_EQ(net.default_config().loss, (Ratio{1, 2}));
  EXPECT_EQ(net.next_event_time(), at_ns(5'100));
  Delivery d;
  net.poll_delivery(at_ns(5'100), d);
  EXPECT_TRUE(net.link_cut(x, y));
  EXPECT_FALSE(net.link_cut(y, x));
  net.poll_delivery(at_ns(5'200), d);
  EXPECT_FALSE(net.link_cut(x, y));
  net.poll_delivery(at_ns(6'000), d);
  EXPECT_TRUE(net.default_config().loss.is_zero());
  EXPECT_EQ(p.liveness_start(at_ns(5'000)), at_ns(6'000));

  p.default_link.corrupt_bits = 0;
  EXPECT_EQ(p.install(net, at_ns(7'000), hosts).error(), SimError::kInvalidConfig);
}

// ---- the plan in the fault grammar ------------------------------------------------------

std::vector<wire::IpAddress> addresses(std::uint32_t n) {
  std::vector<wire::IpAddress> a;
  for (std::uint32_t i = 0; i < n; ++i) a.push_back(v4(static_cast<std::uint8_t>(11 + i)));
  return a;
}

// Faults as the grammar prints them (which keeps ratios in lowest terms: 50/1000 is 5%).
std::string printed(const fault::Faults& f) {
  fault::FaultSpec s;
  s.rules.push_back(fault::Rule{{}, f, {}});
  return s.to_string();
}

// The spec in `line` between UROCE_FAULTS=' and '.
fault::FaultSpec spec_in(const std::string& s, const std::string& prefix) {
  const std::size_t at = s.find(prefix + "UROCE_FAULTS='");
  EXPECT_NE(at, std::string::npos) << prefix << "\n" << s;
  if (at == std::string::npos) return {};
  const std::size_t from = at + prefix.size() + 14;
  auto spec = fault::FaultSpec::parse(s.substr(from, s.find('\'', from) - from));
  EXPECT_TRUE(spec.ok()) << s;
  return spec.ok() ? spec.value() : fault::FaultSpec{};
}

TEST(FaultPlan, PrintsEachHostsReplayInTheFaultGrammar) {
  FaultPlan p;
  p.options.host_count = 3;
  p.options.fault_phase_ns = 1'000'000;
  p.default_link.delay_ns = 2'000;
  p.default_link.loss = {1, 50};
  p.default_link.reordering = {1, 100};
  p.default_link.reorder_delay_ns = 30'000;
  LinkConfig other = p.default_link;
  other.loss = {};
  other.corruption = {1, 1000};
  other.corrupt_bits = 2;
  other.bandwidth_bps = 1'000'000'000;
  other.queue_limit_packets = 32;
  p.overrides = {{0, 1, other}};
  p.events = {{100'000, NetEventKind::kCutLink, 0, 1},
              {200'000, NetEventKind::kHealLink, 0, 1},
              {300'000, NetEventKind::kIsolateHost, 2, 0},
              {400'000, NetEventKind::kHealHost, 2, 0},
              {1'000'000, NetEventKind::kEndFaults, 0, 0}};
  const std::string plain = p.to_string();
  EXPECT_NE(plain.find("  replay: UROCE_FAULTS='dir=tx,loss=2%,reorder=1%,reorder_by=30us,"
                       "delay=2us' (the default link only"),
            std::string::npos)
      << plain;
  const std::string s = p.to_string(addresses(3));
  EXPECT_EQ(s.rfind(plain, 0), 0u);
  const std::string d = "dir=tx,loss=2%,reorder=1%,reorder_by=30us,delay=2us";
  EXPECT_NE(s.find("  replay host 0 (10.0.0.11): UROCE_FAULTS='dir=tx,peer=10.0.0.12,reorder=1%,"
                   "reorder_by=30us,delay=2us,corrupt=0.1%,corrupt_bits=2,rate=1gbit,queue=32,"
                   "partition=100us+100us;dir=tx,peer=10.0.0.13,loss=2%,reorder=1%,reorder_by="
                   "30us,delay=2us,partition=300us+100us;" +
                   d + "'\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  replay host 1 (10.0.0.12): UROCE_FAULTS='dir=tx,peer=10.0.0.13,loss=2%,"
                   "reorder=1%,reorder_by=30us,delay=2us,partition=300us+100us;" +
                   d + "'\n"),
            std::string::npos)
      << s;
  // Host 2 was isolated: its sends to both peers were cut.
  const fault::FaultSpec h2 = spec_in(s, "replay host 2 (10.0.0.13): ");
  ASSERT_EQ(h2.rules.size(), 3u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(h2.rules[i].match.peer, v4(static_cast<std::uint8_t>(11 + i)));
    EXPECT_EQ(h2.rules[i].partitions, (std::vector<fault::Partition>{{300'000, 100'000, 0}}));
    EXPECT_EQ(printed(h2.rules[i].faults), printed(p.default_link.faults()));
  }
  EXPECT_EQ(printed(h2.rules[2].faults), printed(p.default_link.faults()));
  EXPECT_FALSE(h2.rules[2].match.peer.has_value());
}

TEST(FaultPlan, EveryGeneratedPlansReplayParsesToItsLinksFaults) {
  for (std::uint64_t seed = 0; seed < 200; ++seed) {
    const FaultPlan p = FaultPlan::generate(seed, four_hosts());
    const std::string s = p.to_string(addresses(4));
    SCOPED_TRACE(s);
    const fault::FaultSpec all = spec_in(s, "replay: ");
    ASSERT_EQ(all.rules.size(), 1u);
    EXPECT_EQ(printed(all.rules[0].faults), printed(p.default_link.faults()));
    for (std::uint32_t h = 0; h < 4; ++h) {
      const std::string prefix =
          "replay host " + std::to_string(h) + " (10.0.0." + std::to_string(11 + h) + "): ";
      const fault::FaultSpec spec = spec_in(s, prefix);
      ASSERT_FALSE(spec.rules.empty());
      EXPECT_EQ(printed(spec.rules.back().faults), printed(p.default_link.faults()));
      for (const LinkOverride& o : p.overrides) {
        if (o.from != h) continue;
        const auto rule = std::find_if(spec.rules.begin(), spec.rules.end(), [&](const auto& r) {
          return r.match.peer == v4(static_cast<std::uint8_t>(11 + o.to));
        });
        ASSERT_NE(rule, spec.rules.end());
        EXPECT_EQ(printed(rule->faults), printed(o.config.faults()));
      }
    }
  }
}

TEST(FaultPlan, WithFaultsTakesTheSpecOnTheSeedsShape) {
  const FaultPlan seed_plan = FaultPlan::generate(1234, four_hosts());
  auto spec = [](std::string_view t) { return fault::FaultSpec::parse(t).value(); };
  auto p = seed_plan.with_faults(
      spec("dir=tx,loss=2%,dup=1/3,reorder=1%,reorder_by=50us,corrupt=0.5%,corrupt_bits=3,"
           "jitter=7us,partition=10ms+5ms/20ms,partition=12ms+10ms"));
  ASSERT_TRUE(p.ok()) << p.error();
  const LinkConfig& c = p->default_link;
  EXPECT_EQ(c.loss, (Ratio{1, 50}));
  EXPECT_EQ(c.duplication, (Ratio{1, 3}));
  EXPECT_EQ(c.reordering, (Ratio{1, 100}));
  EXPECT_EQ(c.reorder_delay_ns, 50'000);
  EXPECT_EQ(c.corruption, (Ratio{1, 200}));
  EXPECT_EQ(c.corrupt_bits, 3u);
  EXPECT_EQ(c.jitter_ns, 7'000);
  EXPECT_TRUE(c.ecn_mark.is_zero());
  // The seed's network shape stays.
  EXPECT_EQ(c.delay_ns, seed_plan.default_link.delay_ns);
  EXPECT_EQ(c.bandwidth_bps, seed_plan.default_link.bandwidth_bps);
  EXPECT_EQ(c.queue_limit_packets, seed_plan.default_link.queue_limit_packets);
  EXPECT_TRUE(p->overrides.empty());
  // Windows [10, 22) ms (the second partition overlaps the first's) and [30, 35) ms of the
  // 50 ms phase: every host isolated, then healed.
  std::vector<std::int64_t> isolations, heals;
  for (const PlannedEvent& e : p->events) {
    if (e.kind == NetEventKind::kIsolateHost) isolations.push_back(e.at_ns);
    if (e.kind == NetEventKind::kHealHost) heals.push_back(e.at_ns);
  }
  const std::int64_t ms = 1'000'000;
  auto four = [](std::int64_t t) { return std::vector<std::int64_t>(4, t); };
  std::vector<std::int64_t> want_iso = four(10 * ms), want_heal = four(22 * ms);
  for (std::int64_t t : four(30 * ms)) want_iso.push_back(t);
  for (std::int64_t t : four(35 * ms)) want_heal.push_back(t);
  EXPECT_EQ(isolations, want_iso);
  EXPECT_EQ(heals, want_heal);
  EXPECT_EQ(p->events.back(), (PlannedEvent{50 * ms, NetEventKind::kEndFaults, 0, 0}));
  EXPECT_TRUE(std::is_sorted(p->events.begin(), p->events.end(),
                             [](const auto& x, const auto& y) { return x.at_ns < y.at_ns; }));

  // delay= and rate= replace the seed's.
  auto q = seed_plan.with_faults(spec("delay=3us,rate=10mbit,queue=5"));
  ASSERT_TRUE(q.ok()) << q.error();
  EXPECT_EQ(q->default_link.delay_ns, 3'000);
  EXPECT_EQ(q->default_link.bandwidth_bps, 10'000'000u);
  EXPECT_EQ(q->default_link.queue_limit_packets, 5u);
  EXPECT_TRUE(q->default_link.loss.is_zero());
  EXPECT_EQ(q->events.size(), 1u);

  // Gilbert-Elliott bursts are simulated too.
  auto b = seed_plan.with_faults(spec("burst=1%:20%"));
  ASSERT_TRUE(b.ok());
  ASSERT_TRUE(b->default_link.burst.has_value());
  EXPECT_EQ(b->default_link.burst->r, (Ratio{1, 5}));

  // What the simulated links cannot carry is refused, saying why.
  for (const auto& [text, why] : std::vector<std::pair<std::string, std::string>>{
           {"loss=1%;dup=1%", "one rule only"},
           {"class=ack,loss=1%", "match keys"},
           {"dir=rx,loss=1%", "match keys"},
           {"peer=10.0.0.1,loss=1%", "match keys"},
           {"reorder=1%", "reorders by time only"},
           {"partition=0s+1ns/2ns", "partition windows in the fault phase"},
       }) {
    auto r = seed_plan.with_faults(spec(text));
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.error().find(why), std::string::npos) << text << ": " << r.error();
  }
}

}  // namespace
}  // namespace uroce::sim
