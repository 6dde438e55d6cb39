// The fate of packets: classification, decide() and flip_bits() (shared with the simulator),
// and the FaultStage of the real datapath, fed packets with a manual clock.
#include "fault/fault.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <map>
#include <set>
#include <vector>

#include "wire/builder.h"
#include "wire/cm_mad.h"
#include "wire/packet.h"

namespace uroce::fault {
namespace {

using Bytes = std::vector<std::byte>;

Instant at_ns(std::int64_t ns) { return Instant::from_ns(ns); }
constexpr std::int64_t kMs = 1'000'000;
constexpr std::int64_t kUs = 1'000;

wire::IpAddress peer_a() { return wire::IpAddress::v4(0x0a000002); }

// The UDP payload of a packet (BTH .. ICRC, the ICRC left zero) of `op` to `qpn`, with `psn`
// and a payload of `payload_bytes` (when the opcode carries one).
Bytes roce(wire::Opcode op, std::uint32_t qpn = 0x11, std::uint32_t psn = 0,
           std::size_t payload_bytes = 16) {
  const wire::OpcodeInfo& info = wire::opcode_info(op);
  if (!info.is(wire::kFlagPayload)) payload_bytes = 0;
  wire::TransportHeaders h;
  h.bth.opcode = info.value;
  h.bth.dest_qpn = qpn;
  h.bth.psn = psn & 0xffffffu;
  const Bytes payload(payload_bytes, std::byte{static_cast<std::uint8_t>(psn)});
  Bytes out(wire::roce_size(info, payload_bytes));
  EXPECT_EQ(wire::write_roce(out, h, payload), out.size());
  return out;
}

std::uint32_t psn_of(const Bytes& b) { return load_be24(b, 9); }

FaultSpec spec(std::string_view text) {
  auto s = FaultSpec::parse(text);
  EXPECT_TRUE(s.ok()) << text << ": " << (s.ok() ? "" : s.error());
  return s.ok() ? s.value() : FaultSpec{};
}

PacketInfo tx_info(const Bytes& b) { return classify(b, Direction::kTx, peer_a()); }

// A MAD to QP 1 (UD SEND Only, 256 bytes) of management class `mgmt_class` with attribute `attr`.
Bytes mad(std::uint16_t attr, std::uint8_t mgmt_class = wire::kMgmtClassCm) {
  Bytes b = roce(wire::Opcode::kUdSendOnly, wire::kGsiQpn, 0, wire::kMadBytes);
  auto p = wire::parse_roce(b);
  EXPECT_TRUE(p.ok());
  if (!p.ok()) return b;
  const auto at = static_cast<std::size_t>(p->payload.data() - b.data());
  b[at + wire::kMadOffMgmtClass] = std::byte{mgmt_class};
  b[at + wire::kMadOffAttrId] = std::byte{static_cast<std::uint8_t>(attr >> 8)};
  b[at + wire::kMadOffAttrId + 1] = std::byte{static_cast<std::uint8_t>(attr)};
  return b;
}

// |count - n p| <= 6 standard deviations of Binomial(n, p) (+1). Seeds are fixed, so this is
// deterministic; the bound says the rate is right, not merely that the code ran.
void expect_binomial(std::uint64_t count, std::uint64_t n, Ratio p, const char* what) {
  const double q = static_cast<double>(p.num) / p.den;
  const double mean = static_cast<double>(n) * q;
  const double sd = std::sqrt(static_cast<double>(n) * q * (1 - q));
  EXPECT_NEAR(static_cast<double>(count), mean, 6 * sd + 1) << what << ": " << count << " of " << n;
}

// ---- classification ------------------------------------------------------------------------

// The class of each opcode, written out by hand from IBTA 9.2's table (not from the flags). An
// XRC opcode is of its RC operation's class (IBTA 9.2: XRC has RC's operations under 101b).
PacketClass expected_class(wire::Opcode op) {
  using wire::Opcode;
  switch (wire::rc_operation(op)) {
    case Opcode::kRcRdmaReadResponseFirst:
    case Opcode::kRcRdmaReadResponseMiddle:
    case Opcode::kRcRdmaReadResponseLast:
    case Opcode::kRcRdmaReadResponseOnly:
      return PacketClass::kReadResponse;
    case Opcode::kRcAcknowledge:
    case Opcode::kRcAtomicAcknowledge:
      return PacketClass::kAck;
    case Opcode::kRcCompareSwap:
    case Opcode::kRcFetchAdd:
      return PacketClass::kAtomic;
    case Opcode::kCnp:
      return PacketClass::kCnp;
    default:
      return PacketClass::kRequest;  // every SEND and WRITE, the READ request, UD SENDs
  }
}

TEST(FaultClassify, EveryOpcodeHasItsClassAndDestQp) {
  std::set<PacketClass> seen;
  for (wire::Opcode op : wire::kAllOpcodes) {
    const Bytes b = roce(op, 0x123456);
    const PacketInfo p = classify(b, Direction::kRx, peer_a());
    EXPECT_EQ(p.cls, expected_class(op)) << wire::opcode_info(op).name;
    EXPECT_EQ(p.dest_qpn, 0x123456u) << wire::opcode_info(op).name;
    EXPECT_EQ(p.dir, Direction::kRx);
    EXPECT_EQ(p.peer, peer_a());
    seen.insert(p.cls);
  }
  EXPECT_EQ(seen.size(), 5u);  // req, ack, read, atomic, cnp
}

TEST(FaultClassify, MadsToQp1AreCmAndWhatDoesNotParseIsOther) {
  EXPECT_EQ(tx_info(roce(wire::Opcode::kUdSendOnly, wire::kGsiQpn, 0, wire::kMadBytes)).cls,
            PacketClass::kCm);
  EXPECT_EQ(tx_info(roce(wire::Opcode::kUdSendOnly, wire::kGsiQpn, 0, 64)).cls,
            PacketClass::kOther);  // not a MAD
  EXPECT_EQ(tx_info(roce(wire::Opcode::kUdSendOnly, 2, 0, wire::kMadBytes)).cls,
            PacketClass::kRequest);  // a MAD-sized datagram to another QP
  for (const Bytes& junk : {Bytes{}, Bytes(8, std::byte{4}), Bytes(40, std::byte{0xff})}) {
    const PacketInfo p = tx_info(junk);
    EXPECT_EQ(p.cls, PacketClass::kOther);
    EXPECT_EQ(p.dest_qpn, 0u);
  }
  Bytes unknown = roce(wire::Opcode::kRcSendOnly, 7);
  unknown[0] = std::byte{0x1f};  // no such opcode
  EXPECT_EQ(tx_info(unknown).cls, PacketClass::kOther);
  EXPECT_EQ(tx_info(unknown).dest_qpn, 0u);
  for (std::size_t c = 0; c < kPacketClassCount; ++c) {
    EXPECT_NE(to_string(static_cast<PacketClass>(c)), "?");
  }
}

TEST(FaultMatch, DirectionClassQpnAndPeer) {
  PacketInfo p;
  p.dir = Direction::kRx;
  p.cls = PacketClass::kAck;
  p.dest_qpn = 9;
  p.peer = peer_a();
  EXPECT_TRUE(Match{}.matches(p));
  EXPECT_FALSE(spec("dir=tx,loss=1%").rules[0].match.matches(p));
  EXPECT_TRUE(spec("dir=rx,loss=1%").rules[0].match.matches(p));
  EXPECT_TRUE(spec("class=read+ack,loss=1%").rules[0].match.matches(p));
  EXPECT_FALSE(spec("class=req,loss=1%").rules[0].match.matches(p));
  EXPECT_TRUE(spec("qpn=9,loss=1%").rules[0].match.matches(p));
  EXPECT_FALSE(spec("qpn=10,loss=1%").rules[0].match.matches(p));
  EXPECT_TRUE(spec("peer=10.0.0.2,loss=1%").rules[0].match.matches(p));
  EXPECT_FALSE(spec("peer=10.0.0.3,loss=1%").rules[0].match.matches(p));
  // An IPv4-mapped IPv6 address is the IPv4 host (a dual-stack socket's view of it).
  EXPECT_TRUE(spec("peer=::ffff:10.0.0.2,loss=1%").rules[0].match.matches(p));
}

TEST(FaultClassify, ACmMadCarriesItsAttributeIdAndNothingElseDoes) {
  for (std::size_t i = 0; i < kCmAttrCount; ++i) {
    const auto id = static_cast<std::uint16_t>(kFirstCmAttr + i);
    const PacketInfo p = tx_info(mad(id));
    EXPECT_EQ(p.cls, PacketClass::kCm);
    EXPECT_EQ(p.cm_attr, id);
  }
  EXPECT_EQ(tx_info(mad(0x0001)).cm_attr, 0x0001u);   // ClassPortInfo: a CM MAD attr= cannot name
  EXPECT_EQ(tx_info(mad(0x0016, 0x03)).cm_attr, 0u);  // DREP's ID under another class (SA's)
  EXPECT_EQ(tx_info(roce(wire::Opcode::kUdSendOnly, wire::kGsiQpn, 0, 64)).cm_attr, 0u);
  EXPECT_EQ(tx_info(roce(wire::Opcode::kRcSendOnly, 0x16)).cm_attr, 0u);
}

TEST(FaultMatch, AttrTakesTheCmMadsOfItsAttributesAndNothingElse) {
  const Match drep = spec("attr=drep,loss=100%").rules[0].match;
  EXPECT_TRUE(drep.matches(tx_info(mad(0x0016))));
  for (const Bytes& other :
       {mad(0x0015), mad(0x0010), mad(0x0001), mad(0x0016, 0x03),
        roce(wire::Opcode::kUdSendOnly, wire::kGsiQpn, 0, 64),
        roce(wire::Opcode::kRcSendOnly, 0x16), roce(wire::Opcode::kRcAcknowledge, 1)}) {
    EXPECT_FALSE(drep.matches(tx_info(other)));
  }
  // A rule without attr= takes every MAD of its class, as before.
  EXPECT_TRUE(spec("class=cm,loss=1%").rules[0].match.matches(tx_info(mad(0x0001))));
  const Match m = spec("class=cm,attr=req+rep+rtu,loss=1%").rules[0].match;
  for (std::uint16_t id : {0x0010, 0x0013, 0x0014}) EXPECT_TRUE(m.matches(tx_info(mad(id)))) << id;
  for (std::uint16_t id : {0x0011, 0x0012, 0x0015, 0x0016, 0x001b, 0x000f}) {
    EXPECT_FALSE(m.matches(tx_info(mad(id)))) << id;
  }
  // The names are the wire's (IBTA's), in lowercase, one bit each.
  for (std::size_t i = 0; i < kCmAttrCount; ++i) {
    std::string name(wire::cm_attr_name(static_cast<wire::CmAttr>(kFirstCmAttr + i)));
    std::transform(name.begin(), name.end(), name.begin(),
                   [](char c) { return static_cast<char>(std::tolower(c)); });
    EXPECT_EQ(spec("attr=" + name + ",loss=1%").rules[0].match.cm_attrs, 1u << i) << name;
  }
}

// ---- decide() and flip_bits() --------------------------------------------------------------

TEST(FaultDecide, StreamsAreSeededAsTheSimulatorSeedsALink) {
  FateState s(77);
  for (std::size_t k = 0; k < FateState::kCount; ++k) {
    Prng expected(derive_seed(77, k));
    for (int i = 0; i < 4; ++i) EXPECT_EQ(s.streams[k].next(), expected.next()) << k;
  }
}

TEST(FaultDecide, RatesFollowTheirRatios) {
  Faults f;
  f.loss = {1, 10};
  f.duplication = {1, 20};
  f.reordering = {3, 40};
  f.reorder_delay_ns = 7'000;
  f.corruption = {1, 50};
  f.delay_ns = 10'000;
  f.jitter_ns = 5'000;
  FateState s(11);
  const std::uint64_t n = 100'000;
  std::uint64_t lost = 0, dup = 0, copies = 0, reordered = 0, corrupted = 0;
  double jitter_sum = 0;
  for (std::uint64_t i = 0; i < n; ++i) {
    const Fate fate = decide(f, s, 100);
    if (fate.lost) {
      ++lost;
      EXPECT_EQ(fate.copies, 0);
      EXPECT_FALSE(fate.burst_loss);
      continue;
    }
    dup += fate.copies == 2;
    for (std::size_t c = 0; c < fate.copies; ++c) {
      const CopyFate& cf = fate.copy[c];
      ++copies;
      reordered += cf.reordered;
      corrupted += cf.corrupted;
      EXPECT_EQ(cf.corrupt_rng.has_value(), cf.corrupted);
      const std::int64_t jitter = cf.extra_delay_ns - f.delay_ns - (cf.reordered ? 7'000 : 0);
      ASSERT_GE(jitter, 0);
      ASSERT_LE(jitter, f.jitter_ns);
      jitter_sum += static_cast<double>(jitter);
    }
  }
  expect_binomial(lost, n, f.loss, "loss");
  expect_binomial(dup, n - lost, f.duplication, "duplication");
  expect_binomial(reordered, copies, f.reordering, "reordering");
  expect_binomial(corrupted, copies, f.corruption, "corruption");
  // Uniform on [0, 5000]: mean 2500, the mean's sd 1443 / sqrt(copies) < 5.
  EXPECT_NEAR(jitter_sum / static_cast<double>(copies), 2'500, 30);
}

TEST(FaultDecide, AFaultThatIsOffDrawsNothing) {
  FateState s(3);
  FateState fresh(3);
  Faults f;
  for (int i = 0; i < 100; ++i) {
    const Fate fate = decide(f, s, 64);
    EXPECT_FALSE(fate.lost);
    EXPECT_EQ(fate.copies, 1);
    EXPECT_EQ(fate.copy[0].extra_delay_ns, 0);
    EXPECT_FALSE(fate.copy[0].reordered);
    EXPECT_FALSE(fate.copy[0].corrupted);
  }
  for (std::size_t k = 0; k < FateState::kCount; ++k) {
    EXPECT_EQ(s.streams[k].next(), fresh.streams[k].next()) << k;
  }
  // A lost packet draws nothing but its loss.
  f.loss = {1, 1};
  f.duplication = {1, 2};
  f.jitter_ns = 10;
  for (int i = 0; i < 100; ++i) EXPECT_TRUE(decide(f, s, 64).lost);
  for (std::size_t k = FateState::kDuplication; k < FateState::kCount; ++k) {
    EXPECT_EQ(s.streams[k].next(), fresh.streams[k].next()) << k;
  }
}

// Each fault draws from its own stream: turning the others on does not change which packets
// are lost (nor, loss aside, which are duplicated).
TEST(FaultDecide, LossChoicesDoNotDependOnOtherFaults) {
  Faults loss_only;
  loss_only.loss = {1, 10};
  Faults everything = loss_only;
  everything.jitter_ns = 5'000;
  everything.duplication = {1, 5};
  everything.reordering = {1, 5};
  everything.corruption = {1, 5};
  everything.corrupt_bits = 7;
  auto lost = [](const Faults& f, std::uint64_t seed) {
    FateState s(seed);
    std::vector<bool> v;
    for (int i = 0; i < 3'000; ++i) v.push_back(decide(f, s, 200).lost);
    return v;
  };
  EXPECT_EQ(lost(loss_only, 3), lost(everything, 3));
  EXPECT_NE(lost(loss_only, 3), lost(loss_only, 4));
}

// The simulator's order of draws on the corruption stream, which decide() keeps: copy 0's
// chance, copy 0's bit positions, copy 1's chance, copy 1's positions.
TEST(FaultDecide, CorruptionReplaysTheSimulatorsDrawsInOrder) {
  Faults f;
  f.duplication = {1, 1};
  f.corruption = {1, 2};
  f.corrupt_bits = 5;
  FateState s(8);
  Prng reference(derive_seed(8, FateState::kCorruption));
  std::size_t both = 0;
  for (int i = 0; i < 500; ++i) {
    const std::size_t size = 40 + static_cast<std::size_t>(i % 17);
    const Fate fate = decide(f, s, size);
    ASSERT_EQ(fate.copies, 2);
    both += fate.copy[0].corrupted && fate.copy[1].corrupted;
    for (std::size_t c = 0; c < 2; ++c) {
      Bytes expected(size), got(size);
      ASSERT_EQ(reference.chance(1, 2), fate.copy[c].corrupted);
      if (!fate.copy[c].corrupted) continue;
      flip_bits(expected, 0, 5, reference);
      Prng replay = *fate.copy[c].corrupt_rng;
      flip_bits(got, 0, 5, replay);
      ASSERT_EQ(got, expected);
    }
  }
  EXPECT_GT(both, 50u);
  EXPECT_EQ(s.streams[FateState::kCorruption].next(), reference.next());
}

TEST(FaultFlipBits, FlipsExactlyNDistinctBitsPastFrom) {
  Prng rng(4);
  for (std::uint32_t bits : {1u, 2u, 7u, 33u, 64u}) {
    for (int i = 0; i < 200; ++i) {
      const std::size_t size = 8 + static_cast<std::size_t>(rng.below(200));
      const std::size_t from = static_cast<std::size_t>(rng.below(8));
      Bytes b(size);
      for (auto& x : b) x = std::byte{static_cast<std::uint8_t>(rng.below(256))};
      const Bytes before = b;
      flip_bits(b, from, bits, rng);
      std::uint32_t flipped = 0;
      for (std::size_t k = 0; k < size; ++k) {
        const auto x = static_cast<unsigned>(b[k] ^ before[k]);
        if (k < from) {
          ASSERT_EQ(x, 0u);
        }
        flipped += static_cast<std::uint32_t>(std::popcount(x));
      }
      ASSERT_EQ(flipped,
                std::min<std::uint32_t>(bits, static_cast<std::uint32_t>(8 * (size - from))));
    }
  }
  // Fewer bits than asked for: every one of them flips.
  Bytes two(2);
  flip_bits(two, 0, 64, rng);
  EXPECT_EQ(two, (Bytes{std::byte{0xff}, std::byte{0xff}}));
  Bytes none(3);
  flip_bits(none, 3, 5, rng);  // nothing past `from`
  EXPECT_EQ(none, Bytes(3));
  // Every bit position is reachable.
  std::set<std::size_t> positions;
  for (int i = 0; i < 2'000; ++i) {
    Bytes b(4);
    flip_bits(b, 0, 1, rng);
    for (std::size_t k = 0; k < 4; ++k) {
      if (b[k] != std::byte{0})
        positions.insert(k * 8 + std::countr_zero(static_cast<unsigned>(b[k])));
    }
  }
  EXPECT_EQ(positions.size(), 32u);
}

TEST(FaultDecide, GilbertElliottLossesComeInRuns) {
  Faults burst;
  burst.burst = GilbertElliott{{1, 100}, {1, 5}, {1, 1}, {0, 1}};  // mean run 5, 1/21 lost
  Faults independent;
  independent.loss = {1, 21};
  auto runs = [](const Faults& f, std::uint64_t& lost, std::uint64_t& burst_flags) {
    FateState s(12);
    std::vector<std::uint64_t> lengths;
    std::uint64_t run = 0;
    for (int i = 0; i < 200'000; ++i) {
      const Fate fate = decide(f, s, 64);
      lost += fate.lost;
      burst_flags += fate.burst_loss;
      if (fate.lost) {
        ++run;
      } else if (run > 0) {
        lengths.push_back(run);
        run = 0;
      }
    }
    double sum = 0;
    for (std::uint64_t l : lengths) sum += static_cast<double>(l);
    return sum / static_cast<double>(lengths.size());
  };
  std::uint64_t lost_b = 0, flags_b = 0, lost_i = 0, flags_i = 0;
  const double mean_b = runs(burst, lost_b, flags_b);
  const double mean_i = runs(independent, lost_i, flags_i);
  EXPECT_EQ(flags_b, lost_b);
  EXPECT_EQ(flags_i, 0u);
  // Same long-run loss rate (p / (p + r) = 1/21) ...
  EXPECT_NEAR(static_cast<double>(lost_b) / 200'000, 1.0 / 21, 0.006);
  EXPECT_NEAR(static_cast<double>(lost_i) / 200'000, 1.0 / 21, 0.003);
  // ... but in runs of 1 / r = 5 on average, against 1 / (1 - 1/21) = 1.05.
  EXPECT_NEAR(mean_b, 5.0, 0.5);
  EXPECT_NEAR(mean_i, 1.05, 0.05);

  // H and K: loss in the bad state below 100%, some loss in the good state.
  Faults hk;
  hk.burst = GilbertElliott{{0, 1}, {1, 1}, {1, 1}, {1, 10}};  // never bad: K alone
  std::uint64_t lost = 0, flags = 0;
  runs(hk, lost, flags);
  expect_binomial(lost, 200'000, {1, 10}, "loss in the good state");
}

// ---- the stage -----------------------------------------------------------------------------

struct Output {
  Instant at;  // when it was polled (or submitted, for a pass)
  std::uint32_t psn = 0;
  bool duplicate = false;
  bool corrupted = false;
  Bytes bytes;
  bool operator==(const Output&) const = default;
};

// Submits `packets` (one every spacing_ns from `t0`), delivering passes at once and polling
// everything due before each submit, then drains the stage by its deadlines.
struct StageRun {
  std::vector<Output> out;
  std::vector<FaultStage::Verdict> verdicts;
  std::vector<FaultEvent> events;
};

StageRun run_stage(FaultStage& stage, const std::vector<Bytes>& packets, std::int64_t spacing_ns,
                   std::int64_t t0 = 0, Direction dir = Direction::kTx) {
  StageRun r;
  FaultStage::Out o;
  auto drain = [&](Instant now) {
    while (stage.poll(now, o)) {
      r.out.push_back(Output{now, psn_of(o.bytes), o.duplicate, o.corrupted, o.bytes});
    }
  };
  for (std::size_t i = 0; i < packets.size(); ++i) {
    const Instant now = at_ns(t0 + static_cast<std::int64_t>(i) * spacing_ns);
    while (stage.next_deadline() < now) drain(stage.next_deadline());
    drain(now);
    const PacketInfo info = classify(packets[i], dir, peer_a());
    const FaultStage::Verdict v = stage.submit(now, info, packets[i]);
    r.verdicts.push_back(v);
    if (v == FaultStage::Verdict::kPass) {
      r.out.push_back(Output{now, psn_of(packets[i]), false, false, packets[i]});
    }
  }
  while (!stage.next_deadline().is_never()) drain(stage.next_deadline());
  while (auto e = stage.poll_event()) r.events.push_back(*e);
  return r;
}

std::vector<Bytes> sends(std::size_t n, std::size_t payload_bytes = 64,
                         wire::Opcode op = wire::Opcode::kRcSendOnly) {
  std::vector<Bytes> v;
  for (std::size_t i = 0; i < n; ++i) {
    v.push_back(roce(op, 0x11, static_cast<std::uint32_t>(i), payload_bytes));
  }
  return v;
}

std::uint64_t injected(const FaultStage& s, Injected k, Direction d = Direction::kTx) {
  return s.counters(d).injected[static_cast<std::size_t>(k)];
}

TEST(FaultStage, PassesWithoutACopyWhenNoRuleMatchesOrNothingHappens) {
  FaultStage stage(spec("class=ack,loss=100%;dir=rx,dup=100%"), at_ns(0));
  const StageRun r = run_stage(stage, sends(100), 1'000);
  for (FaultStage::Verdict v : r.verdicts) EXPECT_EQ(v, FaultStage::Verdict::kPass);
  EXPECT_EQ(stage.held(), 0u);
  EXPECT_EQ(stage.counters(Direction::kTx).packets, 0u);
  EXPECT_TRUE(r.events.empty());
  EXPECT_TRUE(stage.next_deadline().is_never());

  // A matching rule whose draws leave the packet alone also passes it, uncopied.
  FaultStage rare(spec("loss=0.0001%,dup=0.0001%"), at_ns(0));
  const StageRun q = run_stage(rare, sends(100), 1'000);
  for (FaultStage::Verdict v : q.verdicts) EXPECT_EQ(v, FaultStage::Verdict::kPass);
  EXPECT_EQ(rare.counters(Direction::kTx).packets, 100u);
  EXPECT_EQ(rare.held(), 0u);
}

TEST(FaultStage, LossDropsCountsAndLogs) {
  FaultStage stage(spec("qpn=5,dup=100%;loss=100%"), at_ns(0));
  const StageRun r = run_stage(stage, sends(10), 1'000);
  EXPECT_TRUE(r.out.empty());
  for (FaultStage::Verdict v : r.verdicts) EXPECT_EQ(v, FaultStage::Verdict::kTaken);
  EXPECT_EQ(stage.counters(Direction::kTx).packets, 10u);
  EXPECT_EQ(injected(stage, Injected::kLoss), 10u);
  EXPECT_EQ(stage.counters(Direction::kRx).packets, 0u);
  ASSERT_EQ(r.events.size(), 10u);
  for (std::size_t i = 0; i < 10; ++i) {
    EXPECT_EQ(r.events[i].kind, Injected::kLoss);
    EXPECT_EQ(r.events[i].packet_number, i + 1);
    EXPECT_EQ(r.events[i].rule, 1u);  // the first rule that matches decides
    EXPECT_EQ(r.events[i].at, at_ns(static_cast<std::int64_t>(i) * 1'000));
    EXPECT_EQ(r.events[i].info.dest_qpn, 0x11u);
    EXPECT_EQ(r.events[i].info.cls, PacketClass::kRequest);
  }
  for (std::size_t k = 0; k < kInjectedCount; ++k) {
    EXPECT_NE(to_string(static_cast<Injected>(k)), "?");
  }
}

// What bench/cm_scale.sh's ucmatose run under `attr=drep` needs: every DREP lost, every other
// MAD through, untouched.
TEST(FaultStage, AttrLosesEveryDrepAndPassesTheOtherMads) {
  FaultStage stage(spec("dir=tx,attr=drep,loss=100%"), at_ns(0));
  std::int64_t t = 0;
  for (int round = 0; round < 20; ++round) {
    for (std::uint16_t id : {0x0010, 0x0013, 0x0014, 0x0015, 0x0016}) {
      const Bytes b = mad(id);
      const FaultStage::Verdict v = stage.submit(at_ns(t += 1'000), tx_info(b), b);
      EXPECT_EQ(v, id == 0x0016 ? FaultStage::Verdict::kTaken : FaultStage::Verdict::kPass) << id;
    }
    const Bytes drep_in = mad(0x0016);
    EXPECT_EQ(stage.submit(at_ns(t += 1'000), classify(drep_in, Direction::kRx, peer_a()), drep_in),
              FaultStage::Verdict::kPass);  // dir=tx: a DREP received is no business of the rule
  }
  EXPECT_EQ(stage.counters(Direction::kTx).packets, 20u);
  EXPECT_EQ(injected(stage, Injected::kLoss), 20u);
  EXPECT_EQ(stage.counters(Direction::kRx).packets, 0u);
  EXPECT_EQ(stage.held(), 0u);
}

TEST(FaultStage, DuplicatesAreTwoIdenticalCopiesTheExtraOneSecond) {
  FaultStage stage(spec("dup=100%"), at_ns(0));
  const std::vector<Bytes> p = sends(20);
  const StageRun r = run_stage(stage, p, 1'000);
  ASSERT_EQ(r.out.size(), 40u);
  for (std::size_t i = 0; i < 20; ++i) {
    EXPECT_EQ(r.out[2 * i].bytes, p[i]);
    EXPECT_FALSE(r.out[2 * i].duplicate);
    EXPECT_EQ(r.out[2 * i + 1].bytes, p[i]);
    EXPECT_TRUE(r.out[2 * i + 1].duplicate);
    EXPECT_EQ(r.out[2 * i].at, at_ns(static_cast<std::int64_t>(i) * 1'000));  // due at once
  }
  EXPECT_EQ(injected(stage, Injected::kDuplicate), 20u);
}

TEST(FaultStage, CorruptionFlipsExactlyItsBitsInTheCopy) {
  FaultStage stage(spec("corrupt=100%,corrupt_bits=3"), at_ns(0));
  const std::vector<Bytes> p = sends(50, 100);
  const StageRun r = run_stage(stage, p, 1'000);
  ASSERT_EQ(r.out.size(), 50u);
  for (std::size_t i = 0; i < 50; ++i) {
    EXPECT_TRUE(r.out[i].corrupted);
    std::uint32_t flipped = 0;
    for (std::size_t k = 0; k < p[i].size(); ++k) {
      flipped += static_cast<std::uint32_t>(
          std::popcount(static_cast<unsigned>(r.out[i].bytes[k] ^ p[i][k])));
    }
    EXPECT_EQ(flipped, 3u);
  }
  EXPECT_EQ(injected(stage, Injected::kCorrupt), 50u);
}

TEST(FaultStage, DelayAndJitterHoldEachPacketWithinItsBoundsInDueOrder) {
  FaultStage stage(spec("delay=1ms,jitter=500us"), at_ns(0));
  const std::int64_t spacing = 10 * kUs;
  const StageRun r = run_stage(stage, sends(2'000), spacing);
  ASSERT_EQ(r.out.size(), 2'000u);
  std::size_t overtaken = 0;
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    const Output& o = r.out[i];
    const std::int64_t sent = static_cast<std::int64_t>(o.psn) * spacing;
    const std::int64_t held = o.at.ns() - sent;
    EXPECT_GE(held, 1 * kMs);
    EXPECT_LE(held, 1 * kMs + 500 * kUs);
    if (i > 0) {
      EXPECT_LE(r.out[i - 1].at, o.at);
      overtaken += r.out[i - 1].psn > o.psn;
    }
  }
  EXPECT_GT(overtaken, 100u);  // jitter 50 times the spacing reorders, as netem's does
  EXPECT_EQ(injected(stage, Injected::kDelay), 2'000u);
}

// A reordered packet comes out right after the N-th later packet of its rule and direction,
// which packets of other rules and directions do not count for, or after 1 s.
TEST(FaultStage, ReorderByPacketsReleasesAfterNMorePacketsOfTheRule) {
  FaultStage stage(spec("qpn=0x11,reorder=1/4,reorder_by=3;qpn=0x22,delay=1us"), at_ns(0));
  std::vector<Bytes> p;
  std::vector<std::uint32_t> rule0;  // PSNs of the rule-0 packets, in submit order
  for (std::uint32_t i = 0; i < 400; ++i) {
    const bool other = i % 3 == 2;
    p.push_back(roce(wire::Opcode::kRcSendOnly, other ? 0x22 : 0x11, i));
    if (!other) rule0.push_back(i);
  }
  const StageRun r = run_stage(stage, p, 1'000);
  std::vector<std::uint32_t> out0;
  for (const Output& o : r.out) {
    if (o.psn % 3 != 2) out0.push_back(o.psn);
  }
  ASSERT_EQ(out0.size(), rule0.size());
  std::set<std::uint32_t> reordered;
  for (const FaultEvent& e : r.events) {
    if (e.kind == Injected::kReorder)
      reordered.insert(static_cast<std::uint32_t>(e.packet_number - 1));
  }
  ASSERT_GT(reordered.size(), 60u);
  // Replay the rule: a held packet is released after the packet 3 later is handled.
  std::vector<std::uint32_t> expected;
  std::vector<std::pair<std::size_t, std::uint32_t>> waiting;  // (release index, psn)
  for (std::size_t k = 0; k < rule0.size(); ++k) {
    if (!reordered.count(rule0[k])) expected.push_back(rule0[k]);
    if (reordered.count(rule0[k])) waiting.push_back({k + 3, rule0[k]});
    while (!waiting.empty() && waiting.front().first == k) {
      expected.push_back(waiting.front().second);
      waiting.erase(waiting.begin());
    }
  }
  for (const auto& w : waiting) expected.push_back(w.second);  // the last ones: by timeout
  EXPECT_EQ(out0, expected);

  // Alone, a reordered packet waits 1 s.
  FaultStage lone(spec("reorder=100%"), at_ns(5));
  const Bytes b = roce(wire::Opcode::kRcSendOnly);
  EXPECT_EQ(lone.submit(at_ns(5), tx_info(b), b), FaultStage::Verdict::kTaken);
  EXPECT_EQ(lone.next_deadline(), at_ns(5 + 1'000'000'000));
  FaultStage::Out o;
  EXPECT_FALSE(lone.poll(at_ns(1'000'000'004), o));
  EXPECT_TRUE(lone.poll(at_ns(1'000'000'005), o));
  EXPECT_EQ(o.bytes, b);
}

TEST(FaultStage, ReorderByTimeHoldsForThatLong) {
  FaultStage stage(spec("reorder=1/4,reorder_by=50us"), at_ns(0));
  const std::int64_t spacing = 1 * kUs;
  const StageRun r = run_stage(stage, sends(2'000), spacing);
  ASSERT_EQ(r.out.size(), 2'000u);
  std::set<std::uint32_t> reordered;
  for (const FaultEvent& e : r.events)
    reordered.insert(static_cast<std::uint32_t>(e.packet_number - 1));
  expect_binomial(reordered.size(), 2'000, {1, 4}, "reordering");
  std::size_t overtaken = 0;
  for (std::size_t i = 0; i < r.out.size(); ++i) {
    const Output& o = r.out[i];
    const std::int64_t sent = static_cast<std::int64_t>(o.psn) * spacing;
    EXPECT_EQ(o.at.ns() - sent, reordered.count(o.psn) ? 50 * kUs : 0);
    if (i > 0) overtaken += r.out[i - 1].psn > o.psn;
  }
  EXPECT_GT(overtaken, 300u);
}

TEST(FaultStage, RateLimitSerializesAndDropsWhatTheQueueCannotHold) {
  // 8 mbit: a 1000-byte packet takes the transmitter for exactly 1 ms.
  FaultStage stage(spec("rate=8mbit,queue=3"), at_ns(0));
  auto packet = [](std::uint32_t psn) {
    Bytes b = roce(wire::Opcode::kRcSendOnly, 0x11, psn, 1000 - 16);
    EXPECT_EQ(b.size(), 1000u);
    return b;
  };
  std::vector<Bytes> p;
  for (std::uint32_t i = 0; i < 6; ++i) p.push_back(packet(i));
  using V = FaultStage::Verdict;
  // At 0: the first leaves at once, two wait, the queue (three not yet serialized) is full.
  EXPECT_EQ(stage.submit(at_ns(0), tx_info(p[0]), p[0]), V::kPass);
  EXPECT_EQ(stage.submit(at_ns(0), tx_info(p[1]), p[1]), V::kTaken);
  EXPECT_EQ(stage.submit(at_ns(0), tx_info(p[2]), p[2]), V::kTaken);
  EXPECT_EQ(stage.submit(at_ns(0), tx_info(p[3]), p[3]), V::kTaken);
  EXPECT_EQ(stage.held(), 2u);
  EXPECT_EQ(injected(stage, Injected::kQueueFull), 1u);
  EXPECT_EQ(stage.next_deadline(), at_ns(1 * kMs));
  FaultStage::Out o;
  EXPECT_FALSE(stage.poll(at_ns(1 * kMs - 1), o));
  ASSERT_TRUE(stage.poll(at_ns(1 * kMs), o));
  EXPECT_EQ(psn_of(o.bytes), 1u);
  // At 1 ms the first has been serialized: room for one more, leaving at 3 ms.
  EXPECT_EQ(stage.submit(at_ns(1 * kMs), tx_info(p[4]), p[4]), V::kTaken);
  EXPECT_EQ(stage.submit(at_ns(1 * kMs), tx_info(p[5]), p[5]), V::kTaken);
  EXPECT_EQ(injected(stage, Injected::kQueueFull), 2u);
  EXPECT_EQ(stage.next_deadline(), at_ns(2 * kMs));
  ASSERT_TRUE(stage.poll(at_ns(5 * kMs), o));
  EXPECT_EQ(psn_of(o.bytes), 2u);
  EXPECT_EQ(stage.next_deadline(), at_ns(3 * kMs));
  ASSERT_TRUE(stage.poll(at_ns(5 * kMs), o));
  EXPECT_EQ(psn_of(o.bytes), 4u);
  EXPECT_FALSE(stage.poll(at_ns(5 * kMs), o));
  // An idle transmitter again: a packet passes untouched.
  EXPECT_EQ(stage.submit(at_ns(5 * kMs), tx_info(p[0]), p[0]), V::kPass);

  // Throughput: 1000 packets offered at twice the rate come out at the rate, the rest dropped.
  FaultStage busy(spec("rate=8mbit,queue=10"), at_ns(0));
  std::vector<Bytes> many;
  for (std::uint32_t i = 0; i < 1'000; ++i) many.push_back(packet(i));
  const StageRun r = run_stage(busy, many, 500 * kUs);
  for (std::size_t i = 1; i < r.out.size(); ++i) {
    EXPECT_GE(r.out[i].at - r.out[i - 1].at, Duration::ms(1));
  }
  EXPECT_NEAR(static_cast<double>(r.out.size()), 500, 12);
  EXPECT_EQ(r.out.size() + injected(busy, Injected::kQueueFull), 1'000u);
}

TEST(FaultStage, PartitionsDropEverythingInTheirWindows) {
  EXPECT_FALSE((Partition{10, 5, 0}).active(9));
  EXPECT_TRUE((Partition{10, 5, 0}).active(10));
  EXPECT_TRUE((Partition{10, 5, 0}).active(14));
  EXPECT_FALSE((Partition{10, 5, 0}).active(15));
  EXPECT_FALSE((Partition{10, 5, 0}).active(1'000));
  EXPECT_TRUE((Partition{10, 5, 20}).active(30));
  EXPECT_TRUE((Partition{10, 5, 20}).active(34));
  EXPECT_FALSE((Partition{10, 5, 20}).active(35));
  EXPECT_TRUE((Partition{10, 5, 20}).active(10 + 20 * 1000 + 4));

  // One window from 10 ms to 15 ms, and one every 4 ms for 1 ms from 40 ms; the stage starts at
  // 7 ms.
  FaultStage stage(spec("partition=10ms+5ms,partition=40ms+1ms/4ms"), at_ns(7 * kMs));
  const std::int64_t spacing = 100 * kUs;
  const StageRun r = run_stage(stage, sends(1'000), spacing, 7 * kMs);
  std::set<std::uint32_t> delivered;
  for (const Output& o : r.out) delivered.insert(o.psn);
  for (std::uint32_t i = 0; i < 1'000; ++i) {
    const std::int64_t since = static_cast<std::int64_t>(i) * spacing;
    const bool cut = (since >= 10 * kMs && since < 15 * kMs) ||
                     (since >= 40 * kMs && (since - 40 * kMs) % (4 * kMs) < 1 * kMs);
    EXPECT_EQ(delivered.count(i), cut ? 0u : 1u) << i;
  }
  EXPECT_EQ(injected(stage, Injected::kPartition), 1'000u - delivered.size());
  for (const FaultEvent& e : r.events) EXPECT_EQ(e.kind, Injected::kPartition);

  // Aimed: only the rule's packets.
  FaultStage rx_only(spec("dir=rx,partition=0s+1s"), at_ns(0));
  const Bytes b = roce(wire::Opcode::kRcSendOnly);
  EXPECT_EQ(rx_only.submit(at_ns(0), tx_info(b), b), FaultStage::Verdict::kPass);
  EXPECT_EQ(rx_only.submit(at_ns(0), classify(b, Direction::kRx, peer_a()), b),
            FaultStage::Verdict::kTaken);
  EXPECT_EQ(injected(rx_only, Injected::kPartition, Direction::kRx), 1u);
  EXPECT_EQ(injected(rx_only, Injected::kPartition, Direction::kTx), 0u);
}

// A mixed workload under every fault at once.
std::vector<Bytes> mixed_packets(std::size_t n) {
  static constexpr wire::Opcode kOps[] = {
      wire::Opcode::kRcSendOnly,       wire::Opcode::kRcAcknowledge,
      wire::Opcode::kRcRdmaWriteFirst, wire::Opcode::kRcRdmaReadResponseMiddle,
      wire::Opcode::kRcFetchAdd,       wire::Opcode::kUdSendOnly};
  std::vector<Bytes> v;
  Prng rng(6);
  for (std::size_t i = 0; i < n; ++i) {
    v.push_back(roce(kOps[rng.below(6)], static_cast<std::uint32_t>(0x10 + rng.below(3)),
                     static_cast<std::uint32_t>(i), 16 + 4 * rng.below(200)));
  }
  return v;
}

constexpr std::string_view kEverything =
    "class=ack,loss=5%,dup=2%;qpn=0x11,burst=2%:30%,reorder=5%,reorder_by=2,corrupt=3%,"
    "corrupt_bits=4;qpn=0x12,delay=20us,jitter=30us,reorder=5%,reorder_by=40us,rate=100mbit,"
    "queue=8,partition=3ms+1ms/10ms;dup=1%,loss=1%,corrupt=1%,seed=";

TEST(FaultStage, SameSeedSamePacketsSameFaults) {
  const std::vector<Bytes> p = mixed_packets(5'000);
  auto once = [&](std::uint64_t seed) {
    FaultStage stage(spec(std::string(kEverything) + std::to_string(seed)), at_ns(0));
    return run_stage(stage, p, 2 * kUs);
  };
  const StageRun a = once(7);
  const StageRun b = once(7);
  EXPECT_EQ(a.out, b.out);
  EXPECT_EQ(a.verdicts, b.verdicts);
  ASSERT_EQ(a.events.size(), b.events.size());
  std::map<Injected, std::size_t> kinds;
  for (std::size_t i = 0; i < a.events.size(); ++i) {
    EXPECT_EQ(a.events[i].at, b.events[i].at);
    EXPECT_EQ(a.events[i].kind, b.events[i].kind);
    EXPECT_EQ(a.events[i].packet_number, b.events[i].packet_number);
    EXPECT_EQ(a.events[i].rule, b.events[i].rule);
    ++kinds[a.events[i].kind];
  }
  for (std::size_t k = 0; k < kInjectedCount; ++k) {
    EXPECT_GT(kinds[static_cast<Injected>(k)], 0u) << to_string(static_cast<Injected>(k));
  }
  const StageRun c = once(8);
  EXPECT_NE(a.out, c.out);
}

// A rule's draws in one direction do not depend on the traffic in the other: the same tx
// packets meet the same faults whatever is received between them.
TEST(FaultStage, DirectionsDrawIndependently) {
  const std::vector<Bytes> p = mixed_packets(2'000);
  auto tx_losses = [&](bool with_rx) {
    FaultStage stage(spec("loss=10%,dup=10%"), at_ns(0));
    std::vector<FaultStage::Verdict> v;
    FaultStage::Out o;
    for (std::size_t i = 0; i < p.size(); ++i) {
      const Instant now = at_ns(static_cast<std::int64_t>(i));
      if (with_rx && i % 2 == 0) {
        stage.submit(now, classify(p[i], Direction::kRx, peer_a()), p[i]);
      }
      v.push_back(stage.submit(now, tx_info(p[i]), p[i]));
      while (stage.poll(now, o)) {
      }
    }
    return v;
  };
  EXPECT_EQ(tx_losses(false), tx_losses(true));
}

TEST(FaultStage, TheEventLogIsBoundedAndKeepsTheNewest) {
  FaultStage stage(spec("loss=100%"), at_ns(0));
  const std::vector<Bytes> p = sends(5'000);
  for (std::size_t i = 0; i < p.size(); ++i) stage.submit(at_ns(0), tx_info(p[i]), p[i]);
  EXPECT_EQ(stage.events_lost(), 5'000u - 4'096u);
  std::vector<std::uint64_t> numbers;
  while (auto e = stage.poll_event()) numbers.push_back(e->packet_number);
  ASSERT_EQ(numbers.size(), 4'096u);
  EXPECT_EQ(numbers.front(), 5'000u - 4'096u + 1);
  EXPECT_EQ(numbers.back(), 5'000u);
  EXPECT_EQ(injected(stage, Injected::kLoss), 5'000u);  // the counters count them all
}

TEST(FaultStage, HoldsAtMostItsBound) {
  FaultStage stage(spec("delay=1s"), at_ns(0));
  const Bytes b = roce(wire::Opcode::kRcAcknowledge);
  const PacketInfo info = tx_info(b);
  for (std::size_t i = 0; i < kMaxHeldPackets + 10; ++i) stage.submit(at_ns(0), info, b);
  EXPECT_EQ(stage.held(), kMaxHeldPackets);
  EXPECT_EQ(injected(stage, Injected::kQueueFull), 10u);
  FaultStage moved = std::move(stage);
  EXPECT_EQ(moved.held(), kMaxHeldPackets);
  FaultStage::Out o;
  std::size_t n = 0;
  while (moved.poll(at_ns(1'000'000'000), o)) ++n;
  EXPECT_EQ(n, kMaxHeldPackets);
}

}  // namespace
}  // namespace uroce::fault
