// Partitions: cut links and isolated hosts drop frames from the moment they take effect,
// including frames already in flight, and heal at the right time; scheduled events; end_faults.
#include <gtest/gtest.h>

#include <vector>

#include "sim/network.h"
#include "sim_frames.h"

namespace uroce::sim {
namespace {

using test::Bytes;
using test::must_add;
using test::roce_frame;
using test::v4;

Instant at_ns(std::int64_t ns) { return Instant::from_ns(ns); }

struct Trio {
  Network net{17};
  HostId a = must_add(net, v4(1), 1);
  HostId b = must_add(net, v4(2), 2);
  HostId c = must_add(net, v4(3), 3);
  std::uint32_t psn = 0;

  explicit Trio(std::int64_t delay_ns) {
    LinkConfig cfg;
    cfg.delay_ns = delay_ns;
    UROCE_CHECK(net.configure_default(at_ns(0), cfg).ok());
  }
  // Sends one frame from -> to and returns its PSN.
  std::uint32_t send(std::int64_t t_ns, HostId from, HostId to) {
    net.send(at_ns(t_ns), from, roce_frame(net.host_ip(from), net.host_ip(to), 16, psn));
    return psn++;
  }
  // PSNs delivered up to t, in order.
  std::vector<std::uint32_t> delivered(std::int64_t t_ns) {
    std::vector<std::uint32_t> out;
    Delivery d;
    while (net.poll_delivery(at_ns(t_ns), d)) out.push_back(test::psn_of(d.frame));
    return out;
  }
};

TEST(Partition, CutLinkDropsFramesSentAndInFlightUntilHealed) {
  Trio t(1'000);
  const auto arrives_before_cut = t.send(0, t.a, t.b);  // arrives 1000 = cut time: delivered
  const auto in_flight = t.send(500, t.a, t.b);         // would arrive at 1500: lost
  const auto reverse = t.send(500, t.b, t.a);           // the other direction is not cut
  const auto other = t.send(500, t.a, t.c);             // nor is another link of a
  t.net.cut_link(at_ns(1'000), t.a, t.b);
  EXPECT_TRUE(t.net.link_cut(t.a, t.b));
  EXPECT_FALSE(t.net.link_cut(t.b, t.a));
  t.send(1'200, t.a, t.b);  // dropped at send
  EXPECT_EQ(t.net.link_stats(t.a, t.b).dropped(DropCause::kPartition), 1u);
  t.send(2'900, t.a, t.b);  // in flight when healed, but sent while cut: dropped at send
  EXPECT_EQ(t.delivered(2'999), (std::vector<std::uint32_t>{arrives_before_cut, reverse, other}));

  t.net.heal_link(at_ns(3'000), t.a, t.b);
  EXPECT_FALSE(t.net.link_cut(t.a, t.b));
  const auto after = t.send(3'000, t.a, t.b);
  EXPECT_EQ(t.delivered(10'000), (std::vector<std::uint32_t>{after}));
  const LinkStats& s = t.net.link_stats(t.a, t.b);
  EXPECT_EQ(s.sent_frames, 5u);
  EXPECT_EQ(s.delivered_frames, 2u);
  EXPECT_EQ(s.dropped(DropCause::kPartition), 3u);
  (void)in_flight;
}

TEST(Partition, AFrameInFlightAcrossACutThatHealedIsStillLost) {
  Trio t(10'000);
  t.send(0, t.a, t.b);  // arrives at 10000
  t.net.cut_link(at_ns(2'000), t.a, t.b);
  t.net.heal_link(at_ns(3'000), t.a, t.b);
  const auto later = t.send(4'000, t.a, t.b);
  EXPECT_EQ(t.delivered(20'000), (std::vector<std::uint32_t>{later}));
  EXPECT_EQ(t.net.link_stats(t.a, t.b).dropped(DropCause::kPartition), 1u);
}

TEST(Partition, IsolatedHostNeitherSendsNorReceives) {
  Trio t(1'000);
  const auto old_in = t.send(0, t.a, t.b);  // in flight towards b when b is isolated
  t.net.isolate_host(at_ns(100), t.b);
  EXPECT_TRUE(t.net.host_isolated(t.b));
  EXPECT_TRUE(t.net.link_cut(t.a, t.b));
  EXPECT_TRUE(t.net.link_cut(t.b, t.c));
  t.send(200, t.a, t.b);
  t.send(200, t.b, t.a);
  t.send(200, t.c, t.b);
  t.send(200, t.b, t.b);
  const auto unaffected = t.send(200, t.a, t.c);
  EXPECT_EQ(t.delivered(5'000), (std::vector<std::uint32_t>{unaffected}));
  EXPECT_EQ(t.net.total_stats().dropped(DropCause::kPartition), 5u);
  (void)old_in;

  // A link cut on its own stays cut when the host heals.
  t.net.cut_link(at_ns(5'000), t.c, t.b);
  t.net.heal_host(at_ns(6'000), t.b);
  EXPECT_FALSE(t.net.host_isolated(t.b));
  EXPECT_TRUE(t.net.link_cut(t.c, t.b));
  const auto x = t.send(6'000, t.a, t.b);
  const auto y = t.send(6'000, t.b, t.c);
  t.send(6'000, t.c, t.b);
  EXPECT_EQ(t.delivered(10'000), (std::vector<std::uint32_t>{x, y}));
}

TEST(Partition, ScheduledEventsTakeEffectAtTheirTime) {
  Trio t(0);
  t.net.schedule(NetEvent{at_ns(10'000), NetEventKind::kCutLink, t.a, t.b});
  t.net.schedule(NetEvent{at_ns(20'000), NetEventKind::kHealLink, t.a, t.b});
  t.net.schedule(NetEvent{at_ns(15'000), NetEventKind::kIsolateHost, t.c, 0});
  t.net.schedule(NetEvent{at_ns(30'000), NetEventKind::kHealAll, 0, 0});
  // The network is idle but has things to do: the host loop is woken for them.
  EXPECT_EQ(t.net.next_event_time(), at_ns(10'000));
  const auto before = t.send(9'999, t.a, t.b);
  EXPECT_EQ(t.delivered(9'999), (std::vector<std::uint32_t>{before}));
  EXPECT_FALSE(t.net.link_cut(t.a, t.b));
  t.send(10'000, t.a, t.b);  // the event at 10000 is applied first
  EXPECT_TRUE(t.net.link_cut(t.a, t.b));
  EXPECT_EQ(t.net.next_event_time(), at_ns(15'000));
  const auto c_ok = t.send(14'999, t.a, t.c);
  t.send(15'000, t.a, t.c);
  EXPECT_TRUE(t.net.host_isolated(t.c));
  const auto healed = t.send(20'000, t.a, t.b);
  t.send(29'999, t.c, t.a);
  const auto all_healed = t.send(30'000, t.c, t.a);
  EXPECT_FALSE(t.net.host_isolated(t.c));
  EXPECT_EQ(t.delivered(40'000), (std::vector<std::uint32_t>{c_ok, healed, all_healed}));
  EXPECT_TRUE(t.net.next_event_time().is_never());
}

// A scheduled event and an arrival at the same nanosecond go in the order they were made.
TEST(Partition, EventsAndArrivalsOnTheSameNanosecondGoInTheOrderTheyWereMade) {
  Trio t(5'000);
  const auto before = t.send(0, t.a, t.b);  // arrives at 5000, sent before the cut was scheduled
  t.net.schedule(NetEvent{at_ns(5'000), NetEventKind::kCutLink, t.a, t.b});
  LinkConfig faster;
  faster.delay_ns = 1'000;
  ASSERT_TRUE(t.net.configure_link(at_ns(4'000), t.a, t.b, faster).ok());
  t.send(4'000, t.a, t.b);  // also arrives at 5000, but sent after: the cut goes first
  EXPECT_EQ(t.delivered(6'000), (std::vector<std::uint32_t>{before}));
  EXPECT_EQ(t.net.link_stats(t.a, t.b).dropped(DropCause::kPartition), 1u);
}

TEST(Partition, EndFaultsHealsEverythingAndTurnsFaultsOff) {
  Trio t(0);
  LinkConfig faulty;
  faulty.delay_ns = 2'000;
  faulty.bandwidth_bps = 10'000'000'000;
  faulty.jitter_ns = 500;
  faulty.loss = {1, 2};
  faulty.duplication = {1, 2};
  faulty.reordering = {1, 2};
  faulty.corruption = {1, 2};
  faulty.ecn_mark = {1, 2};
  faulty.ecn_mark_queue_packets = 3;
  ASSERT_TRUE(t.net.configure_default(at_ns(0), faulty).ok());
  ASSERT_TRUE(t.net.configure_link(at_ns(0), t.a, t.b, faulty).ok());
  t.net.cut_link(at_ns(0), t.b, t.c);
  t.net.isolate_host(at_ns(0), t.a);
  t.net.schedule(NetEvent{at_ns(1'000), NetEventKind::kEndFaults, 0, 0});
  t.delivered(1'000);
  EXPECT_FALSE(t.net.link_cut(t.b, t.c));
  EXPECT_FALSE(t.net.host_isolated(t.a));
  EXPECT_EQ(t.net.link_config(t.a, t.b), faulty.without_faults());
  EXPECT_EQ(t.net.default_config(), faulty.without_faults());
  EXPECT_EQ(t.net.link_config(t.a, t.b).delay_ns, 2'000);
  EXPECT_EQ(t.net.link_config(t.a, t.b).bandwidth_bps, 10'000'000'000u);
  EXPECT_EQ(t.net.link_config(t.a, t.b).ecn_mark_queue_packets, 3u);

  const LinkStats before = t.net.total_stats();
  std::vector<Bytes> sent;
  for (std::uint32_t i = 0; i < 300; ++i) {
    const HostId from = i % 3;
    const HostId to = (i / 3) % 3;
    sent.push_back(roce_frame(t.net.host_ip(from), t.net.host_ip(to), 16, i));
    t.net.send(at_ns(1'000 + i * 1'000), from, sent.back());
  }
  Delivery d;
  std::size_t n = 0;
  while (t.net.poll_delivery(at_ns(1'000'000), d)) {
    EXPECT_EQ(d.frame, sent[test::psn_of(d.frame)]);
    EXPECT_EQ(d.time, d.sent_time + Duration::ns(2'000 + 60));  // 74 B at 10 Gb/s: 59.2 ns
    ++n;
  }
  EXPECT_EQ(n, 300u);
  const LinkStats after = t.net.total_stats();
  EXPECT_EQ(after.dropped_total(), before.dropped_total());
  EXPECT_EQ(after.corrupted, before.corrupted);
  EXPECT_EQ(after.duplicated, before.duplicated);
}

}  // namespace
}  // namespace uroce::sim
