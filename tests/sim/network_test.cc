// The simulated network without probabilistic faults: routing, timing (delay, serialization,
// queueing), delivery order, bounds, statistics, determinism and per-link stream independence.
#include "sim/network.h"

#include <gtest/gtest.h>

#include <tuple>
#include <vector>

#include "sim_frames.h"

namespace uroce::sim {
namespace {

using test::Bytes;
using test::must_add;
using test::roce_frame;
using test::v4;
using test::v6;

Instant at_ns(std::int64_t ns) { return Instant::from_ns(ns); }

std::vector<Delivery> drain(Network& net, Instant now) {
  std::vector<Delivery> out;
  Delivery d;
  while (net.poll_delivery(now, d)) out.push_back(d);
  return out;
}

// Runs the network to idle, jumping time to each next event.
std::vector<Delivery> run_to_idle(Network& net) {
  std::vector<Delivery> out;
  for (int i = 0; i < 1'000'000 && !net.next_event_time().is_never(); ++i) {
    const Instant t = std::max(net.now(), net.next_event_time());
    for (Delivery& d : drain(net, t)) out.push_back(std::move(d));
  }
  return out;
}

TEST(Network, RoutesByDestinationAddressAfterTheDelay) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  const HostId c = must_add(net, v4(3), 3);
  LinkConfig cfg;
  cfg.delay_ns = 10'000;
  ASSERT_TRUE(net.configure_default(at_ns(0), cfg).ok());

