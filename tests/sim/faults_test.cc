// Probabilistic faults of one link: their rates, that they are exactly off when off, and what
// each does to a frame (jitter bounds, reordering, duplicates, corrupted bits, ECN marks).
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "sim/fault_plan.h"
#include "sim/network.h"
#include "sim_frames.h"
#include "wire/packet.h"

namespace uroce::sim {
namespace {

using test::Bytes;
using test::must_add;
using test::roce_frame;
using test::v4;
using test::v6;

Instant at_ns(std::int64_t ns) { return Instant::from_ns(ns); }

struct LinkRun {
  std::vector<Bytes> sent;  // by send index
  std::vector<Delivery> got;
  LinkStats stats;
  std::vector<std::uint32_t> lost_psns;  // from the tap, in send order
};

class LossTap : public FrameTap {
 public:
  void on_frame(const TapEvent& e) override {
    if (e.point == TapPoint::kDrop && e.cause == DropCause::kLoss) {
      psns.push_back(load_be24(e.frame, 14 + 20 + 8 + 9));
    }
  }
  std::vector<std::uint32_t> psns;
};

// `n` IPv4 frames from 10.0.0.1 to 10.0.0.2, one every `spacing_ns`, ECN field `ecn`.
LinkRun run_link(std::uint64_t seed, const LinkConfig& c, std::uint32_t n, std::int64_t spacing_ns,
                 std::uint8_t ecn = 0b10, std::size_t payload_bytes = 64) {
  Network net(seed);
  const HostId a = must_add(net, v4(1), 1);
  const HostId b = must_add(net, v4(2), 2);
  LossTap tap;
  net.set_tap(&tap);
  UROCE_CHECK(net.configure_link(at_ns(0), a, b, c).ok());
  LinkRun r;
  Delivery d;
  for (std::uint32_t i = 0; i < n; ++i) {
    const Instant now = at_ns(spacing_ns * i);
    while (net.poll_delivery(now, d)) r.got.push_back(d);
    r.sent.push_back(roce_frame(v4(1), v4(2), payload_bytes, i, ecn));
    net.send(now, a, r.sent.back());
  }
  while (!net.next_event_time().is_never()) {
    while (net.poll_delivery(std::max(net.now(), net.next_event_time()), d)) r.got.push_back(d);
  }
  r.stats = net.link_stats(a, b);
  r.lost_psns = tap.psns;
  net.set_tap(nullptr);
  return r;
}

std::size_t send_index(const Delivery& d, std::int64_t spacing_ns) {
  return static_cast<std::size_t>(d.sent_time.ns() / spacing_ns);
}

// |count - n p| <= 6 standard deviations of Binomial(n, p). The seed is fixed, so this is
// deterministic; the bound says the rate is right, not merely that the code ran.
void expect_binomial(std::uint64_t count, std::uint64_t n, Ratio p, const char* what) {
  const double q = static_cast<double>(p.num) / p.den;
  const double mean = static_cast<double>(n) * q;
  const double sd = std::sqrt(static_cast<double>(n) * q * (1 - q));
  EXPECT_NEAR(static_cast<double>(count), mean, 6 * sd + 1) << what << ": " << count << " of " << n;
}

TEST(Faults, RatesFollowTheirRatios) {
  LinkConfig c;
  c.delay_ns = 10'000;
  c.loss = {1, 10};
  c.duplication = {1, 20};
  c.reordering = {3, 40};
  c.corruption = {1, 50};
  c.ecn_mark = {1, 8};
  const std::uint32_t n = 20'000;
  const LinkRun r = run_link(11, c, n, 1'000);
  const LinkStats& s = r.stats;
  const std::uint64_t lost = s.dropped(DropCause::kLoss);
  const std::uint64_t survivors = n - lost;
  const std::uint64_t copies = survivors + s.duplicated;
  expect_binomial(lost, n, c.loss, "loss");
  expect_binomial(s.duplicated, survivors, c.duplication, "duplication");
  expect_binomial(s.reordered, copies, c.reordering, "reordering");
  expect_binomial(s.corrupted, copies, c.corruption, "corruption");
  expect_binomial(s.ecn_marked, survivors, c.ecn_mark, "ecn");

  // The statistics match what was delivered.
  EXPECT_EQ(s.sent_frames, n);
  EXPECT_EQ(s.dropped_total(), lost);
  EXPECT_EQ(s.delivered_frames, copies);
  EXPECT_EQ(r.got.size(), copies);
  std::uint64_t dup = 0, reordered = 0, corrupted = 0, marked = 0;
  std::set<std::size_t> delivered;
  for (const Delivery& d : r.got) {
    dup += d.duplicate;
    reordered += d.reordered;
    corrupted += d.corrupted;
    marked += d.ecn_marked && !d.duplicate;
    delivered.insert(send_index(d, 1'000));
  }
  EXPECT_EQ(dup, s.duplicated);
  EXPECT_EQ(reordered, s.reordered);
  EXPECT_EQ(corrupted, s.corrupted);
  EXPECT_EQ(marked, s.ecn_marked);
  EXPECT_EQ(delivered.size(), survivors);
  EXPECT_EQ(r.lost_psns.size(), lost);
  for (std::uint32_t psn : r.lost_psns) EXPECT_EQ(delivered.count(psn), 0u);
}

TEST(Faults, NothingHappensWhenEveryFaultIsOff) {
  LinkConfig c;
  c.delay_ns = 3'000;
  const LinkRun r = run_link(11, c, 5'000, 500);
  const LinkStats& s = r.stats;
  EXPECT_EQ(s.dropped_total(), 0u);
  EXPECT_EQ(s.duplicated, 0u);
  EXPECT_EQ(s.reordered, 0u);
  EXPECT_EQ(s.corrupted, 0u);
  EXPECT_EQ(s.ecn_marked, 0u);
  ASSERT_EQ(r.got.size(), r.sent.size());
  for (std::size_t i = 0; i < r.got.size(); ++i) {
    EXPECT_EQ(r.got[i].frame, r.sent[i]);
    EXPECT_EQ(r.got[i].time, at_ns(static_cast<std::int64_t>(i) * 500 + 3'000));
  }
}

// Each fault draws from its own stream: enabling others does not change which frames are lost.
TEST(Faults, LossChoicesDoNotDependOnOtherFaults) {
  LinkConfig loss_only;
  loss_only.loss = {1, 10};
  LinkConfig everything = loss_only;
  everything.jitter_ns = 5'000;
  everything.duplication = {1, 5};
  everything.reordering = {1, 5};
  everything.corruption = {1, 5};
  everything.ecn_mark = {1, 5};
  const LinkRun a = run_link(3, loss_only, 3'000, 1'000);
  const LinkRun b = run_link(3, everything, 3'000, 1'000);
  ASSERT_GT(a.lost_psns.size(), 200u);
  EXPECT_EQ(a.lost_psns, b.lost_psns);
  EXPECT_NE(run_link(4, loss_only, 3'000, 1'000).lost_psns, a.lost_psns);
}

TEST(Faults, JitterStaysWithinItsBoundsAndCoversThem) {
  LinkConfig c;
  c.delay_ns = 10'000;
  c.jitter_ns = 5'000;
  const LinkRun r = run_link(5, c, 5'000, 100'000);  // far apart: no queueing, no overtaking
  ASSERT_EQ(r.got.size(), 5'000u);
  std::int64_t lo = c.jitter_ns;
  std::int64_t hi = 0;
  double sum = 0;
  for (const Delivery& d : r.got) {
    const std::int64_t extra = (d.time - d.sent_time).count_ns() - c.delay_ns;
    ASSERT_GE(extra, 0);
    ASSERT_LE(extra, c.jitter_ns);
    lo = std::min(lo, extra);
    hi = std::max(hi, extra);
    sum += static_cast<double>(extra);
  }
  EXPECT_LT(lo, 50);
  EXPECT_GT(hi, 4'950);
  // Uniform on [0, 5000]: mean 2500, sd of the mean 1443 / sqrt(5000) = 20.
  EXPECT_NEAR(sum / 5'000, 2'500, 120);
}

TEST(Faults, ReorderedFramesLandAfterLaterOnes) {
  LinkConfig c;
  c.delay_ns = 10'000;
  c.reordering = {1, 10};
  c.reorder_delay_ns = 50'000;
  const std::int64_t spacing_ns = 1'000;
  const LinkRun r = run_link(8, c, 2'000, spacing_ns);
  ASSERT_EQ(r.got.size(), 2'000u);
  expect_binomial(r.stats.reordered, 2'000, c.reordering, "reordering");
  std::size_t overtaken = 0;
  std::size_t last_in_order = 0;
  for (std::size_t pos = 0; pos < r.got.size(); ++pos) {
    const Delivery& d = r.got[pos];
    const std::size_t i = send_index(d, spacing_ns);
    const std::int64_t extra = d.reordered ? c.reorder_delay_ns : 0;
    EXPECT_EQ(d.time, d.sent_time + Duration::ns(c.delay_ns + extra));
    if (d.reordered) {
      // Every frame sent within reorder_delay_ns after it (and not itself held back) overtook it.
      std::size_t later_before = 0;
      for (std::size_t p = 0; p < pos; ++p) later_before += send_index(r.got[p], spacing_ns) > i;
      if (i + 50 < 2'000) {
        EXPECT_GE(later_before, 30u);
      }
      overtaken += later_before > 0;
    } else {
      EXPECT_GE(i + 1, last_in_order);  // frames not held back stay in order
      last_in_order = i + 1;
    }
  }
  EXPECT_GT(overtaken, 100u);
}

TEST(Faults, DuplicatesAreIdenticalCopies) {
  LinkConfig c;
  c.delay_ns = 1'000;
  c.duplication = {1, 4};
  const LinkRun r = run_link(9, c, 2'000, 1'000);
  expect_binomial(r.stats.duplicated, 2'000, c.duplication, "duplication");
  ASSERT_EQ(r.got.size(), 2'000 + r.stats.duplicated);
  std::map<std::size_t, int> copies;
  for (const Delivery& d : r.got) {
    const std::size_t i = send_index(d, 1'000);
    EXPECT_EQ(d.frame, r.sent[i]);
    ++copies[i];
    if (d.duplicate) {
      EXPECT_EQ(copies[i], 2);  // the extra copy comes after the original
    }
  }
  for (const auto& [i, n] : copies) EXPECT_LE(n, 2);
}

// Byte offsets of an IPv4 roce_frame() that the ICRC does not cover: the Ethernet header, and
// the IP/UDP/BTH fields that it masks (IPv4 TOS, TTL, header checksum; UDP checksum; BTH byte 4).
bool icrc_blind(std::size_t byte) {
  constexpr std::size_t kIp = 14;
  constexpr std::size_t kUdp = kIp + 20;
  constexpr std::size_t kBth = kUdp + 8;
  return byte < kIp || byte == kIp + 1 || byte == kIp + 8 || byte == kIp + 10 || byte == kIp + 11 ||
         byte == kUdp + 6 || byte == kUdp + 7 || byte == kBth + 4;
}

TEST(Faults, CorruptionFlipsExactlyTheConfiguredNumberOfBits) {
  for (std::uint32_t bits : {1u, 3u, 7u, 64u}) {
    LinkConfig c;
    c.corruption = {1, 4};
    c.corrupt_bits = bits;
    const LinkRun r = run_link(21, c, 2'000, 1'000);
    expect_binomial(r.stats.corrupted, 2'000, c.corruption, "corruption");
    std::uint64_t rejected = 0;
    for (const Delivery& d : r.got) {
      const Bytes& sent = r.sent[send_index(d, 1'000)];
      ASSERT_EQ(d.frame.size(), sent.size());
      std::uint32_t flipped = 0;
      bool covered = false;
      for (std::size_t i = 0; i < sent.size(); ++i) {
        const auto x = static_cast<unsigned>(d.frame[i] ^ sent[i]);
        flipped += static_cast<std::uint32_t>(std::popcount(x));
        covered = covered || (x != 0 && !icrc_blind(i));
      }
      ASSERT_EQ(flipped, d.corrupted ? bits : 0u) << "bits=" << bits;
      // The receiver's checks catch every flip in a covered bit.
      const auto parsed = wire::parse_frame(wire::LinkType::kEthernet, d.frame);
      if (covered) {
        EXPECT_FALSE(parsed.ok());
      }
      if (!d.corrupted) {
        EXPECT_TRUE(parsed.ok());
      }
      rejected += d.corrupted && !parsed.ok();
    }
    EXPECT_GT(rejected, r.stats.corrupted * 2 / 3) << "bits=" << bits;
  }
}

// ---- ECN ------------------------------------------------------------------------------------

TEST(Faults, EcnMarksOnlyEcnCapableFramesAndOnlyTheEcnBits) {
  LinkConfig c;
  c.ecn_mark = {1, 1};
  constexpr std::uint8_t kDscp = 46 << 2;  // EF, to show that DSCP is kept
  for (int e : {0b00, 0b01, 0b10, 0b11}) {
    const auto ecn = static_cast<std::uint8_t>(e);
    const LinkRun r = run_link(2, c, 200, 1'000, static_cast<std::uint8_t>(kDscp | ecn));
    ASSERT_EQ(r.got.size(), 200u);
    const bool capable = ecn != 0b00;
    EXPECT_EQ(r.stats.ecn_marked, ecn == 0b01 || ecn == 0b10 ? 200u : 0u);
    for (const Delivery& d : r.got) {
      const Bytes& sent = r.sent[send_index(d, 1'000)];
      EXPECT_EQ(d.ecn_marked, ecn == 0b01 || ecn == 0b10);
      const std::uint8_t tos = load_u8(d.frame, 15);
      EXPECT_EQ(tos, capable ? (kDscp | 0b11) : kDscp);
      // Nothing else changed but the IPv4 header checksum, which is still right.
      for (std::size_t i = 0; i < sent.size(); ++i) {
        if (i != 15 && i != 24 && i != 25) {
          ASSERT_EQ(d.frame[i], sent[i]) << i;
        }
      }
      const ConstBytes ip = ConstBytes(d.frame).subspan(14, 20);
      EXPECT_EQ(load_be16(ip, 10), wire::ipv4_header_checksum(ip));
      EXPECT_TRUE(wire::parse_frame(wire::LinkType::kEthernet, d.frame).ok());  // ICRC holds
    }
  }
}

TEST(Faults, EcnMarksIpv6TrafficClass) {
  Network net(1);
  const HostId a = must_add(net, v6(1), 1);
  must_add(net, v6(2), 2);
  LinkConfig c;
  c.ecn_mark = {1, 1};
  ASSERT_TRUE(net.configure_default(at_ns(0), c).ok());
  const Bytes ect = roce_frame(v6(1), v6(2), 100, 1, 0xa0 | 0b01);
  const Bytes not_ect = roce_frame(v6(1), v6(2), 100, 2, 0xa0);
  net.send(at_ns(0), a, ect);
  net.send(at_ns(0), a, not_ect);
  Delivery d;
  ASSERT_TRUE(net.poll_delivery(at_ns(0), d));
  Bytes expected = ect;
  expected[15] |= std::byte{0x30};  // traffic class bits 1..0 are bits 5..4 of byte 1 of IPv6
  EXPECT_EQ(d.frame, expected);
  auto parsed = wire::parse_frame(wire::LinkType::kEthernet, d.frame);
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->ipv6.traffic_class, 0xa0 | 0b11);
  ASSERT_TRUE(net.poll_delivery(at_ns(0), d));
  EXPECT_EQ(d.frame, not_ect);
  EXPECT_FALSE(d.ecn_marked);
}

TEST(Faults, QueueDepthMarking) {
  LinkConfig c;
  c.bandwidth_bps = 1'000'000'000;
  c.ecn_mark_queue_packets = 2;
  for (int e : {0b10, 0b00}) {
    const auto ecn = static_cast<std::uint8_t>(e);
    Network net(1);
    const HostId a = must_add(net, v4(1), 1);
    must_add(net, v4(2), 2);
    ASSERT_TRUE(net.configure_default(at_ns(0), c).ok());
    for (std::uint32_t i = 0; i < 5; ++i)
      net.send(at_ns(0), a, roce_frame(v4(1), v4(2), 400, i, ecn));
    // After the queue drains, the next frame finds it empty again.
    net.send(at_ns(1'000'000), a, roce_frame(v4(1), v4(2), 400, 5, ecn));
    Delivery d;
    std::vector<bool> marked;
    while (net.poll_delivery(at_ns(2'000'000), d)) marked.push_back(d.ecn_marked);
    if (ecn != 0) {
      EXPECT_EQ(marked, (std::vector<bool>{false, false, true, true, true, false}));
    } else {
      EXPECT_EQ(marked, std::vector<bool>(6, false));
    }
  }
}

// ---- the fault grammar's faults on a link -------------------------------------------------

TEST(Faults, GilbertElliottLossesComeInRuns) {
  LinkConfig c;
  c.delay_ns = 1'000;
  c.burst = fault::GilbertElliott{{1, 100}, {1, 4}, {1, 1}, {0, 1}};
  const LinkRun r = run_link(17, c, 20'000, 1'000);
  const std::uint64_t lost = r.stats.dropped(DropCause::kLoss);
  expect_binomial(lost, 20'000, {4, 104}, "burst loss (p / (p + r))");  // loose: runs
  std::size_t runs = 0;
  for (std::size_t i = 0; i < r.lost_psns.size(); ++i) {
    runs += i == 0 || r.lost_psns[i] != r.lost_psns[i - 1] + 1;
  }
  // Mean run 1 / r = 4 (independent losses at this rate: 1.04).
  EXPECT_GT(static_cast<double>(lost) / static_cast<double>(runs), 3.0);
  EXPECT_TRUE(c.without_faults().burst == std::nullopt);
  EXPECT_NE(to_string(c).find(" burst=1/100:1/4:1/1:0"), std::string::npos) << to_string(c);
}

// A link's faults in the grammar and back: every generated link survives the trip.
TEST(Faults, LinkConfigConvertsToAndFromTheFaultGrammar) {
  for (std::uint64_t seed = 0; seed < 300; ++seed) {
    FaultPlanOptions po;
    po.host_count = 3;
    const FaultPlan p = FaultPlan::generate(seed, po);
    std::vector<LinkConfig> links = {p.default_link};
    for (const LinkOverride& o : p.overrides) links.push_back(o.config);
    for (const LinkConfig& c : links) {
      const fault::Faults f = c.faults();
      EXPECT_EQ(f.loss, c.loss);
      EXPECT_EQ(f.delay_ns, c.delay_ns);
      EXPECT_EQ(f.rate_bps, c.bandwidth_bps);
      auto back = LinkConfig::from_faults(f, c);
      ASSERT_TRUE(back.ok()) << back.error();
      EXPECT_EQ(back.value(), c) << to_string(c);
      // And through the grammar's text.
      fault::FaultSpec spec;
      spec.rules.push_back(fault::Rule{{}, f, {}});
      auto parsed = fault::FaultSpec::parse(spec.to_string());
      ASSERT_TRUE(parsed.ok()) << spec.to_string() << ": " << parsed.error();
      // (The grammar keeps ratios in lowest terms: the same probabilities print alike.)
      auto again = LinkConfig::from_faults(parsed->rules[0].faults, c);
      ASSERT_TRUE(again.ok());
      fault::FaultSpec reprinted;
      reprinted.rules.push_back(fault::Rule{{}, again->faults(), {}});
      EXPECT_EQ(reprinted.to_string(), spec.to_string());
    }
  }
  fault::Faults by_packets;
  by_packets.reordering = {1, 10};
  EXPECT_FALSE(LinkConfig::from_faults(by_packets).ok());
  fault::Faults too_long;
  too_long.delay_ns = 2 * kMaxLinkDelayNs;
  EXPECT_FALSE(LinkConfig::from_faults(too_long).ok());
}

}  // namespace
}  // namespace uroce::sim