  const Bytes to_b = roce_frame(v4(1), v4(2), 64, 1);
  const Bytes to_c = roce_frame(v4(1), v4(3), 64, 2);
  net.send(at_ns(100), a, to_b);
  net.send(at_ns(200), a, to_c);
  EXPECT_EQ(net.next_event_time(), at_ns(10'100));
  EXPECT_TRUE(drain(net, at_ns(10'099)).empty());

  auto got = drain(net, at_ns(10'100));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].from, a);
  EXPECT_EQ(got[0].to, b);
  EXPECT_EQ(got[0].time, at_ns(10'100));
  EXPECT_EQ(got[0].sent_time, at_ns(100));
  EXPECT_EQ(got[0].frame, to_b);
  EXPECT_FALSE(got[0].duplicate || got[0].reordered || got[0].corrupted || got[0].ecn_marked);
  EXPECT_EQ(net.next_event_time(), at_ns(10'200));

  // Polled late, a frame still carries its arrival time.
  got = drain(net, at_ns(50'000));
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].to, c);
  EXPECT_EQ(got[0].time, at_ns(10'200));
  EXPECT_EQ(got[0].frame, to_c);
  EXPECT_TRUE(net.next_event_time().is_never());
}

TEST(Network, RoutesIpv6AndVlanTaggedFrames) {
  Network net(1);
  const HostId a = must_add(net, v6(1), 1);
  const HostId b = must_add(net, v6(2), 2);
  const HostId c = must_add(net, v4(2), 3);  // same last byte, other family: another host
  net.send(at_ns(0), a, roce_frame(v6(1), v6(2), 16, 7));
  Bytes tagged = roce_frame(v4(9), v4(2), 16, 8);
  // Insert an 802.1Q tag (TPID 0x8100, VLAN 5) before the EtherType.
  const Bytes tag = {std::byte{0x81}, std::byte{0x00}, std::byte{0x00}, std::byte{0x05}};
  tagged.insert(tagged.begin() + 12, tag.begin(), tag.end());
  net.send(at_ns(0), a, tagged);
  auto got = drain(net, at_ns(0));
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].to, b);
  EXPECT_EQ(got[1].to, c);
  EXPECT_EQ(got[1].frame, tagged);
}

TEST(Network, UnroutableFramesAreDroppedAsNoRoute) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  must_add(net, v4(2), 2);
  net.send(at_ns(0), a, roce_frame(v4(1), v4(99), 16, 1));  // nobody has 10.0.0.99
  net.send(at_ns(0), a, Bytes(10, std::byte{0xff}));        // shorter than Ethernet
  Bytes arp = roce_frame(v4(1), v4(2), 16, 1);
  store_be16(arp, 12, 0x0806);  // not IP
  net.send(at_ns(0), a, arp);
  Bytes bad_version = roce_frame(v4(1), v4(2), 16, 1);
  store_u8(bad_version, 14, 0x65);  // IPv6 version in an IPv4 EtherType
  net.send(at_ns(0), a, bad_version);
  net.send(at_ns(0), a, Bytes{});
  EXPECT_TRUE(run_to_idle(net).empty());
  EXPECT_EQ(net.total_stats().sent_frames, 5u);
  EXPECT_EQ(net.total_stats().dropped(DropCause::kNoRoute), 5u);
  EXPECT_EQ(net.total_stats().dropped_total(), 5u);
}

TEST(Network, SerializationAtTheConfiguredRateQueuesFramesBehindEachOther) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  LinkConfig cfg;
  cfg.delay_ns = 10'000;
  cfg.bandwidth_bps = 1'000'000'000;  // 8 ns per byte
  ASSERT_TRUE(net.configure_link(at_ns(0), a, b, cfg).ok());
  const Bytes big = test::sized_frame(v4(1), v4(2), 1000, 1);
  const Bytes small = test::sized_frame(v4(1), v4(2), 500, 2);
  ASSERT_EQ(big.size(), 1000u);
  ASSERT_EQ(small.size(), 500u);

  net.send(at_ns(0), a, big);        // on the wire 0..8000, arrives 18000
  net.send(at_ns(0), a, small);      // waits for it: 8000..12000, arrives 22000
  net.send(at_ns(9'000), a, small);  // behind the second: 12000..16000, arrives 26000
  net.send(at_ns(20'000), a, big);   // idle link again: 20000..28000, arrives 38000
  const auto got = run_to_idle(net);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].time, at_ns(18'000));
  EXPECT_EQ(got[1].time, at_ns(22'000));
  EXPECT_EQ(got[2].time, at_ns(26'000));
  EXPECT_EQ(got[3].time, at_ns(38'000));
  EXPECT_EQ(test::psn_of(got[0].frame), 1u);
  EXPECT_EQ(test::psn_of(got[1].frame), 2u);

  // A rate that does not divide evenly rounds the serialization time up: 1001 bytes at 3 Gb/s
  // is 8008 / 3 = 2669.3 ns -> 2670.
  cfg.delay_ns = 0;
  cfg.bandwidth_bps = 3'000'000'000;
  ASSERT_TRUE(net.configure_link(at_ns(100'000), a, b, cfg).ok());
  net.send(at_ns(100'000), a, test::sized_frame(v4(1), v4(2), 1001, 3));
  const auto odd = run_to_idle(net);
  ASSERT_EQ(odd.size(), 1u);
  EXPECT_EQ(odd[0].frame.size(), 1001u);
  EXPECT_EQ(odd[0].time, at_ns(102'670));
}

TEST(Network, LinksInOppositeDirectionsAreIndependent) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  LinkConfig slow;
  slow.delay_ns = 50'000;
  ASSERT_TRUE(net.configure_link(at_ns(0), a, b, slow).ok());
  EXPECT_EQ(net.link_config(a, b).delay_ns, 50'000);
  EXPECT_EQ(net.link_config(b, a).delay_ns, 0);
  net.send(at_ns(0), a, roce_frame(v4(1), v4(2), 16, 1));
  net.send(at_ns(0), b, roce_frame(v4(2), v4(1), 16, 2));
  const auto got = run_to_idle(net);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].to, a);
  EXPECT_EQ(got[0].time, at_ns(0));
  EXPECT_EQ(got[1].to, b);
  EXPECT_EQ(got[1].time, at_ns(50'000));

  net.reset_link(at_ns(60'000), a, b);  // back to the default
  EXPECT_EQ(net.link_config(a, b).delay_ns, 0);
}

TEST(Network, EqualArrivalTimesComeOutInSendOrder) {
  Network net(1);
  std::vector<HostId> h;
  for (std::uint8_t i = 1; i <= 4; ++i) h.push_back(must_add(net, v4(i), i));
  LinkConfig usual;
  usual.delay_ns = 1000;
  ASSERT_TRUE(net.configure_default(at_ns(0), usual).ok());
  // Different links, different send times and delays, all landing at t = 1000.
  const std::vector<std::tuple<HostId, HostId, std::int64_t, std::int64_t>> sends = {
      {h[3], h[0], 0, 1000}, {h[0], h[1], 400, 600}, {h[2], h[3], 999, 1}, {h[1], h[2], 1000, 0}};
  for (const auto& [from, to, send_ns, delay_ns] : sends) {
    LinkConfig c;
    c.delay_ns = delay_ns;
    ASSERT_TRUE(net.configure_link(at_ns(0), from, to, c).ok());
  }
  std::uint32_t psn = 0;
  auto send = [&](std::int64_t t_ns, HostId from, HostId to) {
    net.send(at_ns(t_ns), from, roce_frame(net.host_ip(from), net.host_ip(to), 4, psn++));
  };
  for (const auto& [from, to, send_ns, delay_ns] : sends) {
    send(send_ns, from, to);
    if (send_ns == 0) {
      // Many more at t = 0 on the default links, so that the heap has to keep ties in order.
      for (std::uint32_t i = 0; i < 100; ++i) {
        const HostId x = h[i % 4];
        const HostId y = h[i / 4 % 4];
        if (net.link_config(x, y).delay_ns == 1000 && !(x == h[3] && y == h[0])) send(0, x, y);
      }
    }
  }
  const auto got = drain(net, at_ns(1000));
  ASSERT_GT(got.size(), 50u);
  ASSERT_EQ(got.size(), psn);
  for (std::uint32_t i = 0; i < psn; ++i) {
    EXPECT_EQ(got[i].time, at_ns(1000));
    EXPECT_EQ(test::psn_of(got[i].frame), i);
    if (i > 0) {
      EXPECT_LT(got[i - 1].seq, got[i].seq);
    }
  }
}

TEST(Network, QueueLimitInPacketsTailDrops) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  LinkConfig cfg;
  cfg.bandwidth_bps = 1'000'000'000;
  cfg.queue_limit_packets = 4;
  ASSERT_TRUE(net.configure_default(at_ns(0), cfg).ok());
  // 1000 bytes: 8 us each on the wire.
  for (std::uint32_t i = 0; i < 10; ++i) {
    net.send(at_ns(0), a, test::sized_frame(v4(1), v4(2), 1000, i));
  }
  EXPECT_EQ(net.link_stats(a, b).dropped(DropCause::kQueueFull), 6u);
  // At 8 us the first frame is done: one place is free, the second of these is dropped.
  net.send(at_ns(8'000), a, test::sized_frame(v4(1), v4(2), 1000, 10));
  net.send(at_ns(8'000), a, test::sized_frame(v4(1), v4(2), 1000, 11));
  const auto got = run_to_idle(net);
  ASSERT_EQ(got.size(), 5u);
  const std::vector<std::uint32_t> psns = {0, 1, 2, 3, 10};
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(test::psn_of(got[i].frame), psns[i]);
    EXPECT_EQ(got[i].time, at_ns(8'000 * static_cast<std::int64_t>(i + 1)));
  }
  const LinkStats& s = net.link_stats(a, b);
  EXPECT_EQ(s.sent_frames, 12u);
  EXPECT_EQ(s.delivered_frames, 5u);
  EXPECT_EQ(s.dropped(DropCause::kQueueFull), 7u);
  EXPECT_EQ(s.dropped_total(), 7u);
  EXPECT_EQ(s.sent_bytes, 12'000u);
  EXPECT_EQ(s.delivered_bytes, 5'000u);
}

TEST(Network, QueueLimitInBytesTailDrops) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  LinkConfig cfg;
  cfg.bandwidth_bps = 1'000'000'000;
  cfg.queue_limit_packets = 0;
  cfg.queue_limit_bytes = 2'500;
  ASSERT_TRUE(net.configure_default(at_ns(0), cfg).ok());
  for (std::uint32_t i = 0; i < 3; ++i) {
    net.send(at_ns(0), a, test::sized_frame(v4(1), v4(2), 1000, i));
  }
  // 2000 bytes queued; a 400-byte frame still fits, another 1000 does not.
  net.send(at_ns(0), a, test::sized_frame(v4(1), v4(2), 400, 3));
  EXPECT_EQ(net.link_stats(a, b).dropped(DropCause::kQueueFull), 1u);
  EXPECT_EQ(run_to_idle(net).size(), 3u);
}

TEST(Network, WithoutBandwidthThereIsNoQueue) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  must_add(net, v4(2), 2);
  LinkConfig cfg;
  cfg.queue_limit_packets = 1;
  ASSERT_TRUE(net.configure_default(at_ns(0), cfg).ok());
  for (std::uint32_t i = 0; i < 100; ++i) {
    net.send(at_ns(0), a, roce_frame(v4(1), v4(static_cast<std::uint8_t>(2 + i % 2)), 16, i));
  }
  EXPECT_EQ(net.total_stats().dropped_total(), 50u);  // no route to 10.0.0.3
  EXPECT_EQ(net.total_stats().dropped(DropCause::kNoRoute), 50u);
  EXPECT_EQ(run_to_idle(net).size(), 50u);
}

TEST(Network, InFlightBoundDropsAndCounts) {
  NetworkOptions opts;
  opts.max_in_flight_frames = 8;
  Network net(1, opts);
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  LinkConfig cfg;
  cfg.delay_ns = 1000;
  ASSERT_TRUE(net.configure_default(at_ns(0), cfg).ok());
  for (std::uint32_t i = 0; i < 10; ++i) net.send(at_ns(0), a, roce_frame(v4(1), v4(2), 16, i));
  EXPECT_EQ(net.in_flight_frames(), 8u);
  EXPECT_EQ(net.link_stats(a, b).dropped(DropCause::kInFlightLimit), 2u);
  // Arrived but not polled still counts against the bound.
  Delivery d;
  ASSERT_TRUE(net.poll_delivery(at_ns(1000), d));
  EXPECT_EQ(net.in_flight_frames(), 0u);
  EXPECT_EQ(net.ready_frames(), 7u);
  net.send(at_ns(1000), a, roce_frame(v4(1), v4(2), 16, 10));
  net.send(at_ns(1000), a, roce_frame(v4(1), v4(2), 16, 11));
  EXPECT_EQ(net.link_stats(a, b).dropped(DropCause::kInFlightLimit), 3u);
  EXPECT_EQ(run_to_idle(net).size(), 8u);
}

TEST(Network, TransmitQueueWithoutALimitIsStillBounded) {
  NetworkOptions opts;
  opts.max_in_flight_frames = 8;
  Network net(1, opts);
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  LinkConfig cfg;
  cfg.bandwidth_bps = 1'000'000'000;
  cfg.queue_limit_packets = 0;
  cfg.loss = {1, 1};  // lost frames hold no slot, but do hold their place in the queue
  ASSERT_TRUE(net.configure_default(at_ns(0), cfg).ok());
  for (std::uint32_t i = 0; i < 20; ++i) {
    net.send(at_ns(0), a, test::sized_frame(v4(1), v4(2), 1000, i));
  }
  EXPECT_EQ(net.link_stats(a, b).dropped(DropCause::kLoss), 8u);
  EXPECT_EQ(net.link_stats(a, b).dropped(DropCause::kInFlightLimit), 12u);
  net.send(at_ns(8'000), a, test::sized_frame(v4(1), v4(2), 1000, 20));  // one has left
  EXPECT_EQ(net.link_stats(a, b).dropped(DropCause::kLoss), 9u);
}

TEST(Network, ReusesTheCallersBuffers) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  Delivery d;
  net.send(at_ns(0), a, roce_frame(v4(1), v4(1), 256, 1));  // to itself
  ASSERT_TRUE(net.poll_delivery(at_ns(0), d));
  const std::byte* first = d.frame.data();
  // The buffer swapped in by the next poll is this one, recycled through the pool.
  net.send(at_ns(0), a, roce_frame(v4(1), v4(1), 256, 2));
  ASSERT_TRUE(net.poll_delivery(at_ns(0), d));
  net.send(at_ns(0), a, roce_frame(v4(1), v4(1), 256, 3));
  ASSERT_TRUE(net.poll_delivery(at_ns(0), d));
  EXPECT_EQ(d.frame.data(), first);
  EXPECT_EQ(test::psn_of(d.frame), 3u);
}

TEST(Network, HostsAndConfigurationErrorsAreValues) {
  NetworkOptions opts;
  opts.max_hosts = 2;
  Network net(1, opts);
  const HostId a = must_add(net, v4(1), 1);
  auto dup = net.add_host(v4(1), test::mac(9));
  ASSERT_FALSE(dup.ok());
  EXPECT_EQ(dup.error(), SimError::kDuplicateAddress);
  const HostId b = must_add(net, v6(1), 2);  // same bytes, other family: a different address
  auto third = net.add_host(v4(3), test::mac(3));
  ASSERT_FALSE(third.ok());
  EXPECT_EQ(third.error(), SimError::kTooManyHosts);
  EXPECT_EQ(net.host_count(), 2u);
  EXPECT_EQ(net.find_host(v4(1)), a);
  EXPECT_EQ(net.find_host(v6(1)), b);
  EXPECT_EQ(net.find_host(v4(7)), std::nullopt);
  EXPECT_EQ(net.host_ip(b), v6(1));
  EXPECT_EQ(net.host_mac(a), test::mac(1));

  LinkConfig bad;
  bad.loss = Ratio{3, 2};
  EXPECT_EQ(net.configure_default(at_ns(0), bad).error(), SimError::kInvalidConfig);
  bad = {};
  bad.corrupt_bits = 0;
  EXPECT_EQ(net.configure_link(at_ns(0), a, b, bad).error(), SimError::kInvalidConfig);
  bad = {};
  bad.delay_ns = -1;
  EXPECT_TRUE(bad.invalid_reason().has_value());
  EXPECT_EQ(net.default_config(), LinkConfig{});
}

TEST(NetworkDeathTest, TimeMustNotGoBackwards) {
  Network net(1);
  const HostId a = must_add(net, v4(1), 1);
  Delivery d;
  EXPECT_FALSE(net.poll_delivery(at_ns(100), d));
  EXPECT_DEATH(net.send(at_ns(99), a, roce_frame(v4(1), v4(1), 4, 1)), "now >= now_");
  EXPECT_DEATH(net.send(at_ns(100), 7, roce_frame(v4(1), v4(1), 4, 1)), "hosts_.size()");
}

// ---- determinism ----------------------------------------------------------------------------

LinkConfig all_faults() {
  LinkConfig c;
  c.delay_ns = 5'000;
  c.jitter_ns = 3'000;
  c.bandwidth_bps = 10'000'000'000;
  c.queue_limit_packets = 16;
  c.loss = {1, 20};
  c.duplication = {1, 20};
  c.reordering = {1, 10};
  c.reorder_delay_ns = 20'000;
  c.corruption = {1, 20};
  c.corrupt_bits = 2;
  c.ecn_mark = {1, 10};
  return c;
}

struct TraceEntry {
  std::int64_t time_ns;
  HostId from;
  HostId to;
  std::uint64_t seq;
  Bytes frame;
  bool operator==(const TraceEntry&) const = default;
};

std::vector<TraceEntry> faulty_run(std::uint64_t seed) {
  Network net(seed);
  std::vector<HostId> h;
  for (std::uint8_t i = 1; i <= 3; ++i) h.push_back(must_add(net, v4(i), i));
  UROCE_CHECK(net.configure_default(at_ns(0), all_faults()).ok());
  std::vector<TraceEntry> trace;
  Delivery d;
  for (std::uint32_t i = 0; i < 600; ++i) {
    const Instant now = at_ns(i * 700);
    while (net.poll_delivery(now, d)) trace.push_back({d.time.ns(), d.from, d.to, d.seq, d.frame});
    const auto from = static_cast<std::uint8_t>(i % 3);
    const auto to = static_cast<std::uint8_t>((i / 3) % 3);
    net.send(now, h[from], roce_frame(v4(from + 1), v4(to + 1), 64 + (i % 7) * 4, i, 0b10));
  }
  for (const Delivery& x : run_to_idle(net)) {
    trace.push_back({x.time.ns(), x.from, x.to, x.seq, x.frame});
  }
  return trace;
}

TEST(Network, SameSeedGivesAByteIdenticalTraceAndAnotherSeedDoesNot) {
  const auto first = faulty_run(42);
  const auto again = faulty_run(42);
  const auto other = faulty_run(43);
  ASSERT_GT(first.size(), 500u);
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

// A link's draws depend on the seed and the two addresses only: not on the order hosts were
// added, nor on other hosts, nor on traffic elsewhere.
TEST(Network, LinkStreamsDoNotDependOnOtherHostsOrTraffic) {
  auto trace_of_link = [](bool crowded) {
    Network net(7);
    HostId a = 0;
    HostId b = 0;
    if (crowded) {
      must_add(net, v4(9), 9);
      b = must_add(net, v4(2), 2);
      must_add(net, v6(5), 5);
      a = must_add(net, v4(1), 1);
    } else {
      a = must_add(net, v4(1), 1);
      b = must_add(net, v4(2), 2);
    }
    UROCE_CHECK(net.configure_default(at_ns(0), all_faults()).ok());
    std::vector<std::tuple<std::int64_t, std::uint64_t, Bytes, bool, bool, bool>> trace;
    Delivery d;
    for (std::uint32_t i = 0; i < 400; ++i) {
      const Instant now = at_ns(i * 1'000);
      while (net.poll_delivery(now, d)) {
        if (d.from == a && d.to == b) {
          trace.emplace_back(d.time.ns(), 0, d.frame, d.duplicate, d.reordered, d.corrupted);
        }
      }
      if (crowded) {  // traffic on other links first, and b -> a
        net.send(now, b, roce_frame(v4(2), v4(9), 32, i, 0b01));
        net.send(now, b, roce_frame(v4(2), v4(1), 32, i, 0b01));
      }
      net.send(now, a, roce_frame(v4(1), v4(2), 32, i, 0b01));
    }
    while (!net.next_event_time().is_never()) {
      while (net.poll_delivery(std::max(net.now(), net.next_event_time()), d)) {
        if (d.from == a && d.to == b) {
          trace.emplace_back(d.time.ns(), 0, d.frame, d.duplicate, d.reordered, d.corrupted);
        }
      }
    }
    return std::make_pair(trace, net.link_stats(a, b));
  };
  const auto [alone, alone_stats] = trace_of_link(false);
  const auto [crowded, crowded_stats] = trace_of_link(true);
  ASSERT_GT(alone.size(), 300u);
  EXPECT_EQ(alone, crowded);
  EXPECT_EQ(alone_stats, crowded_stats);
  EXPECT_GT(alone_stats.corrupted, 0u);
  EXPECT_GT(alone_stats.dropped(DropCause::kLoss), 0u);
}

TEST(Network, TotalsAreTheSumOfLinksAndEveryFrameIsAccountedFor) {
  Network net(5);
  std::vector<HostId> h;
  for (std::uint8_t i = 1; i <= 3; ++i) h.push_back(must_add(net, v4(i), i));
  ASSERT_TRUE(net.configure_default(at_ns(0), all_faults()).ok());
  Delivery d;
  std::uint64_t polled = 0;
  for (std::uint32_t i = 0; i < 3000; ++i) {
    const Instant now = at_ns(i * 100);
    if (i == 1000) net.cut_link(now, h[0], h[1]);
    if (i == 2000) net.heal_link(now, h[0], h[1]);
    while (net.poll_delivery(now, d)) ++polled;
    const auto to = static_cast<std::uint8_t>(1 + i % 4);  // 10.0.0.4 does not exist
    net.send(now, h[i % 3],
             roce_frame(v4(static_cast<std::uint8_t>(1 + i % 3)), v4(to), 64, i, 0b10));
    // Conservation at every step: each frame sent or duplicated is delivered, dropped or in
    // flight.
    const LinkStats& t = net.total_stats();
    ASSERT_EQ(t.sent_frames + t.duplicated,
              t.delivered_frames + t.dropped_total() + net.in_flight_frames());
    ASSERT_EQ(t.delivered_frames, polled + net.ready_frames());
  }
  run_to_idle(net);
  LinkStats sum;
  for (HostId from : h) {
    for (HostId to : h) sum.add(net.link_stats(from, to));
  }
  LinkStats total = net.total_stats();
  EXPECT_GT(total.dropped(DropCause::kNoRoute), 0u);
  EXPECT_GT(total.dropped(DropCause::kPartition), 0u);
  EXPECT_EQ(sum.sent_frames + total.dropped(DropCause::kNoRoute), total.sent_frames);
  sum.sent_frames = total.sent_frames;
  sum.sent_bytes = total.sent_bytes;
  sum.dropped_frames[static_cast<std::size_t>(DropCause::kNoRoute)] =
      total.dropped(DropCause::kNoRoute);
  EXPECT_EQ(sum, total);
  EXPECT_EQ(total.sent_frames + total.duplicated, total.delivered_frames + total.dropped_total());
}

// ---- a switch port in front of a host (configure_port) --------------------------------------

// Two senders, each on a link as fast as the port, into one receiver: on their own links the
// frames never wait, at the port they take turns, so the receiver gets them one port-time apart
// and a queue builds.
TEST(NetworkPort, SendersIntoOneHostShareItsPort) {
  Network net(1);
  const HostId r = must_add(net, v4(1), 1);
  const HostId a = must_add(net, v4(2), 2);
  const HostId b = must_add(net, v4(3), 3);
  LinkConfig link;
  link.delay_ns = 1000;
  link.bandwidth_bps = 1'000'000'000;  // 8 ns per byte: 1000 bytes in 8 us
  link.queue_limit_packets = 0;
  ASSERT_TRUE(net.configure_default(at_ns(0), link).ok());
  PortConfig port;
  port.bandwidth_bps = 1'000'000'000;
  ASSERT_TRUE(net.configure_port(at_ns(0), r, port).ok());
  for (std::uint32_t i = 0; i < 4; ++i) {
    net.send(at_ns(0), a, test::sized_frame(v4(2), v4(1), 1000, i));
    net.send(at_ns(0), b, test::sized_frame(v4(3), v4(1), 1000, 100 + i));
  }
  const auto got = run_to_idle(net);
  ASSERT_EQ(got.size(), 8u);
  // a's first frame reaches the switch at 8 us and leaves it at 16 us; b's, also at the switch
  // at 8 us, waits for it. Then one every 8 us, alternating, plus the 1 us of delay.
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].time, at_ns(16'000 + 8'000 * static_cast<std::int64_t>(i) + 1'000)) << i;
  }
  const PortStats& s = net.port_stats(r);
  EXPECT_EQ(s.enqueued_frames, 8u);
  EXPECT_EQ(s.dropped_frames, 0u);
  EXPECT_EQ(s.forwarded_bytes_by_source.at(a), 4000u);
  EXPECT_EQ(s.forwarded_bytes_by_source.at(b), 4000u);
  // Each pair of frames reaches the switch together, 8 us apart, and the port drains one per
  // 8 us: the queue grows by one frame per pair.
  EXPECT_EQ(s.max_queue_bytes, 5000u);
  EXPECT_EQ(net.port_stats(a).enqueued_frames, 0u);  // no port there
}

// What the port holds at a moment: the frames it has not finished sending on by then.
TEST(NetworkPort, QueueBytesAreTheFramesNotYetSentOn) {
  Network net(1);
  const HostId r = must_add(net, v4(1), 1);
  const HostId a = must_add(net, v4(2), 2);
  LinkConfig link;
  link.bandwidth_bps = 0;  // the sender's link takes no time: the frames reach the port at once
  link.queue_limit_packets = 0;
  ASSERT_TRUE(net.configure_default(at_ns(0), link).ok());
  PortConfig port;
  port.bandwidth_bps = 1'000'000'000;  // 1000 bytes in 8 us
  ASSERT_TRUE(net.configure_port(at_ns(0), r, port).ok());
  EXPECT_EQ(net.port_queue_bytes(a, at_ns(0)), 0u);  // no port in front of a
  for (std::uint32_t i = 0; i < 3; ++i) {
    net.send(at_ns(0), a, test::sized_frame(v4(2), v4(1), 1000, i));
  }
  EXPECT_EQ(net.port_queue_bytes(r, at_ns(0)), 3000u);
  EXPECT_EQ(net.port_queue_bytes(r, at_ns(8'000)), 2000u);
  EXPECT_EQ(net.port_queue_bytes(r, at_ns(23'999)), 1000u);
  EXPECT_EQ(net.port_queue_bytes(r, at_ns(24'000)), 0u);
}

TEST(NetworkPort, TailDropsBeyondItsBuffer) {
  Network net(1);
  const HostId r = must_add(net, v4(1), 1);
  const HostId a = must_add(net, v4(2), 2);
  LinkConfig link;
  link.queue_limit_packets = 0;  // the sender's link: infinitely fast, no queue
  ASSERT_TRUE(net.configure_default(at_ns(0), link).ok());
  PortConfig port;
  port.bandwidth_bps = 1'000'000'000;
  port.queue_limit_bytes = 3000;
  ASSERT_TRUE(net.configure_port(at_ns(0), r, port).ok());
  for (std::uint32_t i = 0; i < 5; ++i)
    net.send(at_ns(0), a, test::sized_frame(v4(2), v4(1), 1000, i));
  EXPECT_EQ(run_to_idle(net).size(), 3u);
  EXPECT_EQ(net.port_stats(r).dropped_frames, 2u);
  EXPECT_EQ(net.link_stats(a, r).dropped(DropCause::kQueueFull), 2u);
}

// DCQCN's congestion point: nothing marked below Kmin, everything at or above Kmax, a
// probability rising linearly between; frames that are not ECN-capable are never marked.
TEST(NetworkPort, MarksEcnCapableFramesBetweenKminAndKmax) {
  Network net(7);
  const HostId r = must_add(net, v4(1), 1);
  const HostId a = must_add(net, v4(2), 2);
  LinkConfig link;
  link.queue_limit_packets = 0;
  ASSERT_TRUE(net.configure_default(at_ns(0), link).ok());
  PortConfig port;
  port.bandwidth_bps = 1'000'000'000;
  port.ecn_kmin_bytes = 10'000;
  port.ecn_kmax_bytes = 30'000;
  port.ecn_pmax = {1, 2};
  port.ecn_mark_on_dequeue = false;  // drawn on the queue each frame finds
  ASSERT_TRUE(net.configure_port(at_ns(0), r, port).ok());
  // 100 frames of ~1100 bytes at once: frame k finds k frames queued ahead of it.
  constexpr std::uint8_t kEct0 = 0b10;
  for (std::uint32_t i = 0; i < 100; ++i) {
    net.send(at_ns(0), a, roce_frame(v4(2), v4(1), 1000, i, i % 10 == 9 ? 0 : kEct0));
  }
  const auto got = run_to_idle(net);
  ASSERT_EQ(got.size(), 100u);
  const std::size_t frame_bytes = got[0].frame.size();
  std::size_t between = 0, marked_between = 0;
  for (std::size_t k = 0; k < got.size(); ++k) {
    const std::uint32_t psn = test::psn_of(got[k].frame);
    const std::uint64_t queued = std::uint64_t{psn} * frame_bytes;  // in send order
    if (psn % 10 == 9) {
      EXPECT_FALSE(got[k].ecn_marked) << psn;  // Not-ECT
    } else if (queued <= port.ecn_kmin_bytes) {
      EXPECT_FALSE(got[k].ecn_marked) << psn;
    } else if (queued >= port.ecn_kmax_bytes) {
      EXPECT_TRUE(got[k].ecn_marked) << psn;
    } else {
      ++between;
      marked_between += got[k].ecn_marked ? 1 : 0;
    }
  }
  // Between the two, the probability averages pmax / 2: a quarter of ~16 frames.
  EXPECT_GT(between, 10u);
  EXPECT_GT(marked_between, 0u);
  EXPECT_LT(marked_between, between);
  EXPECT_EQ(net.port_stats(r).ecn_marked, net.total_stats().ecn_marked);
}

// Marking on dequeue: a frame's mark reflects the queue it leaves behind when it departs, not the
// one it found. The first frame finds the port empty, but 25 frames reach the port while it is
// serialized and it leaves them behind (above Kmax): marked. The last finds 24 ahead of it (above
// Kmax) and leaves nothing behind: not marked. Marking on enqueue decides the other way round.
TEST(NetworkPort, MarksOnDequeueTheQueueAFrameLeavesBehind) {
  for (const bool on_dequeue : {true, false}) {
    Network net(7);
    const HostId r = must_add(net, v4(1), 1);
    const HostId a = must_add(net, v4(2), 2);
    LinkConfig link;
    link.queue_limit_packets = 0;
    link.bandwidth_bps = 0;  // frames reach the port when sent
    ASSERT_TRUE(net.configure_default(at_ns(0), link).ok());
    PortConfig port;
    port.bandwidth_bps = 1'000'000'000;  // ~1100 bytes: ~9 us
    port.ecn_kmin_bytes = 10'000;
    port.ecn_kmax_bytes = 20'000;
    port.ecn_mark_on_dequeue = on_dequeue;
    ASSERT_TRUE(net.configure_port(at_ns(0), r, port).ok());
    constexpr std::uint8_t kEct0 = 0b10;
    net.send(at_ns(0), a, roce_frame(v4(2), v4(1), 1000, 0, kEct0));
    for (std::uint32_t i = 1; i <= 25; ++i) {
      net.send(at_ns(1'000), a, roce_frame(v4(2), v4(1), 1000, i, kEct0));
    }
    const auto got = run_to_idle(net);
    ASSERT_EQ(got.size(), 26u);
    for (const auto& d : got) {
      const std::uint32_t psn = test::psn_of(d.frame);
      if (psn == 0) {
        EXPECT_EQ(d.ecn_marked, on_dequeue) << on_dequeue;
      }
      if (psn == 25) {
        EXPECT_EQ(d.ecn_marked, !on_dequeue) << on_dequeue;
      }
      // Frame k leaves 25 - k behind (dequeue) and finds k - 1 ahead, the first excepted.
      const std::uint64_t frames = on_dequeue ? 25 - psn : (psn == 0 ? 0 : psn - 1);
      const std::uint64_t bytes = frames * got[0].frame.size();
      if (bytes >= port.ecn_kmax_bytes) {
        EXPECT_TRUE(d.ecn_marked) << psn << on_dequeue;
      }
      if (bytes <= port.ecn_kmin_bytes) {
        EXPECT_FALSE(d.ecn_marked) << psn << on_dequeue;
      }
    }
    EXPECT_EQ(net.port_stats(r).ecn_marked, net.total_stats().ecn_marked);
  }
}

TEST(NetworkPort, QueuePercentiles) {
  PortStats s;
  s.queue_histogram[0] = 98;  // under 1 KiB
  s.queue_histogram[9] = 1;   // 9..10 KiB
  s.queue_histogram[40] = 1;  // 40..41 KiB
  EXPECT_EQ(s.queue_percentile_bytes(500), 1024u);
  EXPECT_EQ(s.queue_percentile_bytes(990), 10u * 1024);
  EXPECT_EQ(s.queue_percentile_bytes(1000), 41u * 1024);
  EXPECT_EQ(PortStats{}.queue_percentile_bytes(990), 0u);
}

TEST(NetworkPort, InvalidConfigurationsAreRefused) {
  Network net(1);
  const HostId r = must_add(net, v4(1), 1);
  PortConfig p;
  p.bandwidth_bps = 0;
  EXPECT_FALSE(net.configure_port(at_ns(0), r, p).ok());
  p.bandwidth_bps = 1000;
  p.ecn_kmin_bytes = 20;
  p.ecn_kmax_bytes = 10;
  EXPECT_FALSE(net.configure_port(at_ns(0), r, p).ok());
  p.ecn_kmin_bytes = 0;
  p.ecn_pmax = {3, 2};
  EXPECT_FALSE(net.configure_port(at_ns(0), r, p).ok());
}

}  // namespace
}  // namespace uroce::sim
